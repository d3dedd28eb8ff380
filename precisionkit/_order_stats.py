"""Exact order statistics of the errors without keeping them: the state one pass over the chunks gathers
(:class:`_Accumulator`), the windows of errors it collects around the wanted ranks (:class:`_Window`),
and the radix passes that resolve the ranks no window holds (:func:`_select`). Used by
:func:`precisionkit.stats.error_stats` and its fused C first pass (:mod:`precisionkit._first_pass`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

import numpy as np
import torch

_PERCENTILES = (50.0, 99.0)


def _exact_percentiles(values: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """Linear-interpolation percentiles by selection (O(n)); partitions ``values`` in place."""
    n = len(values)
    ranks = [q / 100.0 * (n - 1) for q in qs]
    kth = sorted({math.floor(r) for r in ranks} | {math.ceil(r) for r in ranks})
    values.partition(kth)
    out = []
    for r in ranks:
        lo, hi = math.floor(r), math.ceil(r)
        out.append(float(values[lo] + (values[hi] - values[lo]) * (r - lo)))
    return out


def _interpolate(order_stats: dict[int, float], m: int, qs: tuple[float, ...]) -> list[float]:
    """Percentiles with numpy's "linear" method from the order statistics at the needed ranks."""
    out = []
    for q in qs:
        r = q / 100.0 * (m - 1)
        lo, hi = math.floor(r), math.ceil(r)
        out.append(float(order_stats[lo] + (order_stats[hi] - order_stats[lo]) * (r - lo)))
    return out


def _needed_ranks(m: int, qs: tuple[float, ...]) -> list[int]:
    ranks = [q / 100.0 * (m - 1) for q in qs]
    return sorted({math.floor(r) for r in ranks} | {math.ceil(r) for r in ranks})


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


_WINDOW_CAP = 6 << 20  # the most errors one window may gather (48 MiB of int64 keys)
_SPREAD = 5.0  # a window covers the sample quantile +- this many binomial standard deviations


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
