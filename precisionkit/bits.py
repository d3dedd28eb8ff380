"""Bit-level comparison: exact equality of bit patterns and ULP distance.

ULP distance is defined through the ordinal map ``ord``: ``ord(+0) = ord(-0) = 0`` and
``ord(nextafter(x, +inf)) = ord(x) + 1`` for every non-NaN ``x`` (subnormals count, and +inf is one
step above the largest finite value). ``ulp_diff(a, b) = |ord(a) - ord(b)|``. In sign-magnitude
encoding ``ord(x)`` is ``+mag`` or ``-mag`` of the raw bits, so the distance between values of
opposite sign is ``mag(a) + mag(b)``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import torch

from ._tensors import FORMAT, INT_VIEW, flat_index, pair, to_kind

#: Distance reported where exactly one side is NaN (2**63 - 1).
ULP_NAN = 2**63 - 1
#: Largest finite distance; fp64 distances that do not fit saturate here (2**63 - 2).
ULP_SATURATED = 2**63 - 2

# Elements per chunk on the CPU: every temporary of a chunk stays in cache, so the whole
# computation costs about one pass over memory instead of one pass per operation.
_CPU_CHUNK = 1 << 18


def bit_equal(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` have identical bit patterns everywhere.

    Shapes and dtypes must match exactly (``ValueError`` otherwise). ``+0.0`` and ``-0.0`` are
    unequal; two NaNs are equal only when their payload bits are identical.

    >>> import torch
    >>> bit_equal(torch.tensor([0.0]), torch.tensor([-0.0]))
    False
    """
    ta, tb, _ = pair(a, b)
    view = INT_VIEW[ta.dtype]
    return bool(torch.equal(ta.view(view), tb.view(view)))


@dataclass(frozen=True)
class BitMismatch:
    """Where two inputs differ bit-wise: ``count`` of ``total`` elements, first at ``first_index``
    (C order, ``None`` when equal); ``mask`` is a bool tensor/array in the inputs' container kind."""

    count: int
    total: int
    first_index: tuple[int, ...] | None
    mask: Any

    def __bool__(self) -> bool:  # truthy when there is a mismatch
        return self.count > 0


def bit_mismatch(a: Any, b: Any) -> BitMismatch:
    """Mismatch mask, count and first mismatching index of two same-shape, same-dtype inputs."""
    ta, tb, kind = pair(a, b)
    view = INT_VIEW[ta.dtype]
    mask = ta.view(view) != tb.view(view)
    count = int(mask.sum())
    first = None
    if count:
        first = flat_index(int(torch.argmax(mask.reshape(-1).to(torch.uint8))), tuple(ta.shape))
    return BitMismatch(count=count, total=ta.numel(), first_index=first, mask=to_kind(mask, kind))


class _OrdinalScratch:
    """Chunk-sized buffers reused across chunks: fresh large temporaries would each cost page
    faults, which dominate the arithmetic."""

    def __init__(self, dtype: np.dtype, size: int) -> None:
        self.sign = np.empty(size, dtype=dtype)
        self.ord_a = np.empty(size, dtype=dtype)
        self.ord_b = np.empty(size, dtype=dtype)


def _inf_magnitude(dtype: torch.dtype) -> int:
    width, mantissa, _ = FORMAT[dtype]
    return ((1 << (width - 1 - mantissa)) - 1) << mantissa


def _ordinal_numpy(bits: np.ndarray, width: int, inf_mag: int, sign: np.ndarray, out: np.ndarray) -> bool:
    """Write ord(bits) into ``out`` (same width); return True when a NaN pattern is present.

    With ``s = bits >> (width - 1)`` (all ones for negative patterns) and ``mag`` the magnitude
    bits, ``ord = (mag ^ s) - s``: ``-mag`` for negatives, ``mag`` otherwise. NaN patterns are
    exactly the magnitudes above +inf's.
    """
    np.right_shift(bits, width - 1, out=sign)
    np.bitwise_and(bits, (1 << (width - 1)) - 1, out=out)
    has_nan = bool(out.max() > inf_mag)
    np.bitwise_xor(out, sign, out=out)
    np.subtract(out, sign, out=out)
    return has_nan


def _ulp_numpy_chunk(
    a: np.ndarray, b: np.ndarray, dtype: torch.dtype, out: np.ndarray, scratch: _OrdinalScratch
) -> bool:
    """16- and 32-bit formats: ord fits in the format's own integer width, the distance in int64."""
    n, width, inf_mag = len(a), FORMAT[dtype][0], _inf_magnitude(dtype)
    nan_a = _ordinal_numpy(a, width, inf_mag, scratch.sign[:n], scratch.ord_a[:n])
    nan_b = _ordinal_numpy(b, width, inf_mag, scratch.sign[:n], scratch.ord_b[:n])
    np.copyto(out, scratch.ord_a[:n])
    np.subtract(out, scratch.ord_b[:n], out=out)
    np.abs(out, out=out)
    return nan_a or nan_b


def _magnitude_and_sign(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    width = FORMAT[t.dtype][0]
    bits = t.view(INT_VIEW[t.dtype]).to(torch.int64)  # sign-extended for narrow widths
    return bits & ((1 << (width - 1)) - 1), bits < 0


def _ulp_torch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    mag_a, neg_a = _magnitude_and_sign(a)
    mag_b, neg_b = _magnitude_and_sign(b)
    # Opposite signs: mag_a + mag_b can exceed int64 for fp64; min() saturates without overflow.
    across = torch.minimum(mag_a, ULP_SATURATED - mag_b).add_(mag_b)
    within = mag_a.sub_(mag_b).abs_()
    torch.where(neg_a == neg_b, within, across, out=out)


def _fix_nans(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    out.masked_fill_(nan_a & nan_b, 0)
    out.masked_fill_(nan_a ^ nan_b, ULP_NAN)


@overload
def ulp_diff(a: torch.Tensor, b: Any) -> torch.Tensor: ...
@overload
def ulp_diff(a: np.ndarray | np.generic, b: Any) -> np.ndarray: ...
def ulp_diff(a: Any, b: Any) -> Any:
    """Element-wise distance between ``a`` and ``b`` in representable values of their dtype.

    Returns int64 in the inputs' container kind (tensor on the same device, or ndarray).
    Both NaN gives 0, exactly one NaN gives :data:`ULP_NAN`, fp64 distances beyond int64 saturate
    at :data:`ULP_SATURATED`. Correct for large values of opposite sign (fp32 ``max`` vs ``-max``
    is 4278190078, where a plain int32 difference overflows).

    >>> import torch
    >>> tiny = torch.tensor([2.0**-24], dtype=torch.float16)  # smallest fp16 subnormal
    >>> int(ulp_diff(tiny, -tiny))
    2
    """
    ta, tb, kind = pair(a, b)
    if ta.device.type == "cpu":
        # numpy backs large allocations with transparent huge pages (madvise), which saves most
        # of the page faults of a fresh int64 result; torch's CPU allocator does not.
        out = torch.from_numpy(np.empty(tuple(ta.shape), dtype=np.int64))
    else:
        out = torch.empty(ta.shape, dtype=torch.int64, device=ta.device)
    if ta.numel() == 0:
        return to_kind(out, kind)
    fa, fb, fo = ta.reshape(-1), tb.reshape(-1), out.view(-1)
    width = FORMAT[ta.dtype][0]
    if ta.device.type != "cpu" or width == 64:
        _ulp_torch(fa, fb, fo)
        has_nan = bool(torch.isnan(fa).any()) or bool(torch.isnan(fb).any())
    else:
        view = INT_VIEW[ta.dtype]
        ia, ib, io = fa.view(view).numpy(), fb.view(view).numpy(), fo.numpy()
        starts = range(0, len(ia), _CPU_CHUNK)
        workers = max(1, min(torch.get_num_threads(), len(starts)))

        def run(worker: int) -> bool:  # numpy releases the GIL inside each ufunc
            scratch = _OrdinalScratch(ia.dtype, min(_CPU_CHUNK, len(ia)))
            found = False
            for start in starts[worker::workers]:
                stop = start + _CPU_CHUNK
                found |= _ulp_numpy_chunk(ia[start:stop], ib[start:stop], ta.dtype, io[start:stop], scratch)
            return found

        if workers == 1:
            has_nan = run(0)
        else:
            with ThreadPoolExecutor(workers) as pool:
                # list() first: any() would stop at the first True and the discarded map
                # iterator cancels workers not yet started, leaving their chunks unwritten.
                has_nan = any(list(pool.map(run, range(workers))))
    if has_nan:
        _fix_nans(fa, fb, fo)
    return to_kind(out, kind)
