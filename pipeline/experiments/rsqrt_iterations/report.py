"""C3: the report page's sections, built from stored values only."""

import altair as alt
import polars as pl

from ...experiment import Experiment
from ...pagekit.blocks import error_scale, opening, select, ulp_bars
from ...pagekit.render import Report, markdown_table
from .rules import METHOD, TIE_FLIP_MARGIN, floor_statement, knob_statement


def deliverable(report: Report, exp: Experiment) -> str:
    table = report.table("c3_iteration_table")
    if table is None:
        return ""
    rows = table.select(
        "path",
        pl.col("iterations").alias("Newton iterations"),
        pl.col("compute_dtype").alias("arithmetic"),
        pl.col("ulp_max").round(3).alias("max ULP vs fp64"),
        pl.col("ulp_mean").round(3).alias("mean ULP vs fp64"),
        pl.col("int_ulp_vs_rounded_ref_max").alias("max last-bit diff vs rounded fp64 (ULP)"),
        pl.col("correctly_rounded_fraction").round(4).alias("correctly rounded (share)"),
    )
    parts = [
        c3_framework_section(report, exp),
        "### Newton iterations (the harness's code: a finding)\n",
        markdown_table(rows),
    ]
    hist = report.table("c3_ulp_histogram")
    if hist is not None:
        vs = hist.filter(
            pl.col("comparison").str.ends_with("vs fp64 (rounded)") & ~pl.col("comparison").str.starts_with("div ")
        )
        names = vs["comparison"].unique(maintain_order=True).to_list()
        reference = next((n for n in names if n.startswith("A_eager")), names[0])
        others = [n for n in names if n != reference]
        order = vs["ulp"].unique(maintain_order=True).to_list()
        x = alt.X("ulp:N", sort=order, title="ULP distance to fp64 rounded to fp16 (ULP)")
        y = alt.Y("fraction:Q", axis=alt.Axis(format="%"), title="share of elements", scale=alt.Scale(domain=[0, 1]))
        left = (
            alt.Chart(vs)
            .mark_bar(color="#1f77b4")
            .encode(x=x, y=y, tooltip=["comparison", "ulp", "count"])
            .transform_filter(alt.datum.comparison == reference)
            .properties(width=250, height=180, title=f"path A: {reference}")
        )
        chart: alt.TopLevelMixin = left
        if others:
            pick = select("path_b", others, "path B ")
            right = (
                alt.Chart(vs)
                .mark_bar(color="#d62728")
                .encode(x=x, y=y, tooltip=["comparison", "ulp", "count"])
                .add_params(pick)
                .transform_filter(alt.datum.comparison == pick)
                .properties(width=250, height=180, title="path B (pick below)")
            )
            chart = alt.hconcat(left, right)
        parts.append(
            report.chart(
                exp.slug,
                "deliverable-histograms",
                chart,
                "ULP histograms against fp64 rounded to fp16: the framework's rsqrt (A) and a Newton-iteration "
                "variant (B)",
            )
        )
    return opening(exp, "\n".join(parts))


def details(report: Report, exp: Experiment) -> str:
    parts = []
    table = report.table("c3_iteration_table")
    if table is not None:
        parts.append(
            "## Error by iteration count\n\n"
            + report.chart(
                exp.slug,
                "iterations",
                c3_iterations_chart(table),
                "Max and mean ULP error against fp64 by Newton iteration count",
            )
        )
        parts += _c3_method(report, table)
    hist = report.table("c3_ulp_histogram")
    if hist is not None:
        vs_fp64 = hist.filter(
            pl.col("comparison").str.ends_with("vs fp64 (rounded)") & ~pl.col("comparison").str.starts_with("div ")
        )
        parts.append(
            report.chart(
                exp.slug,
                "ulp-histogram",
                ulp_bars(vs_fp64, "C3: ULP distance to the correctly rounded fp64 result", columns=3),
                "ULP histograms of every path against fp64 rounded to fp16",
            )
        )
    return "\n".join(parts)


def c3_iterations_chart(table: pl.DataFrame) -> alt.Chart | alt.LayerChart:
    """Max and mean ULP error of the Newton paths by iteration count, with torch.rsqrt's max as a rule."""
    newton = table.filter(pl.col("iterations").is_not_null()).select(
        "iterations", "compute_dtype", "ulp_max", "ulp_mean"
    )
    long = newton.unpivot(
        index=["iterations", "compute_dtype"],
        on=["ulp_max", "ulp_mean"],
        variable_name="statistic",
        value_name="ulp_error",
    )
    framework = table.filter(pl.col("path") == "A_eager")["ulp_max"].to_list()
    lines = (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("iterations:O", title="Newton iterations"),
            y=alt.Y("ulp_error:Q", scale=error_scale(long["ulp_error"]), title="ULP error vs fp64"),
            color=alt.Color("compute_dtype:N", title="arithmetic"),
            strokeDash=alt.StrokeDash("statistic:N"),
            tooltip=["iterations", "compute_dtype", "statistic", alt.Tooltip("ulp_error:Q", format=".4f")],
        )
    )
    chart: alt.Chart | alt.LayerChart = lines
    if framework:
        rule = (
            alt.Chart(pl.DataFrame({"torch_rsqrt_max": framework}))
            .mark_rule(color="gray", strokeDash=[2, 2])
            .encode(y="torch_rsqrt_max:Q")
        )
        chart = lines + rule
    return chart.properties(
        width=420,
        height=260,
        title="C3: rsqrt by magic constant + Newton steps (dashed gray: torch.rsqrt max)",
    )


def _c3_method(report: Report, table: pl.DataFrame) -> list[str]:
    """The method statement, the framework knobs and error floors, and the division table."""
    knobs = report.table("c3_framework_knobs")
    parts = [
        f"## Method: the plan's fallback\n\n{METHOD}.\n\n"
        + (knob_statement(knobs, table) + "\n\n" if knobs is not None else "")
        + floor_statement(table, "rsqrt")
        + "\n"
    ]
    div = report.table("c3_div_table")
    if div is not None:
        parts.append(
            "## div(x, y): true division vs x * reciprocal(y) with N Newton steps\n\n"
            + floor_statement(div, "div")
            + "\n\n"
            + markdown_table(
                div.select(
                    "path",
                    "iterations",
                    "compute_dtype",
                    "ulp_max",
                    "ulp_mean",
                    "pre_round_rel_max",
                    "correctly_rounded_fraction",
                    "vs_A_eager_equal_fraction",
                )
            )
        )
    return parts


#: The checks whose verdicts and reasons the framework section shows, in order.
_FRAMEWORK_CHECKS = ("c3_framework_correctly_rounded", "c3_framework_special_values", "c3_approx_math_switches")


def c3_framework_section(report: Report, exp: Experiment) -> str:
    """The claims on torch's own rsqrt and division: each check's stored verdict and reason, and the
    stored per-class counts of ``c3_framework_rounding`` (shares formatted, nothing re-judged)."""
    rounding = report.table("c3_framework_rounding")
    if rounding is None:
        return ""
    checks = {c.name: c for c in report.checks_of(exp.group) if c.state != "not yet run"}
    lines = [
        f"- `{name}`: **{checks[name].label}**: {checks[name].metadata.get('details') or checks[name].metadata.get('reason', '')}"
        for name in _FRAMEWORK_CHECKS
        if name in checks
    ]
    shown = rounding.select(
        "op",
        "path",
        "input_class",
        "elements",
        "special_results",
        "class_mismatches",
        "numeric_results",
        "not_correctly_rounded",
        (100 * pl.col("not_correctly_rounded") / pl.col("numeric_results").clip(1))
        .round(3)
        .alias("not correctly rounded (%)"),
        "beyond_one_ulp",
    )
    return (
        "### torch's rsqrt and division against fp64, special values included\n\n"
        f"Numeric results must be correctly rounded except for tie flips (margin {100 * TIE_FLIP_MARGIN:.3f} % of them, "
        "derived in the rule) and never more than one fp16 ULP off; results that are exactly NaN, +-inf or +-0 must "
        "come out exactly. Input classes: the U(0.01, 100) body (regular), normals over the whole fp16 range (wide), "
        "+-subnormals, +-0, +-inf, negative normals and NaN.\n\n"
        + ("\n".join(lines) + "\n\n" if lines else "")
        + markdown_table(shown, max_rows=80)
    )
