"""Input normalisation shared by every public function.

Public functions accept torch tensors (any device, any strides) or numpy arrays (including
``ml_dtypes.bfloat16`` arrays). Internally everything is a torch tensor; results go back in the
caller's container kind. Nothing is broadcast or cast silently.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

#: Integer dtype of the same width, used to read raw bit patterns.
INT_VIEW = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}

#: (bit width, explicit mantissa bits, minimum normal exponent) per dtype.
FORMAT = {
    torch.float16: (16, 10, -14),
    torch.bfloat16: (16, 7, -126),
    torch.float32: (32, 23, -126),
    torch.float64: (64, 52, -1022),
}


def _numpy_to_torch(x: np.ndarray) -> torch.Tensor:
    if x.dtype.name == "bfloat16":  # ml_dtypes.bfloat16: same bits as torch.bfloat16
        return _numpy_to_torch(x.view(np.uint16)).view(torch.bfloat16)
    if any(s < 0 for s in x.strides):  # torch.from_numpy rejects negative strides
        x = np.ascontiguousarray(x)
    return torch.from_numpy(x)


def as_tensor(x: Any, name: str) -> tuple[torch.Tensor, str]:
    """Return ``(tensor, kind)`` where kind is ``"torch"`` or ``"numpy"``."""
    if isinstance(x, torch.Tensor):
        return x.detach(), "torch"  # same storage; out= kernels and .numpy() reject grad tensors
    if isinstance(x, (np.ndarray, np.generic)):
        return _numpy_to_torch(np.asarray(x)), "numpy"
    raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def require_float(t: torch.Tensor, name: str) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} has dtype {t.dtype}; precisionkit compares floating dtypes only "
            f"({', '.join(str(d) for d in FLOAT_DTYPES)})"
        )


def require_same(a: torch.Tensor, b: torch.Tensor, names: tuple[str, str], *, dtype: bool = True) -> None:
    """Raise ValueError naming both sides when shapes (and optionally dtypes or devices) differ."""
    na, nb = names
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(
            f"shape mismatch: {na} has shape {tuple(a.shape)}, {nb} has shape {tuple(b.shape)} "
            "(no broadcasting is done)"
        )
    if dtype and a.dtype != b.dtype:
        raise ValueError(f"dtype mismatch: {na} is {a.dtype}, {nb} is {b.dtype} (no implicit casting is done)")
    if a.device != b.device:
        raise ValueError(f"device mismatch: {na} is on {a.device}, {nb} is on {b.device}")


def pair(
    a: Any, b: Any, names: tuple[str, str] = ("a", "b"), *, same_dtype: bool = True
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Normalise and validate two inputs; returns ``(ta, tb, kind_of_a)``."""
    ta, kind = as_tensor(a, names[0])
    tb, _ = as_tensor(b, names[1])
    require_float(ta, names[0])
    require_float(tb, names[1])
    require_same(ta, tb, names, dtype=same_dtype)
    return ta, tb, kind


def to_kind(t: torch.Tensor, kind: str) -> Any:
    """``t`` in the caller's container kind: the tensor itself, or a numpy array for ``"numpy"``."""
    return t.cpu().numpy() if kind == "numpy" else t


def flat_index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(flat), shape)) if shape else ()


def hex_bits(value: torch.Tensor) -> str:
    """Hex bit pattern of a 0-d float tensor, e.g. ``0x3c00`` for fp16 1.0."""
    width = FORMAT[value.dtype][0]
    raw = int(value.reshape(1).view(INT_VIEW[value.dtype]).item()) & ((1 << width) - 1)
    return f"0x{raw:0{width // 4}x}"
