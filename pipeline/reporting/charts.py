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


def _ulp_bars(table: pl.DataFrame, title: str, columns: int = 2) -> alt.FacetChart:
    order = table["ulp"].unique(maintain_order=True).to_list()
    return (
        alt.Chart(table)
        .mark_bar()
        .encode(
            x=alt.X("ulp:N", sort=order, title="ULP distance"),
            y=alt.Y("fraction:Q", axis=alt.Axis(format="%"), title="share of elements"),
            tooltip=["comparison", "ulp", "count", alt.Tooltip("fraction:Q", format=".4%")],
        )
        .properties(width=220, height=140)
        .facet(facet=alt.Facet("comparison:N", title=None, sort=table["comparison"].unique(maintain_order=True).to_list()), columns=columns)
        .properties(title=title)
    )


def instruction_selection(report: Report, exp: Experiment) -> str:
    parts = []
    dist = report.table("c1_ulp_distribution")
    if dist is not None:
        parts.append("## ULP = 0 / 1 / >= 2 by execution mode\n\n" + markdown_table(dist))
    hist = report.table("c1_ulp_histogram")
    if hist is not None:
        parts.append(report.chart(exp.slug, "ulp-histogram", _ulp_bars(hist, "C1: ULP distance between paths"), "ULP distance between x * 0.7 and x * fp16-tensor(0.7), per execution mode, with controls"))
    evidence = report.table("c1_mechanism_evidence")
    if evidence is not None:
        parts.append("## Mechanism evidence (op trace and generated code)\n\n" + markdown_table(evidence))
    return "\n".join(parts)


def reduction_order(report: Report, exp: Experiment) -> str:
    parts = []
    matrix = report.table("c2_ulp_matrix")
    if matrix is not None:
        pool = matrix.filter(pl.col("scope") == "pool")
        order = pool["version_a"].unique(maintain_order=True).to_list()
        order += [v for v in pool["version_b"].unique(maintain_order=True).to_list() if v not in order]
        base = alt.Chart(pool).encode(
            x=alt.X("version_a:N", sort=order, title=None),
            y=alt.Y("version_b:N", sort=order, title=None),
        )
        heat = (
            base.mark_rect().encode(
                color=alt.Color("differ_fraction:Q", title="rows that differ", scale=alt.Scale(scheme="oranges", domain=[0, 1])),
                tooltip=["version_a", "version_b", "rows", "differ_rows", "ulp_max", alt.Tooltip("ulp_mean:Q", format=".3f")],
            )
            + base.mark_text(fontSize=9).encode(text="ulp_max:Q")
        ).properties(width=300, height=300).facet(
            column=alt.Column("output:N", title="output (out16: fp16 sum, acc32: fp32 accumulator); cell text: max ULP")
        ).properties(title="C2: pairwise differences between reduction versions over the row pool")
        parts.append("## Pairwise ULP matrix\n\n" + report.chart(exp.slug, "ulp-matrix", heat, "Share of pool rows where two versions differ, and the largest ULP difference"))
    errors = report.table("c2_error_vs_fp64")
    if errors is not None:
        bars = (
            alt.Chart(errors.filter(pl.col("output") == "out16"))
            .mark_bar()
            .encode(
                y=alt.Y("version:N", sort="-x", title=None),
                x=alt.X("ulp_mean:Q", title="mean ULP error of the fp16 sum vs fp64"),
                color=alt.Color("within_band_fraction:Q", title="within fp64 band", scale=alt.Scale(scheme="greens", domain=[0.9, 1])),
                tooltip=["version", "ulp_mean", "ulp_max", "closest_fraction", "within_band_fraction"],
            )
            .properties(width=420, height=260, title="C2: error of each version against fp64")
        )
        parts.append("## Error against fp64\n\n" + report.chart(exp.slug, "error-vs-fp64", bars, "Mean ULP error of each version's fp16 sum against the fp64 reference"))
    return "\n".join(parts)


def rsqrt_iterations(report: Report, exp: Experiment) -> str:
    parts = []
    table = report.table("c3_iteration_table")
    if table is not None:
        newton = table.filter(pl.col("iterations").is_not_null()).select("iterations", "compute_dtype", "ulp_max", "ulp_mean")
        long = newton.unpivot(index=["iterations", "compute_dtype"], on=["ulp_max", "ulp_mean"], variable_name="statistic", value_name="ulp_error")
        framework = table.filter(pl.col("path") == "A_eager")["ulp_max"].to_list()
        lines = (
            alt.Chart(long)
            .mark_line(point=True)
            .encode(
                x=alt.X("iterations:O", title="Newton iterations"),
                y=alt.Y("ulp_error:Q", scale=alt.Scale(type="log"), title="ULP error vs fp64"),
                color=alt.Color("compute_dtype:N", title="arithmetic"),
                strokeDash=alt.StrokeDash("statistic:N"),
                tooltip=["iterations", "compute_dtype", "statistic", alt.Tooltip("ulp_error:Q", format=".4f")],
            )
        )
        chart = lines
        if framework:
            rule = alt.Chart(pl.DataFrame({"torch.rsqrt max": framework})).mark_rule(color="gray", strokeDash=[2, 2]).encode(y="torch.rsqrt max:Q")
            chart = lines + rule
        parts.append("## Error by iteration count\n\n" + report.chart(exp.slug, "iterations", chart.properties(width=420, height=260, title="C3: rsqrt by magic constant + Newton steps (dashed gray: torch.rsqrt max)"), "Max and mean ULP error against fp64 by Newton iteration count"))
    hist = report.table("c3_ulp_histogram")
    if hist is not None:
        vs_fp64 = hist.filter(pl.col("comparison").str.ends_with("vs fp64 (rounded)"))
        parts.append(report.chart(exp.slug, "ulp-histogram", _ulp_bars(vs_fp64, "C3: ULP distance to the correctly rounded fp64 result", columns=4), "ULP histograms of every path against fp64 rounded to fp16"))
    return "\n".join(parts)


CHARTS: dict[str, Callable[[Report, Experiment], str]] = {
    "S": toolkit,
    "C1": instruction_selection,
    "C2": reduction_order,
    "C3": rsqrt_iterations,
}
