"""Experiment-specific charts. Each builder aggregates with polars first, then charts with Altair,
so no chart carries more rows than it shows."""

from typing import Callable

import altair as alt
import polars as pl

from .claims import Experiment
from .render import Report, markdown_table


def toolkit(report: Report, exp: Experiment) -> str:
    table = report.table("toolkit_selfcheck")
    if table is None:
        return ""
    heat = (
        alt.Chart(table.with_columns(pl.when(pl.col("passed")).then(pl.lit("pass")).otherwise(pl.lit("FAIL")).alias("result")))
        .mark_rect()
        .encode(
            x=alt.X("value_class:N", title="IEEE value class", sort=["normal", "subnormal", "zero", "infinity", "nan"]),
            y=alt.Y("dtype:N", title="dtype", sort=["float16", "bfloat16", "float32", "float64"]),
            color=alt.Color("result:N", scale=alt.Scale(domain=["pass", "FAIL"], range=["#2e7d32", "#c62828"])),
            tooltip=["dtype", "value_class", "result", "detail"],
        )
        .properties(width=360, height=160, title="precisionkit self-check: dtype x value class")
    )
    return "## Coverage matrix\n\n" + report.chart(exp.slug, "coverage", heat, "Self-check of every dtype x IEEE value class") + "\n"


CHARTS: dict[str, Callable[[Report, Experiment], str]] = {"S": toolkit}
