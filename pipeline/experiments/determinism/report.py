"""A: the report page's sections, built from stored values only."""

import altair as alt
import polars as pl

from ...experiment import Experiment
from ...pagekit.blocks import opening
from ...pagekit.render import Report, markdown_table
from ...scalars import as_number


def deliverable(report: Report, exp: Experiment) -> str:
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
        pl.col("artifact_hash_equal_across_cold_start").alias("kernel binary hash = H_k0"),
        pl.col("kernel_hash_equal_across_cold_start").alias("kernel source hash = round 1's"),
        pl.col("outputs_equal_round1").alias("outputs = round 1"),
    )
    r1_counts = summary.filter(pl.col("round") == "round1").select("dtype", "run_count").unique().sort("dtype")
    per_dtype = (
        " per dtype: " + ", ".join(f"{d} {n}" for d, n in r1_counts.iter_rows())
        if r1_counts["run_count"].n_unique() > 1
        else ""
    )
    ok = summary.filter((pl.col("unique_output_hashes") == 1) & (pl.col("max_ulp_diff_across_runs") == 0)).height
    cold_rows = summary.filter(pl.col("round") == "round2_cold")
    cold_run = cold_rows.height > 0
    cold_most = cold_rows["run_count"].max() if cold_run else None
    cold_runs = 0 if cold_most is None else int(as_number(cold_most, "determinism_summary round2_cold run_count"))
    fewer_cold = (
        f" The cold round runs {cold_runs} per dtype: a fresh process's code and bits show in its first run, and "
        "run-to-run determinism is round 1's question."
        if cold_run and cold_runs < expected_runs
        else ""
    )
    return opening(
        exp,
        (
            f"Expected per round: **{expected_runs} / 1 / 0** ({expected_runs} runs in the `{report.profile}` "
            f"profile{per_dtype}; "
            f"the plan's 1000 in `seed`). **{ok} of {summary.height}** rounds show one hash and 0 ULP. `round2_cold` is a "
            "fresh process with an empty compiler cache; `cold_threads_*` changes the thread count, where a different "
            "kernel is expected."
            + fewer_cold
            + ("" if cold_run else f" The `{report.profile}` profile runs no cold-start round.")
            + "\n\n"
            + markdown_table(rows)
        ),
    )


def details(report: Report, exp: Experiment) -> str:
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
    """The seed's summary columns, hashes cut to 16 hex digits."""
    hashes = (
        "code_sha256",
        "kernel_hash_equal_across_cold_start",
        "artifact_sha256",
        "artifact_hash_equal_across_cold_start",
    )
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
    return key.with_columns(pl.col(c).str.slice(0, 16) for c in ("code_sha256", "artifact_sha256"))
