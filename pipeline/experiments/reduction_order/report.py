"""C2: the report page's sections, built from stored values only."""

import altair as alt
import polars as pl

from ...experiment import Experiment
from ...pagekit.blocks import opening, select
from ...pagekit.render import Report, markdown_table


def deliverable(report: Report, exp: Experiment) -> str:
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
    pick = select("output", outputs, "output ")
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
    long = report.table("c2_long_reductions")
    if long is not None:
        parts.append(c2_long_section(long))
    return opening(exp, "\n".join(parts))


def c2_long_section(long: pl.DataFrame) -> str:
    """The long reductions: one row per distribution, row and version."""
    terms = int(long["terms"][0]) if long.height else 0
    table = long.select(
        "distribution",
        "row",
        "version",
        "threads",
        pl.col("relative_error").map_elements(lambda v: f"{v:.3g}", return_dtype=pl.String).alias("|error| / sum|x|"),
        pl.col("bound_prob").map_elements(lambda v: f"{v:.4g}", return_dtype=pl.String).alias("probabilistic bound"),
        pl.col("margin_prob").round(4).alias("margin"),
        pl.col("bound").map_elements(lambda v: f"{v:.3g}", return_dtype=pl.String).alias("deterministic bound"),
        pl.col("bit_equal_eager").alias("bits = eager"),
        pl.col("bit_equal_one_thread").alias("bits = one thread"),
        pl.col("seconds").round(3),
    )
    return (
        f"### Long reductions ({terms:,} fp32 terms per row)\n\n"
        "fp32 `sum` of long rows from U(-1, 1) and U(0, 1) by eager, the fused default (every thread) and the fused "
        "path on one thread, against the fp64 sum. Per-lane or per-thread partial sums that are not cascaded show at "
        "this length, not at 16,384 terms. The deterministic bound gamma_(n-1)(u32) * sum|x| is undefined (inf) once "
        "(n - 1) u32 >= 1, so the margin is against the probabilistic bound (lambda chosen for every row and version "
        "together); margin <= 1 is within.\n\n" + markdown_table(table)
    )


def details(report: Report, exp: Experiment) -> str:
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
    parts.append(c2_accuracy_section(report, exp))
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


def c2_accuracy_section(report: Report, exp: Experiment) -> str:
    """The paired test of the framework's versions against eager and the order thesis, as their checks
    stored them (verdict, reason and the per-version table from the check's metadata; nothing re-judged)."""
    checks = {c.name: c for c in report.checks_of(exp.group) if c.state != "not yet run"}
    parts = []
    accuracy = checks.get("c2_fused_not_less_accurate_than_eager")
    if accuracy is not None:
        m = accuracy.metadata
        # The rule's level as the claim stored it with its verdict (the page loads no check module).
        confidence = m.get("rule.confidence")
        level = f"{1 - confidence:g}" if isinstance(confidence, float) else "the rule's level"
        parts.append(
            "## The framework's versions against eager, row by row\n\n"
            f"**{accuracy.label}**: {m.get('reason', '')}\n\n"
            "Per fused version, paired with eager on the same rows: rows where its fp16 sum is farther from the fp64 "
            "sum than eager's (worse), closer (better) or equally far (tied), the exact one-sided sign test and its "
            f"Holm adjustment over the versions (contradicted at {level}). `median_ulp` and `max_ulp` are the version's "
            "errors in fp16 ULPs of the fp64 sum; `bound_ulp_median` is the median derived bound in the same units "
            f"(eager's median error: {m.get('eager_median_ulp', float('nan')):.3g} ULP, its bound's median: "
            f"{m.get('bound_ulp_median', float('nan')):.3g} ULP), which is why the bound alone cannot see a version "
            "that rounds its partials to fp16.\n\n" + str(m.get("table", ""))
        )
    order = checks.get("c2_order_changes_accumulator")
    if order is not None:
        m = order.metadata
        parts.append(
            "## Does the framework's order show in the fp32 accumulator?\n\n"
            f"**{order.label}**: {m.get('reason', '')}. Judged on {m.get('versions_judged', '?')} framework-produced "
            f"versions ({m.get('pairs', '?')} pairs); the {m.get('pairs_with_a_hand_written_tiling', '?')} pairs that "
            "include a hand-written tiling are shown, not judged: "
            f"{m.get('pairs_with_a_hand_written_tiling_differing', '?')} of them differ.\n"
        )
    return "\n".join(parts)
