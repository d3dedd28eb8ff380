"""Regression: comparison with a promoted baseline, and the planted-bug suite (mutation testing).

* ``baseline_comparison`` compares every experiment's stored tables with the CURRENT baseline
  (see :mod:`pipeline.baseline`); its checks turn WARN/ERROR on moves and say what moved, by
  how much, and which provenance fields changed.
* ``planted_bug_matrix`` re-runs a subset of experiments at smoke size with each deliberately
  faulty backend of :mod:`pipeline.planted_bugs` and records which checks each bug turns red,
  relative to a run with the healthy backend (and a second healthy run as false-alarm control).
* ``promote_baseline_job`` (an op, launchable from the UI) promotes the stored tables.
"""


import importlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from .. import baseline
from ..planted_bugs import PLANTED_BUGS, register_planted_backends
from ..resources import ExperimentSettings
from ..storage import PrecisionIOManager
from ..tables import markdown_table

GROUP = "regression"
# Importing the code location registers the planted backends, so a run launched with
# settings.backend = planted_* (e.g. from the UI) finds them.
register_planted_backends()

# --- provenance from the Dagster instance ----------------------------------------------------


def recorded_provenance(instance: dg.DagsterInstance | None, asset: str, stored: Path | None) -> tuple[dict[str, Any], str] | None:
    """Provenance metadata of the latest materialization of ``asset`` that wrote ``stored``
    (asset keys are shared between profiles, so the event's stored path must match)."""
    if instance is None or stored is None:
        return None
    try:
        records = instance.fetch_materializations(dg.AssetKey(asset), limit=25).records
    except Exception:  # noqa: BLE001 - an instance without event storage
        return None
    target = stored.resolve()
    for record in records:
        mat = record.asset_materialization
        if mat is None:
            continue
        meta = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
        path = meta.get("path")
        if path is None or Path(str(path)).resolve() != target:
            continue
        prov = {k.removeprefix("provenance."): v for k, v in meta.items() if k.startswith("provenance.")}
        if prov:
            return prov, f"materialization event of {asset} in run {record.run_id}"
    return None


def promote_with_instance(instance: dg.DagsterInstance | None, base_dir: str, settings: ExperimentSettings,
                          allow_partial: bool = False, note: str = "") -> baseline.Promotion:
    """Promote ``<base_dir>/<profile>`` with provenance from the instance's events where recorded."""
    data_dir = Path(base_dir) / settings.profile
    return baseline.promote(
        base_dir, settings.profile, allow_partial=allow_partial, note=note, environment=settings.provenance(),
        provenance_lookup=lambda asset: recorded_provenance(instance, asset, baseline.stored_file(data_dir, asset)),
    )


# --- baseline comparison ---------------------------------------------------------------------


def _base_dir(context: dg.AssetExecutionContext) -> str:
    base = getattr(context.resources.io_manager, "base_dir", None)
    if not base:
        raise ValueError("the io_manager resource has no base_dir: the baseline needs PrecisionIOManager")
    return base


_BASELINE_DEPS = [dg.AssetKey(a) for assets in baseline.EXPERIMENTS.values() for a in assets]


@dg.asset(
    group_name=GROUP,
    deps=_BASELINE_DEPS,
    required_resource_keys={"io_manager", "settings"},
    description="Every experiment's stored tables against the promoted baseline (data/baselines/<profile>/CURRENT): "
    "bit-exact items (A output md5s, D bit_equal/ulp_max, C1-C3 outputs and ULP tables), B's per-set ulp_max "
    "distributions with a bootstrap noise tolerance, E's eval loss against its data-order noise band. One row per "
    "item: experiment, item, baseline_value, current_value, delta, tolerance, moved, severity. Feeds the drift page.",
    kinds={"polars"},
)
def baseline_comparison(context: dg.AssetExecutionContext) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    base_dir = _base_dir(context)
    data_dir = Path(base_dir) / settings.profile
    fallback = settings.provenance()

    def current_provenance(exp: str) -> dict[str, Any]:
        for asset in baseline.EXPERIMENTS[exp]:
            found = recorded_provenance(context.instance, asset, baseline.stored_file(data_dir, asset))
            if found:
                return found[0]
        return fallback  # tables written outside this instance: this run's settings are the best record

    start = time.perf_counter()
    result = baseline.compare(base_dir, settings.profile, current_provenance)
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
        "moved_items": dg.MetadataValue.md(markdown_table(moved.select("experiment", "item", "baseline_value", "current_value", "delta", "tolerance", "severity", "status"))),
        "not_compared": ", ".join(f"{r['experiment']}: {r['status']}" for r in table.filter(pl.col("status") != "compared").iter_rows(named=True)
                                 if r["kind"] == "presence") or "none",
    }
    if result.reason:
        meta["reason"] = result.reason
    context.add_output_metadata(meta)
    return table


def _provenance_text(changed: dict[str, dict[str, tuple[Any, Any]]]) -> str:
    if not changed:
        return "none"
    return "; ".join(f"{exp}: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in diff.items()) for exp, diff in changed.items())


@dg.asset_check(
    asset=baseline_comparison,
    description="Nothing moved against the baseline: ERROR when a bit-exact output or an error statistic moved the "
    "worse way beyond its tolerance; WARN for improvements, generated-code changes and missing experiments; "
    "WARN (not a pass) when no baseline is promoted.",
)
def no_moves_against_baseline(baseline_comparison: pl.DataFrame) -> dg.AssetCheckResult:
    table = baseline_comparison
    if table.filter(pl.col("status") == "no baseline").height:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                   metadata={"reason": "no baseline promoted: run `python -m pipeline.cli promote-baseline` "
                                             "or launch promote_baseline_job; nothing was compared"})
    moved = table.filter((pl.col("moved") == "yes") & (pl.col("kind") != "provenance"))
    errors = moved.filter(pl.col("severity") == "ERROR")
    prov = table.filter(pl.col("kind") == "provenance")
    meta = {
        "moved": moved.height,
        "error_moves": errors.height,
        "moved_by_experiment": ", ".join(f"{e}={n}" for e, n in moved.group_by("experiment").len().sort("experiment").iter_rows()) or "none",
        "what_moved": dg.MetadataValue.md(markdown_table(moved.sort("severity").select("experiment", "item", "baseline_value", "current_value", "delta", "tolerance", "severity"))),
        "provenance_changed": ", ".join(f"{r['experiment']}.{r['item'].removeprefix('provenance.')}: {r['baseline_value']} -> {r['current_value']}"
                                        for r in prov.iter_rows(named=True)) or "none",
    }
    if errors.height:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR, metadata=meta)
    if moved.height:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, metadata=meta)
    return dg.AssetCheckResult(passed=True, metadata=meta)


@dg.asset_check(
    asset=baseline_comparison,
    description="Every experiment is both in the baseline and materialized now (WARN otherwise, naming which).",
)
def baseline_covers_every_experiment(baseline_comparison: pl.DataFrame) -> dg.AssetCheckResult:
    presence = baseline_comparison.filter(pl.col("kind") == "presence")
    gaps = presence.filter(pl.col("status") != "compared")
    return dg.AssetCheckResult(
        passed=gaps.height == 0,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"gaps": ", ".join(f"{r['experiment']}: {r['status']}" for r in gaps.iter_rows(named=True)) or "none"},
    )


# --- promotion job ---------------------------------------------------------------------------


class PromoteBaselineConfig(dg.Config):
    """Launchpad options of the promotion."""

    allow_partial: bool = False
    note: str = ""


@dg.op(required_resource_keys={"io_manager", "settings"}, description="Promote the stored tables of the run's profile to a new baseline version.")
def promote_baseline_op(context: dg.OpExecutionContext, config: PromoteBaselineConfig) -> None:
    settings: ExperimentSettings = context.resources.settings
    done = promote_with_instance(context.instance, context.resources.io_manager.base_dir, settings,
                                 allow_partial=config.allow_partial, note=config.note)
    context.log.info(f"promoted {', '.join(done.promoted)} as baseline {done.version} ({done.folder})")
    context.add_output_metadata({"version": done.version, "folder": str(done.folder), "experiments": ", ".join(done.promoted),
                                 "skipped": ", ".join(f"{e} (missing {', '.join(m)})" for e, m in done.skipped.items()) or "none",
                                 "previous": done.previous or "none"})


@dg.job(description="Mark the current materialization of each experiment as the baseline (new version; CURRENT moves).")
def promote_baseline_job() -> None:
    promote_baseline_op()


# --- planted-bug matrix ----------------------------------------------------------------------

#: Experiments re-run per bug and their modules (S assets come along as upstream).
MATRIX_MODULES = {"B": "accumulated_error", "C2": "reduction_order", "D": "data_movement"}
MATRIX_PROFILE = "smoke"
HEALTHY_BACKEND = "inductor"
_LEVEL = {0: "pass", 1: "WARN", 2: "ERROR"}


class PlantedBugMatrixConfig(dg.Config):
    """Which bugs and experiments the matrix runs (empty: all)."""

    bugs: list[str] = []
    experiments: list[str] = []


def matrix_definitions(experiments: list[str]) -> tuple[list[Any], list[str]]:
    """Assets and checks of the S module and the chosen experiments' modules; unavailable modules
    (an experiment still being written) are reported instead of failing the matrix."""
    modules, unavailable = [importlib.import_module("pipeline.assets.toolkit")], []
    for exp in experiments:
        if exp not in MATRIX_MODULES:
            raise ValueError(f"experiment {exp!r} is not runnable in the matrix; choose from {', '.join(MATRIX_MODULES)}")
        try:
            modules.append(importlib.import_module(f"pipeline.assets.{MATRIX_MODULES[exp]}"))
        except Exception as exc:  # noqa: BLE001
            unavailable.append(f"{exp}: {type(exc).__name__}: {exc}")
    assets = list(dg.load_assets_from_modules(modules))
    checks = list(dg.load_asset_checks_from_modules(modules))
    return [*assets, *checks], unavailable


def run_experiments(backend: str, defs: list[Any], base_dir: Path, like: ExperimentSettings) -> dict[str, Any]:
    """Materialize ``defs`` at smoke size with ``backend``; per check its outcome level and metadata,
    plus every failed step (a FusionError marks the fusion evidence check)."""
    settings = ExperimentSettings(profile=MATRIX_PROFILE, device=like.device, backend=backend,
                                  backend_options=like.backend_options, seed=like.seed)
    resources = {"settings": settings, "io_manager": PrecisionIOManager(base_dir=str(base_dir), settings=settings)}
    start = time.perf_counter()
    result = dg.materialize(defs, resources=resources, raise_on_error=False)
    checks = {}
    for e in result.get_asset_check_evaluations():
        level = 0 if e.passed else (2 if e.severity == dg.AssetCheckSeverity.ERROR else 1)
        checks[f"{e.asset_key.to_user_string()}:{e.check_name}"] = {
            "level": level, "metadata": {k: getattr(v, "value", v) for k, v in e.metadata.items()}}
    failures = []
    for ev in result.all_events:
        if ev.event_type_value != "STEP_FAILURE":
            continue
        err = ev.event_specific_data.error
        text = err.to_string() if err else ""
        failures.append({"step": ev.step_key, "error": _root_cls(err), "message": _root_message(err)[:600],
                         "fusion": "FusionError" in text})
    return {"checks": checks, "failures": failures, "seconds": time.perf_counter() - start}


def _root_cls(err: Any) -> str:
    while err is not None and getattr(err, "cause", None) is not None:
        err = err.cause
    return getattr(err, "cls_name", None) or "error"


def _root_message(err: Any) -> str:
    while err is not None and getattr(err, "cause", None) is not None:
        err = err.cause
    return (getattr(err, "message", "") or "").strip()


def compare_to_healthy(healthy: dict[str, Any], other: dict[str, Any]) -> tuple[list[str], str, str]:
    """Checks that ``other`` turned red relative to ``healthy`` (a pass that fails, a WARN failure
    that becomes ERROR), plus steps that failed only in ``other``. Returns (caught_by, first
    failure name, its metadata as text)."""
    caught, first, first_meta = [], "", ""
    for key, h in sorted(healthy["checks"].items()):
        o = other["checks"].get(key)
        if o is not None and o["level"] > h["level"]:
            caught.append(f"{key} ({_LEVEL[h['level']]} -> {_LEVEL[o['level']]})")
            if not first:
                first, first_meta = key, json.dumps(o["metadata"], default=str, sort_keys=True)[:1500]
    healthy_failed = {f["step"] for f in healthy["failures"]}
    for f in other["failures"]:
        if f["step"] in healthy_failed:
            continue
        name = (f"fusion evidence check (FusionError in {f['step']})" if f["fusion"]
                else f"asset raised {f['error']} in {f['step']}")
        caught.append(name)
        if not first:
            first, first_meta = name, f["message"]
    return caught, first, first_meta


MATRIX_SCHEMA = {
    "bug": pl.String, "fault_class": pl.String, "description": pl.String, "caught": pl.String,
    "caught_by": pl.String, "checks_turned_red": pl.Int64, "first_failure": pl.String,
    "first_failure_metadata": pl.String, "wall_seconds": pl.Float64,
}


def build_matrix(bugs: list[str], experiments: list[str], like: ExperimentSettings, work_dir: Path,
                 log: Any = None) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Run the healthy backend twice (second run: false-alarm control) and every bug once; one row
    per bug plus the control row. Returns the table and run facts for metadata."""
    register_planted_backends()
    unknown = [b for b in bugs if b not in PLANTED_BUGS]
    if unknown:
        raise ValueError(f"unknown planted bugs {unknown}; known: {', '.join(PLANTED_BUGS)}")
    defs, unavailable = matrix_definitions(experiments)

    def run(label: str, backend: str) -> dict[str, Any]:
        out = run_experiments(backend, defs, work_dir / label, like)
        if log:
            log(f"{label} ({backend}): {len(out['checks'])} checks, {len(out['failures'])} failed steps, {out['seconds']:.1f} s")
        return out

    healthy = run("healthy", HEALTHY_BACKEND)
    control = run("healthy_control", HEALTHY_BACKEND)
    rows = []
    # The control row: anything that differs between two healthy runs is a false alarm.
    c_caught, c_first, c_meta = compare_to_healthy(healthy, control)
    c_caught_rev, _, _ = compare_to_healthy(control, healthy)
    flips = c_caught + [f"{x} (reverse)" for x in c_caught_rev]
    rows.append({"bug": f"{HEALTHY_BACKEND} (healthy control re-run)", "fault_class": "none (false-alarm control)",
                 "description": "the healthy backend again; any check outcome that differs from the first healthy run is a false alarm",
                 "caught": "yes" if flips else "no", "caught_by": ", ".join(flips), "checks_turned_red": len(flips),
                 "first_failure": c_first, "first_failure_metadata": c_meta, "wall_seconds": control["seconds"]})
    for name in bugs:
        bug = PLANTED_BUGS[name]
        out = run(name, name)
        caught, first, meta = compare_to_healthy(healthy, out)
        rows.append({"bug": name, "fault_class": bug.fault_class, "description": bug.description,
                     "caught": "yes" if caught else "no", "caught_by": ", ".join(caught), "checks_turned_red": len(caught),
                     "first_failure": first, "first_failure_metadata": meta, "wall_seconds": out["seconds"]})
    facts = {
        "healthy_seconds": healthy["seconds"],
        "healthy_checks": len(healthy["checks"]),
        "healthy_red_checks": [f"{k} ({_LEVEL[v['level']]})" for k, v in sorted(healthy["checks"].items()) if v["level"]],
        "healthy_failed_steps": [f"{f['step']}: {f['error']}" for f in healthy["failures"]],
        "unavailable": unavailable,
    }
    return pl.DataFrame(rows, schema=MATRIX_SCHEMA), facts


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    description="Mutation testing of the harness: experiments B, C2 and D re-run at smoke size (whatever the outer "
    "profile) with each planted-bug backend (pipeline/planted_bugs.py) and twice with the healthy backend. Per bug: "
    "which checks turned red relative to the healthy run (pass -> fail, or WARN -> ERROR; a FusionError counts as the "
    "fusion evidence check), and the first failure's metadata. The control row must catch nothing.",
    kinds={"polars"},
)
def planted_bug_matrix(context: dg.AssetExecutionContext, settings: ExperimentSettings, config: PlantedBugMatrixConfig) -> pl.DataFrame:
    bugs = config.bugs or list(PLANTED_BUGS)
    experiments = config.experiments or list(MATRIX_MODULES)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="planted_bugs_") as tmp:
        table, facts = build_matrix(bugs, experiments, settings, Path(tmp), log=context.log.info)
    wall = time.perf_counter() - start
    bug_rows = table.filter(~pl.col("bug").str.contains("healthy control"))
    context.add_output_metadata({
        "profile_used": MATRIX_PROFILE,
        "note": f"experiments re-run at the {MATRIX_PROFILE!r} profile regardless of this run's profile "
                f"({settings.profile!r}) to keep the matrix affordable; data in a temporary folder",
        "experiments": ", ".join(experiments),
        "bugs": len(bugs),
        "bugs_caught": int((bug_rows["caught"] == "yes").sum()),
        "false_alarms": int(table.filter(pl.col("bug").str.contains("healthy control"))["checks_turned_red"].sum()),
        "wall_seconds": round(wall, 1),
        "healthy_run_seconds": round(facts["healthy_seconds"], 1),
        "healthy_checks": facts["healthy_checks"],
        "healthy_red_checks (findings, not bugs)": ", ".join(facts["healthy_red_checks"]) or "none",
        "healthy_failed_steps": ", ".join(facts["healthy_failed_steps"]) or "none",
        "unavailable_experiments": "; ".join(facts["unavailable"]) or "none",
        "matrix": dg.MetadataValue.md(markdown_table(table.select("bug", "caught", "caught_by", pl.col("wall_seconds").round(1)))),
    })
    return table


@dg.asset_check(asset=planted_bug_matrix, description="Every planted bug turned at least one check red (or raised FusionError).")
def every_planted_bug_caught(planted_bug_matrix: pl.DataFrame) -> dg.AssetCheckResult:
    bugs = planted_bug_matrix.filter(~pl.col("bug").str.contains("healthy control"))
    missed = bugs.filter(pl.col("caught") != "yes")
    return dg.AssetCheckResult(
        passed=bugs.height > 0 and missed.height == 0,
        metadata={"bugs": bugs.height, "missed": ", ".join(missed["bug"].to_list()) or "none",
                  "caught_by": dg.MetadataValue.md(markdown_table(bugs.select("bug", "caught", "caught_by")))},
    )


@dg.asset_check(asset=planted_bug_matrix, description="A second run with the healthy backend changes no check outcome (no false alarm).")
def healthy_backend_no_false_alarms(planted_bug_matrix: pl.DataFrame) -> dg.AssetCheckResult:
    control = planted_bug_matrix.filter(pl.col("bug").str.contains("healthy control"))
    alarms = control.filter(pl.col("caught") == "yes")
    return dg.AssetCheckResult(
        passed=control.height == 1 and alarms.height == 0,
        metadata={"control_rows": control.height,
                  "flipped_checks": ", ".join(alarms["caught_by"].to_list()) or "none"},
    )
