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

import ctypes
import math
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from . import _native
from ._tensors import FORMAT, INT_VIEW, as_tensor, require_float, require_same

_CPU_CHUNK = 1 << 18
_DEVICE_CHUNK = 1 << 24
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


def _interpolate(order_stats: dict[int, float], m: int, qs: tuple[float, ...]) -> list[float]:
    """Percentiles with numpy's "linear" method from the order statistics at the needed ranks."""
    out = []
    for q in qs:
        r = q / 100.0 * (m - 1)
        lo, hi = int(math.floor(r)), int(math.ceil(r))
        out.append(float(order_stats[lo] + (order_stats[hi] - order_stats[lo]) * (r - lo)))
    return out


def _needed_ranks(m: int, qs: tuple[float, ...]) -> list[int]:
    ranks = [q / 100.0 * (m - 1) for q in qs]
    return sorted({int(math.floor(r)) for r in ranks} | {int(math.ceil(r)) for r in ranks})


# Exact selection without keeping the errors: every error is a non-negative float64, whose bit
# pattern read as an int64 orders like the value. A pass over the data histograms 16 bits of the
# pattern below an already fixed prefix; the bin holding a wanted rank becomes the next prefix.
# Once a bin is small (_COLLECT elements) its values are gathered in a later pass and the rank is
# selected among them exactly; a bin of one repeated value (e.g. exact zeros) resolves by the
# prefix alone after at most four passes.
_DIGIT = 16
_COLLECT = 1 << 21
_METRICS = ("abs", "rel", "ulp", "sulp")


class _Query:
    """One wanted order statistic of one metric: rank ``rank`` (0-based) among the values whose
    bit pattern starts with ``prefix`` (the top ``64 - shift`` bits)."""

    def __init__(self, metric: str, rank: int) -> None:
        self.metric, self.rank = metric, rank
        self.target = rank  # the rank among all values (``rank`` becomes relative to the prefix's bin)
        self.prefix, self.shift = 0, 64  # nothing fixed yet: every value matches
        self.count: int | None = None  # values matching the prefix, when known
        self.value: float | None = None

    def matches(self, keys: torch.Tensor) -> torch.Tensor:
        if self.shift >= 64:
            return torch.ones_like(keys, dtype=torch.bool)
        return (keys >> self.shift) == self.prefix


class _Accumulator:
    def __init__(self) -> None:
        self.filled = 0
        self.counts = dict(nan_matched=0, inf_matched=0, nan_mismatch=0, inf_mismatch=0)
        self.exact = self.balance = self.within_1e3 = self.within_5e3 = 0
        self.dot = self.norm_a = self.norm_ref = 0.0
        self.max = dict.fromkeys(_METRICS, 0.0)
        self.sums: dict[str, list[float]] = {m: [] for m in _METRICS}
        # Histograms of each error's top _DIGIT bits: the first radix pass, taken with the sums.
        self.hist: dict[str, torch.Tensor] = {}
        self.zeros = 0  # pairs with no error: zero in every metric
        # Per metric, the errors in a key range predicted to hold the wanted ranks (see _Window).
        self.windows: dict[str, list[_Window]] = {}


class _Window:
    """Errors of one metric whose int64 keys lie in ``[lo, hi)``, gathered during the first pass
    into a buffer sized from a sample. The range is a union of whole first-pass histogram bins, so
    after the pass the histogram gives the exact number of errors below it; a wanted rank that
    falls inside the range is then selected among the gathered errors with no further pass. A
    buffer that fills up is dropped (``buffer`` becomes None) and the radix passes take over."""

    def __init__(self, lo: int, hi: int, capacity: int) -> None:
        self.lo, self.hi = lo, hi
        self.buffer: torch.Tensor | None = torch.empty(capacity, dtype=torch.int64)
        self.filled = 0

    def gather(self, keys: torch.Tensor) -> None:
        if self.buffer is None:
            return
        sel = keys[(keys >= self.lo) & (keys < self.hi)]
        if self.filled + sel.numel() > self.buffer.numel():
            self.buffer = None
            return
        self.buffer[self.filled : self.filled + sel.numel()] = sel.cpu()
        self.filled += sel.numel()


def _spacing64(r64: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """:func:`spacing` of finite fp64 values, from the exponent bits (no frexp / ldexp) where the
    result is a normal fp64 number, i.e. for every format but fp64 itself."""
    _, mantissa, emin = FORMAT[dtype]
    if emin - mantissa < -1022:
        return spacing(r64, dtype)
    exponent = ((r64.view(torch.int64) >> 52) & 0x7FF) - 1023  # zero and fp64 subnormals: -1023
    exponent = torch.clamp(exponent, min=emin)
    return ((exponent + (1023 - mantissa)) << 52).view(torch.float64)


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


def _chunks(n: int, row_len: int, chunk: int) -> Iterator[tuple[int, int, int, int]]:
    """(start, stop, first row, rows) per chunk: whole rows where a row fits in a chunk, else
    pieces of one row (rows == 0 marks a piece inside row ``first row``)."""
    if row_len <= chunk:
        step = max(1, chunk // row_len) * row_len
        for start in range(0, n, step):
            stop = min(n, start + step)
            yield start, stop, start // row_len, (stop - start) // row_len
    else:
        for start in range(0, n, chunk):
            row = start // row_len
            yield start, min(n, start + chunk, (row + 1) * row_len), row, 0


def _select(
    queries: list[_Query],
    passes: Callable[[set[str]], Iterable[dict[str, torch.Tensor]]],
    given: dict[str, torch.Tensor] | None = None,
) -> None:
    """Resolve every query's order statistic exactly by radix passes over the errors
    (``passes(metrics)`` yields, per chunk, a dict metric -> fp64 errors of that chunk, at least
    for the named metrics). ``given``: each metric's histogram of the top ``_DIGIT`` bits, when
    already taken, which saves the first pass."""
    pending = list(queries)
    while pending:
        histograms: dict[int, torch.Tensor] = {}
        groups: dict[tuple[str, int, int], list[_Query]] = {}
        for q in pending:
            groups.setdefault((q.metric, q.prefix, q.shift), []).append(q)
        collect = {g for g, qs in groups.items() if qs[0].count is not None and qs[0].count <= _COLLECT}
        if given is not None:  # the first round's histograms are given: no pass
            histograms = {id(qs[0]): given[metric] for (metric, _, _), qs in groups.items()}
            given = None
            collect = set()
            groups_for_pass: dict[tuple[str, int, int], list[_Query]] = {}
        else:
            groups_for_pass = groups
        # Buffers of the known bin sizes, allocated before the pass: many small long-lived pieces
        # between the chunks' temporaries would fragment the heap and keep its memory resident.
        collected: dict[int, torch.Tensor] = {}
        filled: dict[int, int] = {}
        for g in collect:
            first = groups[g][0]
            collected[id(first)] = torch.empty(first.count or 0, dtype=torch.int64)
            filled[id(first)] = 0
        for values in passes({metric for metric, _, _ in groups_for_pass}) if groups_for_pass else ():
            for (metric, prefix, shift), qs in groups_for_pass.items():
                keys = values[metric].view(torch.int64)
                gid = id(qs[0])
                sel = keys if shift >= 64 else keys[(keys >> shift) == prefix]
                if (metric, prefix, shift) in collect:
                    collected[gid][filled[gid] : filled[gid] + sel.numel()] = sel.cpu()
                    filled[gid] += sel.numel()
                else:
                    digit = (sel >> (shift - _DIGIT)) & ((1 << _DIGIT) - 1)
                    h = torch.bincount(digit, minlength=1 << _DIGIT)
                    histograms[gid] = h if gid not in histograms else histograms[gid] + h
        still = []
        for g, qs in groups.items():
            gid = id(qs[0])
            if g in collect:
                ordered = collected[gid].view(torch.float64).numpy()
                wanted = sorted({q.rank for q in qs})
                ordered.partition(wanted)
                for q in qs:
                    q.value = float(ordered[q.rank])
                continue
            hist = histograms.get(gid)
            if hist is None:
                hist = torch.zeros(1 << _DIGIT, dtype=torch.int64)
            cum = torch.cumsum(hist.cpu(), 0)
            for q in qs:
                b = int(torch.searchsorted(cum, torch.tensor(q.rank), right=True))
                below = int(cum[b - 1]) if b > 0 else 0
                q.rank -= below
                q.count = int(hist[b])
                q.shift -= _DIGIT
                q.prefix = ((q.prefix << _DIGIT) if q.shift + _DIGIT < 64 else 0) | b
                if q.shift == 0:  # every bit fixed: the bin is one value
                    q.value = float(torch.tensor(q.prefix, dtype=torch.int64).view(torch.float64))
                else:
                    still.append(q)
        pending = still


_SAMPLE = 1 << 18  # errors drawn (with a fixed seed) to place the first pass's windows
_WINDOW_CAP = 6 << 20  # the most errors one window may gather (48 MiB of int64 keys)
_SPREAD = 5.0  # a window covers the sample quantile +- this many binomial standard deviations


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


def _plan_windows(sample: dict[str, torch.Tensor], n: int) -> dict[str, list[_Window]]:
    """Per metric, key ranges (whole first-pass bins, zeros left out) that the sample says hold
    the wanted percentiles, with buffers sized for them; a range estimated to need more than
    ``_WINDOW_CAP`` errors is left to the radix passes. Only speed depends on this guess."""
    out: dict[str, list[_Window]] = {}
    for metric, v in sample.items():
        s = v.numel()
        if s == 0:
            continue
        keys = np.sort(v.view(torch.int64).cpu().numpy())
        ranges: list[list[int]] = []
        for q in _PERCENTILES:
            f = q / 100.0
            spread = _SPREAD * math.sqrt(f * (1.0 - f) * s) + 2.0
            lo_i = max(0, math.floor(f * (s - 1) - spread))
            hi_i = min(s - 1, math.ceil(f * (s - 1) + spread))
            lo_bin, hi_bin = int(keys[lo_i]) >> (64 - _DIGIT), int(keys[hi_i]) >> (64 - _DIGIT)
            lo = max(1, lo_bin << (64 - _DIGIT))  # exact zeros are resolved by their count
            hi = (hi_bin + 1) << (64 - _DIGIT)
            if ranges and lo <= ranges[-1][1]:
                ranges[-1][1] = max(ranges[-1][1], hi)
            else:
                ranges.append([lo, hi])
        windows = []
        for lo, hi in ranges:
            inside = int(np.searchsorted(keys, hi) - np.searchsorted(keys, lo))
            expected = inside / s * n
            capacity = math.ceil(1.1 * expected + 8.0 * math.sqrt(expected * n / s) + 4096)
            if capacity <= _WINDOW_CAP:
                windows.append(_Window(lo, hi, min(capacity, n)))
        out[metric] = windows
    return out


def _resolve_from_windows(queries: list[_Query], acc: _Accumulator) -> list[_Query]:
    """Set the value of every query whose rank is an exact zero or falls inside its metric's
    window; return the others (for the radix passes)."""
    pending: list[_Query] = []
    wanted: dict[int, tuple[_Window, list[tuple[_Query, int]]]] = {}
    cums = {metric: torch.cumsum(h.cpu(), 0) for metric, h in acc.hist.items()}
    for q in queries:
        if q.rank < acc.zeros:
            q.value = 0.0
            continue
        for w in acc.windows.get(q.metric, ()):
            if w.buffer is None:
                continue
            cum = cums[q.metric]
            below = acc.zeros if w.lo == 1 else int(cum[(w.lo >> (64 - _DIGIT)) - 1])
            top = int(cum[(w.hi >> (64 - _DIGIT)) - 1])
            if top - below != w.filled:  # the window and the histogram must count the same errors
                raise AssertionError(f"window of {q.metric} holds {w.filled} errors, histogram {top - below}")
            if below <= q.rank < top:
                wanted.setdefault(id(w), (w, []))[1].append((q, q.rank - below))
                break
        else:
            pending.append(q)
    for w, picks in wanted.values():
        assert w.buffer is not None
        ordered = w.buffer[: w.filled].view(torch.float64).numpy()
        ordered.partition(sorted({k for _, k in picks}))
        for q, k in picks:
            q.value = float(ordered[k])
    return pending


# The fused first pass (``_native/first_pass.c``): the layouts of its accumulator arrays.
_F_LEN, _F_SUM, _F_COMP, _F_MAX, _F_DOT, _F_NORM_A, _F_NORM_REF = 18, 0, 4, 8, 12, 14, 16
_C_NAMES = (
    "filled", "zeros", "below_half", "ties", "balance", "within_1e3", "within_5e3",
    "nan_matched", "inf_matched", "nan_mismatch", "inf_mismatch",
)  # fmt: skip
_W_LEN, _W_FILLED, _W_DROPPED = 6, 4, 5


def _first_pass_kernel(device: torch.device, dtype: torch.dtype) -> Any:
    """The fused C first pass (a ctypes library with ``pk_first_pass`` and ``pk_row_scales``),
    where it applies (CPU tensors of a 16- or 32-bit format) and can be built; else None (the
    torch path gives the same statistics)."""
    if device.type != "cpu" or dtype == torch.float64:
        return None
    lib = _native.load("first_pass")
    if lib is None:
        return None
    if lib.pk_first_pass.restype is not ctypes.c_int64:
        p, i64, f64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
        lib.pk_first_pass.argtypes = [p, p, i64, p, i64, f64, i64, i64, p, p, p, p, p, p, i64]
        lib.pk_first_pass.restype = i64
        lib.pk_row_scales.argtypes = [p, i64, i64, p]
        lib.pk_row_scales.restype = None
    return lib


def first_pass_implementation(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float16) -> str:
    """Which first pass :func:`error_stats` runs for results of ``dtype`` on ``device``: ``"C"``
    (the fused kernel) or ``"torch"``."""
    return "C" if _first_pass_kernel(torch.device(device), dtype) is not None else "torch"


def _native_row_scales(lib: Any, fr: torch.Tensor, row_len: int, n_rows: int) -> torch.Tensor:
    """:func:`_row_scales` of a contiguous fp64 CPU reference, in one C loop."""
    out = torch.empty(n_rows, dtype=torch.float64)
    lib.pk_row_scales(fr.data_ptr(), n_rows, row_len, out.data_ptr())
    return out


def _correct_ties(a64: torch.Tensor, r64: torch.Tensor, dtype: torch.dtype) -> int:
    """Among finite pairs at exactly half a ULP from ``ref``, how many are ``ref`` correctly rounded."""
    finite = torch.isfinite(a64) & torch.isfinite(r64)
    a64, r64 = a64[finite], r64[finite]
    tie = (a64 - r64).abs() / _spacing64(r64, dtype) == 0.5
    return int((a64[tie] == round_to_dtype(r64[tie], dtype).to(torch.float64)).sum())


class _NativeState:
    """One thread's part of the fused first pass: its accumulators and chunk buffers."""

    def __init__(self, size: int, direct: bool) -> None:
        self.f = np.zeros(_F_LEN, dtype=np.float64)
        self.c = np.zeros(len(_C_NAMES), dtype=np.int64)
        self.hist = torch.zeros(len(_METRICS), 1 << _DIGIT, dtype=torch.int64)
        self.a64 = torch.empty(size, dtype=torch.float64)
        self.r64 = None if direct else torch.empty(size, dtype=torch.float64)
        self.ties_exact = 0  # pairs at exactly half a ULP that are the correctly rounded ref


def _native_first_pass(
    lib: Any,
    fa: torch.Tensor,
    fr: torch.Tensor,
    row_spacing: torch.Tensor,
    row_len: int,
    chunk: int,
    acc: _Accumulator,
) -> None:
    """The first pass (as :func:`_accumulate` over every chunk) in one fused C loop per chunk,
    the chunks shared out among torch's intra-op thread count; the threads gather into the same
    windows."""
    n, dtype = fa.numel(), fa.dtype
    _, mantissa, emin = FORMAT[dtype]
    windows = [(_METRICS.index(name), w) for name, ws in acc.windows.items() for w in ws]
    if len(windows) > 127:
        raise AssertionError(f"{len(windows)} windows do not fit the kernel's int8 table")
    win = np.zeros((max(1, len(windows)), _W_LEN), dtype=np.int64)
    # per metric and first-pass bin, 1 + the index of the window covering the bin (0: none)
    lut = np.zeros((len(_METRICS), 1 << _DIGIT), dtype=np.int8)
    for i, (metric, w) in enumerate(windows):
        assert w.buffer is not None
        win[i, :4] = (metric, w.lo, w.hi, w.buffer.numel())
        lut[metric, w.lo >> (64 - _DIGIT) : ((w.hi - 1) >> (64 - _DIGIT)) + 1] = i + 1
    bufs = (ctypes.c_void_p * max(1, len(windows)))(*[w.buffer.data_ptr() for _, w in windows if w.buffer is not None])
    direct = fr.dtype == torch.float64 and fr.is_contiguous()
    spacing64 = row_spacing.to(torch.float64).contiguous()
    tiny = torch.finfo(dtype).tiny
    chunks = list(_chunks(n, row_len, chunk))
    states = [_NativeState(min(n, chunk), direct) for _ in range(max(1, min(torch.get_num_threads(), len(chunks))))]

    def work(t: int) -> None:
        st = states[t]
        pointers = (st.f.ctypes.data, st.c.ctypes.data, st.hist.data_ptr(), lut.ctypes.data, win.ctypes.data)
        for start, stop, row, rows in chunks[t :: len(states)]:
            k = stop - start
            st.a64[:k].copy_(fa[start:stop])
            r = fr[start:stop] if st.r64 is None else st.r64[:k].copy_(fr[start:stop])
            sp = spacing64[row : row + (rows or 1)]
            ties = lib.pk_first_pass(st.a64.data_ptr(), r.data_ptr(), k, sp.data_ptr(), row_len if rows else k,
                                     tiny, emin, mantissa, *pointers, bufs, len(windows))  # fmt: skip
            if ties:
                st.ties_exact += _correct_ties(st.a64[:k], r, dtype)

    if len(states) == 1:
        work(0)
    else:
        with ThreadPoolExecutor(len(states)) as pool:
            list(pool.map(work, range(len(states))))
    _merge_native(states, windows, win, acc)


def _merge_native(
    states: list[_NativeState], windows: list[tuple[int, _Window]], win: np.ndarray, acc: _Accumulator
) -> None:
    """The threads' accumulators and the windows' fill levels, into ``acc``."""
    counts = dict(zip(_C_NAMES, (int(x) for x in np.sum([st.c for st in states], axis=0)), strict=True))
    acc.filled, acc.zeros = counts["filled"], counts["zeros"]
    acc.exact += counts["below_half"] + sum(st.ties_exact for st in states)
    acc.balance, acc.within_1e3, acc.within_5e3 = counts["balance"], counts["within_1e3"], counts["within_5e3"]
    acc.counts = {key: counts[key] for key in acc.counts}

    def total(at: int) -> float:  # a compensated pair per thread
        return math.fsum(float(x) for st in states for x in st.f[at : at + 2])

    acc.dot, acc.norm_a, acc.norm_ref = total(_F_DOT), total(_F_NORM_A), total(_F_NORM_REF)
    for m, name in enumerate(_METRICS):
        acc.max[name] = max(float(st.f[_F_MAX + m]) for st in states)
        acc.sums[name] = [float(st.f[at]) for st in states for at in (_F_SUM + m, _F_COMP + m)]
        acc.hist[name] = sum((st.hist[m] for st in states[1:]), states[0].hist[m].clone())
    for i, (_, w) in enumerate(windows):
        w.filled = int(win[i, _W_FILLED])
        if win[i, _W_DROPPED]:
            w.buffer = None


STAT_KEYS = tuple(f"{m}_{s}" for m in ("abs", "rel", "ulp", "sulp") for s in ("max", "mean", "p50", "p99")) + (
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
    ta, _ = as_tensor(a, "a")
    tr, _ = as_tensor(ref, "ref")
    require_float(ta, "a")
    require_float(tr, "ref")
    if tr.device != ta.device:
        tr = tr.to(ta.device)
    require_same(ta, tr, ("a", "ref"), dtype=False)
    ta, tr = ta.detach(), tr.detach()
    n = ta.numel()
    dtype = ta.dtype
    fa, fr = ta.reshape(-1), tr.reshape(-1)
    chunk = _CPU_CHUNK if ta.device.type == "cpu" else _DEVICE_CHUNK
    # One spacing per row (last dimension) at the row's largest finite |ref|.
    row_len = ta.shape[-1] if ta.dim() > 0 and ta.shape[-1] > 0 else 1
    n_rows = n // row_len if n else 0
    kernel = _first_pass_kernel(ta.device, dtype) if n else None
    if kernel is not None and fr.dtype == torch.float64 and fr.is_contiguous():
        scales = _native_row_scales(kernel, fr, row_len, n_rows)
    else:
        scales = _row_scales(fr, row_len, n_rows, chunk) if n else torch.zeros(0, dtype=torch.float64)
    row_spacing = spacing(scales, dtype) if n else torch.zeros(0, dtype=torch.float64)

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
