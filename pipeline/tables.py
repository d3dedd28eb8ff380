"""Small, dependency-free formatting of polars tables as Markdown (asset metadata and report pages)."""

from typing import Any

import polars as pl


def fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:
            return "NaN"
        return f"{value:.4g}"
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text


def markdown_table(df: pl.DataFrame, max_rows: int = 60, max_columns: int = 16) -> str:
    """A Markdown table of ``df`` (first ``max_rows`` rows and ``max_columns`` columns, with a
    note when cut: the stored parquet table has everything)."""
    if df.height == 0:
        return "_(empty table)_\n"
    notes = []
    if df.width > max_columns:
        notes.append(f"{df.width - max_columns} more columns")
        df = df.select(df.columns[:max_columns])
    head = df.head(max_rows)
    lines = ["| " + " | ".join(head.columns) + " |", "|" + "---|" * len(head.columns)]
    for row in head.iter_rows():
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    if df.height > max_rows:
        notes.append(f"{df.height - max_rows} more rows")
    if notes:
        lines.append(f"\n_{' and '.join(notes)} in the stored parquet table._")
    return "\n".join(lines) + "\n"
