"""Experiment-specific charts. Each builder aggregates with polars first, then charts with Altair,
so no chart carries more rows than it shows."""

from collections.abc import Callable
from typing import Any

import altair as alt
import polars as pl

from ..scalars import as_number
from .claims import Experiment
from .render import Report, markdown_table


def toolkit(report: Report, exp: Experiment) -> str:
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
        .facet(
            facet=alt.Facet("comparison:N", title=None, sort=table["comparison"].unique(maintain_order=True).to_list()),
            columns=columns,
        )
        .properties(title=title)
    )


def instruction_selection(report: Report, exp: Experiment) -> str:
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
                _ulp_bars(hist, "C1: ULP distance between paths"),
                "ULP distance between x * 0.7 and x * fp16-tensor(0.7), per execution mode, with controls",
            )
        )
    records = report.table("c1_route_records")
    if records is not None and dist is not None:
        from ..experiments.instruction_selection.assets import route_statement

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


def reduction_order(report: Report, exp: Experiment) -> str:
    parts = []
    matrix = report.table("c2_ulp_matrix")
    if matrix is not None:
        parts.append(
            "## Pairwise ULP matrix\n\n"
            + report.chart(
                exp.slug,
                "ulp-matrix",
                c2_ulp_matrix_chart(matrix),
                "Share of pool rows where two versions differ, and the largest ULP difference",
            )
        )
    bounds = report.table("c2_row_bounds")
    if bounds is not None:
        parts.append(C2_BAND + markdown_table(c2_bound_formulas(bounds)))
        parts.append(
            "## Worst row per version\n\nThe row with the largest margin, per version and output "
            "(row 0 is the seed's single input; abs_s = |s|, sum_abs_x = Σ|x_i|, sum_abs_partials = Σ_j|p_j| "
            "of the exact tile partials).\n\n" + markdown_table(c2_worst_rows(bounds))
        )
        parts.append(
            report.chart(
                exp.slug,
                "margin",
                c2_margin_chart(bounds),
                "Per-row margin of each version's fp16 sum against its derived error bound; a point right of the red line would exceed the bound",
            )
        )
    errors = report.table("c2_error_vs_fp64")
    if errors is not None:
        parts.append(
            "## Error against fp64\n\n"
            + report.chart(
                exp.slug,
                "error-vs-fp64",
                c2_error_chart(errors),
                "Mean ULP error of each version's fp16 sum against the fp64 reference, coloured by its largest margin against the derived bound",
            )
        )
    return "\n".join(parts)


def c2_ulp_matrix_chart(matrix: pl.DataFrame) -> alt.FacetChart:
    """Per output, a version x version heat map of the share of pool rows that differ (text: max ULP)."""
    pool = matrix.filter(pl.col("scope") == "pool")
    order = pool["version_a"].unique(maintain_order=True).to_list()
    order += [v for v in pool["version_b"].unique(maintain_order=True).to_list() if v not in order]
    base = alt.Chart(pool).encode(
        x=alt.X("version_a:N", sort=order, title=None),
        y=alt.Y("version_b:N", sort=order, title=None),
    )
    return (
        (
            base.mark_rect().encode(
                color=alt.Color(
                    "differ_fraction:Q", title="rows that differ", scale=alt.Scale(scheme="oranges", domain=[0, 1])
                ),
                tooltip=[
                    "version_a",
                    "version_b",
                    "rows",
                    "differ_rows",
                    "ulp_max",
                    alt.Tooltip("ulp_mean:Q", format=".3f"),
                ],
            )
            + base.mark_text(fontSize=9).encode(text="ulp_max:Q")
        )
        .properties(width=300, height=300)
        .facet(
            column=alt.Column("output:N", title="output (out16: fp16 sum, acc32: fp32 accumulator); cell text: max ULP")
        )
        .properties(title="C2: pairwise differences between reduction versions over the row pool")
    )


#: How C2's per-row error bound is derived (the formulas table follows it on the page).
C2_BAND = (
    "## The band: an error bound derived per row and per version\n\n"
    "Each result is judged against a worst-case forward error bound of *its own* summation, computed from the "
    "row's data (Higham, *Accuracy and Stability of Numerical Algorithms*, ch. 3-4), not a tolerance-matrix entry. "
    "With s the exact (fp64) sum, u16 = 2^-11, u32 = 2^-24 and gamma_k(u) = k·u / (1 - k·u):\n\n"
    "- **fp32 accumulation, one final fp16 rounding** (eager, Inductor default and knobs, framework-tiled versions, hand-written tilings with fp32 partials): "
    "|ŝ - s| ≤ u16·|s| + (1 + u16)·gamma_c(u32)·Σ|x_i| + 2^-25, where c is the longest chain of additions a term "
    "passes through: n - 1 when the framework picks the order (the worst case over every order), b - 1 + n/b - 1 "
    "for tile b (a tile sum, then the sum of the n/b partials).\n"
    "- **fp16-stored partials** add one fp16 rounding per partial: the stored partials are off by at most "
    "E_p = (1 + u16)·gamma_(b-1)(u32)·Σ|x_i| + u16·Σ_j|p_j| + (n/b)·2^-25 in all, and their fp32 sum adds "
    "gamma_(n/b-1)(u32)·(Σ_j|p_j| + E_p) before the final rounding.\n"
    "- The fp32 accumulator (acc32) has the same bound without the final-rounding terms.\n\n"
    "The bound grows with Σ|x_i|, not with |s|: a row that nearly cancels keeps an ordinary absolute error. "
    "**margin = |error| / bound**; a margin above 1 contradicts the claim for that family (checks "
    "`c2_versions_within_fp64_band` for the seed's fp32-accumulation family, `c2_fp16_partials_within_bound` for "
    "fp16-stored partials). `margin_prob` uses the probabilistic bound of Higham & Mary (2019), gamma_k replaced by "
    "exp(λ·√k·u + k·u²/(1-u)) - 1, with λ chosen so that every judged row's bound holds together with probability "
    "≥ 0.99 under independent, mean-zero rounding errors (the seed's 'random error range'); a `margin_prob` above 1 "
    "also contradicts the claim.\n\n"
)


def c2_bound_formulas(bounds: pl.DataFrame) -> pl.DataFrame:
    """Per bound family and output: the chain lengths c seen and the bound's formula (without the tile size)."""
    return (
        bounds.unique(["family", "output", "chain"], maintain_order=True)
        .group_by("family", "output", maintain_order=True)
        .agg(
            pl.col("chain").str.join(", ").alias("chains c"),
            pl.col("bound_formula").first().str.replace(r", b = \d+$", ""),
        )
    )


def c2_worst_rows(bounds: pl.DataFrame) -> pl.DataFrame:
    """The row with the largest margin (NaN counts as largest) per version and output."""
    margin = pl.col("margin").fill_nan(float("inf"))
    return (
        bounds.with_columns(margin.alias("_m"))
        .sort("_m", descending=True)
        .group_by("version", "output", maintain_order=True)
        .first()
        .sort("output", "family", "version", descending=[True, False, False])
        .select(
            "version",
            "output",
            "chain",
            "row",
            pl.col("abs_ref").alias("abs_s"),
            pl.col("abs_sum").alias("sum_abs_x"),
            pl.col("partial_abs_sum").alias("sum_abs_partials"),
            "error",
            "bound",
            "margin",
            "margin_prob",
        )
    )


def c2_margin_chart(bounds: pl.DataFrame) -> alt.LayerChart:
    """Per version, the fp16 result's margin over all rows: min-max line, median dot, max tick, the bound at 1."""
    dist = (
        bounds.filter(pl.col("output") == "out16")
        .group_by("version", "family", maintain_order=True)
        .agg(
            pl.col("margin").min().alias("min"),
            pl.col("margin").median().alias("p50"),
            pl.col("margin").quantile(0.99).alias("p99"),
            pl.col("margin").max().alias("max"),
        )
        .with_columns(pl.col(c).clip(1e-5) for c in ("min", "p50", "p99", "max"))
    )
    order = dist["version"].to_list()
    x = alt.X(
        "min:Q",
        scale=alt.Scale(type="log", domainMax=2),
        title="margin = |error| / derived bound (fp16 result; log; below 1e-5 drawn at 1e-5)",
    )
    ranges = (
        alt.Chart(dist)
        .mark_rule(strokeWidth=2)
        .encode(y=alt.Y("version:N", sort=order, title=None), x=x, x2="max:Q", color=alt.Color("family:N"))
    )
    med = (
        alt.Chart(dist)
        .mark_point(filled=True, size=50)
        .encode(
            y=alt.Y("version:N", sort=order),
            x="p50:Q",
            color="family:N",
            tooltip=[
                "version",
                "family",
                alt.Tooltip("min:Q", format=".3g"),
                alt.Tooltip("p50:Q", format=".3g"),
                alt.Tooltip("p99:Q", format=".3g"),
                alt.Tooltip("max:Q", format=".3g"),
            ],
        )
    )
    top = (
        alt.Chart(dist)
        .mark_tick(thickness=2, size=14)
        .encode(y=alt.Y("version:N", sort=order), x="max:Q", color="family:N")
    )
    one = alt.Chart(pl.DataFrame({"x": [1.0]})).mark_rule(color="#c62828", strokeDash=[4, 3]).encode(x="x:Q")
    return (ranges + med + top + one).properties(
        width=420,
        height=280,
        title="C2: margin per version over all rows (line: min-max, dot: median, tick: max; red: bound)",
    )


def c2_error_chart(errors: pl.DataFrame) -> alt.Chart:
    """Mean ULP error of each version's fp16 sum against fp64, coloured by its largest margin."""
    return (
        alt.Chart(errors.filter(pl.col("output") == "out16"))
        .mark_bar()
        .encode(
            y=alt.Y("version:N", sort="-x", title=None),
            x=alt.X("ulp_mean:Q", title="mean ULP error of the fp16 sum vs fp64"),
            color=alt.Color("margin_max:Q", title="largest margin", scale=alt.Scale(scheme="oranges", domain=[0, 1])),
            tooltip=["version", "ulp_mean", "ulp_max", "closest_fraction", "margin_max", "within_band_fraction"],
        )
        .properties(width=420, height=260, title="C2: error of each version against fp64")
    )


def rsqrt_iterations(report: Report, exp: Experiment) -> str:
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
                _ulp_bars(vs_fp64, "C3: ULP distance to the correctly rounded fp64 result", columns=3),
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
            y=alt.Y("ulp_error:Q", scale=alt.Scale(type="log"), title="ULP error vs fp64"),
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
    from ..experiments.rsqrt_iterations import assets as c3

    knobs = report.table("c3_framework_knobs")
    parts = [
        f"## Method: the plan's fallback\n\n{c3.METHOD}.\n\n"
        + (c3.knob_statement(knobs, table) + "\n\n" if knobs is not None else "")
        + c3.floor_statement(table, "rsqrt")
        + "\n"
    ]
    div = report.table("c3_div_table")
    if div is not None:
        parts.append(
            "## div(x, y): true division vs x * reciprocal(y) with N Newton steps\n\n"
            + c3.floor_statement(div, "div")
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


def accumulated_error(report: Report, exp: Experiment) -> str:
    from ..experiments.accumulated_error import assets as b

    parts = []
    summary = report.table("accumulated_error_summary")
    if summary is not None:
        parts.append(
            "## Verdict table: fused vs eager against fp64 (§3.2)\n\n"
            f"Per input set, the largest error against fp64 in *scale-aware ULPs* (ULPs of the row's largest "
            f"|fp64 reference|, see the methodology page). Per row: the P99 of that over the sets for eager and for "
            f"fused, their paired difference with its one-sided {b.CONFIDENCE:g} bootstrap interval "
            f"({b.BOOTSTRAP_RESAMPLES} resamples), the Holm-adjusted p-value of 'fused is worse by more than "
            f"{b.MATERIALITY_SULP:g} sULP', the sets where fused is non-finite where eager is finite, the sets where "
            f"fused is worse by more than {b.MATERIALITY_SULP:g} sULP, and the verdict. The rule is stated in full "
            "under *Decision rules* above.\n\n" + markdown_table(b.verdict_table(summary))
        )
        parts.append(
            report.chart(
                exp.slug,
                "fused-vs-eager",
                b_fused_vs_eager_chart(summary, b.MATERIALITY_SULP),
                "P99 over input sets of the per-set max scale-aware ULP error, fused vs eager, one point per chain x "
                "distribution x dtype; points above the red line are materially worse",
            )
        )
        parts.append(
            "### Plain ULP and relative error\n\nThe same runs in the seed's own metrics (ULPs of each element's "
            "own reference value, relative error). They explode where the fp64 result is near zero (layer-norm "
            "outputs, gelu's negative tail), so they measure cancellation; they are shown, not used for the "
            "verdict.\n\n" + markdown_table(b_plain_errors(summary))
        )
    cex = report.table("accumulated_error_counterexamples")
    if cex is not None:
        parts.append(_b_counterexamples(cex))
    ablation = report.table("fusion_ablation")
    if ablation is not None and ablation.height:
        parts.append(_b_ablation(ablation, b.ABLATION_SETS))
    switch = report.value("fusion_switch_list")
    if switch is not None:
        parts.append(b_switch_list(switch))
    return "\n".join(parts)


def b_fused_vs_eager_chart(summary: pl.DataFrame, materiality: float) -> alt.LayerChart:
    """P99 error of fused against eager, one point per chain x distribution x dtype, over the equal line
    (gray) and the equal-plus-materiality line (red)."""
    points = summary.select(
        "chain",
        "distribution",
        "dtype",
        "fused_verdict",
        pl.col("eager_sulp_max_p99").alias("eager"),
        pl.col("fused_sulp_max_p99").alias("fused"),
    )
    lo = float(min(as_number(points[c].min(), f"{c} p99 sULP") for c in ("eager", "fused")))
    hi = float(max(as_number(points[c].max(), f"{c} p99 sULP") for c in ("eager", "fused")))
    band = pl.DataFrame({"x": [lo, hi], "y": [lo + materiality, hi + materiality]})
    diagonal = alt.Chart(band).mark_line(color="gray", strokeDash=[4, 4]).encode(x="x:Q", y="x:Q")
    threshold = alt.Chart(band).mark_line(color="#d62728", strokeDash=[2, 2]).encode(x="x:Q", y="y:Q")
    scatter = (
        alt.Chart(points)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X(
                "eager:Q", scale=alt.Scale(type="log"), title="eager: P99 over sets of max error (scale-aware ULP)"
            ),
            y=alt.Y("fused:Q", scale=alt.Scale(type="log"), title="fused: P99 over sets (scale-aware ULP)"),
            color=alt.Color("chain:N"),
            shape=alt.Shape("dtype:N"),
            tooltip=[
                "chain",
                "distribution",
                "dtype",
                "fused_verdict",
                alt.Tooltip("eager:Q", format=".4g"),
                alt.Tooltip("fused:Q", format=".4g"),
            ],
        )
    )
    return (diagonal + threshold + scatter).properties(
        width=420, height=360, title="B: P99 error, fused vs eager (grey: equal; red: eager + materiality)"
    )


def b_plain_errors(summary: pl.DataFrame) -> pl.DataFrame:
    """The summary in the seed's own metrics (plain ULP, relative error), rounded for the page."""
    return summary.select(
        "chain",
        "distribution",
        "dtype",
        "sets",
        pl.col("eager_ulp_max_p99").round(3),
        pl.col("fused_ulp_max_p99").round(3),
        pl.col("eager_ulp_max_max").round(3),
        pl.col("fused_ulp_max_max").round(3),
        pl.col("eager_rel_max_max").round(4),
        pl.col("fused_rel_max_max").round(4),
        pl.col("fused_better_fraction").round(3),
        pl.col("fused_worse_fraction").round(3),
    )


def _b_counterexamples(cex: pl.DataFrame) -> str:
    return (
        "## Counterexamples (for main document §6.1)\n\nEvery row where fused's P99 or max is above eager's at "
        "all, or fused is non-finite where eager is finite; the verdict says whether the rule calls it a "
        "contradiction.\n\n"
        + (
            markdown_table(
                cex.select(
                    "chain",
                    "distribution",
                    "dtype",
                    "verdict",
                    pl.col("p99_difference").round(3),
                    "nonfinite_sets",
                    pl.col("fused_worse_fraction").round(3),
                    "worst_set_index",
                    "explanation",
                )
            )
            if cex.height
            else "No row had fused error above eager's.\n"
        )
    )


def _b_ablation(ablation: pl.DataFrame, ablation_sets: int) -> str:
    return (
        f"## Ablation: which fused op is responsible\n\nFor each counterexample, each op of the chain is kept out "
        f"of the fused region in turn (the rest still fused) and the {ablation_sets} sets where fused is worst "
        "relative to eager are re-run. `improvement` is the drop of the mean per-set error (sULP) when that op "
        "is not fused; the op with the largest measured improvement (over 0.1 sULP, or fewer non-finite sets) is "
        "marked responsible.\n\n"
        + markdown_table(
            ablation.select(
                "chain",
                "distribution",
                "dtype",
                "verdict",
                "op",
                pl.col("eager_mean").round(3),
                pl.col("fused_mean").round(3),
                pl.col("ablated_mean").round(3),
                pl.col("improvement").round(3),
                "ablated_nonfinite_sets",
                "responsible",
            )
        )
    )


def b_switch_list(switch: dict[str, Any]) -> str:
    """The fusion switch list (op types per dtype to keep out of fusion, or to watch) as a Markdown table."""
    keep = switch.get("keep_out_of_fusion") or {}
    watch = switch.get("watch") or {}
    rows = [f"| {dtype} | {', '.join(ops)} | keep out of fusion (contradicted) |" for dtype, ops in keep.items()]
    rows += [f"| {dtype} | {', '.join(ops)} | watch (within the rule) |" for dtype, ops in watch.items()]
    return (
        "## Fusion switch list (§6.1)\n\n"
        + switch.get("note", "")
        + "\n\n"
        + (
            "| dtype | op types | action |\n|---|---|---|\n" + "\n".join(rows) + "\n"
            if rows
            else "Nothing to switch off.\n"
        )
    )


def determinism(report: Report, exp: Experiment) -> str:
    summary = report.table("determinism_summary")
    if summary is None:
        return ""
    return (
        "## Summary (the seed's run count / unique hashes / max ULP / kernel hash columns)\n\n"
        "`code_sha256`: the normalized generated source; `artifact_sha256`: the compiled kernels that run (H_k0 in "
        "round 1). `kernel_hash_equal_across_cold_start` compares the source hash with round 1's, "
        "`artifact_hash_equal_across_cold_start` the artifact hash.\n\n"
        + markdown_table(a_summary_table(summary))
        + report.chart(exp.slug, "summary", a_hashes_chart(summary), "Unique output hashes per dtype and round")
    )


def a_hashes_chart(summary: pl.DataFrame) -> alt.LayerChart:
    """Per dtype and round: green when every run gave one hash equal to round 1's, labelled runs / hashes."""
    cells = summary.with_columns(
        pl.when((pl.col("unique_output_hashes") == 1) & (pl.col("outputs_equal_round1") == "yes"))
        .then(pl.lit("1 hash, equal to round 1"))
        .otherwise(pl.lit("differs"))
        .alias("outcome"),
        (
            pl.col("run_count").cast(pl.String) + " runs / " + pl.col("unique_output_hashes").cast(pl.String) + " hash"
        ).alias("label"),
    )
    base = alt.Chart(cells).encode(x=alt.X("round:N", title=None), y=alt.Y("dtype:N", title=None))
    return (
        base.mark_rect().encode(
            color=alt.Color(
                "outcome:N",
                scale=alt.Scale(domain=["1 hash, equal to round 1", "differs"], range=["#2e7d32", "#c62828"]),
            ),
            tooltip=[
                "dtype",
                "round",
                "threads",
                "run_count",
                "unique_output_hashes",
                "max_ulp_diff_across_runs",
                "kernel_hash_equal_across_cold_start",
                "ms_per_run",
            ],
        )
        + base.mark_text(color="white", fontSize=11).encode(text="label:N")
    ).properties(
        width=480, height=150, title="A: output hashes per round (round2_cold: fresh process, empty compiler cache)"
    )


def a_summary_table(summary: pl.DataFrame) -> pl.DataFrame:
    """The seed's summary columns, with the hash columns present and hashes cut to 16 hex digits."""
    hashes = [
        c
        for c in (
            "code_sha256",
            "kernel_hash_equal_across_cold_start",
            "artifact_sha256",
            "artifact_hash_equal_across_cold_start",
        )
        if c in summary.columns
    ]
    key = summary.select(
        "dtype",
        "round",
        "threads",
        "run_count",
        "unique_output_hashes",
        "max_ulp_diff_across_runs",
        *hashes,
        "outputs_equal_round1",
        "kernel_count",
        "recompiles",
    )
    # 16 hex digits identify a hash on the page; the stored table keeps all 64
    return key.with_columns(pl.col(c).str.slice(0, 16) for c in ("code_sha256", "artifact_sha256") if c in hashes)


def data_movement(report: Report, exp: Experiment) -> str:
    table = report.table("data_movement_check_table")
    if table is None:
        return ""
    cause = [c for c in ("cause_op", "cause_path") if c in table.columns]
    notes = table.filter(~pl.col("bit_equal")).select(
        "subgraph",
        "dtype",
        "shape",
        "layout",
        "ulp_max",
        "mismatched_elements",
        "nan_encoding_mismatches",
        *cause,
        "notes",
    )
    reshape = ""
    if "reshape_copied" in table.columns:
        rs = table.filter(pl.col("reshape_copied").is_not_null())
        reshape = (
            "\n## Reshape rows\n\n`reshape_copied`: whether the eager reshape returned a copy (a non-contiguous input) "
            "rather than a view, measured on the storage.\n\n"
            + markdown_table(
                rs.select(
                    "subgraph", "dtype", "shape", "layout", "reshape_copied", "bit_equal", "ulp_max", "kernel_count"
                )
            )
        )
    return (
        report.chart(
            exp.slug, "check-table", d_bit_exact_chart(table), "Share of bit-exact rows per subgraph and dtype"
        )
        + "\n## Rows that are not bit-exact\n\n"
        + (markdown_table(notes) if notes.height else "None.\n")
        + reshape
    )


def d_bit_exact_chart(table: pl.DataFrame) -> alt.FacetChart:
    """Share of bit-exact rows per subgraph and dtype, pure data movement and hidden arithmetic apart."""
    agg = (
        table.group_by("subgraph", "dtype", "has_implicit_computation", maintain_order=True)
        .agg(
            pl.len().alias("rows"),
            pl.col("bit_equal").sum().alias("bit_exact_rows"),
            pl.col("ulp_max").max().alias("ulp_max"),
        )
        .with_columns(
            (pl.col("bit_exact_rows") / pl.col("rows")).alias("bit_exact_share"),
            (pl.col("bit_exact_rows").cast(pl.String) + "/" + pl.col("rows").cast(pl.String)).alias("label"),
            pl.when(pl.col("has_implicit_computation"))
            .then(pl.lit("hides arithmetic"))
            .otherwise(pl.lit("pure data movement"))
            .alias("kind"),
        )
    )
    base = alt.Chart(agg).encode(x=alt.X("dtype:N", title=None), y=alt.Y("subgraph:N", title=None))
    return (
        (
            base.mark_rect().encode(
                color=alt.Color(
                    "bit_exact_share:Q", title="bit-exact rows", scale=alt.Scale(scheme="redyellowgreen", domain=[0, 1])
                ),
                tooltip=["subgraph", "dtype", "rows", "bit_exact_rows", "ulp_max"],
            )
            + base.mark_text(fontSize=11).encode(text="label:N")
        )
        .properties(width=240, height=150)
        .facet(row=alt.Row("kind:N", title=None))
        .resolve_scale(y="independent")
        .properties(title="D: eager vs fused bit equality (rows: shapes x layouts)")
    )


def training(report: Report, exp: Experiment) -> str:
    curves = report.table("training_curves")
    if curves is None:
        return ""
    deviation = report.table("training_deviation")
    claim = next((c for c in report.checks_of(exp.group) if c.name == "fused_learns_like_eager"), None)
    result = None
    if claim is not None and claim.state != "not yet run":
        result = f"{claim.label}: {claim.metadata.get('reason', '')}"
    parts = ["## Rule (declared before the runs)\n\n" + markdown_table(e_rule_table(result))]
    final = report.table("training_final_metrics")
    if final is not None:
        parts.append(_e_final_metrics(final))
    if deviation is not None and deviation.height:
        parts += _e_eval_sections(report, exp, deviation)
    parts.append(
        "## Train loss and grad norm\n\n"
        + report.chart(exp.slug, "curves", e_curves_chart(curves), "Train loss and grad norm of every run")
    )
    return "\n".join(parts)


def e_rule_table(result: str | None = None) -> pl.DataFrame:
    """E's decision rule, parameter by parameter, with the claim's ``result`` as the last row when judged."""
    from ..experiments.training import assets as e

    rule_rows = [
        (
            "eager replicates (differ only in data order)",
            f"{len(e.REPLICATE_ORDERS)} (orders {', '.join(e.REPLICATE_ORDERS)}; A is fused's)",
        ),
        ("numerics-only control", "eager, fused's data order and init, every initial weight moved one ULP"),
        ("judged points", "every eval step after step 0 (eval loss)"),
        (
            "envelope",
            f"[min - {e.ENVELOPE_WIDENING:g}s, max + {e.ENVELOPE_WIDENING:g}s] over replicates, s = max - min",
        ),
        (
            "contradicted",
            f"fused outside the envelope at > {e.MAX_OUTSIDE_FRACTION:.0%} of judged points, or final "
            f"|fused - eager| > {e.FINAL_SPREAD_MULTIPLE:g}s",
        ),
        (
            "inconclusive",
            f"< {len(e.REPLICATE_ORDERS)} replicates, < {e.MIN_POINTS} judged points, or s = 0 / undefined",
        ),
        (
            "false contradiction (least favourable null)",
            f"<= {e.PER_POINT_FALSE_ALARM / e.MAX_OUTSIDE_FRACTION + e.FINAL_FALSE_ALARM:.3f}",
        ),
        ("finding", f"RMS(fused - eager) > {e.CONTROL_FACTOR:g} x RMS(control - eager) over the judged points"),
    ]
    if result is not None:
        rule_rows.append(("result", result))
    return pl.DataFrame(rule_rows, schema=["parameter", "value"], orient="row")


def _e_final_metrics(final: pl.DataFrame) -> str:
    return (
        "## Final-metric difference (last step)\n\n`replicate_spread` is max - min over the eager replicates; "
        "`control_minus_eager` is what a one-ULP nudge of the initial weights alone does.\n\n"
        + markdown_table(
            final.select(
                "precision",
                "metric",
                "step",
                "eager",
                "fused",
                "fused_minus_eager",
                "replicate_spread",
                "diff_in_spreads",
                "control_minus_eager",
            )
        )
    )


def e_judged_eval(deviation: pl.DataFrame) -> tuple[str, pl.DataFrame]:
    """The first precision of ``deviation`` and its judged eval-loss points, by step."""
    main = deviation["precision"][0]
    ev = deviation.filter((pl.col("precision") == main) & (pl.col("metric") == "eval_loss") & pl.col("judged")).sort(
        "step"
    )
    return main, ev


def _e_eval_sections(report: Report, exp: Experiment, deviation: pl.DataFrame) -> list[str]:
    """The eval-loss band chart, the deviation-from-eager chart and the judged points."""
    from ..experiments.training import assets as e

    main, ev = e_judged_eval(deviation)
    return [
        "## Eval-loss curve against the replicate band\n\n"
        + report.chart(
            exp.slug,
            "eval-band",
            e_eval_band_chart(ev, main, e.ENVELOPE_WIDENING),
            f"Eval loss of eager, fused and the one-ULP control over the band of {len(e.REPLICATE_ORDERS)} eager data-order "
            "replicates, at the judged eval points (step 0 is not judged: every run starts from the same init)",
        ),
        report.chart(exp.slug, "deviation", e_deviation_chart(ev), e_deviation_caption(ev)),
        "## Eval-loss points\n\n" + markdown_table(ev.select(e.EVAL_POINT_COLUMNS)),
    ]


def e_eval_band_chart(ev: pl.DataFrame, main: str, widening: float) -> alt.LayerChart:
    """Eval loss of eager, fused and the control over the replicate band and the widened envelope."""
    lines_long = (
        ev.select("step", "eager", "fused", "control")
        .unpivot(index="step", variable_name="curve", value_name="eval_loss")
        .drop_nulls("eval_loss")
    )
    colors = alt.Scale(domain=["eager", "fused", "control"], range=["#1f77b4", "#d62728", "#2ca02c"])
    x = alt.X("step:Q", title="step")
    widened = alt.Chart(ev).mark_area(opacity=0.15, color="#888").encode(x=x, y="envelope_lo:Q", y2="envelope_hi:Q")
    band = (
        alt.Chart(ev)
        .mark_area(opacity=0.35, color="#888")
        .encode(
            x=x,
            y=alt.Y("replicate_min:Q", title="eval loss", scale=alt.Scale(zero=False)),
            y2="replicate_max:Q",
            tooltip=[
                "step",
                alt.Tooltip("replicate_min:Q", format=".5f"),
                alt.Tooltip("replicate_max:Q", format=".5f"),
                alt.Tooltip("replicate_spread:Q", format=".4g"),
            ],
        )
    )
    lines = (
        alt.Chart(lines_long)
        .mark_line(point=True)
        .encode(
            x=x,
            y="eval_loss:Q",
            color=alt.Color("curve:N", scale=colors, title=None),
            strokeDash=alt.condition(alt.datum.curve == "control", alt.value([4, 3]), alt.value([1, 0])),
            tooltip=["curve", "step", alt.Tooltip("eval_loss:Q", format=".5f")],
        )
    )
    return (widened + band + lines).properties(
        width=620,
        height=260,
        title=f"E: eval loss, {main} (dark band: replicate min-max; light: widened by {widening:g} spreads)",
    )


def e_deviation_chart(ev: pl.DataFrame) -> alt.LayerChart:
    """Fused and control minus eager over the replicate band relative to eager: rounding-sized
    differences are invisible on the loss scale."""
    x = alt.X("step:Q", title="step")
    rel = ev.with_columns(
        (pl.col("replicate_min") - pl.col("eager")).alias("band_lo"),
        (pl.col("replicate_max") - pl.col("eager")).alias("band_hi"),
    )
    rel_long = (
        rel.select("step", pl.col("fused_minus_eager").alias("fused"), pl.col("control_minus_eager").alias("control"))
        .unpivot(index="step", variable_name="curve", value_name="minus_eager")
        .drop_nulls("minus_eager")
    )
    return (
        alt.Chart(rel)
        .mark_area(opacity=0.35, color="#888")
        .encode(x=x, y=alt.Y("band_lo:Q", title="eval loss minus eager (order A)"), y2="band_hi:Q")
        + alt.Chart(rel_long)
        .mark_line(point=True)
        .encode(
            x=x,
            y="minus_eager:Q",
            color=alt.Color(
                "curve:N", scale=alt.Scale(domain=["fused", "control"], range=["#d62728", "#2ca02c"]), title=None
            ),
            tooltip=["curve", "step", alt.Tooltip("minus_eager:Q", format=".3g")],
        )
    ).properties(
        width=620,
        height=200,
        title="E: deviation from eager, fused vs the one-ULP control, over the replicate band",
    )


def e_deviation_caption(ev: pl.DataFrame) -> str:
    """The deviation chart's caption: where fused first leaves the widened envelope, if it does."""
    outside = ev.filter(pl.col("outside_envelope").fill_null(False))
    caption = "Fused and control minus eager at each judged eval point; gray: replicate min-max relative to eager"
    if not outside.height:
        return caption + "; fused never leaves the widened envelope"
    first = int(as_number(outside["step"].min(), "first step outside the envelope"))
    return caption + f"; fused outside the widened envelope at {outside.height} point(s), first at step {first}"


def e_curves_chart(curves: pl.DataFrame) -> alt.FacetChart:
    """Train loss and grad norm of every run, one row per metric."""
    long = curves.unpivot(
        index=["run", "step"], on=["train_loss", "grad_norm"], variable_name="metric", value_name="value"
    ).drop_nulls("value")
    return (
        alt.Chart(long)
        .mark_line()
        .encode(
            x=alt.X("step:Q"),
            y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=False)),
            color=alt.Color("run:N"),
            tooltip=["run", "step", alt.Tooltip("value:Q", format=".5f")],
        )
        .properties(width=620, height=160)
        .facet(row=alt.Row("metric:N", title=None))
        .resolve_scale(y="independent")
        .properties(title="E: train loss and grad norm per run (means over each eval interval)")
    )


def diagnostics(report: Report, exp: Experiment) -> str:
    parts = []
    layers = report.table("divergence_per_layer")
    if layers is not None:
        first = layers.filter(pl.col("divergent"))
        verdict = (
            f"First divergent layer: `{first['layer'][0]}`."
            if first.height
            else "No layer's fused error exceeds eager's by more than the measured noise."
        )
        parts.append(
            "## Divergence locator\n\n"
            + verdict
            + "\n\n"
            + report.chart(exp.slug, "layers", layer_error_chart(layers), "Error growth layer by layer, eager vs fused")
            + markdown_table(
                layers.select(
                    "layer_index",
                    "layer",
                    "eager_err",
                    "fused_err",
                    "excess",
                    "noise",
                    "divergent",
                    "ulp_eager_vs_fused_mean",
                    "kernel_count",
                )
            )
        )
    fuzz = report.table("fuzz_outcomes")
    if fuzz is not None:
        bad = fuzz.filter(pl.col("class") != "ok").select("seed", "dtype", "class", "ops", "shrunk_ops", "reproducer")
        parts.append(
            "## Differential graph fuzzer\n\n"
            + report.chart(exp.slug, "fuzz", fuzz_chart(fuzz), "Outcome classes of the fuzzed graphs")
            + ("\n" + markdown_table(bad) if bad.height else "\nEvery fuzzed graph was classified ok.\n")
        )
    tol = report.table("measured_tolerances")
    if tol is not None:
        parts.append(
            "## Measured tolerances vs the hand-written matrix\n\nAbove the diagonal the matrix is too tight for what was observed.\n\n"
            + report.chart(
                exp.slug, "tolerances", tolerance_chart(tol), "Measured p99.9 error against the decision matrix"
            )
        )
    return "\n".join(parts)


def layer_error_chart(layers: pl.DataFrame) -> alt.Chart:
    """Error against fp64 layer by layer, eager and fused (log scale: exact layers have no point)."""
    long = (
        layers.select("layer_index", "layer", pl.col("eager_err").alias("eager"), pl.col("fused_err").alias("fused"))
        .unpivot(index=["layer_index", "layer"], variable_name="path", value_name="error vs fp64")
        .filter(pl.col("error vs fp64") > 0)
    )
    return (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("layer_index:O", title="layer (call order)"),
            y=alt.Y("error vs fp64:Q", scale=alt.Scale(type="log")),
            color="path:N",
            tooltip=["layer", "path", alt.Tooltip("error vs fp64:Q", format=".3g")],
        )
        .properties(width=620, height=240, title="Per-layer error against fp64 (E's GPT model)")
    )


def fuzz_chart(fuzz: pl.DataFrame) -> alt.Chart:
    """Fuzzed graphs per outcome class and dtype."""
    counts = fuzz.group_by("class", "dtype").agg(pl.len().alias("graphs")).sort("class", "dtype")
    return (
        alt.Chart(counts)
        .mark_bar()
        .encode(
            x=alt.X("graphs:Q"),
            y=alt.Y("class:N", title=None),
            color="dtype:N",
            tooltip=["class", "dtype", "graphs"],
        )
        .properties(width=420, height=120, title=f"Differential fuzzer: {fuzz.height} random graphs")
    )


def tolerance_chart(tol: pl.DataFrame) -> alt.LayerChart:
    """Measured absolute tolerance against the hand-written matrix's, over the diagonal (log-log)."""
    pts = tol.filter(pl.col("atol") > 0)
    lo = float(min(as_number(pts[c].min(), f"measured_tolerances {c}") for c in ("atol", "matrix_atol")))
    hi = float(max(as_number(pts[c].max(), f"measured_tolerances {c}") for c in ("atol", "matrix_atol")))
    diag = alt.Chart(pl.DataFrame({"x": [lo, hi]})).mark_line(color="gray", strokeDash=[4, 4]).encode(x="x:Q", y="x:Q")
    scatter = (
        alt.Chart(pts)
        .mark_point(filled=True)
        .encode(
            x=alt.X("matrix_atol:Q", scale=alt.Scale(type="log"), title="seed 001 decision matrix atol"),
            y=alt.Y("atol:Q", scale=alt.Scale(type="log"), title="measured p99.9 fused error"),
            color="op_class:N",
            shape="dtype:N",
            tooltip=["op_class", "dtype", "reduction_size", "atol", "matrix_atol", "ratio", "verdict"],
        )
    )
    return (diag + scatter).properties(width=420, height=320, title="Measured vs hand-written absolute tolerance")


def drift(report: Report, exp: Experiment) -> str:
    parts = []
    comparison = report.table("baseline_comparison")
    if comparison is not None:
        moved_flag = pl.col("moved") == "yes"
        per_exp = (
            comparison.group_by("experiment")
            .agg(pl.len().alias("items"), moved_flag.sum().alias("moved"))
            .sort("experiment")
        )
        moved = comparison.filter(moved_flag)
        parts.append(
            "## Latest comparison with the promoted baseline\n\n"
            + markdown_table(per_exp)
            + "\n### What moved\n\n"
            + (markdown_table(moved) if moved.height else "Nothing moved.\n")
        )
    matrix = report.table("planted_bug_matrix")
    if matrix is not None:
        from ..experiments.regression import harness

        bugs = matrix.filter(pl.col("row") == harness.BUG_ROW)
        healthy = matrix.filter(pl.col("row") == harness.HEALTHY_ROW)
        caught = int((bugs["caught"] == "yes").sum())
        alarms = int(healthy["error_outcomes"].sum())
        parts.append(
            "## Planted-bug suite: every silent bug must fail at ERROR\n\n"
            f"**{caught} of {bugs.height} bugs caught at ERROR; {alarms} ERROR outcome(s) over {healthy.height} healthy "
            f"seeds.** Scoring: {harness.SCORING}\n\n"
            "### Bug x caught at ERROR\n\n"
            + markdown_table(
                bugs.select(
                    "bug", "fault_class", "caught", "error_outcomes", "caught_by", pl.col("wall_seconds").round(1)
                )
            )
            + "\n### Healthy backend over several base seeds (false alarms)\n\n"
            + markdown_table(healthy.select("bug", "seed", "caught", "error_outcomes", pl.col("wall_seconds").round(1)))
            + "\n<details><summary>What each bug does</summary>\n\n"
            + markdown_table(bugs.select("bug", "description"))
            + "\n</details>\n"
        )
    return "\n".join(parts)


CHARTS: dict[str, Callable[[Report, Experiment], str]] = {
    "A": determinism,
    "D": data_movement,
    "E": training,
    "Diagnostics": diagnostics,
    "Regression": drift,
    "B": accumulated_error,
    "S": toolkit,
    "C1": instruction_selection,
    "C2": reduction_order,
    "C3": rsqrt_iterations,
}
