"""S: the report page's sections, built from stored values only."""

import altair as alt
import polars as pl

from ...experiment import Experiment
from ...pagekit.blocks import opening
from ...pagekit.render import Report, markdown_table


def deliverable(report: Report, exp: Experiment) -> str:
    table = report.table("toolkit_selfcheck")
    if table is None:
        return ""
    grid = table.with_columns(pl.when(pl.col("passed")).then(pl.lit("pass")).otherwise(pl.lit("FAIL")).alias("r"))
    grid = grid.pivot(on="value_class", index="dtype", values="r", aggregate_function="first")
    failed = table.filter(~pl.col("passed")).height
    return opening(
        exp,
        (
            "`bit_equal`, `ulp_diff`, `error_stats` and `fp64_reference` are exported by `precisionkit` (interface on the "
            "[methodology](../methodology.md) page). Self-check of every dtype x IEEE value class, run with this "
            f"materialization: **{table.height - failed} of {table.height} pass**.\n\n" + markdown_table(grid)
        ),
    )


def details(report: Report, exp: Experiment) -> str:
    table = report.table("toolkit_selfcheck")
    if table is None:
        return ""
    heat = (
        alt.Chart(
            table.with_columns(pl.when(pl.col("passed")).then(pl.lit("pass")).otherwise(pl.lit("FAIL")).alias("result"))
        )
        .mark_rect()
        .encode(
            x=alt.X("value_class:N", title="IEEE value class", sort=["normal", "subnormal", "zero", "infinity", "nan"]),
            y=alt.Y("dtype:N", title="dtype", sort=["float16", "bfloat16", "float32", "float64"]),
            color=alt.Color("result:N", scale=alt.Scale(domain=["pass", "FAIL"], range=["#2e7d32", "#c62828"])),
            tooltip=["dtype", "value_class", "result", "detail"],
        )
        .properties(width=360, height=160, title="precisionkit self-check: dtype x value class")
    )
    return (
        "## Coverage matrix\n\n"
        + report.chart(exp.slug, "coverage", heat, "Self-check of every dtype x IEEE value class")
        + "\n"
    )
