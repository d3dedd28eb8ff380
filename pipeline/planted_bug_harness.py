"""The planted-bug harness: re-run experiments with each planted-bug backend and score the runs.

A matrix run materializes a subset of experiments (B, C2, D and the toolkit's assets upstream) at
smoke size in a folder of its own, once with the healthy backend per base seed and once with each
backend of :mod:`pipeline.planted_bugs`. Every evaluated check becomes a
:class:`~pipeline.verdicts.CheckOutcome` read through its declared outcome kind, so scoring needs no
Dagster: a bug is caught only at ERROR, by a contradicted claim, an invalid run or a failed step
that the healthy run at the same seed does not have; every ERROR of a healthy run is a false alarm.

The asset ``planted_bug_matrix`` (:mod:`pipeline.assets.planted_bug_matrix`) wires
:func:`build_matrix` into the code location and judges its table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import dagster as dg
import polars as pl

from .experiments import experiment
from .planted_bugs import PLANTED_BUGS, register_planted_backends
from .progress import track
from .resources import ExperimentSettings
from .storage import DataFolder, PrecisionIOManager
from .verdicts import CLAIM, CONTRADICTED, FINDING, VALIDITY, CheckOutcome, check_outcome

#: Experiments the planted-bug matrix runs (their modules come from the registry; S comes along as upstream).
MATRIX_EXPERIMENTS = ("B", "C2", "D")
MATRIX_PROFILE = "smoke"
HEALTHY_BACKEND = "inductor"
#: Healthy runs need at least this many base seeds for "no false alarm" to be supported.
MIN_HEALTHY_SEEDS = 3
BUG_ROW, HEALTHY_ROW = "planted bug", "healthy seed"


class StepFailure(TypedDict):
    """A step of a matrix run that raised: its key, the root error's class and message, and whether
    the error was precisionkit's ``FusionError`` (no fusion evidence)."""

    step: str
    error: str
    message: str
    fusion: bool


class MatrixRun(TypedDict):
    """One materialization of the matrix's experiments with one backend and base seed."""

    outcomes: dict[str, CheckOutcome]  # ``asset:check`` -> its outcome
    metadata: dict[str, dict[str, Any]]  # ``asset:check`` -> its result metadata (plain values)
    failures: list[StepFailure]
    seed: int
    seconds: float


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
) -> MatrixRun:
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
    outcomes: dict[str, CheckOutcome] = {}
    metadata: dict[str, dict[str, Any]] = {}
    for e in result.get_asset_check_evaluations():
        key = f"{e.asset_key.to_user_string()}:{e.check_name}"
        meta = {k: getattr(v, "value", v) for k, v in e.metadata.items()}
        outcomes[key] = check_outcome(key, e.passed, e.severity, meta, kinds.get(key))
        metadata[key] = meta
    failures: list[StepFailure] = []
    for ev in result.get_step_failure_events():
        err = ev.step_failure_data.error
        text = err.to_string() if err else ""
        failures.append(
            {
                "step": ev.step_key or "",
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


def error_outcomes(run: MatrixRun) -> dict[str, str]:
    """Every ERROR outcome of one run: ``asset:check`` (or ``step <key>``) -> its kind."""
    errors = {key: kind for key, o in sorted(run["outcomes"].items()) if (kind := error_kind(o))}
    for f in run["failures"]:
        errors[f"step {f['step']}"] = (
            "invalid run: FusionError (no fusion evidence)" if f["fusion"] else f"invalid run: step raised {f['error']}"
        )
    return errors


def score_bug(healthy: MatrixRun, bug: MatrixRun) -> dict[str, str]:
    """The bug run's ERROR outcomes that the healthy run (same base seed) does not have: the bug is
    caught when this is not empty."""
    standing = error_outcomes(healthy)
    return {key: kind for key, kind in error_outcomes(bug).items() if key not in standing}


def _first_failure(run: MatrixRun, errors: dict[str, str]) -> tuple[str, str]:
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


class MatrixFacts(TypedDict):
    """What the matrix's table does not hold: the healthy runs' seeds, time and standing WARN checks."""

    healthy_seeds: list[int]
    healthy_seconds: float
    healthy_checks: int
    healthy_warn_checks: list[str]
    unavailable: list[str]


def _matrix_row(
    row: str, bug: str, fault_class: str, description: str, caught: str, run: MatrixRun, errors: dict[str, str]
) -> dict[str, Any]:
    """One row of :data:`MATRIX_SCHEMA` (``unavailable`` is filled in by :func:`build_matrix`)."""
    first, first_meta = _first_failure(run, errors)
    return {
        "row": row,
        "bug": bug,
        "fault_class": fault_class,
        "description": description,
        "seed": run["seed"],
        "caught": caught,
        "caught_by": _caught_by(errors),
        "error_outcomes": len(errors),
        "checks_evaluated": len(run["outcomes"]),
        "unavailable": "",
        "first_failure": first,
        "first_failure_metadata": first_meta,
        "wall_seconds": run["seconds"],
    }


def healthy_row(run: MatrixRun) -> dict[str, Any]:
    """The matrix row of a healthy run: every ERROR outcome of it is a false alarm."""
    errors = error_outcomes(run)
    return _matrix_row(
        HEALTHY_ROW,
        f"{HEALTHY_BACKEND} (healthy, seed {run['seed']})",
        "none (false-alarm control)",
        "the healthy backend; every ERROR outcome of this run is a false alarm",
        "false alarm" if errors else "clean",
        run,
        errors,
    )


def bug_row(name: str, run: MatrixRun, reference: MatrixRun) -> dict[str, Any]:
    """The matrix row of planted bug ``name``: caught by its ERROR outcomes beyond ``reference``'s
    (the healthy run at the same base seed)."""
    bug = PLANTED_BUGS[name]
    errors = score_bug(reference, run)
    return _matrix_row(BUG_ROW, name, bug.fault_class, bug.description, "yes" if errors else "no", run, errors)


def build_matrix(
    bugs: list[str],
    experiments: list[str],
    like: ExperimentSettings,
    work_dir: Path,
    healthy_seeds: list[int] | None = None,
    log: Callable[[str], None] | None = None,
    prune: bool = True,
) -> tuple[pl.DataFrame, MatrixFacts]:
    """The healthy backend once per base seed, then every bug once at the first seed; one row per
    healthy seed (its ERROR outcomes: false alarms) and one per bug (its ERROR outcomes beyond the
    healthy run at the same seed: what caught it). Returns the table and run facts for metadata."""
    register_planted_backends()
    unknown = [b for b in bugs if b not in PLANTED_BUGS]
    if unknown:
        raise ValueError(f"unknown planted bugs {unknown}; known: {', '.join(PLANTED_BUGS)}")
    seeds = list(dict.fromkeys(healthy_seeds or default_healthy_seeds(like)))
    defs, unavailable = matrix_definitions(experiments)

    def run(label: str, backend: str, seed: int) -> MatrixRun:
        out = run_experiments(backend, defs, work_dir / label, like, seed=seed, prune=prune)
        if log:
            log(
                f"{label} ({backend}, seed {seed}): {len(out['outcomes'])} checks, {len(out['failures'])} failed steps, "
                f"{len(error_outcomes(out))} ERROR outcomes, {out['seconds']:.1f} s"
            )
        return out

    healthy_runs = [run(f"healthy_{seed}", HEALTHY_BACKEND, seed) for seed in seeds]
    rows = [healthy_row(out) for out in healthy_runs]
    reference = healthy_runs[0]
    rows.extend(bug_row(name, run(name, name, seeds[0]), reference) for name in track(bugs, log, "planted-bug runs"))
    facts: MatrixFacts = {
        "healthy_seeds": seeds,
        "healthy_seconds": sum(r["seconds"] for r in healthy_runs),
        "healthy_checks": len(reference["outcomes"]),
        "healthy_warn_checks": sorted(
            k for k, o in reference["outcomes"].items() if not o.passed and not error_kind(o)
        ),
        "unavailable": unavailable,
    }
    missing = "; ".join(unavailable)
    table = pl.DataFrame([{**r, "unavailable": missing} for r in rows], schema=MATRIX_SCHEMA)
    return table, facts


SCORING = (
    "a bug is caught when its run has at least one ERROR outcome (claim contradicted, validity check failed, "
    "step failed) that the healthy run at the same base seed does not have; WARN findings and inconclusive "
    "verdicts never count. A healthy run's ERROR outcomes are false alarms."
)
