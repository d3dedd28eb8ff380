"""The planted-bug harness: re-run experiments with each planted-bug backend and score the runs.

A matrix run materializes a subset of experiments (those whose records declare ``matrix="judged"``, with
the toolkit's assets upstream) at smoke size in a folder of its own, once with the healthy backend per
base seed and once with each backend of :mod:`pipeline.instruments.regression.planted_bugs`
(:mod:`.matrix_runs`; several at a time, :mod:`.matrix_parallel`). Every evaluated check becomes a
:class:`~pipeline.verdicts.CheckOutcome` read through its declared outcome kind, so scoring needs no
Dagster: a bug is caught only at ERROR, by a contradicted claim, an invalid run or a failed step
that the healthy run at the same seed does not have; every ERROR of a healthy run is a false alarm
(:data:`.rules.SCORING`).

The asset ``planted_bug_matrix`` (:mod:`pipeline.instruments.regression.matrix`) wires
:func:`build_matrix` into the code location and judges its table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import polars as pl

from ...progress import Progress
from ...resources import ExperimentSettings
from ...verdicts import CLAIM, CONTRADICTED, INCONCLUSIVE, NOT_APPLICABLE, VALIDITY, CheckOutcome
from .matrix_parallel import run_matrix_plan
from .matrix_runs import HEALTHY_BACKEND, MatrixRun, PlannedRun, designed, matrix_definitions
from .planted_bugs import PLANTED_BUGS, register_planted_backends
from .planted_on import INDUCTOR, not_applicable, planted_name, split_planted
from .rules import BUG_ROW, HEALTHY_ROW
from .spec import ID


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
    "designed_catch": pl.String,  # the claim built to catch the bug (bug rows); "" for healthy rows
}


def default_healthy_seeds(like: ExperimentSettings) -> list[int]:
    """The run's base seed and the next ones, as many as the profile's matrix sizes say
    (``healthy_seeds``; each derives independent input streams)."""
    return [like.seed + i for i in range(like.sizes(ID).healthy_seeds)]


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
        "designed_catch": "",
    }


#: ``caught`` of a healthy run in which a step raised: the control did not run, so it says nothing
#: about false alarms, and bugs scored against it are not judged (the torch in use may lack what a
#: step needs, a machine may run out of memory): never counted as a false alarm.
CONTROL_INVALID = "control invalid"


def healthy_row(run: MatrixRun, compiler: str = HEALTHY_BACKEND) -> dict[str, Any]:
    """The matrix row of a healthy run of ``compiler``: every ERROR outcome of it is a false alarm, unless
    a step raised, which makes the control invalid (:data:`CONTROL_INVALID`)."""
    errors = error_outcomes(run)
    caught = CONTROL_INVALID if run["failures"] else ("false alarm" if errors else "clean")
    return _matrix_row(
        HEALTHY_ROW,
        f"{compiler} (healthy, seed {run['seed']})",
        "none (false-alarm control)",
        "the healthy backend; every ERROR outcome of this run is a false alarm",
        caught,
        run,
        errors,
    )


def invalid_controls(matrix: pl.DataFrame) -> str:
    """Why the healthy control is invalid ("" when every healthy run ran every step)."""
    bad = matrix.filter((pl.col("row") == HEALTHY_ROW) & (pl.col("caught") == CONTROL_INVALID))
    return "; ".join(
        f"healthy seed {r['seed']}: {r['first_failure']} ({r['first_failure_metadata'][:300]})"
        for r in bad.iter_rows(named=True)
    )


#: ``caught`` of a bug whose ERROR outcomes beyond the healthy run include none of its designed claim.
NOT_BY_ITS_CLAIM = "not by its claim"


def caught_verdict(designed: str, errors: dict[str, str]) -> str:
    """ "yes" when an ERROR outcome of the claim built for the fault (``designed``, a prefix of its
    ``asset:check (kind)`` entry) is among ``errors``; :data:`NOT_BY_ITS_CLAIM` when only other checks
    caught it; "no" when nothing did. A bug with no designed claim counts any ERROR."""
    if not errors:
        return "no"
    if not designed:
        return "yes"
    entries = [f"{key} ({kind})" for key, kind in errors.items()]
    return "yes" if any(e.startswith(designed) or designed in e for e in entries) else NOT_BY_ITS_CLAIM


#: ``caught`` of a bug that nothing caught while every claim built for it could not judge in the healthy
#: run (inconclusive: a compiler that fused none of the rows the claim judges): not a miss, no catch.
CANNOT_JUDGE = "cannot judge"


def unjudged(catches: list[str], reference: MatrixRun) -> str:
    """Why the claims built for a bug (``catches``) judged nothing in the healthy run ``reference``: each
    is a claim there and none is supported or contradicted ("" when one of them judged, or none ran)."""
    found = [(key, o) for key, o in reference["outcomes"].items() if any(key.startswith(c) for c in catches if c)]
    if not found or any(o.outcome != CLAIM or o.verdict != INCONCLUSIVE for _, o in found):
        return ""
    return "; ".join(f"{key} is inconclusive in the healthy run" for key, _ in found)


def bug_row(name: str, run: MatrixRun, reference: MatrixRun) -> dict[str, Any]:
    """The matrix row of planted bug ``name``: its ERROR outcomes beyond ``reference``'s (the healthy
    run at the same base seed), scored against the claims built to catch it (:func:`caught_verdict`; caught
    by its claim where any of them caught it); :data:`CANNOT_JUDGE`, with the reason as its first failure,
    where nothing caught it and its claims judged nothing in the healthy run."""
    bug, catches = PLANTED_BUGS[name], list(designed(name).values())
    errors = score_bug(reference, run)
    verdicts = [caught_verdict(catch, errors) for catch in catches]
    caught = "yes" if "yes" in verdicts else verdicts[0]
    why = unjudged(catches, reference) if caught == "no" else ""
    row = _matrix_row(BUG_ROW, name, bug.fault_class, bug.description, CANNOT_JUDGE if why else caught, run, errors)
    if why:
        row["first_failure"] = why
    row["designed_catch"] = " or ".join(catches)
    return row


#: ``caught`` of a bug that does not apply to the matrix's compiler (:func:`.planted_on.not_applicable`):
#: not run, and never counted as missed.


def not_applicable_row(name: str, why: str, seed: int) -> dict[str, Any]:
    """The matrix row of planted bug ``name`` that was not run on this compiler, ``why`` as its first failure."""
    bug = PLANTED_BUGS[name]
    empty: MatrixRun = {"outcomes": {}, "metadata": {}, "failures": [], "seed": seed, "seconds": 0.0}
    row = _matrix_row(BUG_ROW, name, bug.fault_class, bug.description, NOT_APPLICABLE, empty, {})
    row["first_failure"] = why
    row["designed_catch"] = " or ".join(designed(name).values())
    return row


def matrix_plan(
    bugs: list[str],
    seeds: list[int],
    designed_only: bool = False,
    experiments: list[str] | None = None,
    compiler: str = HEALTHY_BACKEND,
) -> list[PlannedRun]:
    """The healthy compiler once per base seed, then every bug once at the first seed, planted around
    ``compiler`` (:func:`.planted_on.planted_name`): with ``designed_only``, a bug designed to be caught by
    experiments' claims runs those experiments alone (those of them that ``experiments``, default all,
    include; where none is, every one of them)."""

    def only(name: str) -> tuple[str, ...]:
        held_by = [e for e in designed(name) if e] if designed_only and name in PLANTED_BUGS else []
        return tuple(e for e in held_by if experiments is None or e in experiments)

    return [PlannedRun(f"healthy_{seed}", compiler, seed) for seed in seeds] + [
        PlannedRun(name, planted_name(name, compiler), seeds[0], only(name)) for name in bugs
    ]


def _planted_bug(backend: str) -> str | None:
    """The planted bug a run's backend plants (on Inductor or another compiler), or None for a healthy run."""
    if backend in PLANTED_BUGS:
        return backend
    planted = split_planted(backend)
    return planted[0] if planted else None


def execution_order(plan: list[PlannedRun]) -> list[int]:
    """The order a matrix's runs are taken in (results keep the plan's): the first healthy run, which
    compiles every healthy graph into the shared Inductor cache, beside the bugs that compile graphs of
    their own (:attr:`PlantedBug.rewrites_graph`); then the other healthy seeds and the bugs that reuse the
    healthy graphs, from a warm cache. Two healthy runs started together both compile every graph cold:
    three minutes each on two cores."""
    bugs = [_planted_bug(r.backend) for r in plan]
    healthy = [i for i, b in enumerate(bugs) if b is None]
    own = [i for i, b in enumerate(bugs) if b is not None and PLANTED_BUGS[b].rewrites_graph]
    first = healthy[:1]
    rest = [i for i in range(len(plan)) if i not in first and i not in own]
    return [*first, *own, *rest]


def build_matrix(
    bugs: list[str],
    experiments: list[str],
    like: ExperimentSettings,
    work_dir: Path,
    healthy_seeds: list[int] | None = None,
    log: Callable[[str], None] | None = None,
    prune: bool = True,
    parallel: int = 1,
    designed_only: bool = False,
    compiler: str = INDUCTOR,
) -> tuple[pl.DataFrame, MatrixFacts]:
    """The healthy compiler once per base seed, then every bug once at the first seed (``parallel``
    runs at a time, see :func:`run_matrix_plan`); one row per healthy seed (its ERROR outcomes: false
    alarms) and one per bug (its ERROR outcomes beyond the healthy run at the same seed: what
    caught it). ``compiler`` (an adapter's name) is what the bugs are planted around
    (:mod:`.planted_on`); a bug that does not apply to it is not run and its row says why
    (:data:`NOT_APPLICABLE`). Returns the table and run facts for metadata."""
    register_planted_backends()
    unknown = [b for b in bugs if b not in PLANTED_BUGS]
    if unknown:
        raise ValueError(f"unknown planted bugs {unknown}; known: {', '.join(PLANTED_BUGS)}")
    seeds = list(dict.fromkeys(healthy_seeds or default_healthy_seeds(like)))
    defs, unavailable = matrix_definitions(experiments)
    if designed_only and not prune:
        raise ValueError("designed_only runs a bug's designed experiment's scored assets alone: it needs prune")
    skipped = {b: why for b in bugs if (why := not_applicable(b, compiler)) is not None}
    bugs = [b for b in bugs if b not in skipped]
    plan = matrix_plan(bugs, seeds, designed_only, experiments, compiler)
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

    order = execution_order(plan)
    runs = run_matrix_plan(
        plan, experiments, defs, like, work_dir, prune=prune, parallel=parallel, on_result=logged, order=order
    )
    healthy_runs, bug_runs = runs[: len(seeds)], runs[len(seeds) :]
    rows = [healthy_row(out, compiler) for out in healthy_runs]
    reference = healthy_runs[0]
    rows.extend(bug_row(name, out, reference) for name, out in zip(bugs, bug_runs, strict=True))
    rows.extend(not_applicable_row(name, why, seeds[0]) for name, why in skipped.items())
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
