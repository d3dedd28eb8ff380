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
from collections.abc import Iterator
from typing import Any

import torch

from ._first_pass import _first_pass_kernel, _native_first_pass, _native_row_scales, first_pass_implementation
from ._order_stats import (
    _DIGIT,
    _METRICS,
    _PERCENTILES,
    _Accumulator,
    _chunks,
    _interpolate,
    _needed_ranks,
    _plan_windows,
    _Query,
    _resolve_from_windows,
    _select,
)
from ._tensors import FORMAT, as_tensor, require_float, require_same
from .ulp import _spacing64, round_to_dtype, scaled_spacing, spacing

__all__ = [
    "STAT_KEYS",
    "error_stats",
    "first_pass_implementation",
    "round_to_dtype",
    "scaled_spacing",
    "spacing",
]

_CPU_CHUNK = 1 << 18
_DEVICE_CHUNK = 1 << 24


#: One chunk's finite pairs: a and ref in fp64, a - ref, and the four errors by name.
_Metrics = tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]

_EXPONENT_BITS = 0x7FF0000000000000


class _Buffers:
    """Per-chunk working tensors, allocated once: the chunks' arithmetic runs in place in them."""

    def __init__(self, size: int, device: torch.device) -> None:
        def f64() -> torch.Tensor:
            return torch.empty(size, dtype=torch.float64, device=device)

        self.a64, self.r64, self.diff, self.tmp = f64(), f64(), f64(), f64()
        self.values = {name: f64() for name in _METRICS}
        self.keys = torch.empty(size, dtype=torch.int64, device=device)


def _masked_metrics(
    a: torch.Tensor, ref: torch.Tensor, row_spacing: torch.Tensor, dtype: torch.dtype, acc: _Accumulator | None
) -> _Metrics:
    """:func:`_metrics` for a chunk with NaNs or infinities: counts the excluded pairs into ``acc``
    and computes the errors of the finite pairs (new tensors, not the buffers)."""
    a64, r64 = a.to(torch.float64), ref.to(torch.float64)
    diff = a64 - r64
    finite_a, finite_r = torch.isfinite(a64), torch.isfinite(r64)
    finite = finite_a & finite_r
    if acc is not None:
        nan_a, nan_r = torch.isnan(a64), torch.isnan(r64)
        inf_a, inf_r = ~finite_a & ~nan_a, ~finite_r & ~nan_r
        acc.counts["nan_matched"] += int((nan_a & nan_r).sum())
        acc.counts["nan_mismatch"] += int((nan_a ^ nan_r).sum())
        same_inf = inf_a & inf_r & (a64 == r64)
        acc.counts["inf_matched"] += int(same_inf.sum())
        acc.counts["inf_mismatch"] += int(((inf_a | inf_r) & ~(nan_a | nan_r) & ~same_inf).sum())
    a64, r64, diff = a64[finite], r64[finite], diff[finite]
    if row_spacing.numel() > 1:
        row_spacing = row_spacing.reshape(-1)[finite]
    err = diff.abs()
    tiny = torch.finfo(dtype).tiny
    values = {
        "abs": err,
        "rel": err / torch.clamp(r64.abs(), min=tiny),
        "ulp": err / _spacing64(r64, dtype),
        "sulp": err / row_spacing,
    }
    return a64, r64, diff, values


def _metrics(
    a: torch.Tensor,
    ref: torch.Tensor,
    row_spacing: torch.Tensor,
    rows: int,
    dtype: torch.dtype,
    acc: _Accumulator | None,
    buf: _Buffers,
) -> _Metrics:
    """The four errors of one chunk's finite pairs; with ``acc``, also counts the excluded pairs.

    ``row_spacing`` holds one spacing per row of the chunk (``rows`` rows) or, with ``rows == 0``,
    the one spacing of the row the chunk is a piece of. Chunks of finite pairs (the usual case) are
    computed in place in ``buf``; the returned tensors are views of it, valid until the next chunk.
    """
    k = a.numel()
    a64, r64, diff = buf.a64[:k], buf.r64[:k], buf.diff[:k]
    a64.copy_(a)
    r64.copy_(ref)
    torch.sub(a64, r64, out=diff)
    err = buf.values["abs"][:k]
    torch.abs(diff, out=err)
    # max propagates NaN: a finite maximum means every pair is finite and no difference overflowed
    if k and not math.isfinite(float(err.max())):
        if rows:
            row_spacing = row_spacing[:, None].expand(rows, k // rows)
        return _masked_metrics(a, ref, row_spacing, dtype, acc)
    values = {name: v[:k] for name, v in buf.values.items()}
    tmp = buf.tmp[:k]
    torch.abs(r64, out=tmp)
    tmp.clamp_(min=torch.finfo(dtype).tiny)
    torch.div(err, tmp, out=values["rel"])
    _, mantissa, emin = FORMAT[dtype]
    if emin - mantissa < -1022:  # fp64: spacings below the normal range
        torch.div(err, spacing(r64, dtype), out=values["ulp"])
    else:  # spacing(ref) = max(2**floor(log2|ref|), 2**emin) * 2**-mantissa, all exact powers of two
        keys = buf.keys[:k]
        torch.bitwise_and(r64.view(torch.int64), _EXPONENT_BITS, out=keys)
        gap = keys.view(torch.float64)
        gap.clamp_(min=2.0**emin).mul_(2.0**-mantissa)
        torch.div(err, gap, out=values["ulp"])
    if rows:
        torch.div(err.view(rows, k // rows), row_spacing[:, None], out=values["sulp"].view(rows, k // rows))
    else:
        torch.div(err, row_spacing, out=values["sulp"])
    return a64, r64, diff, values


def _accumulate(
    acc: _Accumulator,
    a64: torch.Tensor,
    r64: torch.Tensor,
    diff: torch.Tensor,
    values: dict[str, torch.Tensor],
    dtype: torch.dtype,
    keys: torch.Tensor,
) -> None:
    k = a64.numel()
    if k == 0:
        return
    acc.filled += k
    keys = keys[:k]
    acc.zeros += int((values["abs"] == 0).sum())
    for name, v in values.items():
        acc.max[name] = max(acc.max[name], float(v.max()))
        acc.sums[name].append(float(v.sum()))
        for window in acc.windows.get(name, ()):
            window.gather(v.view(torch.int64))
        torch.bitwise_right_shift(v.view(torch.int64), 64 - _DIGIT, out=keys)
        h = torch.bincount(keys, minlength=1 << _DIGIT)
        acc.hist[name] = h if name not in acc.hist else acc.hist[name].add_(h)
    acc.exact += _count_correctly_rounded(a64, r64, values["ulp"], dtype)
    acc.balance += int(torch.sign(diff).sum())  # (#above - #below): exact, |sum| < 2**53
    acc.within_1e3 += int((values["rel"] <= 1e-3).sum())
    acc.within_5e3 += int((values["rel"] <= 5e-3).sum())
    acc.dot += float(torch.dot(a64, r64))
    acc.norm_a += float(torch.dot(a64, a64))
    acc.norm_ref += float(torch.dot(r64, r64))


def _count_correctly_rounded(a64: torch.Tensor, r64: torch.Tensor, ulp: torch.Tensor, dtype: torch.dtype) -> int:
    """How many ``a`` equal ``ref`` correctly rounded to ``dtype``, from the ULP errors.

    ``a`` (a ``dtype`` value) is ``ref`` rounded to nearest exactly when ``|a - ref|`` is below half
    the spacing at ``ref``, or equal to it with ``a`` the even neighbour; this holds across binade
    edges and in the subnormal range, where the spacing is the fixed ``2**(emin - p)``. The ULP
    error is that distance divided by a power of two, and fp64 rounding is monotone, so a computed
    ULP error below 0.5 is exact proof; pairs at exactly 0.5 (ties, rare) are decided by rounding
    ``ref`` correctly (:func:`round_to_dtype`)."""
    if dtype == torch.float64:
        return int((a64 == r64).sum())
    count = int((ulp < 0.5).sum())
    tie = ulp == 0.5
    if bool(tie.any()):
        count += int((a64[tie] == round_to_dtype(r64[tie], dtype).to(torch.float64)).sum())
    return count


def _row_scales(fr: torch.Tensor, row_len: int, n_rows: int, chunk: int) -> torch.Tensor:
    """Per row (last dimension), the largest finite ``|ref|``, in fp64, without an fp64 copy of ``ref``."""
    out = torch.zeros(n_rows, dtype=torch.float64, device=fr.device)
    if row_len <= chunk:
        step = max(1, chunk // row_len)
        for r0 in range(0, n_rows, step):
            r1 = min(n_rows, r0 + step)
            block = fr[r0 * row_len : r1 * row_len].reshape(r1 - r0, row_len).abs().to(torch.float64)
            block = torch.where(torch.isfinite(block), block, torch.zeros((), dtype=torch.float64, device=fr.device))
            out[r0:r1] = block.amax(dim=1)
    else:
        for r in range(n_rows):
            best = 0.0
            for s in range(r * row_len, (r + 1) * row_len, chunk):
                piece = fr[s : min((r + 1) * row_len, s + chunk)].abs().to(torch.float64)
                piece = piece[torch.isfinite(piece)]
                if piece.numel():
                    best = max(best, float(piece.max()))
            out[r] = best
    return out


_SAMPLE = 1 << 18  # errors drawn (with a fixed seed) to place the first pass's windows


def _sample_errors(
    fa: torch.Tensor, fr: torch.Tensor, row_spacing: torch.Tensor, row_len: int, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """The four errors of a fixed-seed random sample of pairs (all pairs when there are few)."""
    n = fa.numel()
    if n <= _SAMPLE:
        idx = torch.arange(n)
    else:
        idx = torch.randint(0, n, (_SAMPLE,), generator=torch.Generator().manual_seed(0))
    idx = idx.to(fa.device)
    sp = row_spacing[idx // row_len] if row_spacing.numel() else row_spacing
    *_, values = _masked_metrics(fa[idx], fr[idx], sp, dtype, None)
    return values


STAT_KEYS = (
    *tuple(f"{m}_{s}" for m in ("abs", "rel", "ulp", "sulp") for s in ("max", "mean", "p50", "p99")),
    "exact_fraction",
    "cosine",
    "rel_within_1e-3",
    "rel_within_5e-3",
    "error_balance",
)


def _statistics(acc: _Accumulator, queries: list[_Query], m: int) -> dict[str, float]:
    """The statistics of ``m`` compared pairs from the first pass's sums and the resolved ranks."""
    by_metric: dict[str, dict[int, float]] = {name: {} for name in _METRICS}
    for q in queries:
        assert q.value is not None
        by_metric[q.metric][q.target] = q.value
    out: dict[str, float] = {}
    for name in _METRICS:
        p50, p99 = _interpolate(by_metric[name], m, _PERCENTILES)
        out |= {
            f"{name}_max": acc.max[name],
            f"{name}_mean": math.fsum(acc.sums[name]) / m,
            f"{name}_p50": p50,
            f"{name}_p99": p99,
        }
    denom = math.sqrt(acc.norm_a) * math.sqrt(acc.norm_ref)
    return out | {
        "exact_fraction": acc.exact / m,
        "cosine": acc.dot / denom if denom > 0 else (1.0 if acc.norm_a == acc.norm_ref else 0.0),
        "rel_within_1e-3": acc.within_1e3 / m,
        "rel_within_5e-3": acc.within_5e3 / m,
        "error_balance": abs(acc.balance) / m,
    }


def error_stats(a: Any, ref: Any) -> dict[str, float | int | None]:
    """Error statistics of ``a`` against ``ref`` as a dict of plain Python numbers.

    ``ref`` must have ``a``'s shape; its dtype may be any float dtype (normally float64) and it
    is moved to ``a``'s device. Keys: ``n``, ``n_compared``, ``abs_/rel_/ulp_/sulp_`` x
    ``max/mean/p50/p99``, ``exact_fraction`` (share equal to ``ref`` correctly rounded to a's
    dtype), ``cosine``, ``rel_within_1e-3``, ``rel_within_5e-3`` (shares with relative error at
    most one thousandth / five thousandths), ``error_balance`` (``|#(a > ref) - #(a < ref)| /
    n_compared``, a rounding-bias signal), and the counts ``nan_matched``, ``inf_matched``,
    ``nan_mismatch``, ``inf_mismatch``. See the module docstring for exact definitions.

    The errors are computed chunk by chunk and never stored whole. One pass gathers the counts,
    sums and maxima, a histogram of each error's leading bits, and the errors inside a few
    histogram bins that a fixed-seed sample of 2**18 pairs places around the wanted ranks; the
    histogram then says exactly which gathered error is each percentile. Where the sample
    misplaced a window, further passes narrow the rank down bin by bin instead (same result,
    more time). Working memory is a few chunks plus the windows, not the input's size.

    On CPU, for results in a 16- or 32-bit format, the first pass is one fused C loop per chunk
    (``precisionkit/_native/first_pass.c``, compiled with the system's C compiler on first use and
    cached; ``PRECISIONKIT_NATIVE=0`` turns it off). It gives the same counts, maxima and
    percentiles bit for bit; its sums are compensated, so means and cosine may differ from the
    torch path's in the last digits, towards the correctly rounded value. Where no compiler
    works, the torch path runs instead.

    >>> import torch
    >>> s = error_stats(
    ...     torch.tensor([1.0, 2.0], dtype=torch.float16), torch.tensor([1.0, 2.0 + 2**-11], dtype=torch.float64)
    ... )
    >>> s["ulp_max"], s["exact_fraction"]
    (0.25, 1.0)
    """
    ta, tr = _prepared(a, ref)
    n, dtype = ta.numel(), ta.dtype
    fa, fr = ta.reshape(-1), tr.reshape(-1)
    chunk = _CPU_CHUNK if ta.device.type == "cpu" else _DEVICE_CHUNK
    row_len = ta.shape[-1] if ta.dim() > 0 and ta.shape[-1] > 0 else 1
    kernel = _first_pass_kernel(ta.device, dtype) if n else None
    row_spacing = _row_spacing(fr, row_len, n // row_len if n else 0, chunk, dtype, kernel)

    bufs: list[_Buffers] = []  # the torch path's working tensors, allocated when it first runs

    def chunk_metrics(acc: _Accumulator | None) -> Iterator[_Metrics]:
        if not bufs:
            bufs.append(_Buffers(min(n, chunk), ta.device))
        for start, stop, row, rows in _chunks(n, row_len, chunk):
            sp = row_spacing[row : row + (rows or 1)]
            yield _metrics(fa[start:stop], fr[start:stop], sp, rows, dtype, acc, bufs[0])

    acc = _Accumulator()
    if n:
        acc.windows = _plan_windows(_sample_errors(fa, fr, row_spacing, row_len, dtype), n)
    if kernel is not None:
        _native_first_pass(kernel, fa, fr, row_spacing, row_len, chunk, acc)
    else:
        for a64, r64, diff, values in chunk_metrics(acc):
            _accumulate(acc, a64, r64, diff, values, dtype, bufs[0].keys)
    m = acc.filled
    result: dict[str, float | int | None] = {"n": n, "n_compared": m, **acc.counts}
    if m == 0:
        result.update({key: None for key in STAT_KEYS})
        return result
    ranks = _needed_ranks(m, _PERCENTILES)
    queries = [_Query(metric, r) for metric in _METRICS for r in ranks]
    pending = _resolve_from_windows(queries, acc)
    acc.windows = {}  # free the gathered errors before any further pass
    if pending:
        _select(pending, lambda metrics: (values for *_, values in chunk_metrics(None)), given=acc.hist)
    result.update(_statistics(acc, queries, m))
    if not all(_SAFE_SQUARES[0] <= x < _SAFE_SQUARES[1] for x in (acc.norm_a, acc.norm_ref)):
        # |values| beyond about 1e154 overflow the squares (cosine NaN), below about 1e-154 they
        # underflow: recompute with both sides scaled by one power of two, which cosine ignores
        result["cosine"] = _scaled_cosine(fa, fr, chunk)
    return result


def _prepared(a: Any, ref: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``a`` and ``ref`` as detached float tensors of one shape, ``ref`` on ``a``'s device."""
    ta, _ = as_tensor(a, "a")
    tr, _ = as_tensor(ref, "ref")
    require_float(ta, "a")
    require_float(tr, "ref")
    if tr.device != ta.device:
        tr = tr.to(ta.device)
    require_same(ta, tr, ("a", "ref"), dtype=False)
    return ta.detach(), tr.detach()


def _row_spacing(
    fr: torch.Tensor, row_len: int, n_rows: int, chunk: int, dtype: torch.dtype, kernel: Any
) -> torch.Tensor:
    """One ``dtype`` spacing per row (last dimension) at the row's largest finite ``|ref|``."""
    if n_rows == 0:
        return torch.zeros(0, dtype=torch.float64)
    if kernel is not None and fr.dtype == torch.float64 and fr.is_contiguous():
        scales = _native_row_scales(kernel, fr, row_len, n_rows)
    else:
        scales = _row_scales(fr, row_len, n_rows, chunk)
    return spacing(scales, dtype)


#: The range of a sum of squares in which the first pass's cosine is accurate.
_SAFE_SQUARES = (2.0**-960, 2.0**960)


def _scaled_cosine(fa: torch.Tensor, fr: torch.Tensor, chunk: int) -> float:
    """Cosine of the finite pairs of ``fa`` and ``fr`` computed on ``x * 2**-e``, ``2**e`` the
    largest magnitude's binade: exact scaling, so the result is that of unbounded arithmetic."""
    top = 0.0
    for start in range(0, fa.numel(), chunk):
        a64, r64 = fa[start : start + chunk].double(), fr[start : start + chunk].double()
        keep = torch.isfinite(a64) & torch.isfinite(r64)
        if bool(keep.any()):
            top = max(top, float(a64[keep].abs().max()), float(r64[keep].abs().max()))
    if top == 0.0:
        return 1.0
    shift = -math.frexp(top)[1]
    half = shift // 2  # two factors: 2**shift alone overflows for subnormal data (shift up to 1074)
    scales = (2.0**half, 2.0 ** (shift - half))
    dot, na, nr = [], [], []
    for start in range(0, fa.numel(), chunk):
        a64, r64 = fa[start : start + chunk].double(), fr[start : start + chunk].double()
        keep = torch.isfinite(a64) & torch.isfinite(r64)
        a64, r64 = a64[keep] * scales[0] * scales[1], r64[keep] * scales[0] * scales[1]
        dot.append(float(torch.dot(a64, r64)))
        na.append(float(torch.dot(a64, a64)))
        nr.append(float(torch.dot(r64, r64)))
    denom = math.sqrt(math.fsum(na)) * math.sqrt(math.fsum(nr))
    if denom == 0.0:
        return 1.0 if math.fsum(na) == math.fsum(nr) else 0.0
    return max(-1.0, min(1.0, math.fsum(dot) / denom))
