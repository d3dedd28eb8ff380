"""One run of the planted-bug matrix: the experiments' definitions, their materialization with one
backend and base seed in a folder of its own, and every evaluated check read as a
:class:`~pipeline.verdicts.CheckOutcome` (kind from its declared outcome).

Scoring the runs is :mod:`.harness`; running several at a time is :mod:`.matrix_parallel`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

import dagster as dg

from ... import runs
from ...experiment import Experiment
from ...experiments import EXPERIMENTS
from ...interrupts import raise_if_interrupted
from ...resources import ExperimentSettings
from ...storage import DataFolder, PrecisionIOManager
from ...verdicts import FINDING, CheckOutcome, check_outcome
from .planted_bugs import PLANTED_BUGS, register_planted_backends
from .planted_on import planting, run_backend

#: Experiments the planted-bug matrix runs, by id (in id order): those whose record declares ``matrix="judged"``.
RUNNABLE: dict[str, Experiment] = {e.id: e for e in sorted(EXPERIMENTS, key=lambda e: e.id) if e.matrix == "judged"}
#: What their runs read, materialized beside them (``matrix="upstream"``: S's pools).
UPSTREAM: tuple[Experiment, ...] = tuple(e for e in EXPERIMENTS if e.matrix == "upstream")
MATRIX_EXPERIMENTS = tuple(RUNNABLE)
MATRIX_PROFILE = "smoke"
#: The matrix checks the checks, it does not measure the run's device: its runs compile for the CPU on any
#: machine, so a GPU run spends no GPU time (or Triton compiles) on it and its catches are the same everywhere.
MATRIX_DEVICE = "cpu"
HEALTHY_BACKEND = "inductor"
#: Per planted bug the records declare (``Experiment.planted``): each declaring experiment's id to the claim
#: built to catch it there (one fault can break the claims of several experiments).
DECLARED: dict[str, dict[str, str]] = {
    name: {e.id: e.planted[name] for e in RUNNABLE.values() if name in e.planted}
    for name in dict.fromkeys(n for e in RUNNABLE.values() for n in e.planted)
}


def _declaration_problems() -> list[str]:
    """What is wrong with the records' planted bugs: a name no planted backend has, a record that declares
    bugs but is not judged, a bug nobody declares and no run catches by itself."""
    problems = [
        f"{e.id} declares {n!r}, which is no planted bug"
        for e in RUNNABLE.values()
        for n in e.planted
        if n not in PLANTED_BUGS
    ]
    problems += [
        f"{e.id} declares planted bugs but is not judged" for e in EXPERIMENTS if e.planted and e.matrix != "judged"
    ]
    problems += [
        f"no experiment declares {name}, and no run catches it by itself"
        for name, bug in PLANTED_BUGS.items()
        if not any(name in e.planted for e in RUNNABLE.values()) and not bug.caught_by_any_run
    ]
    return problems


if _declaration_problems():
    raise ValueError("planted bugs: " + "; ".join(_declaration_problems()))


def designed(name: str) -> dict[str, str]:
    """Planted bug ``name``'s catches: each experiment that declares it to its claim's ``asset:check`` prefix,
    or {"": what any run's catch says} for a bug no experiment's claim is built for."""
    return DECLARED.get(name) or {"": PLANTED_BUGS[name].caught_by_any_run}


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
    modules, unavailable = [m for e in UPSTREAM for m in e.load_modules()], []
    generated = [c for e in UPSTREAM for c in e.generated_checks()]
    for exp in experiments:
        if exp not in MATRIX_EXPERIMENTS:
            raise ValueError(
                f"experiment {exp!r} is not runnable in the matrix; choose from {', '.join(MATRIX_EXPERIMENTS)}"
            )
        try:
            modules.extend(RUNNABLE[exp].load_modules())
        except Exception as exc:  # noqa: BLE001
            unavailable.append(f"{exp}: {type(exc).__name__}: {exc}")
        else:
            generated.extend(RUNNABLE[exp].generated_checks())
    assets = list(dg.load_assets_from_modules(modules))
    checks = list(dg.load_asset_checks_from_modules(modules))
    return [*assets, *checks, *generated], unavailable


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


def scored_assets(defs: list[Any], only: tuple[str, ...] = ()) -> list[dg.AssetKey]:
    """The assets a matrix run materializes: everything a check that can reach ERROR reads (its asset
    and additional inputs), with their upstream assets and whole multi-assets. Checks declared as
    findings can never catch a bug, so assets only they (or nothing) read are skipped, e.g. B's
    op-by-op fusion ablation, which would recompile every chain for every bug that damages it.
    ``only`` (experiment ids of :data:`RUNNABLE`) keeps the checks of those experiments and of S alone."""
    checks = [d for d in defs if isinstance(d, dg.AssetChecksDefinition)]
    assets = [d for d in defs if isinstance(d, dg.AssetsDefinition) and not isinstance(d, dg.AssetChecksDefinition)]
    kinds = declared_outcomes(defs)
    groups = {RUNNABLE[e].group for e in only} | {e.group for e in UPSTREAM} if only else None
    group_of = {k: g for a in assets for k, g in a.group_names_by_key.items()}
    wanted: set[dg.AssetKey] = set()
    for c in checks:
        specs = list(c.check_specs)
        if all(kinds.get(f"{s.asset_key.to_user_string()}:{s.name}") == FINDING for s in specs):
            continue
        if groups is not None and not any(group_of.get(s.asset_key) in groups for s in specs):
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
    backend: str,
    defs: list[Any],
    base_dir: Path,
    like: ExperimentSettings,
    seed: int | None = None,
    prune: bool = True,
    only: tuple[str, ...] = (),
) -> MatrixRun:
    """Materialize ``defs`` at smoke size with ``backend`` (base seed ``seed``, default ``like``'s); a
    ``<bug>@<adapter>`` backend runs as that adapter with the bug planted around it (:mod:`.planted_on`).
    Returns every evaluated check as a :class:`~pipeline.verdicts.CheckOutcome` (kind from its spec,
    else its result metadata) with its metadata, and every failed step. ``prune`` materializes only
    :func:`scored_assets`; ``only`` (experiment ids) limits the run to those experiments and S."""
    if only and not prune:
        raise ValueError("a matrix run limited to some experiments materializes only their scored assets: prune it")
    if backend in PLANTED_BUGS:
        register_planted_backends()  # in the process that compiles, before the settings name it
    settings = ExperimentSettings(
        profile=MATRIX_PROFILE,
        device=MATRIX_DEVICE,
        backend=run_backend(backend),  # a bug planted on another compiler runs as that compiler (planted_on)
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
    with planting(backend):
        result = dg.materialize(
            defs,
            resources=resources,
            raise_on_error=False,
            selection=scored_assets(defs, only) if prune else None,
            run_config=quiet,
        )
    outcomes: dict[str, CheckOutcome] = {}
    metadata: dict[str, dict[str, Any]] = {}
    for e in result.get_asset_check_evaluations():
        key = f"{e.asset_key.to_user_string()}:{e.check_name}"
        meta = runs.plain(e.metadata)
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
    raise_if_interrupted(failures)  # an interrupt stops the matrix, not only this run's step
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


class PlannedRun(NamedTuple):
    """One run of a matrix: its folder name under the work folder, its backend and base seed, and the
    experiments it runs (empty: every experiment of the matrix)."""

    label: str
    backend: str
    seed: int
    only: tuple[str, ...] = ()
