"""Regression: comparison with a promoted baseline, and the job that promotes one.

* ``baseline_comparison`` compares every experiment's stored tables with the CURRENT baseline
  (see :mod:`pipeline.instruments.regression.baseline`). Its checks use the three outcomes of :mod:`pipeline.verdicts`:
  the claim "numerics unchanged" is contradicted by a move the worse way beyond tolerance; a
  baseline item missing now (or one that cannot be compared) makes the comparison invalid;
  improvements, generated-code changes, provenance changes (commit, torch version) and
  experiments absent on one side are findings.
* ``promote_baseline_job`` (an op, launchable from the UI) promotes the stored tables.

The planted-bug suite of the same group is :mod:`pipeline.instruments.regression.matrix`.
"""

import time
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from ... import runs
from ...resources import ExperimentSettings
from ...storage import DataFolder
from ...tables import markdown_table
from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    NOT_APPLICABLE,
    SUPPORTED,
    claim_check,
    claim_result,
    finding_check,
    finding_result,
    validity_check,
    validity_result,
)
from . import baseline
from .rules import BASELINE_RULE
from .spec import GROUP

# --- provenance from the Dagster instance ----------------------------------------------------


def recorded_provenance(
    instance: dg.DagsterInstance | None, asset: str, stored: Path | None, include_imported: bool = False
) -> tuple[dict[str, Any], str] | None:
    """Provenance metadata of the latest materialization of ``asset`` that wrote ``stored``
    (asset keys are shared between profiles, so the event's stored path must match). Only those
    made here unless ``include_imported``: an imported bundle's event may name the same path on the
    machine it came from, and its provenance is that machine's."""
    if instance is None or stored is None:
        return None
    target = stored.resolve()
    try:
        for record, _, meta in runs.materializations(instance, dg.AssetKey(asset), limit=25):
            path = meta.get("path")
            if runs.is_imported(meta) and not include_imported:
                continue
            if path is None or Path(str(path)).resolve() != target:
                continue
            prov = runs.provenance(meta)
            if prov:
                return prov, f"materialization event of {asset} in run {record.run_id}"
    except Exception:  # noqa: BLE001 - an instance without event storage
        return None
    return None


def promote_with_instance(
    instance: dg.DagsterInstance | None,
    base_dir: str,
    settings: ExperimentSettings,
    allow_partial: bool = False,
    note: str = "",
    include_imported: bool = False,
) -> baseline.Promotion:
    """Promote the tables ``settings.backend``'s compiler stored for the profile to a baseline of that compiler,
    with provenance from the instance's events where recorded."""
    compiler = settings.backend
    return baseline.promote(
        base_dir,
        settings.profile,
        allow_partial=allow_partial,
        note=note,
        environment=settings.provenance(),
        provenance_lookup=lambda asset: recorded_provenance(
            instance, asset, baseline.compiler_file(base_dir, settings.profile, compiler, asset), include_imported
        ),
        compiler=compiler,
    )


# --- baseline comparison ---------------------------------------------------------------------


_BASELINE_DEPS = [dg.AssetKey(a) for assets in baseline.BASELINE_ASSETS.values() for a in assets]


@dg.asset(
    group_name=GROUP,
    deps=_BASELINE_DEPS,
    required_resource_keys={"data", "settings"},
    description="Every experiment's stored tables against the baseline promoted with the same compiler "
    "(data/baselines/<profile>/CURRENT for Inductor, data/baselines/<profile>/compilers/<compiler>/CURRENT for another): "
    "bit-exact items (A output md5s, D bit_equal/ulp_max, C1-C3 outputs and ULP tables), B's per-set ulp_max "
    "distributions with a bootstrap noise tolerance, E's eval loss against its data-order noise band. One row per "
    "item: experiment, item, baseline_value, current_value, delta, tolerance, moved, severity. Feeds the drift page.",
    kinds={"polars"},
)
def baseline_comparison(context: dg.AssetExecutionContext) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    data: DataFolder = context.resources.data
    data.profile_dir(settings.profile)  # a local folder, or the error that says why one is needed
    base_dir, compiler = data.root, settings.backend
    fallback = settings.provenance()

    def current_provenance(exp: str) -> dict[str, Any]:
        for asset in baseline.BASELINE_ASSETS[exp]:
            stored = baseline.compiler_file(base_dir, settings.profile, compiler, asset)
            found = recorded_provenance(context.instance, asset, stored)
            if found:
                return found[0]
        return fallback  # tables written outside this instance: this run's settings are the best record

    start = time.perf_counter()
    # This compiler's tables against this compiler's baseline: a baseline of another compiler is never read.
    result = baseline.compare(base_dir, settings.profile, current_provenance, compiler=compiler)
    table = result.table
    moved = table.filter(pl.col("moved") == "yes")
    meta: dict[str, Any] = {
        "baseline_version": result.baseline_version or "none",
        "items_compared": table.filter(pl.col("status") == "compared").height,
        "items_moved": moved.filter(pl.col("kind") != "provenance").height,
        "error_moves": moved.filter(pl.col("severity") == "ERROR").height,
        "warn_moves": moved.filter(pl.col("severity") == "WARN").height,
        "seconds": round(time.perf_counter() - start, 2),
        "provenance_changed": _provenance_text(result.provenance_changed),
        "moved_items": dg.MetadataValue.md(
            markdown_table(
                moved.select(
                    "experiment", "item", "baseline_value", "current_value", "delta", "tolerance", "severity", "status"
                )
            )
        ),
        "not_compared": ", ".join(
            f"{r['experiment']}: {r['status']}"
            for r in table.filter(pl.col("status") != "compared").iter_rows(named=True)
            if r["kind"] == "presence"
        )
        or "none",
    }
    if result.reason:
        meta["reason"] = result.reason
    context.add_output_metadata(meta)
    return table


def _provenance_text(changed: dict[str, dict[str, tuple[Any, Any]]]) -> str:
    if not changed:
        return "none"
    return "; ".join(
        f"{exp}: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in diff.items()) for exp, diff in changed.items()
    )


#: Item kinds of the comparison table that are not numerics (experiment presence, provenance fields).
_META_KINDS = ("presence", "provenance")


def _compared(table: pl.DataFrame) -> pl.DataFrame:
    return table.filter((pl.col("status") == "compared") & ~pl.col("kind").is_in(list(_META_KINDS)))


def _what_moved(moved: pl.DataFrame) -> Any:
    return dg.MetadataValue.md(
        markdown_table(
            moved.sort("severity").select(
                "experiment", "item", "baseline_value", "current_value", "delta", "tolerance", "severity", "status"
            )
        )
    )


@claim_check(
    rule=BASELINE_RULE,
    asset=baseline_comparison,
    description="Numerics unchanged against the baseline: contradicted (ERROR) when a bit-exact output or an error "
    "statistic moved the worse way beyond its tolerance; inconclusive (WARN) when no baseline is promoted. "
    "Improvements and generated-code changes go to baseline_moves_within_rule, provenance to baseline_provenance_changed.",
)
def no_moves_against_baseline(baseline_comparison: pl.DataFrame) -> dg.AssetCheckResult:
    table = baseline_comparison
    if table.filter(pl.col("status") == "no baseline").height:
        return claim_result(
            INCONCLUSIVE,
            BASELINE_RULE,
            "no baseline promoted: run `python -m pipeline.cli promote-baseline` or launch "
            "promote_baseline_job; nothing was compared",
        )
    compared = _compared(table)
    moved = compared.filter(pl.col("moved") == "yes")
    errors = moved.filter(pl.col("severity") == "ERROR")
    prov = table.filter(pl.col("kind") == "provenance")
    meta = {
        "items_compared": compared.height,
        "moved": moved.height,
        "error_moves": errors.height,
        "moved_by_experiment": ", ".join(
            f"{e}={n}" for e, n in moved.group_by("experiment").len().sort("experiment").iter_rows()
        )
        or "none",
        "what_moved": _what_moved(moved),
        "provenance_changed": ", ".join(
            f"{r['experiment']}.{r['item'].removeprefix('provenance.')}: {r['baseline_value']} -> {r['current_value']}"
            for r in prov.iter_rows(named=True)
        )
        or "none",
    }
    if errors.height:
        worst = ", ".join(f"{r['experiment']} {r['item']}" for r in errors.head(3).iter_rows(named=True))
        return claim_result(
            CONTRADICTED,
            BASELINE_RULE,
            f"{errors.height} item(s) moved the worse way beyond tolerance (e.g. {worst})",
            meta,
        )
    if compared.height == 0:
        return claim_result(INCONCLUSIVE, BASELINE_RULE, "a baseline is promoted but no item could be compared", meta)
    return claim_result(
        SUPPORTED,
        BASELINE_RULE,
        f"{compared.height} items compared, none moved the worse way beyond its tolerance",
        meta,
    )


@validity_check(
    asset=baseline_comparison,
    description="The comparison is complete for the experiments it compared: no item of the baseline is missing from "
    "the current tables and every item could be compared (an item that cannot, e.g. a table without the columns or "
    "runs its comparison needs, makes the comparison invalid, not the numerics contradicted).",
)
def baseline_items_comparable(baseline_comparison: pl.DataFrame) -> dg.AssetCheckResult:
    items = baseline_comparison.filter(~pl.col("kind").is_in(list(_META_KINDS)))
    broken = items.filter(~pl.col("status").is_in(["compared", "not in baseline"]))
    problems = [f"{r['experiment']} {r['item']}: {r['status']}" for r in broken.iter_rows(named=True)]
    return validity_result(problems, {"items": items.height, "not_comparable": broken.height})


@finding_check(
    asset=baseline_comparison,
    description="Items that moved without contradicting the claim, for a human to read: improvements beyond "
    "tolerance, generated-code changes, per-set changes within B's noise, items new since the baseline.",
)
def baseline_moves_within_rule(baseline_comparison: pl.DataFrame) -> dg.AssetCheckResult:
    items = baseline_comparison.filter(~pl.col("kind").is_in(list(_META_KINDS)))
    moved = items.filter((pl.col("moved") == "yes") & (pl.col("severity") == "WARN"))
    findings = [
        f"{r['experiment']} {r['item']}: {r['baseline_value']} -> {r['current_value']}"
        + (f" ({r['status']})" if r["status"] != "compared" else "")
        for r in moved.iter_rows(named=True)
    ]
    return finding_result(findings, {"what_moved": _what_moved(moved)})


@finding_check(
    asset=baseline_comparison,
    description="Provenance fields that changed since the baseline (git commit, torch version, device, seed, ...): "
    "what a human needs to explain a move; never a failure by itself.",
)
def baseline_provenance_changed(baseline_comparison: pl.DataFrame) -> dg.AssetCheckResult:
    prov = baseline_comparison.filter((pl.col("kind") == "provenance") & (pl.col("moved") == "yes"))
    findings = [
        f"{r['experiment']}.{r['item'].removeprefix('provenance.')}: {r['baseline_value']} -> {r['current_value']}"
        for r in prov.iter_rows(named=True)
    ]
    return finding_result(findings)


@finding_check(
    asset=baseline_comparison,
    description="Every experiment is both in the baseline and materialized now; the ones that are not (a partial "
    "baseline or a partial run) are named. Nothing is compared for them. An experiment that does not apply to the "
    "run's compiler is no gap: it is listed apart, with its reason.",
)
def baseline_covers_every_experiment(baseline_comparison: pl.DataFrame) -> dg.AssetCheckResult:
    presence = baseline_comparison.filter(pl.col("kind") == "presence")
    by_design = presence.filter(pl.col("status").str.starts_with(NOT_APPLICABLE))
    gaps = presence.filter((pl.col("status") != "compared") & ~pl.col("status").str.starts_with(NOT_APPLICABLE))
    findings = [f"{r['experiment']}: {r['status']}" for r in gaps.iter_rows(named=True)]
    skipped = ", ".join(by_design["experiment"].to_list()) or "none"
    return finding_result(findings, {"gaps": ", ".join(findings) or "none", "not_applicable_to_compiler": skipped})


# --- promotion job ---------------------------------------------------------------------------


class PromoteBaselineConfig(dg.Config):
    """Launchpad options of the promotion."""

    allow_partial: bool = False
    note: str = ""


@dg.op(
    required_resource_keys={"data", "settings"},
    description="Promote the stored tables of the run's profile to a new baseline version.",
)
def promote_baseline_op(context: dg.OpExecutionContext, config: PromoteBaselineConfig) -> None:
    settings: ExperimentSettings = context.resources.settings
    data: DataFolder = context.resources.data
    done = promote_with_instance(
        context.instance, data.root, settings, allow_partial=config.allow_partial, note=config.note
    )
    context.log.info(f"promoted {', '.join(done.promoted)} as baseline {done.version} ({done.folder})")
    context.add_output_metadata(
        {
            "version": done.version,
            "folder": str(done.folder),
            "experiments": ", ".join(done.promoted),
            "skipped": ", ".join(f"{e} (missing {', '.join(m)})" for e, m in done.skipped.items()) or "none",
            "previous": done.previous or "none",
        }
    )


@dg.job(description="Mark the current materialization of each experiment as the baseline (new version; CURRENT moves).")
def promote_baseline_job() -> None:
    promote_baseline_op()
