"""Diagnostics: the report page's sections, built from stored values only."""

import altair as alt
import polars as pl

from precisionkit.repro import minimization_text

from ...experiment import Experiment
from ...pagekit.blocks import error_scale
from ...pagekit.render import Report, markdown_table
from ...pagekit.repro_page import publish_repro
from ...scalars import as_number
from .wrong_results import BY_DESIGN, by_design_rows


def details(report: Report, exp: Experiment) -> str:
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
    diff = report.table("difftest_outcomes")
    if diff is not None:
        parts.append(difftest_section(diff))
    found = report.table("reproducers")
    if found is not None:
        parts.append(reproducers_section(report, found))
    tol = report.table("measured_tolerances")
    if tol is not None:
        parts.append(
            "## Measured tolerances vs the hand-written matrix\n\nAbove the diagonal the matrix is too tight for what was observed.\n\n"
            + report.chart(
                exp.slug, "tolerances", tolerance_chart(tol), "Measured p99.9 error against the decision matrix"
            )
        )
    return "\n".join(parts)


def difftest_section(diff: pl.DataFrame) -> str:
    """Programs per generator and class, every program that did not agree, and apart from them the
    mismatches that are by design (clean with the compiler's faithful-casts options), each with why."""
    # The class columns in one order whatever order group_by returns them in: "ok" first, then the rest
    # by name (a page rendered twice from the same stored table reads the same).
    classes = sorted(diff["class"].unique(), key=lambda c: (c != "ok", c))
    counts = (
        diff.group_by("generator", "class")
        .len()
        .pivot(on="class", index="generator", values="len", aggregate_function="sum")
        .fill_null(0)
        .sort("generator")
    )
    counts = counts.select("generator", *(c for c in classes if c in counts.columns))
    bad = diff.filter(~pl.col("class").is_in(["ok", BY_DESIGN])).select("id", "class", "features", "message")
    apart = by_design_rows(diff).select("id", "features", "message", pl.col("by_design").alias("why by design"))
    by_design = (
        f"\n### By design ({apart.height})\n\nMismatches the diff rule flagged that are clean when the program is "
        "rerun with the compiler's faithful-casts options (Inductor: `emulate_precision_casts`): the compiler "
        "elides a 16-bit rounding between fused operations, a documented precision increase, and an integer or "
        "class downstream shows it. They are not counted as wrong results, nor as compared programs.\n\n"
        + markdown_table(apart)
        if apart.height
        else ""
    )
    agreed = "agreed" if not apart.height else "not by design agreed"
    return (
        "## Differential tester\n\nRandom programs over float, integer and bool tensors (every input layout, edge "
        "values) and structured attention / norm / GELU / long-reduction programs, judged by the `diff` rule: integer "
        "and bool outputs exactly, float outputs by class (NaN, +-inf, +-0) and by an error against fp64 beyond "
        "rounding noise and eager's own error. Reproduce one with `python -m pipeline.cli repros --make "
        "difftest/<generator>/<seed>/<dtype>`.\n\n"
        + markdown_table(counts)
        + ("\n" + markdown_table(bad) if bad.height else f"\nEvery program {agreed} with eager and fp64.\n")
        + by_design
    )


def reproducers_section(report: Report, found: pl.DataFrame) -> str:
    """The reproducers table, each linked to its issue-ready report and downloadable script."""
    head = (
        "## Reproducers\n\nEvery contradiction of D and every fuzzer mismatch gets a minimal standalone reproducer "
        "(`repro.py`, torch only, exits 1 while the defect reproduces), minimized over ops and dims and bisected "
        "to the layer at fault in fresh interpreters. `python -m pipeline.cli repros` re-runs them; "
        "`--python PATH` under another torch.\n\n"
    )
    if found.height == 0:
        return head + "Nothing to reproduce in this run: no contradiction and no fuzzer mismatch.\n"
    rows = []
    for r in found.iter_rows(named=True):
        link = publish_repro(report, r["id"])
        files = f"[report]({link}/report.md) · [repro.py]({link}/repro.py)" if link else "files not in this data folder"
        rows.append(
            {
                "reproducer": r["id"],
                "from": r["source"],
                "ops": f"{r['ops_before']} -> {r['ops_after']}",
                # the sentence of the reproducer's report.md and docstring (a table stored before the
                # minimizer said why it stopped has the op counts alone)
                "minimization": minimization_text(r) if r.get("minimize_ended") else "",
                "status": r["status"],
                "layer at fault": r["layer_at_fault"],
                "workaround": r["workaround"],
                "files": files,
            }
        )
    return head + markdown_table(pl.DataFrame(rows))


def layer_error_chart(layers: pl.DataFrame) -> alt.Chart:
    """Error against fp64 layer by layer, eager and fused (symmetric log scale: an exact layer is
    drawn at 0)."""
    long = (
        layers.select("layer_index", "layer", pl.col("eager_err").alias("eager"), pl.col("fused_err").alias("fused"))
        .unpivot(index=["layer_index", "layer"], variable_name="path", value_name="error vs fp64")
        .filter(pl.col("error vs fp64").is_not_null() & pl.col("error vs fp64").is_finite())
    )
    return (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("layer_index:O", title="layer (call order)"),
            y=alt.Y("error vs fp64:Q", scale=error_scale(long["error vs fp64"])),
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
            x=alt.X("matrix_atol:Q", scale=error_scale(pts["matrix_atol"]), title="seed 001 decision matrix atol"),
            y=alt.Y("atol:Q", scale=error_scale(pts["atol"]), title="measured p99.9 fused error"),
            color="op_class:N",
            shape="dtype:N",
            tooltip=["op_class", "dtype", "reduction_size", "atol", "matrix_atol", "ratio", "verdict"],
        )
    )
    return (diag + scatter).properties(width=420, height=320, title="Measured vs hand-written absolute tolerance")
