"""The planted-bug suite (mutation testing of the harness) as an asset and its checks.

``planted_bug_matrix`` re-runs a subset of experiments at smoke size with the healthy backend over
several base seeds and with each deliberately faulty backend of :mod:`pipeline.instruments.regression.planted_bugs`; the
runs and their scoring are :mod:`pipeline.instruments.regression.harness`, its decision rules
:mod:`pipeline.instruments.regression.rules`. A bug is caught only at ERROR: a
contradicted claim, an invalid run or a failed step that the healthy run at the same seed does not
have. Every ERROR of a healthy run is a false alarm.
"""

import tempfile
import time
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
from pydantic import Field

from ...resources import ExperimentSettings
from ...storage import NO_FUSED_PATH
from ...tables import markdown_table
from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    NOT_APPLICABLE,
    SUPPORTED,
    claim_check,
    claim_result,
    validity_check,
    validity_result,
)
from .harness import MatrixFacts, build_matrix, invalid_controls
from .matrix_parallel import parallel_runs_here
from .matrix_runs import MATRIX_EXPERIMENTS, MATRIX_PROFILE
from .planted_bugs import PLANTED_BUGS
from .rules import BUG_ROW, FALSE_ALARM_RULE, HEALTHY_ROW, MIN_HEALTHY_SEEDS, MUTATION_RULE, SCORING
from .spec import GROUP, ID, PARALLEL_RUNS, SIZES


class PlantedBugMatrixConfig(dg.Config):
    """Which bugs, experiments and healthy base seeds the matrix runs (empty: the profile's bugs, else all / the
    default)."""

    bugs: list[str] = Field(default_factory=list)
    experiments: list[str] = Field(default_factory=list)
    healthy_seeds: list[int] = Field(default_factory=list)
    #: Skip assets that only finding checks (or no check) read: they cannot produce an ERROR outcome
    #: by a check, only by crashing. False runs every asset of the chosen experiments.
    skip_finding_only_assets: bool = True
    #: Runs at a time: this process and parallel_runs - 1 worker processes (at most one per CPU
    #: core). Each run is the same whichever process runs it; 1 runs them one after another here.
    parallel_runs: int = PARALLEL_RUNS
    #: Each bug re-runs only the experiment holding the claim built to catch it (``Experiment.planted``)
    #: instead of all of them; unset: the profile's choice (``spec.MatrixSizes.designed_only``).
    designed_only: bool | None = None
    #: The compiler the bugs are planted around, an adapter's name (:mod:`.planted_on`); bugs that do not
    #: apply to it are listed as not applicable. Inductor unless set.
    compiler: str = "inductor"


def matrix_metadata(
    table: pl.DataFrame,
    facts: MatrixFacts,
    *,
    run_profile: str,
    experiments: list[str],
    not_run: list[str],
    pruned: bool,
    wall_seconds: float,
    parallel_runs: int = 1,
    designed_only: bool = False,
) -> dict[str, Any]:
    """The asset's metadata: what ran and how (``run_profile`` is the outer run's), the bugs caught
    and missed, false alarms per healthy seed, timings and the matrix as a markdown table."""
    bug_rows = table.filter(pl.col("row") == BUG_ROW)
    healthy_rows = table.filter(pl.col("row") == HEALTHY_ROW)
    return {
        "profile_used": MATRIX_PROFILE,
        "note": f"experiments re-run at the {MATRIX_PROFILE!r} profile regardless of this run's profile "
        f"({run_profile!r}) to keep the matrix affordable; data in a temporary folder",
        "scoring": SCORING,
        "experiments": ", ".join(experiments),
        "assets_run": "only assets read by validity/claim checks (and upstream)"
        if pruned
        else "every asset of the experiments",
        "bug_runs": "each bug: the experiment holding its designed claim (and S); healthy seeds: every experiment"
        if designed_only
        else "each bug: every experiment",
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
        "wall_seconds": round(wall_seconds, 1),
        "parallel_runs": parallel_runs,
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


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    description=f"Mutation testing of the harness: experiments {', '.join(MATRIX_EXPERIMENTS)} (the records that "
    "declare planted bugs) re-run at smoke size (whatever the outer profile) with the healthy backend over the profile's healthy base seeds ("
    + ", ".join(f"{name}: {sizes.healthy_seeds}" for name, sizes in SIZES.items())
    + f"; no false alarm is supported only from {MIN_HEALTHY_SEEDS}) and "
    "with each planted-bug backend "
    "(pipeline/instruments/regression/planted_bugs.py) at the first seed. Per bug: caught when its run has an ERROR outcome (claim "
    "contradicted, run invalid, step failed such as FusionError) that the healthy run lacks, and by which; per "
    "healthy seed: its ERROR outcomes (false alarms, target 0). Outcome kinds are read from each check's declared "
    "outcome through pipeline.verdicts.",
    kinds={"polars"},
    # Its runs compile with Inductor (healthy) and the planted-bug backends, whatever the run's compiler:
    # stored once and shared by every compiler's report.
    tags=NO_FUSED_PATH,
)
def planted_bug_matrix(
    context: dg.AssetExecutionContext, settings: ExperimentSettings, config: PlantedBugMatrixConfig
) -> pl.DataFrame:
    bugs = config.bugs or list(settings.sizes(ID).planted_bugs or PLANTED_BUGS)
    not_run = [b for b in PLANTED_BUGS if b not in bugs]
    experiments = config.experiments or list(MATRIX_EXPERIMENTS)
    parallel = parallel_runs_here(config.parallel_runs)
    designed_only = config.designed_only
    if designed_only is None:  # the profile's choice, where every run is pruned to its scored assets
        designed_only = settings.sizes(ID).designed_only and config.skip_finding_only_assets
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
            parallel=parallel,
            designed_only=designed_only,
            compiler=config.compiler,
        )
    wall = time.perf_counter() - start
    context.add_output_metadata(
        matrix_metadata(
            table,
            facts,
            run_profile=settings.profile,
            experiments=experiments,
            not_run=not_run,
            pruned=config.skip_finding_only_assets,
            wall_seconds=wall,
            parallel_runs=parallel,
            designed_only=designed_only,
        )
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
    rows = planted_bug_matrix.filter(pl.col("row") == BUG_ROW)
    # A bug that does not apply to the matrix's compiler was not run: neither caught nor missed.
    bugs = rows.filter(pl.col("caught") != NOT_APPLICABLE)
    missed = bugs.filter(pl.col("caught") != "yes")
    meta = {
        "bugs": bugs.height,
        "bugs_not_applicable": ", ".join(rows.filter(pl.col("caught") == NOT_APPLICABLE)["bug"].to_list()) or "none",
        "caught": bugs.height - missed.height,
        "missed": ", ".join(missed["bug"].to_list()) or "none",
        "caught_by": dg.MetadataValue.md(
            markdown_table(
                bugs.select(
                    "bug",
                    "fault_class",
                    "caught",
                    *(["designed_catch"] if "designed_catch" in bugs.columns else []),
                    "caught_by",
                )
            )
        ),
    }
    if bugs.height == 0:
        return claim_result(INCONCLUSIVE, MUTATION_RULE, "no planted bug ran", meta)
    if why := invalid_controls(planted_bug_matrix):
        return claim_result(
            INCONCLUSIVE, MUTATION_RULE, f"bugs are scored against the healthy run, which is invalid: {why}", meta
        )
    if missed.height:
        return claim_result(
            CONTRADICTED,
            MUTATION_RULE,
            f"{missed.height} of {bugs.height} planted bugs raised no ERROR outcome of their designed claim beyond "
            "the healthy run's: " + ", ".join(f"{r['bug']} ({r['caught']})" for r in missed.iter_rows(named=True)),
            meta,
        )
    return claim_result(
        SUPPORTED, MUTATION_RULE, f"all {bugs.height} planted bugs caught at ERROR by the claim built for them", meta
    )


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
    if why := invalid_controls(planted_bug_matrix):
        return claim_result(INCONCLUSIVE, FALSE_ALARM_RULE, f"the healthy control is invalid: {why}", meta)
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
