"""Experiment-specific charts. Each builder aggregates with polars first, then charts with Altair,
so no chart carries more rows than it shows."""

from collections.abc import Callable

import altair as alt
import polars as pl

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
        from ..assets.instruction_selection import route_statement

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
        pool = matrix.filter(pl.col("scope") == "pool")
        order = pool["version_a"].unique(maintain_order=True).to_list()
        order += [v for v in pool["version_b"].unique(maintain_order=True).to_list() if v not in order]
        base = alt.Chart(pool).encode(
            x=alt.X("version_a:N", sort=order, title=None),
            y=alt.Y("version_b:N", sort=order, title=None),
        )
        heat = (
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
                column=alt.Column(
                    "output:N", title="output (out16: fp16 sum, acc32: fp32 accumulator); cell text: max ULP"
                )
            )
            .properties(title="C2: pairwise differences between reduction versions over the row pool")
        )
        parts.append(
            "## Pairwise ULP matrix\n\n"
            + report.chart(
                exp.slug,
                "ulp-matrix",
                heat,
                "Share of pool rows where two versions differ, and the largest ULP difference",
            )
        )
    bounds = report.table("c2_row_bounds")
    if bounds is not None:
        formulas = (
            bounds.unique(["family", "output", "chain"], maintain_order=True)
            .group_by("family", "output", maintain_order=True)
            .agg(
                pl.col("chain").str.join(", ").alias("chains c"),
                pl.col("bound_formula").first().str.replace(r", b = \d+$", ""),
            )
        )
        parts.append(
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
            "also contradicts the claim.\n\n" + markdown_table(formulas)
        )
        margin = pl.col("margin").fill_nan(float("inf"))
        worst = (
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
        parts.append(
            "## Worst row per version\n\nThe row with the largest margin, per version and output "
            "(row 0 is the seed's single input; abs_s = |s|, sum_abs_x = Σ|x_i|, sum_abs_partials = Σ_j|p_j| "
            "of the exact tile partials).\n\n" + markdown_table(worst)
        )
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
        parts.append(
            report.chart(
                exp.slug,
                "margin",
                (ranges + med + top + one).properties(
                    width=420,
                    height=280,
                    title="C2: margin per version over all rows (line: min-max, dot: median, tick: max; red: bound)",
                ),
                "Per-row margin of each version's fp16 sum against its derived error bound; a point right of the red line would exceed the bound",
            )
        )
    errors = report.table("c2_error_vs_fp64")
    if errors is not None:
        bars = (
            alt.Chart(errors.filter(pl.col("output") == "out16"))
            .mark_bar()
            .encode(
                y=alt.Y("version:N", sort="-x", title=None),
                x=alt.X("ulp_mean:Q", title="mean ULP error of the fp16 sum vs fp64"),
                color=alt.Color(
                    "margin_max:Q", title="largest margin", scale=alt.Scale(scheme="oranges", domain=[0, 1])
                ),
                tooltip=["version", "ulp_mean", "ulp_max", "closest_fraction", "margin_max", "within_band_fraction"],
            )
            .properties(width=420, height=260, title="C2: error of each version against fp64")
        )
        parts.append(
            "## Error against fp64\n\n"
            + report.chart(
                exp.slug,
                "error-vs-fp64",
                bars,
                "Mean ULP error of each version's fp16 sum against the fp64 reference, coloured by its largest margin against the derived bound",
            )
        )
    return "\n".join(parts)


def rsqrt_iterations(report: Report, exp: Experiment) -> str:
    parts = []
    table = report.table("c3_iteration_table")
    if table is not None:
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
        chart = lines
        if framework:
            rule = (
                alt.Chart(pl.DataFrame({"torch_rsqrt_max": framework}))
                .mark_rule(color="gray", strokeDash=[2, 2])
                .encode(y="torch_rsqrt_max:Q")
            )
            chart = lines + rule
        parts.append(
            "## Error by iteration count\n\n"
            + report.chart(
                exp.slug,
                "iterations",
                chart.properties(
                    width=420,
                    height=260,
                    title="C3: rsqrt by magic constant + Newton steps (dashed gray: torch.rsqrt max)",
                ),
                "Max and mean ULP error against fp64 by Newton iteration count",
            )
        )
    knobs = report.table("c3_framework_knobs")
    if table is not None:
        from ..assets import rsqrt_iterations as c3

        parts.append(
            f"## Method: the plan's fallback\n\n{c3.METHOD}.\n\n"
            + (c3.knob_statement(knobs, table) + "\n\n" if knobs is not None else "")
            + c3.floor_statement(table, "rsqrt")
            + "\n"
        )
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


def accumulated_error(report: Report, exp: Experiment) -> str:
    from ..assets import accumulated_error as b

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
        points = summary.select(
            "chain",
            "distribution",
            "dtype",
            "fused_verdict",
            pl.col("eager_sulp_max_p99").alias("eager"),
            pl.col("fused_sulp_max_p99").alias("fused"),
        )
        lo = float(min(points["eager"].min(), points["fused"].min()))
        hi = float(max(points["eager"].max(), points["fused"].max()))
        band = pl.DataFrame({"x": [lo, hi], "y": [lo + b.MATERIALITY_SULP, hi + b.MATERIALITY_SULP]})
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
        parts.append(
            report.chart(
                exp.slug,
                "fused-vs-eager",
                (diagonal + threshold + scatter).properties(
                    width=420, height=360, title="B: P99 error, fused vs eager (grey: equal; red: eager + materiality)"
                ),
                "P99 over input sets of the per-set max scale-aware ULP error, fused vs eager, one point per chain x "
                "distribution x dtype; points above the red line are materially worse",
            )
        )
        extra = summary.select(
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
        parts.append(
            "### Plain ULP and relative error\n\nThe same runs in the seed's own metrics (ULPs of each element's "
            "own reference value, relative error). They explode where the fp64 result is near zero (layer-norm "
            "outputs, gelu's negative tail), so they measure cancellation; they are shown, not used for the "
            "verdict.\n\n" + markdown_table(extra)
        )
    cex = report.table("accumulated_error_counterexamples")
    if cex is not None:
        parts.append(
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
    ablation = report.table("fusion_ablation")
    if ablation is not None and ablation.height:
        parts.append(
            f"## Ablation: which fused op is responsible\n\nFor each counterexample, each op of the chain is kept out "
            f"of the fused region in turn (the rest still fused) and the {b.ABLATION_SETS} sets where fused is worst "
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
    switch = report.value("fusion_switch_list")
    if switch is not None:
        keep = switch.get("keep_out_of_fusion") or {}
        watch = switch.get("watch") or {}
        rows = [f"| {dtype} | {', '.join(ops)} | keep out of fusion (contradicted) |" for dtype, ops in keep.items()]
        rows += [f"| {dtype} | {', '.join(ops)} | watch (within the rule) |" for dtype, ops in watch.items()]
        parts.append(
            "## Fusion switch list (§6.1)\n\n"
            + switch.get("note", "")
            + "\n\n"
            + (
                "| dtype | op types | action |\n|---|---|---|\n" + "\n".join(rows) + "\n"
                if rows
                else "Nothing to switch off.\n"
            )
        )
    return "\n".join(parts)


def determinism(report: Report, exp: Experiment) -> str:
    summary = report.table("determinism_summary")
    if summary is None:
        return ""
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
    chart = (
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
    key = key.with_columns(pl.col(c).str.slice(0, 16) for c in ("code_sha256", "artifact_sha256") if c in hashes)
    return (
        "## Summary (the seed's run count / unique hashes / max ULP / kernel hash columns)\n\n"
        "`code_sha256`: the normalized generated source; `artifact_sha256`: the compiled kernels that run (H_k0 in "
        "round 1). `kernel_hash_equal_across_cold_start` compares the source hash with round 1's, "
        "`artifact_hash_equal_across_cold_start` the artifact hash.\n\n"
        + markdown_table(key)
        + report.chart(exp.slug, "summary", chart, "Unique output hashes per dtype and round")
    )


def data_movement(report: Report, exp: Experiment) -> str:
    table = report.table("data_movement_check_table")
    if table is None:
        return ""
    agg = (
        table.group_by("subgraph", "dtype", "has_implicit_computation")
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
    chart = (
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
        report.chart(exp.slug, "check-table", chart, "Share of bit-exact rows per subgraph and dtype")
        + "\n## Rows that are not bit-exact\n\n"
        + (markdown_table(notes) if notes.height else "None.\n")
        + reshape
    )


def training(report: Report, exp: Experiment) -> str:
    from ..assets import training as e

    curves = report.table("training_curves")
    if curves is None:
        return ""
    parts = []
    deviation = report.table("training_deviation")
    claim = next((c for c in report.checks_of(exp.group) if c.name == "fused_learns_like_eager"), None)
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
    if claim is not None and claim.state != "not yet run":
        rule_rows.append(("result", f"{claim.label}: {claim.metadata.get('reason', '')}"))
    parts.append(
        "## Rule (declared before the runs)\n\n"
        + markdown_table(pl.DataFrame(rule_rows, schema=["parameter", "value"], orient="row"))
    )
    final = report.table("training_final_metrics")
    if final is not None:
        parts.append(
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
    if deviation is not None and deviation.height:
        main = deviation["precision"][0]
        ev = deviation.filter(
            (pl.col("precision") == main) & (pl.col("metric") == "eval_loss") & pl.col("judged")
        ).sort("step")
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
        chart = (widened + band + lines).properties(
            width=620,
            height=260,
            title=f"E: eval loss, {main} (dark band: replicate min-max; light: widened by {e.ENVELOPE_WIDENING:g} spreads)",
        )
        parts.append(
            "## Eval-loss curve against the replicate band\n\n"
            + report.chart(
                exp.slug,
                "eval-band",
                chart,
                f"Eval loss of eager, fused and the one-ULP control over the band of {len(e.REPLICATE_ORDERS)} eager data-order "
                "replicates, at the judged eval points (step 0 is not judged: every run starts from the same init)",
            )
        )
        # The same data relative to eager: rounding-sized differences are invisible on the loss scale.
        rel = ev.with_columns(
            (pl.col("replicate_min") - pl.col("eager")).alias("band_lo"),
            (pl.col("replicate_max") - pl.col("eager")).alias("band_hi"),
        )
        rel_long = (
            rel.select(
                "step", pl.col("fused_minus_eager").alias("fused"), pl.col("control_minus_eager").alias("control")
            )
            .unpivot(index="step", variable_name="curve", value_name="minus_eager")
            .drop_nulls("minus_eager")
        )
        rel_chart = (
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
        outside = ev.filter(pl.col("outside_envelope").fill_null(False))
        caption = "Fused and control minus eager at each judged eval point; gray: replicate min-max relative to eager"
        caption += (
            f"; fused outside the widened envelope at {outside.height} point(s), first at step {int(outside['step'].min())}"
            if outside.height
            else "; fused never leaves the widened envelope"
        )
        parts.append(report.chart(exp.slug, "deviation", rel_chart, caption))
        parts.append(
            "## Eval-loss points\n\n"
            + markdown_table(
                ev.select(
                    "step",
                    "replicate_min",
                    "replicate_max",
                    "replicate_spread",
                    "eager",
                    "fused",
                    "control",
                    "fused_minus_eager",
                    "control_minus_eager",
                    "outside_envelope",
                )
            )
        )
    long = curves.unpivot(
        index=["run", "step"], on=["train_loss", "grad_norm"], variable_name="metric", value_name="value"
    ).drop_nulls("value")
    other = (
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
    parts.append(
        "## Train loss and grad norm\n\n"
        + report.chart(exp.slug, "curves", other, "Train loss and grad norm of every run")
    )
    return "\n".join(parts)


def diagnostics(report: Report, exp: Experiment) -> str:
    parts = []
    layers = report.table("divergence_per_layer")
    if layers is not None:
        long = (
            layers.select(
                "layer_index", "layer", pl.col("eager_err").alias("eager"), pl.col("fused_err").alias("fused")
            )
            .unpivot(index=["layer_index", "layer"], variable_name="path", value_name="error vs fp64")
            .filter(pl.col("error vs fp64") > 0)
        )  # log scale: exact layers have no point
        chart = (
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
            + report.chart(exp.slug, "layers", chart, "Error growth layer by layer, eager vs fused")
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
        counts = fuzz.group_by("class", "dtype").agg(pl.len().alias("graphs")).sort("class", "dtype")
        chart = (
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
        bad = fuzz.filter(pl.col("class") != "ok").select("seed", "dtype", "class", "ops", "shrunk_ops", "reproducer")
        parts.append(
            "## Differential graph fuzzer\n\n"
            + report.chart(exp.slug, "fuzz", chart, "Outcome classes of the fuzzed graphs")
            + ("\n" + markdown_table(bad) if bad.height else "\nEvery fuzzed graph was classified ok.\n")
        )
    tol = report.table("measured_tolerances")
    if tol is not None:
        pts = tol.filter(pl.col("atol") > 0)
        lo = float(min(pts["atol"].min(), pts["matrix_atol"].min()))
        hi = float(max(pts["atol"].max(), pts["matrix_atol"].max()))
        diag = (
            alt.Chart(pl.DataFrame({"x": [lo, hi]})).mark_line(color="gray", strokeDash=[4, 4]).encode(x="x:Q", y="x:Q")
        )
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
        parts.append(
            "## Measured tolerances vs the hand-written matrix\n\nAbove the diagonal the matrix is too tight for what was observed.\n\n"
            + report.chart(
                exp.slug,
                "tolerances",
                (diag + scatter).properties(width=420, height=320, title="Measured vs hand-written absolute tolerance"),
                "Measured p99.9 error against the decision matrix",
            )
        )
    return "\n".join(parts)


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
        from .. import planted_bug_harness as harness

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
