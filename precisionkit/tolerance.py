"""Tolerances by dtype, operation class and reduction size, and assertion helpers that say what
differs.

The base absolute tolerances follow the decision matrix of seed document 001 ("Testing ML
compilers", tolerance decision matrix: elementwise, matmul, convolution, batchnorm, softmax,
layernorm, end-to-end; float32 and float16 columns). Reductions widen them by the sqrt(K) rule
from the same source (float32: sqrt(K) * 1e-7; float16 with float32 accumulation: sqrt(K) * 1e-4).
bfloat16 has 3 fewer mantissa bits than float16, so its float16 entries are scaled by 2**3.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ._tensors import as_tensor, flat_index, hex_bits, pair, require_float, require_same
from .bits import ULP_SATURATED, bit_mismatch, ulp_diff

# op class -> (float32 atol, float16 atol), from the seed 001 decision matrix.
_BASE_ATOL = {
    "elementwise": (1e-7, 1e-3),
    "matmul": (1e-5, 5e-2),
    "conv": (1e-4, 5e-2),
    "batchnorm": (1e-4, 1e-1),
    "softmax": (1e-5, 5e-2),
    "layernorm": (1e-4, 1e-1),
    "e2e": (1e-3, 5e-1),
}
# dtype -> rtol and per-term sqrt(K) coefficient.
_RTOL = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 8e-2}
_PER_TERM = {torch.float64: 1e-15, torch.float32: 1e-7, torch.float16: 1e-4, torch.bfloat16: 8e-4}
OP_CLASSES = tuple(_BASE_ATOL)


@dataclass(frozen=True)
class Tolerance:
    """``|actual - expected| <= atol + rtol * |expected|``; ``source`` says where it came from."""

    atol: float
    rtol: float
    source: str

    def __iter__(self) -> Iterator[float]:  # allows ``atol, rtol = tolerance(...)``
        return iter((self.atol, self.rtol))


def tolerance(
    dtype: torch.dtype,
    op_class: str = "elementwise",
    reduction_size: int = 1,
    *,
    measured: MeasuredTolerances | None = None,
) -> Tolerance:
    """(atol, rtol) for results of ``dtype`` from an operation of ``op_class`` that accumulates
    ``reduction_size`` terms per output element.

    ``measured`` (optional, see :func:`tolerance_from_table`) answers from a measured table where
    it has rows for ``(op_class, dtype)``; otherwise, and by default, the decision matrix answers.

    >>> tolerance(torch.float32, "matmul", reduction_size=4096).atol
    1e-05
    """
    if measured is not None:
        found = measured.lookup(dtype, op_class, reduction_size)
        if found is not None:
            return found
    if op_class not in _BASE_ATOL:
        raise ValueError(f"unknown op_class {op_class!r}; expected one of {', '.join(OP_CLASSES)}")
    if dtype not in _RTOL:
        raise TypeError(f"no tolerance for dtype {dtype}; expected a floating dtype")
    if reduction_size < 1:
        raise ValueError(f"reduction_size must be >= 1, got {reduction_size}")
    fp32, fp16 = _BASE_ATOL[op_class]
    base = {
        torch.float64: fp32 * 1e-7,
        torch.float32: fp32,
        torch.float16: fp16,
        torch.bfloat16: fp16 * 8,
    }[dtype]
    growth = math.sqrt(reduction_size) * _PER_TERM[dtype]
    atol = max(base, growth)
    rule = "sqrt(K) rule" if growth > base else "decision matrix"
    return Tolerance(atol=atol, rtol=_RTOL[dtype], source=f"{op_class}/{dtype}/K={reduction_size}: {rule}")


@dataclass(frozen=True)
class MeasuredTolerances:
    """Tolerances measured per (op class, dtype, reduction size), e.g. the p99.9 of observed
    fused error against fp64 (asset ``measured_tolerances``).

    Lookup for K terms: the row of the same op class and dtype with the smallest reduction size
    >= K; beyond the largest measured size, that row's atol grows by sqrt(K / K_row) (the sqrt(K)
    rule). rtol is the row's own when given, else the decision matrix's for the dtype.
    """

    rows: tuple[tuple[str, torch.dtype, int, float, float | None], ...]

    def lookup(self, dtype: torch.dtype, op_class: str, reduction_size: int) -> Tolerance | None:
        """The measured tolerance, or ``None`` when the table has nothing for (op_class, dtype)."""
        same = sorted((r for r in self.rows if r[0] == op_class and r[1] == dtype), key=lambda r: r[2])
        if not same:
            return None
        covering = [r for r in same if r[2] >= reduction_size]
        row = covering[0] if covering else same[-1]
        atol = row[3] * (1.0 if covering else math.sqrt(reduction_size / row[2]))
        rtol = _RTOL[dtype] if row[4] is None else row[4]
        how = "measured" if covering else f"measured at K={row[2]}, sqrt(K) rule"
        return Tolerance(atol=atol, rtol=rtol, source=f"{op_class}/{dtype}/K={reduction_size}: {how}")


def tolerance_from_table(rows: Any) -> MeasuredTolerances:
    """:class:`MeasuredTolerances` from rows (dicts, or anything with ``.to_dicts()`` such as a
    polars DataFrame) with keys ``op_class``, ``dtype`` (name or torch.dtype), ``reduction_size``,
    ``atol`` and optionally ``rtol``."""
    if hasattr(rows, "to_dicts"):
        rows = rows.to_dicts()
    out = []
    for i, row in enumerate(rows):
        missing = [k for k in ("op_class", "dtype", "reduction_size", "atol") if k not in row]
        if missing:
            raise ValueError(f"tolerance table row {i} lacks {', '.join(missing)}: {row}")
        if row["op_class"] not in _BASE_ATOL:
            raise ValueError(f"tolerance table row {i}: unknown op_class {row['op_class']!r}")
        dtype = row["dtype"] if isinstance(row["dtype"], torch.dtype) else getattr(torch, str(row["dtype"]), None)
        if dtype not in _RTOL:
            raise ValueError(f"tolerance table row {i}: {row['dtype']!r} is not a floating dtype")
        atol, k = float(row["atol"]), int(row["reduction_size"])
        if not (atol >= 0 and math.isfinite(atol)) or k < 1:
            raise ValueError(
                f"tolerance table row {i}: atol must be finite >= 0 and reduction_size >= 1, got {atol}, {k}"
            )
        rtol = row.get("rtol")
        out.append((row["op_class"], dtype, k, atol, None if rtol is None else float(rtol)))
    return MeasuredTolerances(tuple(out))


def _describe_pair(actual: torch.Tensor, expected: torch.Tensor, flat: int) -> str:
    idx = flat_index(flat, tuple(actual.shape))
    a = actual.reshape(-1)[flat]
    e = expected.reshape(-1)[flat]
    return f"index {idx}: actual {a.item()!r} ({hex_bits(a)}), expected {e.item()!r} ({hex_bits(e)})"


def _first(mask: torch.Tensor) -> int:
    """Flat index of the first True element of a non-empty ``mask``."""
    return int(torch.argmax(mask.reshape(-1).to(torch.uint8)))


def _spelled(value: torch.Tensor) -> str:
    v = value.item()
    return "NaN" if math.isnan(v) else repr(v)


def _nan_mismatches(actual: torch.Tensor, other: torch.Tensor, mask: torch.Tensor) -> str:
    """``"2 NaN mismatches, first at index (1,): NaN vs 1.5"`` for the elements of ``mask`` (which
    must have exactly one NaN side), ``""`` when there are none. A NaN has no ULP distance or
    error to show; the sentinel :data:`~precisionkit.ULP_NAN` would read as a number."""
    n = int(mask.sum())
    if not n:
        return ""
    flat = _first(mask)
    a, b = actual.reshape(-1)[flat], other.reshape(-1)[flat]
    where = flat_index(flat, tuple(actual.shape))
    return f"{n} NaN mismatch{'' if n == 1 else 'es'}, first at index {where}: {_spelled(a)} vs {_spelled(b)}"


def _ulps(value: int) -> str:
    return f">= {ULP_SATURATED} (saturated)" if value >= ULP_SATURATED else str(value)


def _message(msg: str, parts: list[str]) -> str:
    return (f"{msg}: " if msg else "") + "; ".join(p for p in parts if p)


def assert_bit_equal(actual: Any, expected: Any, msg: str = "") -> None:
    """Raise ``AssertionError`` unless the bit patterns are identical.

    The message counts the differing elements, shows the first with its bit patterns, and gives
    the largest ULP distance among the numbers; elements that are NaN on one side only are
    reported as such (``NaN vs 1.5``).

    >>> import torch
    >>> assert_bit_equal(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 1.5]))
    Traceback (most recent call last):
        ...
    AssertionError: not bit-equal: 1 of 2 elements differ; first at index (1,): actual nan (0x7fc00000), expected 1.5 (0x3fc00000); 1 NaN mismatch, first at index (1,): NaN vs 1.5
    """
    __tracebackhide__ = True
    mism = bit_mismatch(actual, expected)
    if not mism.count:
        return
    ta, _ = as_tensor(actual, "actual")
    te, _ = as_tensor(expected, "expected")
    differ = torch.as_tensor(mism.mask)
    nan_a, nan_e = torch.isnan(ta), torch.isnan(te)
    numbers = differ & ~(nan_a | nan_e)
    payloads = int((differ & nan_a & nan_e).sum())
    parts = [
        f"not bit-equal: {mism.count} of {mism.total} elements differ",
        f"first at {_describe_pair(ta, te, _first(differ))}",
        _nan_mismatches(ta, te, nan_a ^ nan_e),
    ]
    if bool(numbers.any()):
        parts.append(f"max ULP distance {_ulps(int(ulp_diff(ta, te)[numbers].max()))}")
    if payloads:
        parts.append(f"{payloads} NaN payload mismatch{'' if payloads == 1 else 'es'}")
    raise AssertionError(_message(msg, parts))


def assert_ulp_within(actual: Any, expected: Any, max_ulp: int, msg: str = "") -> None:
    """Raise ``AssertionError`` when any element is more than ``max_ulp`` ULP from ``expected``.

    NaN against NaN is 0 ULP; NaN against a number always fails and is reported as ``NaN vs x``.
    """
    __tracebackhide__ = True
    ta, te, _ = pair(actual, expected, ("actual", "expected"))
    ulps = ulp_diff(ta, te)
    bad = ulps > max_ulp
    count = int(bad.sum())
    if not count:
        return
    one_nan = torch.isnan(ta) ^ torch.isnan(te)
    numbers = bad & ~one_nan
    parts = [f"{count} of {ta.numel()} elements exceed {max_ulp} ULP"]
    if bool(numbers.any()):
        worst = int(torch.argmax(torch.where(numbers, ulps, -1).reshape(-1)))
        parts.append(f"worst {_ulps(int(ulps.reshape(-1)[worst]))} ULP at {_describe_pair(ta, te, worst)}")
    parts.append(_nan_mismatches(ta, te, bad & one_nan))
    raise AssertionError(_message(msg, parts))


def assert_close_to_reference(
    actual: Any,
    reference: Any,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    op_class: str = "elementwise",
    reduction_size: int = 1,
    msg: str = "",
) -> None:
    """Assert ``|actual - reference| <= atol + rtol * |reference|`` element-wise.

    ``reference`` is normally the fp64 re-execution (any float dtype is accepted; it is compared
    in fp64). Missing ``atol``/``rtol`` come from :func:`tolerance` for actual's dtype. NaN must
    face NaN and infinities must match exactly.
    """
    __tracebackhide__ = True
    ta, _ = as_tensor(actual, "actual")
    tr, _ = as_tensor(reference, "reference")
    require_float(ta, "actual")
    require_float(tr, "reference")
    tr = tr.to(ta.device)
    require_same(ta, tr, ("actual", "reference"), dtype=False)
    tol = tolerance(ta.dtype, op_class, reduction_size)
    atol = tol.atol if atol is None else atol
    rtol = tol.rtol if rtol is None else rtol
    a64, r64 = ta.to(torch.float64), tr.to(torch.float64)
    err = (a64 - r64).abs()
    allowed = atol + rtol * r64.abs()
    nan_a, nan_r = torch.isnan(a64), torch.isnan(r64)
    same_special = (nan_a & nan_r) | (torch.isinf(a64) & (a64 == r64))
    # NaN errors count as failures; so does any other infinity, which the test below would pass
    # (an infinite reference makes ``allowed`` infinite too).
    special = nan_a | nan_r | torch.isinf(a64) | torch.isinf(r64)
    bad = ~same_special & (special | ~(err <= allowed))
    count = int(bad.sum())
    if not count:
        return
    source = tol.source if (atol, rtol) == (tol.atol, tol.rtol) else "given"
    parts = [f"{count} of {ta.numel()} elements outside tolerance (atol={atol:g}, rtol={rtol:g}; {source})"]
    numbers = bad & ~(nan_a | nan_r)
    if bool(numbers.any()):
        excess = torch.nan_to_num(err - allowed, nan=math.inf)  # inf - inf: an infinity of the wrong sign
        worst = int(torch.argmax(torch.where(numbers, excess, -math.inf).reshape(-1)))
        rounded = ta.reshape(-1)[worst]
        ref_value = r64.reshape(-1)[worst]
        parts.append(
            f"worst at index {flat_index(worst, tuple(ta.shape))}: actual {rounded.item()!r} "
            f"({hex_bits(rounded)}), reference {ref_value.item()!r} ({hex_bits(ref_value)}), "
            f"abs error {float(err.reshape(-1)[worst]):.6g}"
        )
    parts.append(_nan_mismatches(a64, r64, bad & (nan_a ^ nan_r)))
    raise AssertionError(_message(msg, parts))
