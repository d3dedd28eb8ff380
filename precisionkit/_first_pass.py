"""The fused C first pass of :func:`precisionkit.stats.error_stats` (``_native/first_pass.c``): per chunk,
the counts, compensated sums, maxima, leading-bit histograms and window gathers of the torch path's
:func:`precisionkit.stats._accumulate`, in one loop, the chunks shared out among torch's threads.
"""

from __future__ import annotations

import ctypes
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from . import _native
from ._order_stats import _DIGIT, _METRICS, _Accumulator, _chunks, _Window
from ._tensors import FORMAT
from .ulp import _spacing64, round_to_dtype

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
