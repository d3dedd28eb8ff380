"""E: the report page's sections, built from stored values only."""

from collections.abc import Mapping
from typing import Any

import altair as alt
import polars as pl

from ...experiment import Experiment
from ...pagekit.blocks import opening
from ...pagekit.render import Report, markdown_table
from .rules import (
    CONFIDENCE,
    EVAL_POINT_COLUMNS,
    JUDGED_METRICS,
    MIN_ORDERS,
    MIN_ORDERS_TO_CONTRADICT,
    MIN_POINTS,
    REPLICATE_ORDERS,
    STATISTICS,
    margin_text,
)


def deliverable(report: Report, exp: Experiment) -> str:
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
            "Train and eval loss, grad norm and perplexity per run (coloured: eager and fused on data order A; "
            "grey: eager and fused on the other data orders and the one-ULP controls)",
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
    return opening(exp, "\n".join(parts))


def details(report: Report, exp: Experiment) -> str:
    curves = report.table("training_curves")
    if curves is None:
        return ""
    deviation = report.table("training_deviation")
    claim = next((c for c in report.checks_of(exp.group) if c.name == "fused_learns_like_eager"), None)
    judged = claim is not None and claim.state != "not yet run"
    result = f"{claim.label}: {claim.metadata.get('reason', '')}" if judged and claim is not None else None
    parts = ["## Rule (declared before the runs)\n\n" + markdown_table(e_rule_table(result))]
    if judged and claim is not None:
        parts.append(e_tests_section(claim.metadata))
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


def e_tests_section(meta: Mapping[str, Any]) -> str:
    """The rule's tests, one row per metric x statistic, as the claim check stored them."""
    tests = meta.get("tests")
    if not tests:
        return "## Paired tests\n\nNo test was stored (fewer than two data orders with finite curves)."
    return (
        f"## Paired tests ({meta.get('orders', '?')} data orders, {meta.get('judged_points', '?')} judged eval points)"
        "\n\nPer metric and statistic: the mean over data orders of fused - eager on the same order (grad norm "
        f"relative to eager), its sd, its one-sided {CONFIDENCE:g} bounds, the margin ({margin_text()}), the TOST "
        "p-value of equivalence, the p-value of 'beyond the margin' before and after Holm, the one-ULP controls' "
        "mean and sd of control - eager and whether they are shown within the margin, and the eager runs' sd over "
        "data orders for scale.\n\n" + str(tests)
    )


def e_rule_table(result: str | None = None) -> pl.DataFrame:
    """E's decision rule, parameter by parameter, with the claim's ``result`` as the last row when judged."""
    rule_rows = [
        (
            "data orders",
            f"{len(REPLICATE_ORDERS)} ({', '.join(REPLICATE_ORDERS)}); each trains eager, fused and the one-ULP control "
            "from the same initial weights",
        ),
        ("judged", f"{', '.join(JUDGED_METRICS)} at every eval step after step 0"),
        (
            "statistics of fused - eager",
            "final value, mean over the points (area), least-squares drift over the span; grad norm relative to eager",
        ),
        ("margin (fixed before the runs)", margin_text()),
        ("noise", "the paired differences' own sd over data orders (t tests, K - 1 degrees of freedom)"),
        (
            "contradicted",
            f"non-finite fused where eager is finite, or any t test of '|mean| <= margin' rejected after Holm over "
            f"{len(JUDGED_METRICS) * len(STATISTICS)} tests (family-wise {CONFIDENCE:g}), >= {MIN_ORDERS_TO_CONTRADICT} "
            "orders",
        ),
        (
            "supported",
            f"every test equivalent (TOST at {1 - CONFIDENCE:g}) and every test of the one-ULP controls too, "
            f">= {MIN_ORDERS} orders, >= {MIN_POINTS} points",
        ),
        (
            "inconclusive",
            "otherwise (too few orders or points, a test neither beyond nor within, or controls missing or not shown "
            "within the margin)",
        ),
        ("finding", "exact rank test of |fused - eager| against |control - eager| (final eval loss) at p <= 0.05"),
    ]
    if result is not None:
        rule_rows.append(("result", result))
    return pl.DataFrame(rule_rows, schema=["parameter", "value"], orient="row")


def _e_final_metrics(final: pl.DataFrame) -> str:
    return (
        "## Final-metric difference (last step)\n\n`eager`, `fused` and `control` are data order A's; "
        "`paired_mean_diff` and `paired_sd_diff` are fused - eager over every data order; `replicate_spread` is max - "
        "min over the eager runs; `control_minus_eager` is what a one-ULP nudge of the initial weights alone does.\n\n"
        + markdown_table(
            final.select(
                "precision",
                "metric",
                "step",
                "eager",
                "fused",
                "fused_minus_eager",
                "paired_mean_diff",
                "paired_sd_diff",
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
    main, ev = e_judged_eval(deviation)
    return [
        "## Eval-loss curve against the replicate band\n\n"
        + report.chart(
            exp.slug,
            "eval-band",
            e_eval_band_chart(ev, main),
            f"Eval loss of eager, fused and the one-ULP control on data order A over the range of the {len(REPLICATE_ORDERS)} "
            "eager runs' data orders, at the judged eval points (step 0 is not judged: every run starts from the same init)",
        ),
        report.chart(exp.slug, "deviation", e_deviation_chart(ev), e_deviation_caption(ev)),
        "## Eval-loss points\n\n" + markdown_table(ev.select(EVAL_POINT_COLUMNS)),
    ]


def e_eval_band_chart(ev: pl.DataFrame, main: str) -> alt.LayerChart:
    """Eval loss of eager, fused and the control (order A) over the eager runs' range over data orders."""
    lines_long = (
        ev.select("step", "eager", "fused", "control")
        .unpivot(index="step", variable_name="curve", value_name="eval_loss")
        .drop_nulls("eval_loss")
    )
    colors = alt.Scale(domain=["eager", "fused", "control"], range=["#1f77b4", "#d62728", "#2ca02c"])
    x = alt.X("step:Q", title="step")
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
    return (band + lines).properties(
        width=620, height=260, title=f"E: eval loss, {main} (band: eager min-max over data orders)"
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
    """The deviation chart's caption, with fused - eager over every data order at the last point."""
    caption = (
        "Fused and control minus eager on data order A at each judged eval point; gray: eager min-max relative to eager"
    )
    last = ev.tail(1).row(0, named=True) if ev.height else {}
    if last.get("paired_mean_diff") is None:
        return caption
    sd = last.get("paired_sd_diff")
    spread = f" (sd {sd:.3g})" if sd is not None else ""
    return (
        caption
        + f"; at the last point fused - eager averages {last['paired_mean_diff']:+.3g}{spread} over the data orders"
    )


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
