"""One row of a baseline comparison: its columns and how a row is made (shared by the comparators of
tables and tensors and by the curves' comparator)."""

from __future__ import annotations

from typing import Any

import polars as pl

#: One row per compared item.
COLUMNS: dict[str, Any] = {
    "experiment": pl.String,
    "item": pl.String,
    "kind": pl.String,
    "baseline_value": pl.String,
    "current_value": pl.String,
    "delta": pl.Float64,
    "tolerance": pl.Float64,
    "tolerance_source": pl.String,
    "moved": pl.String,
    "severity": pl.String,
    "status": pl.String,
}

Row = dict[str, Any]


def row(
    exp: str,
    item: str,
    kind: str,
    base: Any,
    cur: Any,
    *,
    delta: float | None = None,
    tol: float | None = None,
    tol_source: str = "",
    moved: bool = False,
    severity: str = "none",
    status: str = "compared",
) -> Row:
    """One row of :data:`COLUMNS` (the severity shows only on a moved or uncompared item)."""

    def fmt(v: Any) -> str | None:
        if v is None:
            return None
        if isinstance(v, float):
            return f"{v:.6g}"
        return str(v)

    return {
        "experiment": exp,
        "item": item,
        "kind": kind,
        "baseline_value": fmt(base),
        "current_value": fmt(cur),
        "delta": None if delta is None else float(delta),
        "tolerance": None if tol is None else float(tol),
        "tolerance_source": tol_source,
        "moved": "yes" if moved else "no",
        "severity": severity if moved or status != "compared" else "none",
        "status": status,
    }


#: Marks an item (row, tensor) absent on one side, as opposed to a stored null value.
