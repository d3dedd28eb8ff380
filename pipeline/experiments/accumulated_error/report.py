"""B: the report page's sections, built from stored values only."""

import json
from collections import Counter
from typing import Any

import altair as alt
import polars as pl

from ...experiment import Experiment
from ...pagekit.blocks import PATH_COLORS, PATH_DASHES, error_scale, opening, select
from ...pagekit.render import Report, markdown_table
from ...scalars import as_number
from .rules import ABLATION_SETS, BOOTSTRAP_RESAMPLES, CONFIDENCE, MATERIALITY_SULP

#: How a chain's verdict cell starts when the stored summary has no per-chain verdict (stored before there
#: were, e.g. an imported bundle): its rows' stored verdicts, counted, not combined.
NOT_STORED = "no chain verdict stored; its rows:"


def _rows_as_stored(verdicts: list[str]) -> str:
    counts = Counter(verdicts)
    return f"{NOT_STORED} " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))


def deliverable(report: Report, exp: Experiment) -> str:
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
        pl.col("fused_verdict").alias("_rows"),
    )
    # each chain's verdict as the summary asset stored it (the page combines no verdicts itself)
    verdicts = _stored_json(report, exp, "chain_verdicts")
    per_chain = per_chain.with_columns(
        pl.struct("chain", "_rows")
        .map_elements(lambda r: verdicts.get(r["chain"]) or _rows_as_stored(list(r["_rows"])), return_dtype=pl.String)
        .alias("verdict")
    ).drop("_rows")
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
            chart = b_cdf_chart(rows, chain, inputs)
            parts.append(
                f"### {chain}\n\n"
                + report.chart(
                    exp.slug,
                    f"deliverable-cdf-{chain}",
                    chart,
                    f"{chain}: CDF over input sets of the max scale-aware ULP error, eager vs fused (pick the input distribution)",
                )
            )
    return opening(exp, "\n".join(parts))


def details(report: Report, exp: Experiment) -> str:
    # the bound's constants are imported here: reading the registry loads only spec, report and rules
    from .bounds import FUNCTION_UNITS, LAMBDA, reduction_failure_probability

    parts = []
    summary = report.table("accumulated_error_summary")
    if summary is not None:
        parts.append(
            "## Verdict table: fused vs eager against fp64 (§3.2)\n\n"
            f"Per input set, the largest error against fp64 in *scale-aware ULPs* (ULPs of the row's largest "
            f"|fp64 reference|, see the methodology page). Per row: the P99 of that over the sets for eager and for "
            f"fused, their paired difference with its one-sided {CONFIDENCE:g} bootstrap interval "
            f"({BOOTSTRAP_RESAMPLES} resamples), the Holm-adjusted p-value of 'fused is worse by more than "
            f"{MATERIALITY_SULP:g} sULP', the sets where fused is non-finite where eager is finite, the sets where "
            f"fused is worse by more than {MATERIALITY_SULP:g} sULP, the bias test, and the verdict. Two more "
            "columns judge what that unit cannot see. *Gross sets*: sets where fused's error is beyond twice "
            "eager's worst set plus one unit; one contradicts (a fault that fires on rare inputs). Beside it, fused's "
            "worst set minus eager's worst: the headroom a healthy compiler leaves (a few hundredths of a unit at "
            "most on every healthy run measured). *Decisive elements*: where fused's own code computes the whole "
            "chain (no library call), the elements whose fp64 value is farther from a rounding midpoint than the "
            "chain's derived fp32 error bound (per element: the roundings of each step, transcendentals within "
            f"{FUNCTION_UNITS:g} fp32 units, each reduction of n terms within {LAMBDA:g} u sqrt(n-1) times the sum of "
            "its terms' magnitudes, which grows with cancellation). Any fp32 computation within that bound, in any "
            "reduction order and on any thread count, rounds such an element correctly, so fused must return the "
            "correctly rounded fp64 value there. The test counts the sets where it does not; a reduction exceeds its "
            f"bound with probability at most {reduction_failure_probability():.2g} (Azuma-Hoeffding under the "
            "independent rounding model), and the binomial tail at that rate is the p-value. The fp32 single rounding "
            "of the chain is run as the bound's own check: where it misrounds a decisive element the bound does not "
            "hold on this machine, and the row is not judged per element. The rule is stated in full under *Decision "
            "rules* above; `python -m pipeline.experiments.accumulated_error.power_study` measures what each part "
            "catches.\n\n" + _stored(report, exp, "verdicts")
        )
        parts.append(_cannot_judge(report, exp))
        parts.append(_library_bounds(report, exp))
        if "fused_unavailable" in summary.columns:
            why = sorted(set(summary["fused_unavailable"].drop_nulls().to_list()))
            if why:
                parts.append(
                    "**Not run as fused:** the compiler did not fuse these rows' chains (it ran them in torch "
                    "after failing them, or fused none of their operations), so their verdicts are inconclusive: "
                    + "; ".join(why)
                )
        if "emulate_unavailable" in summary.columns:
            why = sorted(set(summary["emulate_unavailable"].drop_nulls().to_list()))
            if why:
                parts.append(
                    "**Not measured here:** fused with faithful casts (Inductor's `emulate_precision_casts`) did "
                    "not run, so its verdicts are inconclusive: " + "; ".join(why)
                )
        parts.append(
            report.chart(
                exp.slug,
                "fused-vs-eager",
                b_fused_vs_eager_chart(summary, MATERIALITY_SULP),
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
        parts.append(b_fusion_table(summary))
    cex = report.table("accumulated_error_counterexamples")
    if cex is not None:
        parts.append(_b_counterexamples(cex))
    ablation = report.table("fusion_ablation")
    if ablation is not None and ablation.height:
        parts.append(_b_ablation(ablation, ABLATION_SETS))
    switch = report.value("fusion_switch_list")
    if switch is not None:
        parts.append(b_switch_list(switch))
    return "\n".join(parts)


def _summary_entry(report: Report, exp: Experiment, key: str) -> Any:
    """One metadata entry the summary asset stored with its judgment; None when it has none."""
    record = next((a for a in report.assets_of(exp.group) if a.key == "accumulated_error_summary"), None)
    return None if record is None else record.metadata.get(key)


def _stored(report: Report, exp: Experiment, key: str) -> str:
    """A table the summary asset stored with its judgment (the page reads it, never re-derives it)."""
    text = _summary_entry(report, exp, key)
    return str(text) if text else f"_(the stored summary has no `{key}` table: rematerialize B)_\n"


def _stored_json(report: Report, exp: Experiment, key: str) -> dict[str, Any]:
    """A JSON object the summary asset stored with its judgment (the report keeps it as JSON text);
    empty when the stored summary has none."""
    text = _summary_entry(report, exp, key)
    return json.loads(text) if isinstance(text, str) and text else {}


def _cannot_judge(report: Report, exp: Experiment) -> str:
    """The rows the element test cannot judge, said in words; the rows are the stored ones."""
    from .rules import BIAS_MARGIN_SULP

    return (
        "### Rows the element test cannot judge\n\n"
        "Where the chain's fp32 error bound is wider than half a ULP of the dtype at every element (long reductions "
        "over near-cancelling values in fp16), no element is decisive: a legitimate reduction order may round any "
        "of them either way, so the element test has nothing to judge. The tail and bias tests alone then pass "
        "faults within a unit of the row's scale (a wrong epsilon, a one-pass variance, rounding toward zero, a "
        "3x error were all 'supported' on layernorm_long / near_cancellation / float16), so such a row is "
        "inconclusive, never supported. It can still be contradicted: its bias test takes a margin derived from "
        "the row's own rounding instead of the fixed "
        f"{BIAS_MARGIN_SULP:g} sULP, twice the chain's fp32 bound averaged over a set's elements (in sULP, the bias "
        "test's unit; never below the fixed margin). Each of fused and eager lies within the bound of the exact "
        "value before its final rounding, and rounding to nearest moves a value's expected rounded value by no "
        "more than that, so their magnitude biases differ by at most that much without a fault. The same holds "
        "for a row whose bound fails its own check (the fp32 single rounding misrounds a decisive element).\n\n"
        + _stored(report, exp, "cannot_judge")
    )


def _library_bounds(report: Report, exp: Experiment) -> str:
    """The absolute bound of the library chains, stated; its figures are the stored ones."""
    from .library_bounds import LIBRARY_BOUNDS

    return (
        "### Library chains: an absolute bound against fp64\n\n"
        f"The chains that leave a matmul or attention to a library call ({', '.join(LIBRARY_BOUNDS)}) get their "
        "output rounded to the 16-bit dtype at the library's boundary, so no element has to be correctly rounded. "
        "They are judged instead against an absolute bound per element, derived for any legitimate computation: the "
        "library matmul within gamma_K sum_k |a_ik||b_kj| (deterministic, any summation order; gamma_K = K u / "
        "(1 - K u), u = 2^-24), its output and a fused attention kernel's probabilities each rounded to the dtype "
        "once (u16 of their size: 2^-11 for fp16, 2^-8 for bf16), the fp32 epilogue (bias add, scale, mask, layer "
        "norm or softmax, each propagated to first order with its own fp32 rounding bound), the second matmul, and "
        "the final rounding (half a ULP of the output). An element beyond it is something no fp32-accumulating "
        "library produces; the epilogue's reductions are probabilistic as above, so the binomial test judges the "
        "sets with such an element. Fully masked rows (every key masked by the additive -1e4) have a defined answer, "
        "the finite softmax average fp64 and eager give: NaN, zeros or an infinity there contradicts. Admitting "
        "every legitimate 16-bit boundary costs width: the median bound below is that many half-ULPs of each "
        "element's own output, so a fault smaller than a 16-bit rounding of the scores or probabilities (an exp "
        "error below u16, an error three times the rounded result's, a stochastic final rounding) stays inside it; "
        "`python -m pipeline.experiments.accumulated_error.power_study` reports which faults it catches and which it "
        "declares harmless, with numbers.\n\n" + _stored(report, exp, "element_bounds")
    )


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
                "eager:Q",
                scale=error_scale(points["eager"], points["fused"]),
                title="eager: P99 over sets of max error (scale-aware ULP)",
            ),
            y=alt.Y(
                "fused:Q",
                scale=error_scale(points["eager"], points["fused"]),
                title="fused: P99 over sets (scale-aware ULP)",
            ),
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


def b_fusion_table(summary: pl.DataFrame) -> str:
    """How the fused path compiled each chain and dtype: generated kernels, library calls, and the
    fused attention kernel a pattern rewrite put in (the rewrite fired where that column names one)."""
    cols = [c for c in ("fused_kernel_count", "fused_extern_calls", "fused_library_calls") if c in summary.columns]
    if not cols:
        return ""
    table = (
        summary.group_by("chain", "dtype", maintain_order=True)
        .agg(pl.col(c).first() for c in cols)
        .rename(
            {
                "fused_kernel_count": "generated kernels",
                "fused_extern_calls": "library calls",
                "fused_library_calls": "fused attention kernel (rewrite fired)",
            },
            strict=False,
        )
    )
    if "fused attention kernel (rewrite fired)" in table.columns:
        table = table.with_columns(
            pl.col("fused attention kernel (rewrite fired)").fill_null("").replace("", "no rewrite")
        )
    return (
        "### How each chain was fused\n\nFrom the fused path's generated code: the kernels it generated, the "
        "library kernels it calls, and the fused attention kernel that Inductor's attention pattern matcher "
        "substitutes for matmul, scale, mask, softmax and matmul when the graph has the form it knows (heads "
        "permuted, scores divided by the scale, an additive mask).\n\n" + markdown_table(table)
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


def b_cdf_chart(rows: pl.DataFrame, chain: str, inputs: list[str]) -> alt.FacetChart:
    """One chain's CDF over input sets of the per-set max error, a panel per dtype; the error axis
    is symmetric-log, so a panel whose sets are all exact (error 0) still has its lines."""
    pick = select("distribution", inputs, "input distribution ")
    return (
        alt.Chart(rows)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X(
                "bin_hi:Q",
                scale=error_scale(rows["bin_hi"]),  # zero-error sets stay on the chart
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
