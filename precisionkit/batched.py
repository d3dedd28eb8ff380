"""Per-set error statistics over a stack of input sets, in one vectorized pass.

:func:`error_stats_per_set` computes, for every leading index ``i``, the statistics that
:func:`precisionkit.error_stats` computes for ``(a[i], ref[i])``, with the same definitions (see
:mod:`precisionkit.stats`): errors in fp64, relative error ``|a - ref| / max(|ref|, tiny)``, ULP
error against :func:`precisionkit.stats.spacing`, exact linear-interpolation percentiles, and
NaN/inf positions counted and excluded. It adds the scale-aware ULP error ``sulp`` (see
:func:`precisionkit.stats.scaled_spacing`): the error in ULPs of the largest reference magnitude
of its row (last dimension), which measures rounding at the data's scale instead of the
cancellation that makes ULP and relative errors explode where the reference is near zero. Calling ``error_stats`` once per set costs a Python round
trip per set; here the whole stack is one set of tensor operations.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from ._tensors import as_tensor, require_float, require_same
from .stats import round_to_dtype, scaled_spacing, spacing

#: Keys of :func:`error_stats_per_set` (a subset of ``error_stats``' keys, same meaning).
BATCHED_KEYS = (
    "n",
    "n_compared",
    "nan_matched",
    "inf_matched",
    "nan_mismatch",
    "inf_mismatch",
    *(f"{m}_{s}" for m in ("abs", "rel", "ulp", "sulp") for s in ("max", "mean", "p50", "p99")),
    "exact_fraction",
    "error_balance",
)

_PERCENTILES = (50.0, 99.0)
#: The error measures whose statistics :func:`error_stats_per_set` gives.
MEASURES = ("abs", "rel", "ulp", "sulp")


def _row_percentiles(values: torch.Tensor, counts: np.ndarray, qs: tuple[float, ...]) -> list[np.ndarray]:
    """Per-row linear-interpolation percentiles over the first ``counts[i]`` values of each row.

    Excluded positions hold +inf so a row sort moves them past the compared values. The rank and
    interpolation arithmetic repeats ``stats._exact_percentiles`` operation for operation (fp64),
    so the results are bit-identical to it. Rows with no compared value give NaN.
    """
    # Sorted, picked and interpolated where the values are: only the percentiles reach the host.
    ordered = torch.sort(values, dim=1).values
    valid = counts > 0
    n_minus_1 = torch.as_tensor(np.where(valid, counts - 1, 0).astype(np.float64), device=ordered.device)
    out = []
    for q in qs:
        rank = q / 100.0 * n_minus_1
        lo, hi = torch.floor(rank), torch.ceil(rank)
        v_lo = ordered.gather(1, lo.long()[:, None])[:, 0]
        v_hi = ordered.gather(1, hi.long()[:, None])[:, 0]
        value = (v_lo + (v_hi - v_lo) * (rank - lo)).cpu().numpy()
        out.append(np.where(valid, value, np.nan))
    return out


def error_stats_per_set(a: Any, ref: Any, percentiles_of: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Error statistics of each ``a[i]`` against ``ref[i]``, as arrays of length ``a.shape[0]``.

    ``a`` is a stack ``[n_sets, ...]`` of results in one float dtype; ``ref`` has the same shape
    (normally float64) and is moved to ``a``'s device. Keys are :data:`BATCHED_KEYS`, with the
    meaning they have in :func:`precisionkit.error_stats`; counts are int64 arrays, statistics
    float64 arrays that are NaN for sets with no finite pair to compare. Max and percentile values
    equal ``error_stats``' bit for bit; means may differ in the last bits (summation order).

    The percentiles (``<measure>_p50``, ``<measure>_p99``) are given for the measures of
    ``percentiles_of`` (default: all of :data:`MEASURES`) and left out for the others: each measure's
    percentiles sort every row, which is most of the cost on long rows.

    >>> import torch
    >>> s = error_stats_per_set(
    ...     torch.tensor([[1.0, 2.0], [1.0, 1.0]], dtype=torch.float16),
    ...     torch.tensor([[1.0, 2.0 + 2**-11], [1.0, 1.0]], dtype=torch.float64),
    ... )
    >>> s["ulp_max"].tolist(), s["sulp_max"].tolist(), s["exact_fraction"].tolist()
    ([0.25, 0.0], [0.25, 0.0], [1.0, 1.0])
    """
    ta, _ = as_tensor(a, "a")
    tr, _ = as_tensor(ref, "ref")
    require_float(ta, "a")
    require_float(tr, "ref")
    if ta.dim() < 1:
        raise ValueError("a must have a leading set axis: got a 0-d tensor")
    if tr.device != ta.device:
        tr = tr.to(ta.device)
    require_same(ta, tr, ("a", "ref"), dtype=False)
    ranked = set(MEASURES if percentiles_of is None else percentiles_of)
    unknown = sorted(ranked - set(MEASURES))
    if unknown:
        raise ValueError(
            f"percentiles_of names no error measure {', '.join(unknown)} (measures: {', '.join(MEASURES)})"
        )
    dtype = ta.dtype
    n_sets = ta.shape[0]
    a64 = ta.reshape(n_sets, -1).to(torch.float64)
    r64 = tr.reshape(n_sets, -1).to(torch.float64)
    per_set = a64.shape[1]

    nan_a, nan_r = torch.isnan(a64), torch.isnan(r64)
    inf_a, inf_r = torch.isinf(a64), torch.isinf(r64)
    same_inf = inf_a & inf_r & (a64 == r64)
    finite = ~(nan_a | nan_r | inf_a | inf_r)

    def count(mask: torch.Tensor) -> np.ndarray:
        return mask.sum(dim=1).cpu().numpy().astype(np.int64)

    out: dict[str, np.ndarray] = {
        "n": np.full(n_sets, per_set, dtype=np.int64),
        "nan_matched": count(nan_a & nan_r),
        "inf_matched": count(same_inf),
        "nan_mismatch": count(nan_a ^ nan_r),
        "inf_mismatch": count((inf_a | inf_r) & ~(nan_a | nan_r) & ~same_inf),
    }
    m = count(finite)
    out["n_compared"] = m
    has = m > 0

    # Excluded positions get a harmless reference (1.0) and zero error, then are masked out.
    safe_r = torch.where(finite, r64, torch.ones_like(r64))
    diff = torch.where(finite, a64 - r64, torch.zeros_like(a64))
    err = diff.abs()
    errors = {
        "abs": err,
        "rel": err / torch.clamp(safe_r.abs(), min=torch.finfo(dtype).tiny),
        "ulp": err / spacing(safe_r, dtype),
        "sulp": err
        / scaled_spacing(torch.where(finite, r64, torch.zeros_like(r64)).reshape(tr.shape), dtype).reshape(n_sets, -1),
    }
    neg_inf = torch.tensor(-torch.inf, dtype=torch.float64, device=ta.device)
    pos_inf = torch.tensor(torch.inf, dtype=torch.float64, device=ta.device)
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, values in errors.items():
            mx = torch.where(finite, values, neg_inf).amax(dim=1).cpu().numpy()
            total = values.sum(dim=1).cpu().numpy()  # excluded positions are exactly 0
            out[f"{name}_max"] = np.where(has, mx, np.nan)
            out[f"{name}_mean"] = np.where(has, total / np.maximum(m, 1), np.nan)
            if name in ranked:
                p50, p99 = _row_percentiles(torch.where(finite, values, pos_inf), m, _PERCENTILES)
                out[f"{name}_p50"] = p50
                out[f"{name}_p99"] = p99
        rounded = round_to_dtype(safe_r, dtype).to(torch.float64) if dtype != torch.float64 else safe_r
        exact = count(finite & (a64 == rounded))
        above, below = count(diff > 0), count(diff < 0)
        out["exact_fraction"] = np.where(has, exact / np.maximum(m, 1), np.nan)
        out["error_balance"] = np.where(has, np.abs(above - below) / np.maximum(m, 1), np.nan)
    return out
