"""Helpers for the precisionkit tests: dtype tables and an independent, slow ULP reference
written with plain Python integers on raw bit patterns (no code shared with precisionkit.bits)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

#: name -> (torch dtype, numpy dtype of the same bits, unsigned numpy view, width, mantissa bits)
FORMATS = {
    "float16": (torch.float16, np.dtype(np.float16), np.uint16, 16, 10),
    "bfloat16": (torch.bfloat16, np.dtype(ml_dtypes.bfloat16), np.uint16, 16, 7),
    "float32": (torch.float32, np.dtype(np.float32), np.uint32, 32, 23),
    "float64": (torch.float64, np.dtype(np.float64), np.uint64, 64, 52),
}
DTYPE_NAMES = tuple(FORMATS)

ULP_NAN = 2**63 - 1
ULP_SATURATED = 2**63 - 2


def inf_bits(name: str) -> int:
    _, _, _, width, mantissa = FORMATS[name]
    return ((1 << (width - 1 - mantissa)) - 1) << mantissa


def max_finite_bits(name: str) -> int:
    return inf_bits(name) - 1


def is_nan_bits(bits: int, name: str) -> bool:
    width = FORMATS[name][3]
    return (bits & ((1 << (width - 1)) - 1)) > inf_bits(name)


def ordinal(bits: int, name: str) -> int:
    """ord of a non-NaN bit pattern: +magnitude for sign 0, -magnitude for sign 1."""
    width = FORMATS[name][3]
    magnitude = bits & ((1 << (width - 1)) - 1)
    return -magnitude if bits >> (width - 1) else magnitude


def reference_ulp(bits_a: int, bits_b: int, name: str) -> int:
    nan_a, nan_b = is_nan_bits(bits_a, name), is_nan_bits(bits_b, name)
    if nan_a and nan_b:
        return 0
    if nan_a or nan_b:
        return ULP_NAN
    return min(abs(ordinal(bits_a, name) - ordinal(bits_b, name)), ULP_SATURATED)


def from_bits(bits, name: str) -> torch.Tensor:
    """Tensor of dtype ``name`` with the given raw (unsigned) bit patterns."""
    torch_dtype, _np_dtype, unsigned, width, _ = FORMATS[name]
    raw = np.array(bits, dtype=unsigned)
    signed = {16: np.int16, 32: np.int32, 64: np.int64}[width]
    return torch.from_numpy(raw.view(signed)).view(torch_dtype)
