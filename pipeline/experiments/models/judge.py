"""From model runs to M's tables: the per-output errors and the verdict per model x dtype, with what
``torch._dynamo.utils.same`` says beside it and why the two disagree where they do."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from precisionkit.decide import holm, paired_quantile_test, resamples_for_family

from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED
from .compute import ModelRun
from .rules import (
    BOOTSTRAP_RESAMPLES,
    CONFIDENCE,
    MATERIALITY_SULP,
    MIN_INDEPENDENT_UNITS,
    MIN_UNITS_FOR_SUPPORTED,
    TAIL_QUANTILE,
)

#: The row verdict of a model that could not run fused (its reason is in `error`): not judged.
INVALID = "invalid run"


def output_table(runs: list[ModelRun]) -> pl.DataFrame:
    """One row per model x dtype x batch x output."""
    rows = [
        {
            "model": run.model,
            "source": run.source,
            "dtype": run.dtype,
            "batch": o.batch,
            "output": o.output,
            "shape": o.shape,
            "kind": o.kind,
            "units": o.units,
            "eager_sulp_max": o.eager_max,
            "fused_sulp_max": o.fused_max,
            "eager_sulp_p99": float(np.quantile(o.eager_units[np.isfinite(o.eager_units)], TAIL_QUANTILE))
            if np.isfinite(o.eager_units).any()
            else None,
            "fused_sulp_p99": float(np.quantile(o.fused_units[np.isfinite(o.fused_units)], TAIL_QUANTILE))
            if np.isfinite(o.fused_units).any()
            else None,
            "eager_rmse": o.eager_rmse,
            "fused_rmse": o.fused_rmse,
            "eager_nonfinite": o.eager_nonfinite,
            "fused_nonfinite_where_eager_finite": o.fused_nonfinite_where_eager_finite,
            "integer_mismatches": o.mismatched,
            "class_differences": o.class_wrong,
            "fp64_sided": o.fp64_sided,
            "faithful_class_changes": o.faithful_class,
            "inconsistent": o.inconsistent,
            "first_wrong": o.example,
            "bit_equal": o.bit_equal,
        }
        for run in runs
        for o in run.outputs
    ]
    schema: dict[str, Any] = {
        "model": pl.String,
        "source": pl.String,
        "dtype": pl.String,
        "batch": pl.Int64,
        "output": pl.Int64,
        "shape": pl.String,
        "kind": pl.String,
        "units": pl.Int64,
        "eager_sulp_max": pl.Float64,
        "fused_sulp_max": pl.Float64,
        "eager_sulp_p99": pl.Float64,
        "fused_sulp_p99": pl.Float64,
        "eager_rmse": pl.Float64,
        "fused_rmse": pl.Float64,
        "eager_nonfinite": pl.Int64,
        "fused_nonfinite_where_eager_finite": pl.Int64,
        "integer_mismatches": pl.Int64,
        "class_differences": pl.Int64,
        "fp64_sided": pl.Int64,
        "faithful_class_changes": pl.Int64,
        "inconsistent": pl.Int64,
        "first_wrong": pl.String,
        "bit_equal": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=schema)


def _paired_units(run: ModelRun) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eager's and fused's finite paired units over every output and batch, and per unit its independent unit:
    the batch and the image or sequence in it (:func:`.compute.unit_clusters`), the same for every output of that
    image or sequence. A record without cluster labels counts each of its units as its own."""
    e = np.concatenate([o.eager_units for o in run.outputs if o.units] or [np.zeros(0)])
    f = np.concatenate([o.fused_units for o in run.outputs if o.units] or [np.zeros(0)])
    labels, own = [], 0
    for o in run.outputs:
        if not o.units:
            continue
        if o.unit_clusters.size == o.eager_units.size:
            labels.append(o.batch * _PER_BATCH + o.unit_clusters.astype(np.int64))
        else:  # no labels: each unit its own independent unit, numbered apart from every labelled one
            labels.append(-1 - own - np.arange(o.eager_units.size, dtype=np.int64))
            own += o.eager_units.size
    c = np.concatenate(labels or [np.zeros(0, dtype=np.int64)])
    keep = np.isfinite(e) & np.isfinite(f)
    return e[keep], f[keep], c[keep]


#: Label space of one batch's images or sequences (a batch has far fewer).
_PER_BATCH = 1 << 32


def cannot_judge(units: int, clusters: int) -> str | None:
    """Why the tail test has nothing to judge on a row (None when it judges): fewer than two paired units, or
    fewer than :data:`.rules.MIN_INDEPENDENT_UNITS` images or sequences to resample (their units share inputs,
    so one image's rows are not a sample of the model's behaviour)."""
    if units < 2:
        return f"{units} paired float unit(s): the tail test needs at least 2"
    if clusters < MIN_INDEPENDENT_UNITS:
        return (
            f"{units} units from {clusters} independent input(s) (image or sequence): the bootstrap resamples "
            f"inputs and needs at least {MIN_INDEPENDENT_UNITS}"
        )
    return None


def _largest(values: Any) -> float | None:
    finite = [v for v in values if v is not None]
    return max(finite) if finite else None


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def _why_disagree(verdict: str, same_ok: bool, row: dict[str, Any]) -> str:
    if verdict == CONTRADICTED and same_ok:
        if row.get("faithful_class_changes") or row.get("inconsistent"):
            return (
                "same() passed although fused changed a class the program's own dtypes give (an overflow "
                "eager and the dtype-faithful run have) or disagrees with another of its outputs"
            )
        if row["class_differences"]:
            return (
                "same() passed although fused's class (NaN, +-inf, the sign of a zero) differs where eager has fp64's"
            )
        if row["integer_mismatches"]:
            return "same() passed although integer or bool outputs differ where fp64 does not side with fused"
        return (
            f"fused's P99 unit error is {row['difference']:.3g} sULP above eager's (confidence {CONFIDENCE:g}); "
            f"same() compares whole-output RMSE (ratio {_ratio(row['rmse_ratio'])}, allowed 2-3x), which a tail "
            "confined to some rows barely moves"
        )
    if verdict == SUPPORTED and not same_ok:
        if row["fp64_sided"]:
            return (
                f"same() failed: {row['fp64_sided']} element(s) differ from eager's where fp64 sides with fused (a "
                "tie fp64 breaks as fused did, or fp64's class), and same() holds eager as the truth there"
            )
        return (
            f"same() failed (RMSE ratio {_ratio(row['rmse_ratio'])}) although fused's P99 unit error is within "
            f"{MATERIALITY_SULP:g} sULP of eager's: an allclose / RMSE multiplier is not a statement about the tail"
        )
    return ""


def _reason(verdict: str, row: dict[str, Any]) -> str:
    """The row's verdict and the rule that gave it, in one line."""
    sided = (
        f"; {row['fp64_sided']} element(s) differ from eager where fp64 sides with fused (not counted)"
        if row["fp64_sided"]
        else ""
    )
    exact = (
        "rule against fp64: an integer/bool element is wrong where fused differs from eager and fp64 does not side "
        "with fused, so a tie fp64 breaks as fused did is right; a float element is wrong where its class (NaN, "
        "+-inf, +-0) differs from eager's and eager has fp64's"
    )
    if verdict == INVALID:
        return f"not judged: {row['error']}"
    own = row.get("faithful_class_changes", 0) + row.get("inconsistent", 0)
    if own and not row["integer_mismatches"] + row["class_differences"]:
        return (
            f"contradicted in the program's own dtypes: {row['faithful_class_changes']} element(s) change class "
            "(a bool its value) against the dtype-faithful re-execution (each op in fp64, rounded to the dtype "
            f"eager gives it) where eager has its class, and {row['inconsistent']} disagree with the output they "
            f"are computed from, recomputed from fused's; e.g. {row['first_wrong']}{sided}"
        )
    wrong = row["integer_mismatches"] + row["class_differences"]
    if wrong:
        return (
            f"contradicted: {row['integer_mismatches']} integer/bool and {row['class_differences']} float-class "
            f"element(s) wrong, e.g. {row['first_wrong']} ({exact}){sided}"
        )
    tail = (
        f"P99(fused) - P99(eager) = {row['difference']:.3g} sULP, one-sided upper bound {row['ci_upper']:.3g}, "
        f"Holm p {row['p_holm']:.3g} over {row['units']} units of {row['clusters']} independent inputs "
        f"({row['resamples']} resamples of the inputs; materiality {MATERIALITY_SULP:g}, at least "
        f"{MIN_UNITS_FOR_SUPPORTED} units for supported)"
        if row["p_value"] is not None
        else f"the tail test cannot judge here: {row['cannot_judge']}; {row['integer_elements']} integer/bool "
        f"elements judged (with no float unit, supported from {MIN_UNITS_FOR_SUPPORTED})"
    )
    return f"{verdict}: {tail}; no integer/bool or float-class element wrong ({exact}){sided}"


def tail_test(f: np.ndarray, e: np.ndarray, clusters: np.ndarray, seed: int, family: int) -> Any:
    """M's tail test of one row: the paired bootstrap of P99(fused) - P99(eager) against the materiality,
    resampling independent inputs (``clusters``). It starts at :data:`.rules.BOOTSTRAP_RESAMPLES`; when no
    resample comes within the margin, the p-value is only the resample floor, so it is run again with enough
    resamples (:func:`precisionkit.decide.resamples_for_family`) for the floor to pass Holm over ``family`` rows:
    only rows that far from the margin pay for them."""

    def run(resamples: int) -> Any:
        return paired_quantile_test(
            f,
            e,
            q=TAIL_QUANTILE,
            margin=MATERIALITY_SULP,
            confidence=CONFIDENCE,
            resamples=resamples,
            seed=seed,
            clusters=clusters,
        )

    test = run(BOOTSTRAP_RESAMPLES)
    needed = resamples_for_family(max(family, 1), 1 - CONFIDENCE, BOOTSTRAP_RESAMPLES)
    if test.p_value <= 1.0 / (BOOTSTRAP_RESAMPLES + 1) and needed > BOOTSTRAP_RESAMPLES:
        test = run(needed)
    return test


def _run_row(run: ModelRun, e: np.ndarray, f: np.ndarray, c: np.ndarray) -> dict[str, Any]:
    """One model x dtype's figures, before its test (the test's columns are None)."""
    clusters = int(np.unique(c).size)
    row: dict[str, Any] = {
        "model": run.model,
        "source": run.source,
        "dtype": run.dtype,
        "parameters": run.parameters,
        "batches": len(run.same_passed),
        "units": int(e.size),
        "clusters": clusters,
        "resamples": None,
        "cannot_judge": None if run.error else cannot_judge(e.size, clusters),
        "eager_p99": float(np.quantile(e, TAIL_QUANTILE)) if e.size else None,
        "fused_p99": float(np.quantile(f, TAIL_QUANTILE)) if f.size else None,
        "eager_max": _largest(o.eager_max for o in run.outputs),
        "fused_max": _largest(o.fused_max for o in run.outputs),
        "difference": None,
        "ci_lower": None,
        "ci_upper": None,
        "p_value": None,
        "fused_nonfinite": sum(o.fused_nonfinite_where_eager_finite for o in run.outputs),
        "eager_nonfinite": sum(o.eager_nonfinite for o in run.outputs),
        "integer_mismatches": sum(o.mismatched for o in run.outputs),
        "class_differences": sum(o.class_wrong for o in run.outputs),
        "fp64_sided": sum(o.fp64_sided for o in run.outputs),
        "faithful_class_changes": sum(o.faithful_class for o in run.outputs),
        "inconsistent": sum(o.inconsistent for o in run.outputs),
        "integer_elements": sum(o.units for o in run.outputs if o.kind == "integer"),
        "first_wrong": next((o.example for o in run.outputs if o.example), ""),
        "eager_rmse": float(np.mean([o.eager_rmse for o in run.outputs if o.kind == "float"] or [0.0])),
        "fused_rmse": float(np.mean([o.fused_rmse for o in run.outputs if o.kind == "float"] or [0.0])),
        "same_passed": bool(run.same_passed) and all(run.same_passed),
        "same_batches_failed": sum(not s for s in run.same_passed),
        "error": run.error,
        "seconds": run.seconds,
        **{k: run.evidence.get(k) for k in ("graph_count", "graph_breaks", "kernel_count", "compile_seconds")},
        "break_reasons": run.evidence.get("break_reasons", ""),
    }
    row["rmse_ratio"] = row["fused_rmse"] / row["eager_rmse"] if row["eager_rmse"] else None
    return row


def _row_verdict(row: dict[str, Any], rejected: bool) -> str:
    """A row's verdict: invalid with an error; contradicted by any wrong class, integer or inconsistent
    output, or a tail test Holm rejects; supported when the interval's upper end is within materiality on
    enough units (or an integer-only row has enough elements, all equal); else inconclusive."""
    if row["error"]:
        return INVALID
    wrong = row["class_differences"] or row["integer_mismatches"] or row["faithful_class_changes"]
    if wrong or row["inconsistent"] or rejected:
        return CONTRADICTED
    within = (
        row["ci_upper"] is not None and row["units"] >= MIN_UNITS_FOR_SUPPORTED and row["ci_upper"] <= MATERIALITY_SULP
    )
    if within or (row["units"] == 0 and row["integer_elements"] >= MIN_UNITS_FOR_SUPPORTED):
        return SUPPORTED
    return INCONCLUSIVE


def verdict_table(runs: list[ModelRun], seed: int) -> pl.DataFrame:
    """One row per model x dtype: the paired test, the verdict (Holm over every judged row), same()
    beside it, and the fusion evidence; invalid runs carry their reason and are not judged."""
    rows: list[dict[str, Any]] = []
    paired = [_paired_units(run) for run in runs]
    # the rows Holm adjusts over: a row at the resample floor must be able to pass Holm's first step
    family = sum(
        not run.error and cannot_judge(e.size, np.unique(c).size) is None
        for run, (e, _, c) in zip(runs, paired, strict=True)
    )
    for run, (e, f, c) in zip(runs, paired, strict=True):
        row = _run_row(run, e, f, c)
        if not run.error and row["cannot_judge"] is None:
            test = tail_test(f, e, c, seed, family)
            row.update(
                difference=test.estimate,
                ci_lower=test.lower,
                ci_upper=test.upper,
                p_value=test.p_value,
                resamples=test.resamples,
            )
        rows.append(row)
    judged = [i for i, r in enumerate(rows) if r["p_value"] is not None]
    rejected = np.zeros(len(rows), dtype=bool)
    adjusted: list[float | None] = [None] * len(rows)
    if judged:
        rej, adj = holm([rows[i]["p_value"] for i in judged], alpha=1 - CONFIDENCE)
        for j, i in enumerate(judged):
            rejected[i], adjusted[i] = bool(rej[j]), float(adj[j])
    for i, row in enumerate(rows):
        row["p_holm"] = adjusted[i]
        verdict = _row_verdict(row, bool(rejected[i]))
        row["verdict"] = verdict
        row["reason"] = _reason(verdict, row)
        row["same_verdict"] = "pass" if row["same_passed"] else "fail"
        row["disagreement"] = _why_disagree(verdict, row["same_passed"], row) if verdict != INVALID else ""
    return pl.DataFrame(rows, infer_schema_length=None)


def needs_locating(row: dict[str, Any]) -> bool:
    """Rows whose divergence is worth locating: fused worse (contradicted) or diverging (same() failed)."""
    return not row["error"] and (row["verdict"] == CONTRADICTED or not row["same_passed"])
