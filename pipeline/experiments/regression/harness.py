"""The planted-bug harness: re-run experiments with each planted-bug backend and score the runs.

A matrix run materializes a subset of experiments (B, C2, D and the toolkit's assets upstream) at
smoke size in a folder of its own, once with the healthy backend per base seed and once with each
backend of :mod:`pipeline.experiments.regression.planted_bugs`. Every evaluated check becomes a
:class:`~pipeline.verdicts.CheckOutcome` read through its declared outcome kind, so scoring needs no
Dagster: a bug is caught only at ERROR, by a contradicted claim, an invalid run or a failed step
that the healthy run at the same seed does not have; every ERROR of a healthy run is a false alarm.

The runs are mostly single-threaded tracing and compilation, so :func:`run_plan` runs them two at
a time by default: here and in a worker process (:class:`MatrixWorker`) with the same environment
and CPU thread count. Which process ran a run changes nothing in it; results and log lines come
back in plan order.

The asset ``planted_bug_matrix`` (:mod:`pipeline.experiments.regression.matrix`) wires
:func:`build_matrix` into the code location and judges its table.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

import dagster as dg
import polars as pl

from ...experiment import Experiment
from ...progress import Progress
from ...resources import REPO_ROOT, ExperimentSettings
from ...storage import DataFolder, PrecisionIOManager
from ...verdicts import CLAIM, CONTRADICTED, FINDING, VALIDITY, CheckOutcome, check_outcome
from .. import accumulated_error, data_movement, reduction_order, toolkit
from .planted_bugs import PLANTED_BUGS, register_planted_backends

#: Experiments the planted-bug matrix runs, by id (S comes along as their upstream).
RUNNABLE: dict[str, Experiment] = {
    e.id: e for e in (accumulated_error.EXPERIMENT, reduction_order.EXPERIMENT, data_movement.EXPERIMENT)
}
MATRIX_EXPERIMENTS = tuple(RUNNABLE)
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
    modules, unavailable = toolkit.EXPERIMENT.load_modules(), []
    for exp in experiments:
        if exp not in MATRIX_EXPERIMENTS:
            raise ValueError(
                f"experiment {exp!r} is not runnable in the matrix; choose from {', '.join(MATRIX_EXPERIMENTS)}"
            )
        try:
            modules.extend(RUNNABLE[exp].load_modules())
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


class PlannedRun(NamedTuple):
    """One run of a matrix: its folder name under the work folder, its backend and base seed."""

    label: str
    backend: str
    seed: int


def matrix_plan(bugs: list[str], seeds: list[int]) -> list[PlannedRun]:
    """The healthy backend once per base seed, then every bug once at the first seed."""
    return [PlannedRun(f"healthy_{seed}", HEALTHY_BACKEND, seed) for seed in seeds] + [
        PlannedRun(name, name, seeds[0]) for name in bugs
    ]


def parallel_runs_here(requested: int) -> int:
    """How many runs go at a time: ``requested``, at most one per CPU core (the runs are mostly
    single-threaded tracing and compilation, so more would only contend)."""
    if requested < 1:
        raise ValueError(f"parallel runs must be at least 1, got {requested}")
    return max(1, min(requested, os.cpu_count() or 1))


# --- runs in worker processes ----------------------------------------------------------------


class MatrixWorker:
    """A fresh interpreter (``python -m pipeline.experiments.regression.matrix_worker``) that loads the matrix's
    definitions once and then runs whole matrix runs on request, over a socket pair. It inherits
    this process's environment (so the same Inductor cache folder) and CPU thread count, so a run
    gives the same numbers whichever process runs it. A subprocess, not multiprocessing: that
    would re-import the caller's main module, which a script need not guard."""

    def __init__(self, experiments: list[str], threads: int) -> None:
        here, there = multiprocessing.Pipe()  # a socket pair on POSIX
        cmd = [
            sys.executable,
            "-m",
            "pipeline.experiments.regression.matrix_worker",
            "--fd",
            str(there.fileno()),
            "--threads",
            str(threads),
            "--experiments",
            ",".join(experiments),
        ]
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, pass_fds=(there.fileno(),))
        there.close()
        self.conn = here

    def _receive(self) -> Any:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            code = self.proc.wait()
            raise RuntimeError(f"planted-bug matrix worker (pid {self.proc.pid}) exited with status {code}") from None

    def ready(self) -> None:
        """Wait until the worker has loaded the definitions."""
        status, detail = self._receive()
        if status != "ready":
            raise RuntimeError(f"planted-bug matrix worker failed to start: {detail}")

    def run(self, run: PlannedRun, base_dir: Path, like: dict[str, Any], prune: bool) -> MatrixRun:
        self.conn.send((tuple(run), str(base_dir), like, prune))
        status, value = self._receive()
        if status != "ok":
            raise RuntimeError(f"matrix run {run.label} failed in the worker: {value}")
        out: MatrixRun = value
        return out

    def close(self, kill: bool = False, wait: bool = True) -> None:
        """Stop the worker: ask it to exit (``kill``: kill it), then wait for it to exit, or with
        ``wait=False`` leave that to a background thread (an interpreter that has used Inductor
        takes a second or two to shut down, and nothing depends on it any more)."""
        if kill:
            self.proc.kill()
        else:
            with contextlib.suppress(OSError):  # already gone: nothing to tell it
                self.conn.send(None)
        if wait:
            self._reap()
        else:
            threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.conn.close()


def run_plan(
    plan: list[PlannedRun],
    experiments: list[str],
    defs: list[Any],
    like: ExperimentSettings,
    work_dir: Path,
    prune: bool = True,
    parallel: int = 1,
    on_result: Callable[[int, MatrixRun], None] | None = None,
) -> list[MatrixRun]:
    """Every run of ``plan`` (folder ``work_dir / label``) over ``defs``, the
    :func:`matrix_definitions` of ``experiments`` (a worker loads its own), in plan order.

    With ``parallel`` > 1, this process and ``parallel - 1`` :class:`MatrixWorker` processes each
    take the next run as they become free. ``on_result(index, run)`` is called in this thread and
    in plan order (run ``i`` once runs ``0..i`` are finished), so logs read the same however the
    runs were shared out. A run that raises (here or in a worker) stops the plan and its error is
    raised; the workers are stopped either way."""
    results: dict[int, MatrixRun] = {}
    reported = 0

    def report() -> None:
        nonlocal reported
        while reported in results:
            if on_result is not None:
                on_result(reported, results[reported])
            reported += 1

    def run_here(run: PlannedRun) -> MatrixRun:
        return run_experiments(run.backend, defs, work_dir / run.label, like, seed=run.seed, prune=prune)

    workers = min(parallel, len(plan)) - 1 if os.name == "posix" else 0
    if workers < 1:
        for i, run in enumerate(plan):
            results[i] = run_here(run)
            report()
        return [results[i] for i in range(len(plan))]

    pending = deque(enumerate(plan))
    lock = threading.Condition()
    errors: list[BaseException] = []
    plain = {
        "profile": MATRIX_PROFILE,
        "device": like.device,
        "backend": HEALTHY_BACKEND,
        "backend_options": like.backend_options,
        "seed": like.seed,
    }

    def take() -> tuple[int, PlannedRun] | None:
        with lock:
            return pending.popleft() if pending and not errors else None

    def store(i: int, out: MatrixRun) -> None:
        with lock:
            results[i] = out
            lock.notify_all()

    def feed(worker: MatrixWorker) -> None:
        try:
            worker.ready()  # loaded before it takes a run: this process keeps taking runs meanwhile
            while (item := take()) is not None:
                i, run = item
                store(i, worker.run(run, work_dir / run.label, plain, prune))
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            with lock:
                errors.append(exc)
                lock.notify_all()

    import torch

    pool = [MatrixWorker(experiments, torch.get_num_threads()) for _ in range(workers)]
    feeders = [threading.Thread(target=feed, args=(w,), daemon=True) for w in pool]
    for t in feeders:
        t.start()
    failed = False
    try:
        while (item := take()) is not None:
            i, run = item
            store(i, run_here(run))
            report()
        while True:
            with lock:
                done = len(results) == len(plan) or bool(errors) or not any(t.is_alive() for t in feeders)
                if not done:
                    lock.wait(timeout=1.0)
            report()
            if done:
                break
    except BaseException as exc:
        failed = True
        with lock:
            errors.append(exc)
        raise
    finally:
        failed = failed or bool(errors)
        for w in pool:
            if failed:
                w.close(kill=True)
        for t in feeders:
            t.join()
        for w in pool:
            if not failed:
                w.close(wait=False)
    if errors:
        raise errors[0]
    missing = [plan[i].label for i in range(len(plan)) if i not in results]
    if missing:
        raise RuntimeError(f"matrix runs never finished: {', '.join(missing)}")
    report()
    return [results[i] for i in range(len(plan))]


def build_matrix(
    bugs: list[str],
    experiments: list[str],
    like: ExperimentSettings,
    work_dir: Path,
    healthy_seeds: list[int] | None = None,
    log: Callable[[str], None] | None = None,
    prune: bool = True,
    parallel: int = 1,
) -> tuple[pl.DataFrame, MatrixFacts]:
    """The healthy backend once per base seed, then every bug once at the first seed (``parallel``
    runs at a time, see :func:`run_plan`); one row per healthy seed (its ERROR outcomes: false
    alarms) and one per bug (its ERROR outcomes beyond the healthy run at the same seed: what
    caught it). Returns the table and run facts for metadata."""
    register_planted_backends()
    unknown = [b for b in bugs if b not in PLANTED_BUGS]
    if unknown:
        raise ValueError(f"unknown planted bugs {unknown}; known: {', '.join(PLANTED_BUGS)}")
    seeds = list(dict.fromkeys(healthy_seeds or default_healthy_seeds(like)))
    defs, unavailable = matrix_definitions(experiments)
    plan = matrix_plan(bugs, seeds)
    progress = Progress(log, "planted-bug runs", len(bugs))

    def logged(i: int, out: MatrixRun) -> None:
        run = plan[i]
        if log:
            log(
                f"{run.label} ({run.backend}, seed {run.seed}): {len(out['outcomes'])} checks, "
                f"{len(out['failures'])} failed steps, {len(error_outcomes(out))} ERROR outcomes, "
                f"{out['seconds']:.1f} s"
            )
        if i >= len(seeds):
            progress.advance()

    runs = run_plan(plan, experiments, defs, like, work_dir, prune=prune, parallel=parallel, on_result=logged)
    healthy_runs, bug_runs = runs[: len(seeds)], runs[len(seeds) :]
    rows = [healthy_row(out) for out in healthy_runs]
    reference = healthy_runs[0]
    rows.extend(bug_row(name, out, reference) for name, out in zip(bugs, bug_runs, strict=True))
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
