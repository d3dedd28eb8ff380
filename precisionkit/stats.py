"""Error statistics of a result against a (normally fp64) reference.

Definitions, for a result ``a`` of dtype D and reference ``ref``:

* abs error ``|a - ref|`` (computed in fp64);
* relative error ``|a - ref| / max(|ref|, tiny(D))`` with ``tiny`` the smallest normal of D, so
  the relative error at ``ref = 0`` is finite;
* ULP error ``|a - ref| / spacing_D(ref)``, fractional, where ``spacing_D(ref) = 2**(e - p)`` with
  ``e = max(floor(log2|ref|), emin(D))`` and ``p`` the explicit mantissa bits of D: the gap
  between neighbouring D values around ``ref`` (exponent clamped at D's minimum normal exponent,
  as libm accuracy tests do);
* scale-aware ULP error ``|a - ref| / scaled_spacing_D(ref)``: the error in ULPs of the largest
  ``|ref|`` along the last dimension (the normalized or reduced dimension of the chains), so a
  result near zero in a row of O(1) values is judged at the row's scale, not its own (see
  :func:`scaled_spacing`);
* percentiles are exact order statistics with linear interpolation between closest ranks
  (numpy's default ``"linear"`` method), not sketches.

Positions where both sides are NaN, or the same infinity, are counted (``nan_matched``,
``inf_matched``) and excluded; positions where exactly one side is NaN (``nan_mismatch``) or the
infinities differ (``inf_mismatch``) are counted and excluded. Every other statistic is over the
remaining ``n_compared`` finite pairs and is ``None`` when there are none.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ._tensors import FORMAT, INT_VIEW, as_tensor, require_float, require_same

_CPU_CHUNK = 1 << 20
_PERCENTILES = (50.0, 99.0)


def round_to_dtype(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round float64 ``x`` to ``dtype`` correctly (round to nearest, ties to even).

    ``tensor.to(torch.float16)`` on a float64 tensor rounds twice (through float32), which is
    wrong when the float32 value lands exactly on a float16 tie: 1 + 2**-11 + 2**-40 becomes 1.0
    instead of 1 + 2**-10. Rounding to float32 with round-to-odd first keeps enough information
    for the final round-to-nearest to be correct (float32 has at least two more bits than the
    16-bit formats everywhere, subnormals included).
    """
    if x.dtype != torch.float64:
        raise TypeError(f"round_to_dtype expects float64 input, got {x.dtype}")
    if dtype in (torch.float64, torch.float32):
        return x.to(dtype)  # a single rounding: already correct
    nearest = x.to(torch.float32)
    inexact = nearest.to(torch.float64) != x
    bits = nearest.view(torch.int32).clone()
    # Round-to-odd: truncate toward zero (step back one unit where nearest rounded away), then
    # set the last bit on inexact results. Stepping the raw bits by one moves toward zero for
    # both signs in sign-magnitude encoding.
    away = inexact & (nearest.abs().to(torch.float64) > x.abs())
    bits -= away.to(torch.int32)
    bits |= inexact.to(torch.int32)
    return bits.view(torch.float32).to(dtype)


def spacing(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """fp64 gap between neighbouring ``dtype`` values around ``|ref|`` (see module docstring)."""
    _, mantissa, emin = FORMAT[dtype]
    _, exponent = torch.frexp(ref)  # ref = m * 2**exponent with 0.5 <= |m| < 1
    exponent = torch.clamp(exponent.to(torch.int64) - 1, min=emin)
    # frexp(0) reports exponent 0, but floor(log2|0|) = -inf: ref == 0 clamps to emin as well.
    exponent = exponent.masked_fill(ref == 0, emin)
    return torch.ldexp(torch.ones_like(ref), (exponent - mantissa).to(ref.dtype))


def scaled_spacing(ref: torch.Tensor, dtype: torch.dtype, dim: int = -1) -> torch.Tensor:
    """The ``dtype`` spacing at the scale of each row: ``spacing(max |ref| along dim)``, broadcast
    back to ``ref``'s shape.

    Rounding error in a normalization, reduction or smooth elementwise function is proportional
    to the magnitudes it works with, not to the result's own magnitude: layer-norm outputs and
    gelu's negative tail pass through zero, where a plain ULP or relative error measures
    cancellation. Dividing by this spacing gives errors in "ULPs at the data's scale"; 1 means
    one ULP of the row's largest value. Non-finite references must be replaced by the caller.

    >>> import torch
    >>> scaled_spacing(torch.tensor([[3.0, 1e-3], [0.0, 0.0]], dtype=torch.float64), torch.float16).tolist()
    [[0.001953125, 0.001953125], [5.960464477539063e-08, 5.960464477539063e-08]]
    """
    if ref.dim() == 0:
        return spacing(ref.abs(), dtype)
    scale = ref.abs().amax(dim=dim, keepdim=True)
    return spacing(scale, dtype).expand_as(ref)


def _exact_percentiles(values: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """Linear-interpolation percentiles by selection (O(n)); partitions ``values`` in place."""
    n = len(values)
    ranks = [q / 100.0 * (n - 1) for q in qs]
    kth = sorted({int(math.floor(r)) for r in ranks} | {int(math.ceil(r)) for r in ranks})
    values.partition(kth)
    out = []
    for r in ranks:
        lo, hi = int(math.floor(r)), int(math.ceil(r))
        out.append(float(values[lo] + (values[hi] - values[lo]) * (r - lo)))
    return out


class _Accumulator:
    def __init__(self, n: int, device: torch.device) -> None:
        self.abs = torch.empty(n, dtype=torch.float64, device=device)
        self.rel = torch.empty(n, dtype=torch.float64, device=device)
        self.ulp = torch.empty(n, dtype=torch.float64, device=device)
        self.sulp = torch.empty(n, dtype=torch.float64, device=device)
        self.filled = 0
        self.counts = dict(nan_matched=0, inf_matched=0, nan_mismatch=0, inf_mismatch=0)
        self.exact = self.above = self.below = self.within_1e3 = self.within_5e3 = 0
        self.dot = self.norm_a = self.norm_ref = 0.0


def _chunk(acc: _Accumulator, a: torch.Tensor, ref: torch.Tensor, row_spacing: torch.Tensor, dtype: torch.dtype) -> None:
    a64, r64 = a.to(torch.float64), ref.to(torch.float64)
    nan_a, nan_r = torch.isnan(a64), torch.isnan(r64)
    inf_a, inf_r = torch.isinf(a64), torch.isinf(r64)
    acc.counts["nan_matched"] += int((nan_a & nan_r).sum())
    acc.counts["nan_mismatch"] += int((nan_a ^ nan_r).sum())
    same_inf = inf_a & inf_r & (a64 == r64)
    acc.counts["inf_matched"] += int(same_inf.sum())
    acc.counts["inf_mismatch"] += int(((inf_a | inf_r) & ~(nan_a | nan_r) & ~same_inf).sum())
    finite = ~(nan_a | nan_r | inf_a | inf_r)
    if not bool(finite.all()):
        a64, r64, row_spacing = a64[finite], r64[finite], row_spacing[finite]
    k = a64.numel()
    if k == 0:
        return
    sl = slice(acc.filled, acc.filled + k)
    diff = a64 - r64
    err = torch.abs(diff, out=acc.abs[sl])
    tiny = torch.finfo(dtype).tiny
    torch.div(err, torch.clamp(r64.abs(), min=tiny), out=acc.rel[sl])
    torch.div(err, spacing(r64, dtype), out=acc.ulp[sl])
    torch.div(err, row_spacing, out=acc.sulp[sl])
    acc.filled += k
    rounded = round_to_dtype(r64, dtype).to(torch.float64) if dtype != torch.float64 else r64
    acc.exact += int((a64 == rounded).sum())
    acc.above += int((diff > 0).sum())
    acc.below += int((diff < 0).sum())
    acc.within_1e3 += int((acc.rel[sl] <= 1e-3).sum())
    acc.within_5e3 += int((acc.rel[sl] <= 5e-3).sum())
    acc.dot += float(torch.dot(a64, r64))
    acc.norm_a += float(torch.dot(a64, a64))
    acc.norm_ref += float(torch.dot(r64, r64))


def _summary(values: torch.Tensor, prefix: str) -> dict[str, float]:
    if values.device.type == "cpu":
        p50, p99 = _exact_percentiles(values.numpy(), _PERCENTILES)
    else:
        ordered = torch.sort(values).values.cpu().numpy()
        p50, p99 = _exact_percentiles(ordered, _PERCENTILES)
    return {
        f"{prefix}_max": float(values.max()),
        f"{prefix}_mean": float(values.sum()) / values.numel(),
        f"{prefix}_p50": p50,
        f"{prefix}_p99": p99,
    }


STAT_KEYS = tuple(
    f"{m}_{s}" for m in ("abs", "rel", "ulp", "sulp") for s in ("max", "mean", "p50", "p99")
) + ("exact_fraction", "cosine", "rel_within_1e-3", "rel_within_5e-3", "error_balance")


def error_stats(a: Any, ref: Any) -> dict[str, float | int | None]:
    """Error statistics of ``a`` against ``ref`` as a dict of plain Python numbers.

    ``ref`` must have ``a``'s shape; its dtype may be any float dtype (normally float64) and it
    is moved to ``a``'s device. Keys: ``n``, ``n_compared``, ``abs_/rel_/ulp_/sulp_`` x
    ``max/mean/p50/p99``, ``exact_fraction`` (share equal to ``ref`` correctly rounded to a's
    dtype), ``cosine``, ``rel_within_1e-3``, ``rel_within_5e-3`` (shares with relative error at
    most one thousandth / five thousandths), ``error_balance`` (``|#(a > ref) - #(a < ref)| /
    n_compared``, a rounding-bias signal), and the counts ``nan_matched``, ``inf_matched``,
    ``nan_mismatch``, ``inf_mismatch``. See the module docstring for exact definitions.

    >>> import torch
    >>> s = error_stats(torch.tensor([1.0, 2.0], dtype=torch.float16),
    ...                 torch.tensor([1.0, 2.0 + 2**-11], dtype=torch.float64))
    >>> s["ulp_max"], s["exact_fraction"]
    (0.25, 1.0)
    """
    ta, _ = as_tensor(a, "a")
    tr, _ = as_tensor(ref, "ref")
    require_float(ta, "a")
    require_float(tr, "ref")
    if tr.device != ta.device:
        tr = tr.to(ta.device)
    require_same(ta, tr, ("a", "ref"), dtype=False)
    n = ta.numel()
    acc = _Accumulator(n, ta.device)
    fa, fr = ta.reshape(-1), tr.reshape(-1)
    # One spacing per row (last dimension) at the row's largest finite |ref|; elements find theirs by index.
    row_len = ta.shape[-1] if ta.dim() > 0 and ta.shape[-1] > 0 else 1
    finite_ref = torch.where(torch.isfinite(tr), tr, torch.zeros((), dtype=tr.dtype, device=tr.device))
    rows = finite_ref.to(torch.float64).reshape(-1, row_len) if n else finite_ref.to(torch.float64).reshape(0, 1)
    row_spacing = scaled_spacing(rows, ta.dtype)[:, 0] if n else rows[:, 0]
    step = _CPU_CHUNK if ta.device.type == "cpu" else max(n, 1)
    for start in range(0, n, step):
        stop = min(n, start + step)
        index = torch.arange(start, stop, device=ta.device) // row_len
        _chunk(acc, fa[start:stop], fr[start:stop], row_spacing[index], ta.dtype)
    m = acc.filled
    result: dict[str, float | int | None] = {"n": n, "n_compared": m, **acc.counts}
    if m == 0:
        result.update({key: None for key in STAT_KEYS})
        return result
    for name in ("abs", "rel", "ulp", "sulp"):
        result.update(_summary(getattr(acc, name)[:m], name))
    denom = math.sqrt(acc.norm_a) * math.sqrt(acc.norm_ref)
    result.update(
        {
            "exact_fraction": acc.exact / m,
            "cosine": acc.dot / denom if denom > 0 else (1.0 if acc.norm_a == acc.norm_ref else 0.0),
            "rel_within_1e-3": acc.within_1e3 / m,
            "rel_within_5e-3": acc.within_5e3 / m,
            "error_balance": abs(acc.above - acc.below) / m,
        }
    )
    return result
