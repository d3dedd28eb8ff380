"""The opening section of each experiment page: the test plan's deliverable, in the plan's own form.

A reader who knows the plan finds at the top of every page exactly what the plan promised (A's run count /
unique hash count / max ULP table, C1's ULP = 0 / 1 / >= 2 percentages, ...). The verdict and its rule
follow, then the details. Every figure here is read from a stored table; nothing is recomputed.
"""

from collections.abc import Callable

import altair as alt
import polars as pl

from ..scalars import as_number
from ..verdicts import combine
from .claims import Experiment
from .render import Report, fmt, markdown_table

#: What the test plan asks each experiment to deliver, in its words.
PLAN_DELIVERABLE = {
    "S": "toolkit interface and a unit-test report over fp16 / bf16 / fp32 and every IEEE value class",
    "A": "table of run count / unique hash count / max ULP diff, expected 1000 / 1 / 0",
    "C1": "ULP = 0 / ULP = 1 / ULP >= 2 percentages and the ULP difference histogram",
    "C2": "version x version output ULP difference matrix and the comparison table with fp64",
    "C3": "table of iteration count vs last-bit difference and the two paths' ULP histograms",
    "D": "check table (subgraph x dtype x shape) and the counterexample list",
    "B": "one summary-table row and one error-distribution comparison chart per operator chain",
    "E": "loss (train / eval), grad norm and perplexity curves and the final-metric difference table",
}

#: Colours shared by every eager-vs-fused chart.
PATH_COLORS = alt.Scale(domain=["eager", "fused", "fused_emulate"], range=["#1f77b4", "#d62728", "#ff9896"])
PATH_DASHES = alt.Scale(domain=["eager", "fused", "fused_emulate"], range=[[1, 0], [6, 3], [2, 2]])


def _opening(exp: Experiment, body: str) -> str:
    return f"## Deliverable\n\n*Test plan:* {PLAN_DELIVERABLE[exp.id]}.\n\n{body}\n"


def _select(name: str, options: list[str], label: str) -> alt.Parameter:
    """A variable parameter bound to a dropdown: one chart shows one of many combinations."""
    return alt.param(name=name, value=options[0], bind=alt.binding_select(options=options, name=label))


def toolkit(report: Report, exp: Experiment) -> str:
    table = report.table("toolkit_selfcheck")
    if table is None:
        return ""
    grid = table.with_columns(pl.when(pl.col("passed")).then(pl.lit("pass")).otherwise(pl.lit("FAIL")).alias("r"))
    grid = grid.pivot(on="value_class", index="dtype", values="r", aggregate_function="first")
    failed = table.filter(~pl.col("passed")).height
    return _opening(
        exp,
        (
            "`bit_equal`, `ulp_diff`, `error_stats` and `fp64_reference` are exported by `precisionkit` (interface on the "
            "[methodology](../methodology.md) page). Self-check of every dtype x IEEE value class, run with this "
            f"materialization: **{table.height - failed} of {table.height} pass**.\n\n" + markdown_table(grid)
        ),
    )


def determinism(report: Report, exp: Experiment) -> str:
    summary = report.table("determinism_summary")
    if summary is None:
        return ""
    most = summary.filter(pl.col("round") == "round1")["run_count"].max()
    expected_runs = 0 if most is None else int(as_number(most, "determinism_summary round1 run_count"))
    rows = summary.select(
        "dtype",
        "round",
        pl.col("run_count").alias("run count"),
        pl.col("unique_output_hashes").alias("unique hash count"),
        pl.col("max_ulp_diff_across_runs").alias("max ULP diff"),
        *(
            [pl.col("artifact_hash_equal_across_cold_start").alias("kernel binary hash = H_k0")]
            if "artifact_hash_equal_across_cold_start" in summary.columns
            else []
        ),
        pl.col("kernel_hash_equal_across_cold_start").alias("kernel source hash = round 1's"),
        pl.col("outputs_equal_round1").alias("outputs = round 1"),
    )
    ok = summary.filter((pl.col("unique_output_hashes") == 1) & (pl.col("max_ulp_diff_across_runs") == 0)).height
    cold_run = summary.filter(pl.col("round") == "round2_cold").height > 0
    return _opening(
        exp,
        (
            f"Expected per round: **{expected_runs} / 1 / 0** ({expected_runs} runs in the `{report.profile}` profile; "
            f"the plan's 1000 in `seed`). **{ok} of {summary.height}** rounds show one hash and 0 ULP. `round2_cold` is a "
            "fresh process with an empty compiler cache; `cold_threads_*` changes the thread count, where a different "
            "kernel is expected."
            + ("" if cold_run else f" The `{report.profile}` profile runs no cold-start round.")
            + "\n\n"
            + markdown_table(rows)
        ),
    )


def instruction_selection(report: Report, exp: Experiment) -> str:
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
        pick = _select("comparison", comparisons, "comparison ")
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
    return _opening(exp, "\n".join(parts))


def reduction_order(report: Report, exp: Experiment) -> str:
    matrix = report.table("c2_ulp_matrix")
    if matrix is None:
        return ""
    parts = []
    upper = matrix.filter(pl.col("scope") == "pool")
    # The stored matrix holds each pair once; the ULP distance is symmetric, so show both halves.
    pool = pl.concat([upper, upper.rename({"version_a": "version_b", "version_b": "version_a"}).select(upper.columns)])
    order = upper["version_a"].unique(maintain_order=True).to_list()
    order += [v for v in upper["version_b"].unique(maintain_order=True).to_list() if v not in order]
    outputs = pool["output"].unique(maintain_order=True).to_list()
    pick = _select("output", outputs, "output ")
    base = alt.Chart(pool).encode(
        x=alt.X("version_b:N", sort=order, title=None), y=alt.Y("version_a:N", sort=order, title=None)
    )
    heat = (
        (
            base.mark_rect().encode(
                color=alt.Color("ulp_max:Q", title="max ULP", scale=alt.Scale(scheme="oranges", type="symlog")),
                tooltip=[
                    "version_a",
                    "version_b",
                    "output",
                    "rows",
                    "differ_rows",
                    "ulp_max",
                    alt.Tooltip("ulp_mean:Q", format=".3f"),
                ],
            )
            + base.mark_text(fontSize=10).encode(text="ulp_max:Q")
        )
        .add_params(pick)
        .transform_filter(alt.datum.output == pick)
        .properties(width=360, height=360, title="C2: max ULP difference between versions over the row pool (ULP)")
    )
    parts.append(
        report.chart(
            exp.slug,
            "deliverable-matrix",
            heat,
            "Version x version matrix: the largest ULP difference between two versions' sums over "
            "the pool rows (out16: fp16 result, acc32: fp32 accumulator)",
        )
    )
    errors = report.table("c2_error_vs_fp64")
    if errors is not None:
        table = errors.filter(pl.col("output") == "out16").select(
            "version",
            "family",
            pl.col("ulp_mean").round(4).alias("mean ULP vs fp64"),
            pl.col("ulp_max").round(4).alias("max ULP vs fp64"),
            pl.col("closest_fraction").round(3).alias("closest to fp64 (share of rows)"),
            pl.col("within_band_fraction").round(3).alias("within bound (share)"),
            pl.col("margin_max").round(4).alias("largest margin"),
        )
        parts.append("### Comparison with fp64 (fp16 result)\n\n" + markdown_table(table))
    return _opening(exp, "\n".join(parts))


def rsqrt_iterations(report: Report, exp: Experiment) -> str:
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
    parts = [markdown_table(rows)]
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
            pick = _select("path_b", others, "path B ")
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
    return _opening(exp, "\n".join(parts))


def _ulp_text(value: int | None) -> str:
    # The check table stores a non-finite mismatch as the largest int64.
    return "non-finite mismatch" if value is not None and value >= 2**62 else fmt(value)


def data_movement(report: Report, exp: Experiment) -> str:
    table = report.table("data_movement_check_table")
    if table is None:
        return ""
    kind = (
        pl.when(pl.col("has_implicit_computation"))
        .then(pl.lit("hides arithmetic"))
        .otherwise(pl.lit("pure data movement"))
    )
    cells = table.group_by("subgraph", "dtype", maintain_order=True).agg(
        kind.first().alias("kind"),
        (pl.col("bit_equal").sum().cast(pl.String) + " / " + pl.len().cast(pl.String)).alias("bit-exact"),
    )
    check = cells.pivot(on="dtype", index=["subgraph", "kind"], values="bit-exact", aggregate_function="first")
    bad = table.filter(~pl.col("bit_equal"))
    pure_bad = bad.filter(~pl.col("has_implicit_computation")).height
    # A list, not a table: each counterexample's explanation is prose.
    items = [
        f"- **{r['subgraph']}**, {r['dtype']}, shape {r['shape']}, {r['layout']}"
        f"{' (hides arithmetic)' if r['has_implicit_computation'] else ''}: "
        f"max ULP {_ulp_text(r['ulp_max'])}, {fmt(r['mismatched_elements'])} element(s) differ. {fmt(r['notes'])}"
        + (f" Cause: `{r['cause_op']}` ({fmt(r.get('cause_path'))})." if r.get("cause_op") else "")
        for r in bad.iter_rows(named=True)
    ]
    return _opening(
        exp,
        (
            "### Check table\n\nBit-exact rows (shapes x layouts) of eager vs fused, per subgraph and dtype.\n\n"
            + markdown_table(check)
            + f"\n### Counterexamples\n\n**{bad.height}** row(s) not bit-exact, {pure_bad} of them pure data movement.\n\n"
            + ("\n".join(items) + "\n" if items else "None.\n")
        ),
    )


def accumulated_error(report: Report, exp: Experiment) -> str:
    summary = report.table("accumulated_error_summary")
    if summary is None:
        return ""
    per_chain = summary.group_by("chain", maintain_order=True).agg(
        pl.len().alias("dtype x inputs"),
        pl.col("sets").max().alias("sets each"),
        pl.col("eager_sulp_max_p99").max().round(3).alias("eager P99 (sULP, worst)"),
        pl.col("fused_sulp_max_p99").max().round(3).alias("fused P99 (sULP, worst)"),
        pl.col("eager_sulp_max_max").max().round(3).alias("eager max (sULP)"),
        pl.col("fused_sulp_max_max").max().round(3).alias("fused max (sULP)"),
        pl.col("fused_p99_difference").max().round(3).alias("largest P99 difference"),
        pl.col("fused_verdict").alias("_verdicts"),
    )
    per_chain = per_chain.with_columns(
        pl.col("_verdicts").map_elements(lambda v: combine(v.to_list()), return_dtype=pl.String).alias("verdict")
    ).drop("_verdicts")
    parts = [
        "One row per operator chain: the worst row over dtype x input distribution (scale-aware ULP, sULP: ULPs of "
        "the row's largest |fp64 reference|; see the methodology page). Every row is in the verdict table below.\n",
        markdown_table(per_chain),
    ]
    dist = report.table("accumulated_error_distributions")
    if dist is not None:
        cdf = dist.filter(pl.col("metric") == "sulp_max")
        for chain in cdf["chain"].unique(maintain_order=True).to_list():
            rows = cdf.filter(pl.col("chain") == chain)
            inputs = sorted(rows["distribution"].unique().to_list(), key=lambda d: (d != "normal", d))
            pick = _select("distribution", inputs, "input distribution ")
            chart = (
                alt.Chart(rows)
                .mark_line(interpolate="step-after")
                .encode(
                    x=alt.X(
                        "bin_hi:Q",
                        scale=alt.Scale(type="log"),
                        axis=alt.Axis(tickCount=5, labelOverlap=True),
                        title="per-set max error (scale-aware ULP)",
                    ),
                    y=alt.Y("cdf:Q", title="share of input sets (CDF)", scale=alt.Scale(domain=[0, 1])),
                    color=alt.Color("path:N", scale=PATH_COLORS, title="path"),
                    # Dashes keep both lines visible where fused equals eager.
                    strokeDash=alt.StrokeDash("path:N", scale=PATH_DASHES, legend=None),
                    tooltip=[
                        "dtype",
                        "distribution",
                        "path",
                        alt.Tooltip("bin_hi:Q", format=".4g"),
                        alt.Tooltip("cdf:Q", format=".3f"),
                    ],
                )
                .add_params(pick)
                .transform_filter(alt.datum.distribution == pick)
                .properties(width=250, height=170)
                .facet(facet=alt.Facet("dtype:N", title=None), columns=2)
                .properties(title=f"B: {chain}, CDF of each input set's max error against fp64")
            )
            parts.append(
                f"### {chain}\n\n"
                + report.chart(
                    exp.slug,
                    f"deliverable-cdf-{chain}",
                    chart,
                    f"{chain}: CDF over input sets of the max scale-aware ULP error, eager vs fused (pick the input distribution)",
                )
            )
    return _opening(exp, "\n".join(parts))


def training(report: Report, exp: Experiment) -> str:
    curves = report.table("training_curves")
    if curves is None:
        return ""
    parts = []
    metrics = [m for m in ("train_loss", "eval_loss", "grad_norm", "perplexity") if m in curves.columns]
    long = curves.unpivot(
        index=["run", "role", "step"], on=metrics, variable_name="metric", value_name="value"
    ).drop_nulls("value")
    runs = long["run"].unique(maintain_order=True).to_list()
    main = [r for r in runs if r.endswith(("_eager", "_fused"))]
    colors = ["#1f77b4" if r.endswith("_eager") else "#d62728" for r in main]
    dashes = [[1, 0] if r.endswith("_eager") else [6, 3] for r in main]

    def curve(metric: str) -> alt.LayerChart:
        rows = long.filter(pl.col("metric") == metric)
        x = alt.X("step:Q", title="step")
        y = alt.Y("value:Q", title=metric.replace("_", " "), scale=alt.Scale(zero=False))
        tooltip = ["run", "role", "step", alt.Tooltip("value:Q", format=".5f")]
        # Replicates and the control in grey underneath; eager and fused on top (fused dashed, so both show).
        others = (
            alt.Chart(rows.filter(~pl.col("run").is_in(main)))
            .mark_line(color="#bdbdbd", strokeWidth=1)
            .encode(x=x, y=y, detail="run:N", tooltip=tooltip)
        )
        ours = (
            alt.Chart(rows.filter(pl.col("run").is_in(main)))
            .mark_line(point=metric != "train_loss", strokeWidth=1.8)
            .encode(
                x=x,
                y=y,
                color=alt.Color("run:N", scale=alt.Scale(domain=main, range=colors), title="run"),
                strokeDash=alt.StrokeDash("run:N", scale=alt.Scale(domain=main, range=dashes), legend=None),
                tooltip=tooltip,
            )
        )
        return (others + ours).properties(width=260, height=150, title=metric.replace("_", " "))

    charts = [curve(m) for m in metrics]
    grid = alt.vconcat(*[alt.hconcat(*charts[i : i + 2]) for i in range(0, len(charts), 2)]).properties(
        title="E: eager (blue) vs fused (red) over training"
    )
    parts.append(
        report.chart(
            exp.slug,
            "deliverable-curves",
            grid,
            "Train and eval loss, grad norm and perplexity per run (grey: eager data-order replicates "
            "and the one-ULP control)",
        )
    )
    final = report.table("training_final_metrics")
    if final is not None:
        parts.append(
            "### Final-metric difference\n\n"
            + markdown_table(
                final.select(
                    "precision", "metric", "step", "eager", "fused", "fused_minus_eager", "rel_diff", "replicate_spread"
                )
            )
        )
    return _opening(exp, "\n".join(parts))


DELIVERABLES: dict[str, Callable[[Report, Experiment], str]] = {
    "S": toolkit,
    "A": determinism,
    "C1": instruction_selection,
    "C2": reduction_order,
    "C3": rsqrt_iterations,
    "D": data_movement,
    "B": accumulated_error,
    "E": training,
}
