"""Regression: comparison with a promoted baseline, and the planted-bug suite (mutation testing).

* ``baseline_comparison`` compares every experiment's stored tables with the CURRENT baseline
  (see :mod:`pipeline.baseline`). Its checks use the three outcomes of :mod:`pipeline.verdicts`:
  the claim "numerics unchanged" is contradicted by a move the worse way beyond tolerance; a
  baseline item missing now (or one that cannot be compared) makes the comparison invalid;
  improvements, generated-code changes, provenance changes (commit, torch version) and
  experiments absent on one side are findings.
* ``planted_bug_matrix`` re-runs a subset of experiments at smoke size with the healthy backend
  over several base seeds and with each deliberately faulty backend of :mod:`pipeline.planted_bugs`.
  A bug is caught only at ERROR: a contradicted claim, an invalid run or a failed step that the
  healthy run at the same seed does not have. Every ERROR of a healthy run is a false alarm.
* ``promote_baseline_job`` (an op, launchable from the UI) promotes the stored tables.
"""

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
from pydantic import Field

from .. import baseline
from ..experiments import experiment, group_of
from ..planted_bugs import PLANTED_BUGS, register_planted_backends
from ..progress import track
from ..resources import ExperimentSettings
from ..storage import DataFolder, PrecisionIOManager
from ..tables import markdown_table
from ..verdicts import (
    CLAIM,
    CONTRADICTED,
    FINDING,
    INCONCLUSIVE,
    SUPPORTED,
    VALIDITY,
    CheckOutcome,
    Rule,
    check_outcome,
    claim_check,
    claim_result,
    finding_check,
    finding_result,
    validity_check,
    validity_result,
)

GROUP = group_of("Regression")
# Importing the code location registers the planted backends, so a run launched with
# settings.backend = planted_* (e.g. from the UI) finds them.
register_planted_backends()

# --- provenance from the Dagster instance ----------------------------------------------------


def recorded_provenance(
    instance: dg.DagsterInstance | None, asset: str, stored: Path | None
) -> tuple[dict[str, Any], str] | None:
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


def promote_with_instance(
    instance: dg.DagsterInstance | None,
    base_dir: str,
    settings: ExperimentSettings,
    allow_partial: bool = False,
    note: str = "",
) -> baseline.Promotion:
    """Promote ``<base_dir>/<profile>`` with provenance from the instance's events where recorded."""
    data_dir = Path(base_dir) / settings.profile
    return baseline.promote(
        base_dir,
        settings.profile,
        allow_partial=allow_partial,
        note=note,
        environment=settings.provenance(),
        provenance_lookup=lambda asset: recorded_provenance(instance, asset, baseline.stored_file(data_dir, asset)),
    )


# --- baseline comparison ---------------------------------------------------------------------


_BASELINE_DEPS = [dg.AssetKey(a) for assets in baseline.EXPERIMENTS.values() for a in assets]


@dg.asset(
    group_name=GROUP,
    deps=_BASELINE_DEPS,
    required_resource_keys={"data", "settings"},
    description="Every experiment's stored tables against the promoted baseline (data/baselines/<profile>/CURRENT): "
    "bit-exact items (A output md5s, D bit_equal/ulp_max, C1-C3 outputs and ULP tables), B's per-set ulp_max "
    "distributions with a bootstrap noise tolerance, E's eval loss against its data-order noise band. One row per "
    "item: experiment, item, baseline_value, current_value, delta, tolerance, moved, severity. Feeds the drift page.",
    kinds={"polars"},
)
def baseline_comparison(context: dg.AssetExecutionContext) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    data: DataFolder = context.resources.data
    base_dir = data.root
    data_dir = data.profile_dir(settings.profile)
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

BASELINE_RULE = Rule(
    claim="numerics unchanged against the promoted baseline of the same profile",
    metric="per compared item (bit-exact outputs and tables: md5s, bit_equal, ulp_max, C1-C3 tables; B's per-set "
    "ULP statistics per chain x dtype x path; E's final eval loss): a move the worse way beyond the item's tolerance",
    decision="contradicted when any compared item moved the worse way beyond its tolerance; supported when a baseline "
    "is promoted, at least one item was compared and none moved the worse way; inconclusive when no baseline is "
    "promoted or nothing could be compared. Improvements and generated-code changes are findings.",
    threshold="per item: 0 for bit-exact items; B: bootstrap quantile of |difference| between two resamples of the "
    "baseline's sets; E: the noise band between its two data orders",
    unit="the item's own unit (hash, ULP, loss)",
    confidence=baseline.BOOTSTRAP_QUANTILE,
    sample_size=f"every item of every experiment in both the baseline and the current tables; B: every input set of "
    f"the profile, {baseline.BOOTSTRAP_RESAMPLES} bootstrap pairs per statistic",
    derivation="For a fixed seed, code and device the bit-exact items are deterministic, so any change is a change; "
    "B's statistics vary between input draws, so their tolerance is measured from the baseline's own sets (its "
    "quantile is the confidence above); E's tolerance is the spread its own data-order control shows.",
)


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
    "baseline or a partial run) are named. Nothing is compared for them.",
)
def baseline_covers_every_experiment(baseline_comparison: pl.DataFrame) -> dg.AssetCheckResult:
    presence = baseline_comparison.filter(pl.col("kind") == "presence")
    gaps = presence.filter(pl.col("status") != "compared")
    findings = [f"{r['experiment']}: {r['status']}" for r in gaps.iter_rows(named=True)]
    return finding_result(findings, {"gaps": ", ".join(findings) or "none"})


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


# --- planted-bug matrix ----------------------------------------------------------------------

#: Experiments re-run per bug and their modules (S assets come along as upstream).
#: Experiments the planted-bug matrix runs (their modules come from the registry).
MATRIX_EXPERIMENTS = ("B", "C2", "D")
MATRIX_PROFILE = "smoke"
HEALTHY_BACKEND = "inductor"
#: Healthy runs need at least this many base seeds for "no false alarm" to be supported.
MIN_HEALTHY_SEEDS = 3
BUG_ROW, HEALTHY_ROW = "planted bug", "healthy seed"

MUTATION_RULE = Rule(
    claim="the harness catches every planted bug at ERROR",
    metric="per bug run: ERROR outcomes that the healthy run at the same base seed does not have (a claim "
    "verdict contradicted, a validity check failed, a step failed, e.g. FusionError for missing fusion "
    "evidence); WARN findings and inconclusive verdicts are not counted",
    decision="contradicted when any bug run has no such ERROR outcome; supported when every bug run has at least "
    "one; inconclusive when no bug ran",
    threshold=1.0,
    unit="ERROR outcomes per bug run, beyond the healthy run's",
    confidence=None,
    sample_size="one run per planted bug (every bug of pipeline.planted_bugs unless configured or limited by the "
    "profile's planted_bugs: smoke runs one bug per way of being caught), at the first healthy base seed",
    derivation="A planted bug is a known wrong result: a harness that lets it through with only WARN findings or "
    "inconclusive verdicts would let the same real fault through (DESIGN principle 6: planted faults must flip a "
    "verdict at ERROR). Outcomes the healthy run already has are subtracted so a standing failure is not credited.",
)

FALSE_ALARM_RULE = Rule(
    claim="the healthy backend raises no ERROR outcome, over several base seeds",
    metric="per healthy run: ERROR outcomes (claim verdicts contradicted, validity checks failed, steps failed)",
    decision=f"contradicted when any healthy run has an ERROR outcome; supported when at least {MIN_HEALTHY_SEEDS} "
    f"base seeds ran and none has one; inconclusive with fewer than {MIN_HEALTHY_SEEDS} seeds",
    threshold=0.0,
    unit="ERROR outcomes per healthy run",
    confidence=None,
    sample_size=f">= {MIN_HEALTHY_SEEDS} base seeds (the run's seed and the next ones unless configured), one healthy "
    "run each",
    derivation="Every experiment's rule is built so the healthy backend does not reach ERROR (derived bounds, "
    "Holm-adjusted tests, bit-exactness where the plan promises it); inputs drawn from other seeds expose a rule "
    "that only holds for one draw. A single ERROR here is a defect of the harness, not noise.",
)


class PlantedBugMatrixConfig(dg.Config):
    """Which bugs, experiments and healthy base seeds the matrix runs (empty: the profile's bugs, else all / the
    default)."""

    bugs: list[str] = Field(default_factory=list)
    experiments: list[str] = Field(default_factory=list)
    healthy_seeds: list[int] = Field(default_factory=list)
    #: Skip assets that only finding checks (or no check) read: they cannot produce an ERROR outcome
    #: by a check, only by crashing. False runs every asset of the chosen experiments.
    skip_finding_only_assets: bool = True


def matrix_definitions(experiments: list[str]) -> tuple[list[Any], list[str]]:
    """Assets and checks of the S module and the chosen experiments' modules; unavailable modules
    (an experiment still being written) are reported instead of failing the matrix."""
    modules, unavailable = experiment("S").load_modules(), []
    for exp in experiments:
        if exp not in MATRIX_EXPERIMENTS:
            raise ValueError(
                f"experiment {exp!r} is not runnable in the matrix; choose from {', '.join(MATRIX_EXPERIMENTS)}"
            )
        try:
            modules.extend(experiment(exp).load_modules())
        except Exception as exc:  # noqa: BLE001
            unavailable.append(f"{exp}: {type(exc).__name__}: {exc}")
    assets = list(dg.load_assets_from_modules(modules))
    checks = list(dg.load_asset_checks_from_modules(modules))
    return [*assets, *checks], unavailable


def declared_outcomes(defs: list[Any]) -> dict[str, str]:
    """``asset:check`` -> the outcome kind its spec declares (validity / claim / finding), for every
    check of ``defs`` that declares one (asset checks and checks carried by multi-assets)."""
    out: dict[str, str] = {}
    for d in defs:
        for spec in getattr(d, "check_specs", None) or ():
            kind = (spec.metadata or {}).get("outcome")
            if kind is not None:
                out[f"{spec.asset_key.to_user_string()}:{spec.name}"] = str(getattr(kind, "value", kind))
    return out


def scored_assets(defs: list[Any]) -> list[dg.AssetKey]:
    """The assets a matrix run materializes: everything a check that can reach ERROR reads (its asset
    and additional inputs), with their upstream assets and whole multi-assets. Checks declared as
    findings can never catch a bug, so assets only they (or nothing) read are skipped, e.g. B's
    op-by-op fusion ablation, which would recompile every chain for every bug that damages it."""
    checks = [d for d in defs if isinstance(d, dg.AssetChecksDefinition)]
    assets = [d for d in defs if isinstance(d, dg.AssetsDefinition) and not isinstance(d, dg.AssetChecksDefinition)]
    kinds = declared_outcomes(defs)
    wanted: set[dg.AssetKey] = set()
    for c in checks:
        specs = list(c.check_specs)
        if all(kinds.get(f"{s.asset_key.to_user_string()}:{s.name}") == FINDING for s in specs):
            continue
        wanted.update(s.asset_key for s in specs)
        wanted.update(c.keys_by_input_name.values())
    by_key = {k: a for a in assets for k in a.keys}
    selected: set[dg.AssetKey] = set()
    todo = [k for k in wanted if k in by_key]
    while todo:
        key = todo.pop()
        if key in selected:
            continue
        owner = by_key[key]
        selected.update(owner.keys)  # a multi-asset runs whole
        todo.extend(k for k in [*owner.keys, *owner.dependency_keys] if k in by_key and k not in selected)
    return sorted(selected, key=lambda k: k.to_user_string())


def run_experiments(
    backend: str, defs: list[Any], base_dir: Path, like: ExperimentSettings, seed: int | None = None, prune: bool = True
) -> dict[str, Any]:
    """Materialize ``defs`` at smoke size with ``backend`` (base seed ``seed``, default ``like``'s).
    Returns every evaluated check as a :class:`~pipeline.verdicts.CheckOutcome` (kind from its spec,
    else its result metadata) with its metadata, and every failed step. ``prune`` materializes only
    :func:`scored_assets`."""
    settings = ExperimentSettings(
        profile=MATRIX_PROFILE,
        device=like.device,
        backend=backend,
        backend_options=like.backend_options,
        seed=like.seed if seed is None else seed,
    )
    data = DataFolder(root=str(base_dir))
    resources = {"settings": settings, "data": data, "io_manager": PrecisionIOManager(data=data, settings=settings)}
    kinds = declared_outcomes(defs)
    start = time.perf_counter()
    # The nested run's own console log stays silent: this harness records its outcomes and failures
    # itself, and Dagster's default console logger would otherwise print DEBUG events to the terminal
    # for the rest of the outer run.
    quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    result = dg.materialize(
        defs,
        resources=resources,
        raise_on_error=False,
        selection=scored_assets(defs) if prune else None,
        run_config=quiet,
    )
    outcomes, metadata = {}, {}
    for e in result.get_asset_check_evaluations():
        key = f"{e.asset_key.to_user_string()}:{e.check_name}"
        meta = {k: getattr(v, "value", v) for k, v in e.metadata.items()}
        outcomes[key] = check_outcome(key, e.passed, e.severity, meta, kinds.get(key))
        metadata[key] = meta
    failures = []
    for ev in result.all_events:
        if ev.event_type_value != "STEP_FAILURE":
            continue
        err = ev.event_specific_data.error
        text = err.to_string() if err else ""
        failures.append(
            {
                "step": ev.step_key,
                "error": _root_cls(err),
                "message": _root_message(err)[:600],
                "fusion": "FusionError" in text,
            }
        )
    return {
        "outcomes": outcomes,
        "metadata": metadata,
        "failures": failures,
        "seed": settings.seed,
        "seconds": time.perf_counter() - start,
    }


def _root_cls(err: Any) -> str:
    while err is not None and getattr(err, "cause", None) is not None:
        err = err.cause
    return getattr(err, "cls_name", None) or "error"


def _root_message(err: Any) -> str:
    while err is not None and getattr(err, "cause", None) is not None:
        err = err.cause
    return (getattr(err, "message", "") or "").strip()


def error_kind(outcome: CheckOutcome) -> str | None:
    """What an evaluated check counts as at ERROR: "claim contradicted", "invalid run", or None.

    Only a claim whose verdict is contradicted (at ERROR) and a validity check that failed at ERROR
    count; findings, inconclusive or supported verdicts and WARN failures never do."""
    if not outcome.is_error:
        return None
    if outcome.outcome == CLAIM:
        return "claim contradicted" if outcome.verdict == CONTRADICTED else None
    if outcome.outcome == VALIDITY:
        return "invalid run"
    return None


def error_outcomes(run: dict[str, Any]) -> dict[str, str]:
    """Every ERROR outcome of one run: ``asset:check`` (or ``step <key>``) -> its kind."""
    errors = {key: kind for key, o in sorted(run["outcomes"].items()) if (kind := error_kind(o))}
    for f in run["failures"]:
        errors[f"step {f['step']}"] = (
            "invalid run: FusionError (no fusion evidence)" if f["fusion"] else f"invalid run: step raised {f['error']}"
        )
    return errors


def score_bug(healthy: dict[str, Any], bug: dict[str, Any]) -> dict[str, str]:
    """The bug run's ERROR outcomes that the healthy run (same base seed) does not have: the bug is
    caught when this is not empty."""
    standing = error_outcomes(healthy)
    return {key: kind for key, kind in error_outcomes(bug).items() if key not in standing}


def _first_failure(run: dict[str, Any], errors: dict[str, str]) -> tuple[str, str]:
    """The first counted ERROR outcome and its metadata (or the failed step's message) as text."""
    for key in errors:
        if key in run["metadata"]:
            return key, json.dumps(run["metadata"][key], default=str, sort_keys=True)[:1500]
        step = key.removeprefix("step ")
        for f in run["failures"]:
            if f["step"] == step:
                return key, f"{f['error']}: {f['message']}"
    return "", ""


def _caught_by(errors: dict[str, str]) -> str:
    return ", ".join(f"{key} ({kind})" for key, kind in errors.items())


MATRIX_SCHEMA = {
    "row": pl.String,
    "bug": pl.String,
    "fault_class": pl.String,
    "description": pl.String,
    "seed": pl.Int64,
    "caught": pl.String,
    "caught_by": pl.String,
    "error_outcomes": pl.Int64,
    "checks_evaluated": pl.Int64,
    "unavailable": pl.String,
    "first_failure": pl.String,
    "first_failure_metadata": pl.String,
    "wall_seconds": pl.Float64,
}


def default_healthy_seeds(like: ExperimentSettings) -> list[int]:
    """The run's base seed and the next ones, as many as the profile's ``planted_bug_healthy_seeds``
    (each derives independent input streams)."""
    return [like.seed + i for i in range(like.get_profile().planted_bug_healthy_seeds)]


def build_matrix(
    bugs: list[str],
    experiments: list[str],
    like: ExperimentSettings,
    work_dir: Path,
    healthy_seeds: list[int] | None = None,
    log: Any = None,
    prune: bool = True,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The healthy backend once per base seed, then every bug once at the first seed; one row per
    healthy seed (its ERROR outcomes: false alarms) and one per bug (its ERROR outcomes beyond the
    healthy run at the same seed: what caught it). Returns the table and run facts for metadata."""
    register_planted_backends()
    unknown = [b for b in bugs if b not in PLANTED_BUGS]
    if unknown:
        raise ValueError(f"unknown planted bugs {unknown}; known: {', '.join(PLANTED_BUGS)}")
    seeds = list(dict.fromkeys(healthy_seeds or default_healthy_seeds(like)))
    defs, unavailable = matrix_definitions(experiments)
    missing = "; ".join(unavailable)

    def run(label: str, backend: str, seed: int) -> dict[str, Any]:
        out = run_experiments(backend, defs, work_dir / label, like, seed=seed, prune=prune)
        if log:
            log(
                f"{label} ({backend}, seed {seed}): {len(out['outcomes'])} checks, {len(out['failures'])} failed steps, "
                f"{len(error_outcomes(out))} ERROR outcomes, {out['seconds']:.1f} s"
            )
        return out

    rows, healthy_runs = [], []
    for seed in seeds:
        out = run(f"healthy_{seed}", HEALTHY_BACKEND, seed)
        healthy_runs.append(out)
        errors = error_outcomes(out)
        first, first_meta = _first_failure(out, errors)
        rows.append(
            {
                "row": HEALTHY_ROW,
                "bug": f"{HEALTHY_BACKEND} (healthy, seed {seed})",
                "fault_class": "none (false-alarm control)",
                "description": "the healthy backend; every ERROR outcome of this run is a false alarm",
                "seed": seed,
                "caught": "false alarm" if errors else "clean",
                "caught_by": _caught_by(errors),
                "error_outcomes": len(errors),
                "checks_evaluated": len(out["outcomes"]),
                "unavailable": missing,
                "first_failure": first,
                "first_failure_metadata": first_meta,
                "wall_seconds": out["seconds"],
            }
        )
    reference = healthy_runs[0]
    for name in track(bugs, log, "planted-bug runs"):
        bug = PLANTED_BUGS[name]
        out = run(name, name, seeds[0])
        errors = score_bug(reference, out)
        first, first_meta = _first_failure(out, errors)
        rows.append(
            {
                "row": BUG_ROW,
                "bug": name,
                "fault_class": bug.fault_class,
                "description": bug.description,
                "seed": seeds[0],
                "caught": "yes" if errors else "no",
                "caught_by": _caught_by(errors),
                "error_outcomes": len(errors),
                "checks_evaluated": len(out["outcomes"]),
                "unavailable": missing,
                "first_failure": first,
                "first_failure_metadata": first_meta,
                "wall_seconds": out["seconds"],
            }
        )
    facts = {
        "healthy_seeds": seeds,
        "healthy_seconds": sum(r["seconds"] for r in healthy_runs),
        "healthy_checks": len(reference["outcomes"]),
        "healthy_warn_checks": sorted(
            k for k, o in reference["outcomes"].items() if not o.passed and not error_kind(o)
        ),
        "unavailable": unavailable,
    }
    return pl.DataFrame(rows, schema=MATRIX_SCHEMA), facts


SCORING = (
    "a bug is caught when its run has at least one ERROR outcome (claim contradicted, validity check failed, "
    "step failed) that the healthy run at the same base seed does not have; WARN findings and inconclusive "
    "verdicts never count. A healthy run's ERROR outcomes are false alarms."
)


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    description="Mutation testing of the harness: experiments B, C2 and D re-run at smoke size (whatever the outer "
    f"profile) with the healthy backend over {MIN_HEALTHY_SEEDS}+ base seeds and with each planted-bug backend "
    "(pipeline/planted_bugs.py) at the first seed. Per bug: caught when its run has an ERROR outcome (claim "
    "contradicted, run invalid, step failed such as FusionError) that the healthy run lacks, and by which; per "
    "healthy seed: its ERROR outcomes (false alarms, target 0). Outcome kinds are read from each check's declared "
    "outcome through pipeline.verdicts.",
    kinds={"polars"},
)
def planted_bug_matrix(
    context: dg.AssetExecutionContext, settings: ExperimentSettings, config: PlantedBugMatrixConfig
) -> pl.DataFrame:
    bugs = config.bugs or list(settings.get_profile().planted_bugs or PLANTED_BUGS)
    not_run = [b for b in PLANTED_BUGS if b not in bugs]
    experiments = config.experiments or list(MATRIX_EXPERIMENTS)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="planted_bugs_") as tmp:
        table, facts = build_matrix(
            bugs,
            experiments,
            settings,
            Path(tmp),
            healthy_seeds=config.healthy_seeds or None,
            log=context.log.info,
            prune=config.skip_finding_only_assets,
        )
    wall = time.perf_counter() - start
    bug_rows = table.filter(pl.col("row") == BUG_ROW)
    healthy_rows = table.filter(pl.col("row") == HEALTHY_ROW)
    context.add_output_metadata(
        {
            "profile_used": MATRIX_PROFILE,
            "note": f"experiments re-run at the {MATRIX_PROFILE!r} profile regardless of this run's profile "
            f"({settings.profile!r}) to keep the matrix affordable; data in a temporary folder",
            "scoring": SCORING,
            "experiments": ", ".join(experiments),
            "assets_run": "only assets read by validity/claim checks (and upstream)"
            if config.skip_finding_only_assets
            else "every asset of the experiments",
            "bugs": bug_rows.height,
            "bugs_caught": int((bug_rows["caught"] == "yes").sum()),
            "bugs_caught_of_total": f"{int((bug_rows['caught'] == 'yes').sum())} / {bug_rows.height}",
            "bugs_missed": ", ".join(bug_rows.filter(pl.col("caught") != "yes")["bug"].to_list()) or "none",
            "bugs_not_run": ", ".join(not_run) or "none",
            "healthy_seeds": ", ".join(str(s) for s in facts["healthy_seeds"]),
            "false_alarms": int(healthy_rows["error_outcomes"].sum()),
            "false_alarms_by_seed": ", ".join(
                f"{r['seed']}={r['error_outcomes']}" for r in healthy_rows.iter_rows(named=True)
            ),
            "wall_seconds": round(wall, 1),
            "healthy_run_seconds": round(facts["healthy_seconds"], 1),
            "healthy_checks": facts["healthy_checks"],
            "healthy_warn_checks (findings / inconclusive, never counted)": ", ".join(facts["healthy_warn_checks"])
            or "none",
            "unavailable_experiments": "; ".join(facts["unavailable"]) or "none",
            "matrix": dg.MetadataValue.md(
                markdown_table(
                    table.select(
                        "bug", "fault_class", "caught", "caught_by", "error_outcomes", pl.col("wall_seconds").round(1)
                    )
                )
            ),
        }
    )
    return table


@validity_check(
    asset=planted_bug_matrix,
    description="The matrix ran what it says: every requested experiment module was importable, and every run "
    "evaluated checks or failed a step (a run with neither tested nothing).",
)
def planted_bug_matrix_run_valid(planted_bug_matrix: pl.DataFrame) -> dg.AssetCheckResult:
    table = planted_bug_matrix
    problems = []
    unavailable = sorted({u for u in table["unavailable"].to_list() if u})
    if unavailable:
        problems.append("experiments not run: " + "; ".join(unavailable))
    empty = table.filter((pl.col("checks_evaluated") == 0) & (pl.col("error_outcomes") == 0))
    if empty.height:
        problems.append("runs that evaluated no check: " + ", ".join(empty["bug"].to_list()))
    if table.filter(pl.col("row") == HEALTHY_ROW).height == 0:
        problems.append("no healthy run")
    return validity_result(problems, {"runs": table.height})


@claim_check(
    rule=MUTATION_RULE,
    asset=planted_bug_matrix,
    description="Every planted bug is caught at ERROR: its run has a contradicted claim, an invalid run or a failed "
    "step that the healthy run at the same seed does not have.",
)
def every_planted_bug_caught(planted_bug_matrix: pl.DataFrame) -> dg.AssetCheckResult:
    bugs = planted_bug_matrix.filter(pl.col("row") == BUG_ROW)
    missed = bugs.filter(pl.col("caught") != "yes")
    meta = {
        "bugs": bugs.height,
        "caught": bugs.height - missed.height,
        "missed": ", ".join(missed["bug"].to_list()) or "none",
        "caught_by": dg.MetadataValue.md(markdown_table(bugs.select("bug", "fault_class", "caught", "caught_by"))),
    }
    if bugs.height == 0:
        return claim_result(INCONCLUSIVE, MUTATION_RULE, "no planted bug ran", meta)
    if missed.height:
        return claim_result(
            CONTRADICTED,
            MUTATION_RULE,
            f"{missed.height} of {bugs.height} planted bugs raised no ERROR outcome beyond the healthy "
            f"run's: {', '.join(missed['bug'].to_list())}",
            meta,
        )
    return claim_result(SUPPORTED, MUTATION_RULE, f"all {bugs.height} planted bugs caught at ERROR", meta)


@claim_check(
    rule=FALSE_ALARM_RULE,
    asset=planted_bug_matrix,
    description=f"The healthy backend has no ERROR outcome on any of >= {MIN_HEALTHY_SEEDS} base seeds.",
)
def healthy_backend_no_false_alarms(planted_bug_matrix: pl.DataFrame) -> dg.AssetCheckResult:
    healthy = planted_bug_matrix.filter(pl.col("row") == HEALTHY_ROW)
    alarms = healthy.filter(pl.col("error_outcomes") > 0)
    meta = {
        "healthy_seeds": healthy.height,
        "error_outcomes_by_seed": ", ".join(f"{r['seed']}={r['error_outcomes']}" for r in healthy.iter_rows(named=True))
        or "none",
        "false_alarms": "; ".join(f"seed {r['seed']}: {r['caught_by']}" for r in alarms.iter_rows(named=True))
        or "none",
    }
    if alarms.height:
        return claim_result(
            CONTRADICTED,
            FALSE_ALARM_RULE,
            f"{int(alarms['error_outcomes'].sum())} ERROR outcome(s) on {alarms.height} of "
            f"{healthy.height} healthy seeds",
            meta,
        )
    if healthy.height < MIN_HEALTHY_SEEDS:
        return claim_result(
            INCONCLUSIVE,
            FALSE_ALARM_RULE,
            f"only {healthy.height} healthy seed(s); the rule needs {MIN_HEALTHY_SEEDS}",
            meta,
        )
    return claim_result(SUPPORTED, FALSE_ALARM_RULE, f"0 ERROR outcomes on {healthy.height} healthy seeds", meta)
