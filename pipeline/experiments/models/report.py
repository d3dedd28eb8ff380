"""M's page: the model table (model x dtype: eager and fused error against fp64, the verdict, same()'s
verdict, the first divergent module), then the disagreements, the divergence tables and the evidence."""

import altair as alt
import polars as pl

from ...experiment import Experiment
from ...pagekit.render import Report, collapsed, markdown_table
from .rules import BOOTSTRAP_RESAMPLES, CONFIDENCE, MATERIALITY_SULP, MIN_INDEPENDENT_UNITS, same_statement

BEYOND = (
    '!!! note "Beyond the test plan"\n'
    "    The plan's tasks judge hand-written operator chains. M asks the same question of models engineers ship: "
    "architectures from `transformers` built from their configs with seeded random weights (no download), and any "
    "workload you register with `FUSION_WORKLOADS=module:NAME` (see the README).\n"
)


def model_table(verdicts: pl.DataFrame) -> pl.DataFrame:
    return verdicts.select(
        "model",
        "dtype",
        pl.col("eager_p99").round(3).alias("eager P99 (sULP)"),
        pl.col("fused_p99").round(3).alias("fused P99 (sULP)"),
        pl.col("difference").round(3).alias("difference"),
        pl.col("ci_upper").round(3).alias("CI high"),
        *[pl.col(c) for c in ("clusters", "resamples") if c in verdicts.columns],
        pl.col("verdict"),
        pl.col("same_verdict").alias("same()"),
        pl.col("first_divergent_module").fill_null("—").alias("first divergent module"),
        pl.col("graph_breaks").alias("graph breaks"),
        pl.col("error").alias("invalid because"),
    )


def deliverable(report: Report, exp: Experiment) -> str:
    verdicts = report.table("model_verdicts")
    if verdicts is None:
        return ""
    return (
        "## Deliverable\n\n"
        + BEYOND
        + "\nOne row per model x dtype: eager's and fused's P99 error per output unit against an fp64 re-execution "
        "of the same module (scale-aware ULP), the paired difference and its one-sided "
        f"{CONFIDENCE:g} upper bound, M's verdict (materiality {MATERIALITY_SULP:g} sULP, Holm over the table), "
        "what PyTorch's own accuracy check `same()` says on the same outputs, and, where fused is worse or same() "
        "fails, the first submodule whose error departs.\n\n" + markdown_table(model_table(verdicts)) + "\n"
    )


def _chart(verdicts: pl.DataFrame) -> alt.LayerChart:
    data = verdicts.filter(pl.col("eager_p99").is_not_null()).select(
        "model", "dtype", "eager_p99", "fused_p99", "verdict"
    )
    points = (
        alt.Chart(data)
        .mark_point(filled=True, size=70)
        .encode(
            x=alt.X("eager_p99:Q", scale=alt.Scale(type="symlog"), title="eager P99 (sULP)"),
            y=alt.Y("fused_p99:Q", scale=alt.Scale(type="symlog"), title="fused P99 (sULP)"),
            color=alt.Color("dtype:N"),
            shape=alt.Shape("verdict:N"),
            tooltip=["model", "dtype", "eager_p99", "fused_p99", "verdict"],
        )
    )
    top = float(max(data["eager_p99"].max() or 1.0, data["fused_p99"].max() or 1.0))  # type: ignore[arg-type]
    diagonal = (
        alt.Chart(pl.DataFrame({"x": [0.0, top], "y": [0.0, top]}))
        .mark_line(color="gray", strokeDash=[4, 4])
        .encode(x="x:Q", y="y:Q")
    )
    return (diagonal + points).properties(width=420, height=320, title="Fused vs eager P99 per model x dtype")


def cannot_judge_section(verdicts: pl.DataFrame) -> str:
    """The rows M's tail test cannot judge (too few independent inputs), and how the test resamples."""
    head = (
        "## Rows the tail test cannot judge\n\n"
        "The tail test resamples independent inputs (an image or a sequence, with all its units), not units: the "
        "rows of one image share its input, so resampling them one by one would make the interval as narrow as if "
        f"each were a new input. It starts at {BOOTSTRAP_RESAMPLES} resamples; where none comes within the margin "
        "the p-value is only the resample floor, so the test is run again with enough resamples that the floor "
        "passes Holm over the table's rows (the `resamples` column). A row of fewer than "
        f"{MIN_INDEPENDENT_UNITS} independent inputs cannot be judged by it and is inconclusive unless an exact "
        "element contradicts it.\n\n"
    )
    if "cannot_judge" not in verdicts.columns:
        return head + "_(the stored verdicts predate this test: rematerialize M)_\n"
    rows = verdicts.filter(pl.col("cannot_judge").is_not_null())
    if rows.height == 0:
        return head + "Every judged row has enough independent inputs.\n"
    return head + markdown_table(rows.select("model", "dtype", "units", "clusters", "cannot_judge", "verdict"))


def details(report: Report, exp: Experiment) -> str:
    verdicts = report.table("model_verdicts")
    if verdicts is None:
        return ""
    parts = [
        "## Fused against eager, model by model\n",
        report.chart(
            exp.slug,
            "models_fused_vs_eager",
            _chart(verdicts),
            "Points above the diagonal: fused's tail error is larger than eager's. Symmetric-log axes.",
        ),
        "## M's rule and `same()`\n",
        same_statement() + "\n",
    ]
    parts.append(cannot_judge_section(verdicts))
    disagree = verdicts.filter(pl.col("disagreement") != "")
    if disagree.height:
        parts.append(markdown_table(disagree.select("model", "dtype", "verdict", "same_verdict", "disagreement")))
    else:
        parts.append("On every model x dtype of this run, `same()` and M's rule agree.\n")
    divergence = report.table("model_divergence")
    if divergence is not None and divergence.height:
        parts.append("## Where the divergence starts\n")
        for (model, dtype), rows in divergence.group_by(["model", "dtype"], maintain_order=True):
            first = rows.filter(pl.col("divergent")) if "divergent" in rows.columns else rows.head(0)
            head = (
                f"{model} {dtype}: first divergent module `{first['layer'][0]}`"
                if first.height
                else f"{model} {dtype}: no module departs beyond the noise"
            )
            parts.append(collapsed(head, markdown_table(rows.drop("model", "dtype").head(60))))
    evidence = verdicts.select(
        "model",
        "dtype",
        "parameters",
        "graph_count",
        "graph_breaks",
        "kernel_count",
        pl.col("compile_seconds").round(1),
        "break_reasons",
    )
    parts.append("## Fusion evidence\n")
    parts.append(markdown_table(evidence))
    return "\n".join(parts)
