"""Typed reads of single numbers from polars.

``Series.max()``, ``Series.min()``, ``Series.mean()`` and ``Series.sum()`` are typed as any Python
literal or ``None`` (an empty or all-null column), so code that needs a number narrows the value
here: a missing or non-numeric value is an error that names what was being read, not a
``TypeError`` from ``float(None)``.
"""

from typing import Any


def as_float(value: Any, what: str) -> float:
    """``value`` as a float; a clear ``ValueError`` naming ``what`` when it is ``None`` or not a number.

    >>> as_float(3, "rows")
    3.0
    """
    if not isinstance(value, int | float):
        raise ValueError(f"{what}: expected a number, got {value!r}")
    return float(value)


def as_int(value: Any, what: str) -> int:
    """``value`` as an int (an integral float is accepted); a clear ``ValueError`` naming ``what``
    when it is ``None``, not a number or not integral.

    >>> as_int(4.0, "runs")
    4
    """
    if not isinstance(value, int | float) or not float(value).is_integer():
        raise ValueError(f"{what}: expected an integer, got {value!r}")
    return int(value)


def as_number(value: Any, what: str) -> int | float:
    """``value`` as a number, an int staying an int (for display); a clear ``ValueError`` naming
    ``what`` when it is ``None`` (an empty or all-null column), a bool or not a number.

    >>> as_number(7, "sets"), as_number(0.5, "margin")
    (7, 0.5)
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what}: expected a number, got {value!r}")
    return value
