"""Floating-point spacing (the size of one ULP), correct rounding from fp64, and ULP-distance histograms.

``spacing_D(ref) = 2**(e - p)`` with ``e = max(floor(log2|ref|), emin(D))`` and ``p`` the explicit
mantissa bits of D: the gap between neighbouring D values around ``ref``, the exponent clamped at D's
minimum normal exponent (as libm accuracy tests do). :func:`scaled_spacing` is that gap at the scale of
each row's largest ``|ref|``. :func:`ulp_histogram` bins integer ULP distances (:func:`precisionkit.ulp_diff`).
"""

from __future__ import annotations

from typing import Any

import torch

from ._tensors import FORMAT


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


def _spacing64(r64: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """:func:`spacing` of finite fp64 values, from the exponent bits (no frexp / ldexp) where the
    result is a normal fp64 number, i.e. for every format but fp64 itself."""
    _, mantissa, emin = FORMAT[dtype]
    if emin - mantissa < -1022:
        return spacing(r64, dtype)
    exponent = ((r64.view(torch.int64) >> 52) & 0x7FF) - 1023  # zero and fp64 subnormals: -1023
    exponent = torch.clamp(exponent, min=emin)
    return ((exponent + (1023 - mantissa)) << 52).view(torch.float64)


def ulp_histogram(distances: torch.Tensor, top: int, **labels: Any) -> list[dict[str, Any]]:
    """Rows of the histogram of integer ULP ``distances`` (e.g. :func:`precisionkit.ulp_diff`): one row per
    distance 0 .. ``top - 1`` and a last row ``">=top"`` collecting everything above, each with its ``count``
    and ``fraction`` of all distances; ``labels`` (e.g. ``comparison="A vs B"``) lead every row.

    >>> rows = ulp_histogram(torch.tensor([0, 0, 1, 5]), 2, comparison="x")
    >>> [(r["comparison"], r["ulp"], r["count"], r["fraction"]) for r in rows]
    [('x', '0', 2, 0.5), ('x', '1', 1, 0.25), ('x', '>=2', 1, 0.25)]
    """
    if top < 1:
        raise ValueError(f"ulp_histogram needs at least one bin below the top, got top={top}")
    d = distances.reshape(-1).cpu()
    if d.numel() == 0:
        raise ValueError("ulp_histogram of no distances")
    if d.dtype.is_floating_point or bool((d < 0).any()):
        raise ValueError("ulp_histogram takes non-negative integer ULP distances")
    counts = torch.bincount(torch.clamp(d, max=top), minlength=top + 1)
    n = d.numel()
    return [
        {**labels, "ulp": str(k) if k < top else f">={top}", "count": int(counts[k]), "fraction": int(counts[k]) / n}
        for k in range(top + 1)
    ]
