"""``report``: check the settings, choose what is missing or stale, run it in the local instance,
and print what came of it (a failed step still gets the report built from what was stored)."""

import os
import sys
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from ..resources import REPO_ROOT
from ..run_summary import failed_experiments, interrupted, outcome_table, step_failures, stored_bytes
from . import local
from .staleness import assets_to_run, latest_evaluations, selection_for

REPORT_SITE = dg.AssetKey("report_site")


def built_site_index() -> Path:
    """The built site's front page: under ``$FUSION_SITE_DIR/build`` where that is set (a report of its own,
    as scripts/healthy_sweep.py runs them), else the checkout's ``site/build``."""
    from ..reporting.asset import site_folder

    built = Path(site_folder("build"))
    return (built if built.is_absolute() else REPO_ROOT / built) / "index.html"


def _only_problem(only: Sequence[str]) -> str | None:
    """Why ``--only`` names something that is not an experiment, or None."""
    from ..experiments import BY_ID

    unknown = [i for i in only if i not in BY_ID]
    if unknown:
        return f"--only: no experiment {', '.join(map(repr, unknown))}; known: {', '.join(BY_ID)}"
    return None


def _workloads_problem(workloads: str, device: str) -> str | None:
    """The one line a bad workload spec gets (each workload is imported, built and asked for inputs), or None."""
    if not workloads.strip():
        return None
    from ..experiments.models import workload_problem
    from ..resources import resolve_device

    return workload_problem(workloads, resolve_device(device))


def selection_problem(text: str) -> str | None:
    """Why a selection (:data:`SELECT_ENV`'s form) names an experiment that takes none, or a part its
    experiment does not have (with the parts it has); None when every entry holds."""
    from ..experiment import parse_selection
    from ..experiments import BY_ID

    for exp_id, names in parse_selection(text).items():
        exp = BY_ID.get(exp_id)
        if exp is None or exp.parts is None:
            takes = ", ".join(e.id for e in BY_ID.values() if e.parts is not None)
            return f"--select: {exp_id!r} is no experiment that runs in parts (those that do: {takes})"
        known = list(exp.parts())
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            missing = ", ".join(map(repr, unknown)) or "(none named)"
            return f"--select {exp_id}: no part {missing}; {exp_id} has {', '.join(known)}"
    return None


def request_problems(settings: dict[str, str], only: Sequence[str]) -> list[str]:
    """Every reason the request cannot run, one line each: the settings (:func:`settings_problems`,
    the settings' own validation), then ``--only`` and the workloads (only once the settings hold,
    since loading a workload needs the device)."""
    from ..resources import settings_problems

    problems = settings_problems(
        settings["profile"], settings["device"], settings["backend"], settings["backend_options"]
    )
    if not problems:
        problems += [
            p for p in (_only_problem(only), _workloads_problem(settings["workloads"], settings["device"])) if p
        ]
    return problems


#: Assets that test the harness itself, on the CPU whatever the run's device: a run on an accelerator leaves
#: them to CPU reports (its lease is for the device's numerics) unless ``--only`` names their experiment.
CPU_SELF_TESTS = {"Regression": (dg.AssetKey("planted_bug_matrix"),)}


def self_tests_skipped(device: Any, only: Sequence[str], out: Callable[[str], None] = print) -> set[dg.AssetKey]:
    """The CPU self-tests a run on ``device`` leaves out (none on the CPU, none that ``only`` names), said in one line."""
    if getattr(device, "type", str(device)) == "cpu":
        return set()
    left = {e: keys for e, keys in CPU_SELF_TESTS.items() if e not in only}
    for exp_id, keys in left.items():
        names = ", ".join(k.to_user_string() for k in keys)
        out(
            f"{names} skipped on {device}: it tests the harness on the CPU, whatever the device, and CPU reports run "
            f"it (--only {exp_id} runs it here)"
        )
    return {k for keys in left.values() for k in keys}


def not_applicable_skipped(
    instance: dg.DagsterInstance, settings: dict[str, str], only: Sequence[str], out: Callable[[str], None] = print
) -> set[dg.AssetKey]:
    """The assets of the experiments that do not apply to the run's compiler (:mod:`pipeline.compilers`),
    which the run leaves out, those upstream of ``only``'s experiments too (run, their guard would store
    nothing and Dagster would skip what reads them); each such experiment in the run's scope has its checks
    stored as "not applicable to <compiler>: <why>" now, and one line per experiment says so."""
    from ..compilers import not_applicable_assets, not_applicable_experiments, record_not_applicable
    from ..experiments import EXPERIMENTS
    from ..resources import ExperimentSettings

    backend = settings["backend"]
    every = not_applicable_experiments(backend)
    left_out = not_applicable_assets(backend, [e for e in EXPERIMENTS if e.id in every]) if every else set()
    reasons = {i: why for i, why in every.items() if i in only} if only else every
    if not reasons:
        return left_out
    provenance = ExperimentSettings(
        profile=settings["profile"],
        device=settings["device"],
        backend=backend,
        backend_options=settings["backend_options"],
    ).provenance()
    record_not_applicable(instance, EXPERIMENTS, reasons, provenance)
    for exp_id, why in reasons.items():
        out(f"{exp_id}: {why}")
    return left_out


def run_config_for(settings: dict[str, str], verbose: bool, only: Sequence[str], skip: set[dg.AssetKey]) -> dict:
    """The run's config: the settings resource, the console loggers, ``--only`` for the report."""
    loggers = {"console": {"config": {"log_level": "DEBUG"}}} if verbose else {"progress": {}}
    run_config: dict[str, Any] = {"resources": {"settings": {"config": settings}}, "loggers": loggers}
    if only and REPORT_SITE not in skip:
        run_config["ops"] = {"report_site": {"config": {"only": list(only)}}}
    return run_config


def job_to_run(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    settings: dict[str, str],
    everything: bool,
    only: Sequence[str],
    skip: set[dg.AssetKey],
) -> dg.JobDefinition:
    """The job subset to run: what is missing or stale for the profile and ``same`` settings (all of
    it with ``everything``), within ``only``'s selection, without ``skip``; prints what it chose."""
    from ..experiment import selection_provenance
    from ..experiments import EXPERIMENTS
    from ..resources import DEFAULT_SEED, resolve_device

    profile = settings["profile"]
    # Only M records which workloads it ran (provenance.workloads); an asset without that record
    # matches any value, so a change of FUSION_WORKLOADS makes M (and what reads it) stale, nothing else.
    same = {
        "device": str(resolve_device(settings["device"])),
        "seed": os.environ.get("FUSION_SEED") or str(DEFAULT_SEED),  # another seed's results are not these
        **{k: settings[k] for k in ("backend", "backend_options", "workloads")},
        # the parts an experiment ran (report --select): a value made under another selection is stale
        **{
            k.removeprefix("provenance."): v
            for e in EXPERIMENTS
            if e.parts
            for k, v in selection_provenance(e.id).items()
        },
    }
    job = defs.resolve_job_def("all_assets_job")
    graph = defs.resolve_asset_graph()
    chosen_assets, chosen_checks = selection_for(defs, only) if only else (None, None)
    if not everything:
        assets, checks = assets_to_run(defs, instance, profile, same)
        if chosen_assets is not None and chosen_checks is not None:
            assets = [a for a in assets if a in chosen_assets]
            checks = [c for c in checks if c in chosen_checks]
        n_assets = len(chosen_assets) if chosen_assets is not None else len(graph.get_all_asset_keys())
        assets = [a for a in assets if a not in skip]
        checks = [c for c in checks if c.asset_key not in skip]
        n_checks = len(chosen_checks) if chosen_checks is not None else len(graph.asset_check_keys)
        scope = "selected " if only else ""
        print(
            f"profile {profile}: {len(assets)} of {n_assets} {scope}assets missing or stale "
            f"(the rest are stored), {len(checks)} of {n_checks} {scope}checks to run; "
            "--all re-runs everything"
        )
        return job.get_subset(asset_selection=set(assets), asset_check_selection=set(checks))
    if chosen_assets is not None and chosen_checks is not None:
        return job.get_subset(
            asset_selection=chosen_assets - skip,
            asset_check_selection={c for c in chosen_checks if c.asset_key not in skip},
        )
    if skip:
        return job.get_subset(
            asset_selection=set(graph.get_all_asset_keys()) - skip,
            asset_check_selection={c for c in graph.asset_check_keys if c.asset_key not in skip},
        )
    return job


def selected_asset_names(only: Collection[str]) -> frozenset[str]:
    """The assets a ``report --only`` run of ``only`` materializes, by name (:func:`selection_for`: theirs
    and what they need upstream): what the plan's estimate counts (``pipeline.plan``'s ``select``)."""
    from ..definitions import defs

    return frozenset(k.to_user_string() for k in selection_for(defs, list(only))[0])


def report_settings(
    profile: str, device: str, backend: str, backend_options: str, workloads: str | None
) -> dict[str, str]:
    """The run's settings as the checks and the run config read them (``workloads`` None: the
    ``FUSION_WORKLOADS`` environment variable's, else none)."""
    return {
        "profile": profile,
        "device": device,
        "backend": backend,
        "backend_options": backend_options,
        "workloads": os.environ.get("FUSION_WORKLOADS", "") if workloads is None else workloads,
    }


#: :func:`report`'s parameters in order, as its supervised child receives them (``pipeline.cli.child``).
REPORT_ARGS = (
    "profile",
    "device",
    "backend",
    "backend_options",
    "verbose",
    "everything",
    "only",
    "workloads",
    "build_site",
)


def report(
    profile: str,
    device: str,
    backend: str,
    backend_options: str = "{}",
    verbose: bool = False,
    everything: bool = False,
    only: Sequence[str] = (),
    workloads: str | None = None,
    build_site: bool = True,
) -> int:
    """Materialize what is missing or stale for the settings (``everything``: all of it) and print
    the outcome; exit status 2 for bad settings (a compiler that is not installed among them, said
    in one line with the command that installs it, before anything is written), 130 when
    interrupted, 1 when a step failed. ``build_site`` False leaves the report's site to a later run
    (``--backends`` builds it once, after the last compiler)."""
    from .. import experiments  # noqa: F401 - the registry offers its on-demand backends (planted bugs) to the check

    settings = report_settings(profile, device, backend, backend_options, workloads)
    problems = request_problems(settings, only)
    if problems:
        print(f"report: invalid settings: {'; '.join(problems)}", file=sys.stderr)
        return 2
    from .supervise import crashed_experiments, isolated, supervise

    if isolated(backend):
        # Another compiler's native code may crash the process: run the plan in a watched child.
        args = (profile, device, backend, backend_options, verbose, everything, list(only), workloads, build_site)
        return supervise(dict(zip(REPORT_ARGS, args, strict=True)))
    from ..plan import announce
    from ..resources import resolve_device
    from ..storage import default_data_root

    # The plan-time estimate, and a one-line refusal when the data folder's disk cannot hold the run.
    refused = announce(
        profile, resolve_device(device), Path(default_data_root()), only or None, select=selected_asset_names
    )
    if refused is not None:
        return refused
    from ..definitions import defs
    from ..reporting.site import site_skipped

    # Where the site packages are missing (a GPU node), everything but the site runs: one line says so.
    no_site = site_skipped(profile)
    if no_site is not None:
        print(no_site)
    skip = {REPORT_SITE} if no_site is not None else set()
    skip |= self_tests_skipped(resolve_device(device), only)
    if not build_site:
        skip.add(REPORT_SITE)
    instance = local.local_instance()
    skip |= not_applicable_skipped(instance, settings, only)
    from ..experiments import experiment

    crashed = crashed_experiments()  # taken out by a crash of an earlier process of this command
    skip |= {k for exp_id in crashed for a in experiment(exp_id).assets() for k in a.keys}
    run_config = run_config_for(settings, verbose, only, skip)
    if crashed and REPORT_SITE not in skip:
        site_config = run_config.setdefault("ops", {}).setdefault("report_site", {"config": {}})["config"]
        site_config["failed"] = {exp_id: reason for exp_id, (_, reason) in crashed.items()}
    for run_id in local.release_interrupted_runs(instance):
        print(f"run {run_id} was interrupted: marked failed, its pool slots released")
    job = job_to_run(defs, instance, settings, everything, only, skip)
    if only:
        print(f"only {', '.join(only)}: their assets, what they need upstream, and the report")
    start = time.perf_counter()
    result = job.execute_in_process(
        instance=instance, run_config=run_config, raise_on_error=False, tags=local.run_tags()
    )
    return after_run(
        defs,
        instance,
        result,
        run_config,
        only,
        built_site=REPORT_SITE not in skip,
        seconds=time.perf_counter() - start,
        crashed_steps=[step for step, _ in crashed.values()],
    )


def report_backends(
    profile: str,
    device: str,
    backends: Sequence[str],
    backend_options: str = "{}",
    verbose: bool = False,
    everything: bool = False,
    only: Sequence[str] = (),
    workloads: str | None = None,
    out: Callable[[str], None] = print,
) -> int:
    """``report --backends a,b,c``: the plan for each compiler in turn (what depends on no fused path,
    S's pools and references, is stored by the first and reused by the others), the site built once by
    the last, then the wall time of each compiler. Every compiler's settings are checked first: a bad
    one (a compiler that is not installed) is exit status 2 with nothing run. The exit status is the
    worst of the runs' (130 stops at once)."""
    from .. import experiments  # noqa: F401 - the registry offers its on-demand backends to the check

    if not backends:
        print("report: --backends names no compiler", file=sys.stderr)
        return 2
    for backend in backends:
        problems = request_problems(report_settings(profile, device, backend, backend_options, workloads), only)
        if problems:
            print(f"report: invalid settings for --backends {backend}: {'; '.join(problems)}", file=sys.stderr)
            return 2
    times: dict[str, float] = {}
    status = 0
    for i, backend in enumerate(backends):
        out(f"== compiler {backend} ({i + 1} of {len(backends)}) ==")
        start = time.perf_counter()
        code = report(
            profile,
            device,
            backend,
            backend_options,
            verbose,
            everything,
            only,
            workloads,
            build_site=i == len(backends) - 1,
        )
        times[backend] = time.perf_counter() - start
        status = max(status, code)
        if code == 130:
            break
    out("wall time per compiler: " + ", ".join(f"{b} {t:.1f} s" for b, t in times.items()))
    return status


def after_run(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    result: Any,
    run_config: dict,
    only: Sequence[str],
    built_site: bool,
    seconds: float,
    crashed_steps: Sequence[str] = (),
) -> int:
    """Print what the run did and the outcome table (``crashed_steps``: steps an earlier process of
    this command crashed in, failed too); build the report alone when a failed step skipped it. The
    exit status: 130 interrupted, 0 success, else 1 (a crashed step counts as failed)."""
    from ..plan import bytes_text

    profile = run_config["resources"]["settings"]["config"]["profile"]
    evaluated = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    # A step failure always names its step.
    failed_steps = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE" and e.step_key]
    materialized = result.get_asset_materialization_events()
    # What the run did (the plan line before it was an estimate): the bytes the IO manager wrote.
    print(
        f"profile {profile}: {len(materialized)} assets materialized, {bytes_text(stored_bytes(materialized))} "
        f"stored, {len(evaluated)} checks in {seconds:.1f} s; run {result.run_id}"
    )
    causes = step_failures(result)
    for step, cause in causes.items():
        print(f"failed step {step}: {cause.text()}")
    stopped = interrupted(causes)
    if stopped:
        # Interrupted (Ctrl-C, or SIGTERM from a scheduler): stop now, build nothing more. The run is
        # marked failed; what it stored stays stored, and the next report resumes from there.
        print(
            f"interrupted during {', '.join(stopped)}: run {result.run_id} marked failed; "
            "run the same command again to resume (what was stored is kept)",
            file=sys.stderr,
        )
        return 130
    reported = any(e.asset_key == REPORT_SITE for e in materialized if e.asset_key is not None)
    if causes and not reported and built_site:
        # A failed step skips everything downstream of it, the report included: build the report
        # alone from what was materialized, each failed experiment shown with its reason.
        failed = failed_experiments(causes)
        print(f"building the report from what was materialized ({', '.join(failed)} failed)")
        config = {**run_config, "ops": {"report_site": {"config": {"only": list(only), "failed": failed}}}}
        report_job = defs.resolve_job_def("all_assets_job").get_subset(asset_selection={REPORT_SITE})
        report_job.execute_in_process(instance=instance, run_config=config, raise_on_error=False)
    backend = run_config["resources"]["settings"]["config"].get("backend")
    print(outcome_table(defs, latest_evaluations(defs, instance, backend), [*failed_steps, *crashed_steps]))
    site = built_site_index()
    if site.exists():
        print(f"report site: {site}  (serve with: python -m http.server -d {site.parent} 8000)")
    print(f"browse runs and assets: DAGSTER_HOME={os.environ['DAGSTER_HOME']} .venv/bin/dagster dev")
    _print_time_table(instance, result.run_id, profile)
    return 0 if result.success and not crashed_steps else 1


def _print_time_table(instance: dg.DagsterInstance, run_id: str, profile: str) -> None:
    """Where the run's time went, against the profile's budget (``times`` prints it again later)."""
    from ..timing import table_for_run, text_table

    table = table_for_run(instance, run_id, profile)
    if table is not None:
        print(text_table(table))
