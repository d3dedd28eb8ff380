"""C1: the report page's sections, built from stored values only."""

import altair as alt
import polars as pl

from ...experiment import Experiment
from ...pagekit.blocks import opening, select, ulp_bars
from ...pagekit.render import Report, markdown_table
from .rules import route_statement


def deliverable(report: Report, exp: Experiment) -> str:
    dist = report.table("c1_ulp_distribution")
    if dist is None:
        return ""
    rows = dist.select(
        "comparison",
        pl.col("n").alias("elements"),
        pl.col("ulp0_pct").round(3).alias("ULP = 0 (%)"),
        pl.col("ulp1_pct").round(3).alias("ULP = 1 (%)"),
        pl.col("ulp_ge2_pct").round(3).alias("ULP >= 2 (%)"),
        pl.col("ulp_max").alias("max ULP"),
    )
    parts = [markdown_table(rows)]
    hist = report.table("c1_ulp_histogram")
    if hist is not None:
        comparisons = hist["comparison"].unique(maintain_order=True).to_list()
        pick = select("comparison", comparisons, "comparison ")
        order = hist["ulp"].unique(maintain_order=True).to_list()
        chart = (
            alt.Chart(hist)
            .mark_bar(color="#3f51b5")
            .encode(
                x=alt.X("ulp:N", sort=order, title="ULP distance between the two outputs (ULP)"),
                y=alt.Y(
                    "fraction:Q", axis=alt.Axis(format="%"), title="share of elements", scale=alt.Scale(domain=[0, 1])
                ),
                tooltip=["comparison", "ulp", "count", alt.Tooltip("fraction:Q", format=".4%")],
            )
            .add_params(pick)
            .transform_filter(alt.datum.comparison == pick)
            .properties(width=420, height=200, title="C1: ULP difference histogram (pick the comparison below)")
        )
        parts.append(
            report.chart(
                exp.slug,
                "deliverable-histogram",
                chart,
                "ULP distance between x * 0.7 (path A) and x * broadcast tensor (path B), "
                "per execution mode and control",
            )
        )
    return opening(exp, "\n".join(parts))


def details(report: Report, exp: Experiment) -> str:
    parts = []
    dist = report.table("c1_ulp_distribution")
    if dist is not None:
        parts.append("## ULP = 0 / 1 / >= 2 by execution mode\n\n" + markdown_table(dist))
    hist = report.table("c1_ulp_histogram")
    if hist is not None:
        parts.append(
            report.chart(
                exp.slug,
                "ulp-histogram",
                ulp_bars(hist, "C1: ULP distance between paths"),
                "ULP distance between x * 0.7 and x * fp16-tensor(0.7), per execution mode, with controls",
            )
        )
    records = report.table("c1_route_records")
    if records is not None and dist is not None:
        parts.append(
            "## Route or value: the two controls and the instruction each route ran\n\n"
            "`control_route_only` keeps path A's value and takes path B's broadcast-tensor route; "
            "`control_value_only` keeps path A's scalar route and takes path B's fp16 value.\n\n"
            + route_statement(records, dist)
            + "\n\n"
            + markdown_table(records.drop("aten_ops"))
        )
    evidence = report.table("c1_mechanism_evidence")
    if evidence is not None:
        parts.append("## Mechanism evidence (op trace and generated code)\n\n" + markdown_table(evidence))
    return "\n".join(parts)
