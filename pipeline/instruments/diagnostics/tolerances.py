"""Diagnostics: tolerances measured from the experiments, next to seed 001's hand-written matrix.

Observations of *fused* error against fp64 come from task B (per input set: the largest error of
the set), C1/C2/C3 (one row per fused version: the largest error over all elements) and the
fuzzer (per graph that classified ``ok``: the largest error of the graph). Each is filed under
(op class, dtype, reduction size) as :func:`precisionkit.tolerance` sees it. Per group the
measured tolerance is the p99.9 (linear interpolation) of those per-observation maxima, so it
covers every element of at least 99.9 % of the observed sets/graphs; with few observations it is
simply their maximum.

Two forms: ``atol`` (absolute error, comparable with the matrix's atol; only meaningful for O(1)
outputs: the wide-range inputs of B make it large by construction) and ``ulp`` (error in units of
the spacing of the dtype at the reference value: scale-free, the form that transfers between
magnitudes). ``ratio = atol / matrix_atol``: above 1 the matrix would reject observed, legitimate
fused results; below 0.1 it is more than ten times looser than needed. Feeds §6.1 (tolerances).
"""

from collections import defaultdict
from typing import Any

import dagster as dg
import numpy as np
import polars as pl
import torch

from precisionkit.tolerance import tolerance

from ...experiment import not_applicable
from ...experiments import experiment
from ...experiments.reduction_order.spec import ID as REDUCTION_ID
from ...experiments.toolkit.spec import ID as POOL_ID
from ...experiments.toolkit.spec import PoolSizes
from ...resources import ExperimentSettings
from ...scalars import as_float
from ...tables import markdown_table
from ...verdicts import NOT_STORED, READS_OTHER_ASSETS_TAG, finding_check, finding_result
from ...workloads import WORKLOADS
from .spec import GROUP

QUANTILE = 99.9
TOO_LOOSE = 0.1


def observations(
    per_set: pl.DataFrame,
    c1: pl.DataFrame | None,
    c2: pl.DataFrame,
    c3: pl.DataFrame | None,
    fuzzed: pl.DataFrame,
    pool: PoolSizes,
    c2_length: int,
) -> list[dict[str, Any]]:
    """Every fused-vs-fp64 observation as (source, op_class, dtype, reduction_size, abs_err, ulp_err).

    ``pool`` holds the shapes of B's input sets (S's pools: a chain's reduction size follows from
    them) and ``c2_length`` is C2's row length (the terms of its sums). ``c1`` or ``c3`` is None where
    that experiment does not apply to the run's compiler."""
    obs: list[dict[str, Any]] = []
    for r in per_set.filter(pl.col("path") == "fused").iter_rows(named=True):
        w = WORKLOADS[r["chain"]]
        obs.append(
            {
                "source": f"B:{r['chain']}/{r['distribution']}",
                "op_class": w.op_class,
                "dtype": r["dtype"],
                "reduction_size": int(w.reduction(pool)),
                "abs_err": r["abs_max"],
                "ulp_err": r["ulp_max"],
            }
        )
    for r in c1.filter(pl.col("path").str.starts_with("fused")).iter_rows(named=True) if c1 is not None else ():
        # C1 multiplies an fp16 tensor by a scalar: one rounding, no accumulation.
        obs.append(
            {
                "source": f"C1:{r['path']}",
                "op_class": "elementwise",
                "dtype": "float16",
                "reduction_size": 1,
                "abs_err": r["abs_max"],
                "ulp_err": r["ulp_max"],
            }
        )
    for r in c2.filter(pl.col("version").str.starts_with("fused")).iter_rows(named=True):
        # A row sum of K terms is K additions, the matrix's matmul case; acc32 is the fp32 accumulator.
        dtype = "float16" if r["output"] == "out16" else "float32"
        obs.append(
            {
                "source": f"C2:{r['version']}/{r['output']}",
                "op_class": "matmul",
                "dtype": dtype,
                "reduction_size": int(c2_length),
                "abs_err": r["abs_max"],
                "ulp_err": r["ulp_max"],
            }
        )
    for r in c3.filter(pl.col("path") == "A_fused").iter_rows(named=True) if c3 is not None else ():
        # The framework rsqrt, fused; C3 records relative and ULP error only (no absolute error).
        obs.append(
            {
                "source": f"C3:{r['path']}",
                "op_class": "elementwise",
                "dtype": "float16",
                "reduction_size": 1,
                "abs_err": None,
                "ulp_err": r["ulp_max"],
            }
        )
    for r in fuzzed.filter(pl.col("class") == "ok").iter_rows(named=True):
        obs.append(
            {
                "source": "fuzz",
                "op_class": r["op_class"],
                "dtype": r["dtype"],
                "reduction_size": int(r["reduction_size"]),
                "abs_err": r["fused_abs_err"],
                "ulp_err": None,
            }
        )
    return obs


def _quantile(values: list[float]) -> float | None:
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.percentile(finite, QUANTILE)) if finite else None


def measure(obs: list[dict[str, Any]]) -> pl.DataFrame:
    """One row per (op_class, dtype, reduction_size): measured p99.9 and the matrix's tolerance."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for o in obs:
        groups[(o["op_class"], o["dtype"], o["reduction_size"])].append(o)
    rows = []
    for (op_class, dtype, k), items in sorted(groups.items()):
        atol = _quantile([o["abs_err"] for o in items])
        ulp = _quantile([o["ulp_err"] for o in items])
        by_source: dict[str, list[float]] = defaultdict(list)
        for o in items:
            if o["abs_err"] is not None:
                by_source[o["source"]].append(o["abs_err"])
        worst = max(by_source, key=lambda s: max(by_source[s])) if by_source else ""
        matrix = tolerance(getattr(torch, dtype), op_class, k)
        ratio = atol / matrix.atol if atol is not None else None
        verdict = (
            "no atol data"
            if ratio is None
            else ("matrix too tight" if ratio > 1 else ("matrix >10x loose" if ratio < TOO_LOOSE else "matrix ok"))
        )
        rows.append(
            {
                "op_class": op_class,
                "dtype": dtype,
                "reduction_size": k,
                "n_obs": len(items),
                "sources": ", ".join(sorted({o["source"].split(":")[0] for o in items})),
                "atol": atol,
                "ulp": ulp,
                "matrix_atol": matrix.atol,
                "matrix_rtol": matrix.rtol,
                "matrix_rule": matrix.source.split(": ")[-1],
                "ratio": ratio,
                "verdict": verdict,
                "worst_source": worst,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "op_class": pl.String,
            "dtype": pl.String,
            "reduction_size": pl.Int64,
            "n_obs": pl.Int64,
            "sources": pl.String,
            "atol": pl.Float64,
            "ulp": pl.Float64,
            "matrix_atol": pl.Float64,
            "matrix_rtol": pl.Float64,
            "matrix_rule": pl.String,
            "ratio": pl.Float64,
            "verdict": pl.String,
            "worst_source": pl.String,
        },
    )


@dg.asset(
    group_name=GROUP,
    ins={
        "per_set": dg.AssetIn("accumulated_error_per_set"),
        "c1": dg.AssetIn("c1_error_vs_fp64"),
        "c2": dg.AssetIn("c2_error_vs_fp64"),
        "c3": dg.AssetIn("c3_iteration_table"),
        "fuzzed": dg.AssetIn("fuzz_outcomes"),
    },
    description=(
        "Measured tolerance table (feeds §6.1): per op class x dtype x reduction size, the p99.9 of observed fused "
        "error vs fp64 (B per set, C1/C2/C3 per version, fuzzer per graph) as atol and ULP, next to seed 001's "
        "decision matrix (precisionkit.tolerance) with the ratio measured/matrix."
    ),
    kinds={"polars"},
    op_tags={READS_OTHER_ASSETS_TAG: "c1,c3"},  # C1 and C3 store nothing for a compiler they do not apply to
)
def measured_tolerances(
    context: dg.AssetExecutionContext,
    settings: ExperimentSettings,
    per_set: pl.DataFrame,
    c1: Any,
    c2: pl.DataFrame,
    c3: Any,
    fuzzed: pl.DataFrame,
) -> pl.DataFrame:
    left_out = _not_applicable_sources(settings.backend, C1=c1, C3=c3)
    c1, c3 = (None if "C1" in left_out else c1), (None if "C3" in left_out else c3)
    obs = observations(per_set, c1, c2, c3, fuzzed, settings.sizes(POOL_ID), settings.sizes(REDUCTION_ID).length)
    if not obs:
        raise ValueError("no fused-path observations in the upstream tables: nothing to measure")
    table = measure(obs)
    counts = table["verdict"].value_counts()
    context.add_output_metadata(
        {
            "groups": table.height,
            "observations": len(obs),
            **{f"verdict.{r['verdict']}": int(r["count"]) for r in counts.iter_rows(named=True)},
            "max_ratio": as_float(table["ratio"].max() or 0.0, "max ratio"),
            **{f"sources_left_out.{exp_id}": why for exp_id, why in left_out.items()},
            "quantile": QUANTILE,
            "table": dg.MetadataValue.md(
                markdown_table(
                    table.select(_TABLE_COLUMNS).with_columns(  # bold where the hand-written matrix is off
                        pl.when(pl.col("verdict") != "matrix ok")
                        .then("**" + pl.col("verdict") + "**")
                        .otherwise(pl.col("verdict"))
                        .alias("verdict")
                    )
                )
            ),
        }
    )
    return table


def _not_applicable_sources(backend: str, **stored: Any) -> dict[str, str]:
    """Of the upstream experiments' tables (by experiment id), those the IO manager found nothing stored for
    (:data:`NOT_STORED`), each with why its experiment does not apply to ``backend``. A table missing for an
    experiment that does apply is an error: that experiment has to be materialized first."""
    out = {}
    for exp_id, value in stored.items():
        if value is not NOT_STORED:
            continue
        why = not_applicable(experiment(exp_id), backend)
        if why is None:
            raise ValueError(f"{exp_id} applies to {backend} but stores no table here: materialize {exp_id} first")
        out[exp_id] = why
    return out


_TABLE_COLUMNS = ("op_class", "dtype", "reduction_size", "n_obs", "atol", "ulp", "matrix_atol", "ratio", "verdict")


@finding_check(
    asset=measured_tolerances,
    description="Finding (diagnostic): WARN for every group where seed 001's hand-written tolerance matrix is tighter "
    "than the fused error actually measured (ratio > 1); it tells a human which matrix entry to revisit.",
)
def matrix_covers_measured_error(measured_tolerances: pl.DataFrame) -> dg.AssetCheckResult:
    tight = measured_tolerances.filter(pl.col("ratio") > 1)
    findings = [
        f"{r['op_class']}/{r['dtype']}/K={r['reduction_size']}: measured {r['atol']:.3g} vs matrix {r['matrix_atol']:.3g} "
        f"(x{r['ratio']:.3g}, worst {r['worst_source']})"
        for r in tight.iter_rows(named=True)
    ]
    return finding_result(
        findings,
        {
            "groups_too_tight": tight.height,
            "groups": measured_tolerances.height,
            "finding": "; ".join(findings) or "none",
        },
    )
