"""A runtime self-check of precisionkit's definitions over every dtype x IEEE value class.

Each cell checks the toolkit against expectations computed independently from raw bit
patterns (integer arithmetic), so a broken build or platform shows up as a failed cell.
"""

from __future__ import annotations

import torch

from ._tensors import FORMAT, INT_VIEW
from .bits import ULP_NAN, bit_equal, ulp_diff
from .stats import error_stats

VALUE_CLASSES = ("normal", "subnormal", "zero", "infinity", "nan")
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _from_bits(pattern: list[int], dtype: torch.dtype) -> torch.Tensor:
    width = FORMAT[dtype][0]
    signed = [p - (1 << width) if p >= 1 << (width - 1) else p for p in pattern]
    return torch.tensor(signed, dtype=INT_VIEW[dtype]).view(dtype)


def _patterns(dtype: torch.dtype, value_class: str) -> list[int]:
    width, mantissa, _ = FORMAT[dtype]
    sign = 1 << (width - 1)
    inf = ((1 << (width - 1 - mantissa)) - 1) << mantissa
    one = ((1 << (width - 2 - mantissa)) - 1) << mantissa  # exponent bias -> 1.0
    return {
        "normal": [one, one + 1, sign | one, inf - 1],
        "subnormal": [1, 2, (1 << mantissa) - 1, sign | 1],
        "zero": [0, sign],
        "infinity": [inf, sign | inf],
        "nan": [inf | 1, inf | (1 << (mantissa - 1)), sign | inf | 1],
    }[value_class]


def _check(dtype: torch.dtype, value_class: str) -> list[str]:
    """Return the failed expectations of one cell (empty when the cell passes)."""
    failures: list[str] = []
    width = FORMAT[dtype][0]
    sign = 1 << (width - 1)
    patterns = _patterns(dtype, value_class)
    x = _from_bits(patterns, dtype)
    if not bit_equal(x, x.clone()):
        failures.append("bit_equal(x, copy of x) is False")
    if value_class == "zero":
        if bit_equal(x[:1], x[1:]):
            failures.append("bit_equal(+0, -0) is True")
        if int(ulp_diff(x[:1], x[1:])[0]) != 0:
            failures.append("ulp_diff(+0, -0) != 0")
    if value_class == "nan":
        got = ulp_diff(x, x.clone()).tolist()
        if got != [0] * len(patterns):
            failures.append(f"ulp_diff(NaN, NaN) = {got}, expected zeros")
        one = torch.ones_like(x)
        if ulp_diff(x, one).tolist() != [ULP_NAN] * len(patterns):
            failures.append("ulp_diff(NaN, 1) != ULP_NAN")
        return failures
    # Neighbour toward +inf by bit arithmetic: magnitude +1 for positives, -1 for negatives
    # (-0's neighbour is the smallest positive subnormal).
    positive_inf = _patterns(dtype, "infinity")[0]
    neighbours = []
    for p in patterns:
        if p == positive_inf:
            continue  # +inf has no upward neighbour
        if p == sign:
            n = 1
        elif p & sign:
            n = p - 1 if (p & ~sign) else 1
        else:
            n = p + 1
        neighbours.append((p, n))
    if neighbours:
        a = _from_bits([p for p, _ in neighbours], dtype)
        b = _from_bits([n for _, n in neighbours], dtype)
        got = ulp_diff(a, b).tolist()
        if got != [1] * len(neighbours):
            failures.append(f"ulp_diff(x, nextafter(x, +inf)) = {got}, expected ones")
    finite = x[torch.isfinite(x)]
    if finite.numel():
        stats = error_stats(finite, finite.to(torch.float64))
        if stats["exact_fraction"] != 1.0 or stats["ulp_max"] != 0.0:
            failures.append("error_stats(x, exact fp64 x) is not exact")
    if value_class == "infinity":
        stats = error_stats(x, x.to(torch.float64))
        if stats["inf_matched"] != 2 or stats["n_compared"] != 0:
            failures.append("error_stats does not count matched infinities")
    return failures


def self_check() -> list[dict[str, object]]:
    """One row per dtype x value class: ``dtype``, ``value_class``, ``passed``, ``detail``."""
    rows = []
    for dtype in DTYPES:
        for value_class in VALUE_CLASSES:
            try:
                failures = _check(dtype, value_class)
            except Exception as exc:  # noqa: BLE001 - a crash is a failed cell, reported as such
                failures = [f"{type(exc).__name__}: {exc}"]
            rows.append(
                {
                    "dtype": str(dtype).removeprefix("torch."),
                    "value_class": value_class,
                    "passed": not failures,
                    "detail": "; ".join(failures) or "ok",
                }
            )
    return rows
