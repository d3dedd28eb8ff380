"""Command line: ``python -m pipeline.cli report --profile default`` materializes every asset
into the local Dagster instance (so the runs show in the UI) and prints what was produced."""

import argparse
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from precisionkit.repro import Case

from .profiles import PROFILES
from .resources import REPO_ROOT
from .run_summary import failed_experiments, interrupted, outcome_table, step_failures
from .runs import is_imported, materializations
from .runs import plain as runs_plain


def _instance() -> dg.DagsterInstance:
    os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT / ".dagster_home"))
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    Path(os.environ["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
    return dg.DagsterInstance.get()


#: Tags on runs this command starts: which process ran them, on which machine.
CLI_PID_TAG, CLI_HOST_TAG = "fusion/cli_pid", "fusion/cli_host"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"pipeline.cli" in f.read()
    except OSError:
        if not Path("/proc").is_dir():  # no procfs: ask the OS whether the pid exists
            try:
                os.kill(pid, 0)
                return True
            except OSError:
                return False
        return False


def release_interrupted_runs(instance: dg.DagsterInstance) -> list[str]:
    """Runs this command started whose process is gone (killed, crashed) still read as in
    progress and still hold their slots of the one-step-at-a-time pool, so the next run would wait
    for them forever: mark them failed and free their slots. Returns their run ids."""
    statuses = [
        dg.DagsterRunStatus.STARTED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.NOT_STARTED,
        dg.DagsterRunStatus.CANCELING,
    ]
    released = []
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=statuses, tags={CLI_HOST_TAG: platform.node()}))
    for run in runs:
        pid = int(run.tags.get(CLI_PID_TAG, "0") or 0)
        if pid and pid != os.getpid() and _alive(pid):
            continue
        instance.report_run_failed(run, f"interrupted: the command that ran it (pid {pid}) is gone")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        released.append(run.run_id)
    return released


def _stored_for_profile(
    instance: dg.DagsterInstance, key: dg.AssetKey, profile: str, same: dict[str, str] | None = None
) -> float | None:
    """Timestamp of the latest materialization of ``key`` for ``profile`` whose stored file still
    exists, or None; None as well when that materialization's provenance differs from ``same``
    (device, backend, options: the stored value was computed under other settings)."""
    from .storage import stored_exists

    for record, _, meta in materializations(instance, key, limit=50):
        if meta.get("provenance.profile") != profile or is_imported(meta):
            continue  # another profile's, or another machine's imported from a bundle
        path = meta.get("path")
        if path is not None and not stored_exists(str(path)):
            return None
        if any(str(meta.get(f"provenance.{k}", v)) != v for k, v in (same or {}).items()):
            return None
        return record.timestamp
    return None


def _evaluated(instance: dg.DagsterInstance, check_key: dg.AssetCheckKey) -> bool:
    """Whether the check's latest record is a result (not only "planned" by a run that stopped)."""
    latest = _latest_local_record(instance, check_key)
    event = latest.event.dagster_event if latest is not None and latest.event is not None else None
    return event is not None and isinstance(event.event_specific_data, dg.AssetCheckEvaluation)


def assets_to_run(
    defs: dg.Definitions, instance: dg.DagsterInstance, profile: str, same: dict[str, str] | None = None
) -> tuple[list[dg.AssetKey], list[dg.AssetCheckKey]]:
    """What a resumed run does. Assets: those missing for ``profile`` (never materialized, stored
    file gone, or computed under other ``same`` settings), those older than an upstream asset,
    everything downstream of those, and the report. Checks: every check of those assets, and the
    checks of stored assets that never produced a result (e.g. a run stopped before them); those
    run against the stored values without materializing their asset again."""
    graph = defs.resolve_asset_graph()
    keys = [k for k in graph.get_all_asset_keys() if graph.get(k).is_materializable]
    stamps = {k: _stored_for_profile(instance, k, profile, same) for k in keys}
    stored = {k: t for k, t in stamps.items() if t is not None}
    todo = {k for k in keys if k not in stored}
    for key in keys:
        node = graph.get(key)
        if key not in todo and any(p in stored and stored[p] > stored[key] for p in node.parent_keys):
            todo.add(key)
    frontier = list(todo)
    while frontier:
        for child in graph.get(frontier.pop()).child_keys:
            if child not in todo:
                todo.add(child)
                frontier.append(child)
    todo |= {k for k in keys if graph.get(k).group_name == "report"}
    # A multi-asset that cannot be subset runs whole: take its other outputs along.
    todo = set(dg.AssetSelection.assets(*todo).required_multi_asset_neighbors().resolve(graph))
    checks = {c for c in graph.asset_check_keys if c.asset_key in todo or not _evaluated(instance, c)}
    return (
        sorted(todo, key=lambda k: k.to_user_string()),
        sorted(checks, key=lambda c: (c.asset_key.to_user_string(), c.name)),
    )


def _latest_local_record(instance: dg.DagsterInstance, check_key: dg.AssetCheckKey) -> Any:
    """The check's newest execution record made here: evaluations imported from a results bundle
    (another machine's) are skipped; None when there is none."""
    for record in instance.event_log_storage.get_asset_check_execution_history(check_key, limit=50):
        event = record.event.dagster_event if record.event is not None else None
        data = event.event_specific_data if event is not None else None
        if isinstance(data, dg.AssetCheckEvaluation) and is_imported(runs_plain(data.metadata)):
            continue
        return record
    return None


def _latest_evaluations(defs: dg.Definitions, instance: dg.DagsterInstance) -> list[dg.AssetCheckEvaluation]:
    out = []
    for check_key in defs.resolve_asset_graph().asset_check_keys:
        latest = _latest_local_record(instance, check_key)
        if latest and latest.event and latest.event.dagster_event:
            data = latest.event.dagster_event.event_specific_data
            if isinstance(data, dg.AssetCheckEvaluation):  # else planned but never evaluated: not yet run
                out.append(data)
    return out


def _only_problem(only: Sequence[str]) -> str | None:
    """Why ``--only`` names something that is not an experiment, or None."""
    from .experiments import BY_ID

    unknown = [i for i in only if i not in BY_ID]
    if unknown:
        return f"--only: no experiment {', '.join(map(repr, unknown))}; known: {', '.join(BY_ID)}"
    return None


def _workloads_problem(workloads: str, device: str) -> str | None:
    """The one line a bad workload spec gets (each workload is imported, built and asked for inputs), or None."""
    if not workloads.strip():
        return None
    from .experiments.models.workloads import WorkloadError, load_workloads
    from .resources import resolve_device

    try:
        load_workloads(workloads, resolve_device(device))
    except WorkloadError as exc:
        return str(exc)
    return None


def selection_for(defs: dg.Definitions, only: Sequence[str]) -> tuple[set[dg.AssetKey], set[dg.AssetCheckKey]]:
    """The assets of the experiments ``only`` names, everything upstream of them and the report;
    the checks of those assets."""
    from .experiments import experiment

    graph = defs.resolve_asset_graph()
    keys = {k for i in only for a in experiment(i).assets() for k in a.keys}
    chosen = set(dg.AssetSelection.assets(*keys).upstream().resolve(graph)) | {dg.AssetKey("report_site")}
    chosen = set(dg.AssetSelection.assets(*chosen).required_multi_asset_neighbors().resolve(graph))
    return chosen, {c for c in graph.asset_check_keys if c.asset_key in chosen}


def report(
    profile: str,
    device: str,
    backend: str,
    backend_options: str = "{}",
    verbose: bool = False,
    everything: bool = False,
    only: Sequence[str] = (),
    workloads: str | None = None,
) -> int:
    from . import experiments  # noqa: F401 - the registry offers its on-demand backends (planted bugs) to the check
    from .resources import resolve_device, settings_problems

    workloads = os.environ.get("FUSION_WORKLOADS", "") if workloads is None else workloads
    problems = settings_problems(profile, device, backend, backend_options)
    if not problems:
        problems += [p for p in (_only_problem(only), _workloads_problem(workloads, device)) if p]
    if problems:
        print(f"report: invalid settings: {'; '.join(problems)}", file=sys.stderr)
        return 2
    from .definitions import defs
    from .reporting.site import site_skipped

    # Where the site packages are missing (a GPU node), everything but the site runs: one line says so.
    no_site = site_skipped(profile)
    if no_site is not None:
        print(no_site)
    skip = {dg.AssetKey("report_site")} if no_site is not None else set()
    settings = {
        "profile": profile,
        "device": device,
        "backend": backend,
        "backend_options": backend_options,
        "workloads": workloads,
    }
    loggers = {"console": {"config": {"log_level": "DEBUG"}}} if verbose else {"progress": {}}
    run_config: dict = {"resources": {"settings": {"config": settings}}, "loggers": loggers}
    if only and not skip:
        run_config["ops"] = {"report_site": {"config": {"only": list(only)}}}
    instance = _instance()
    job = defs.resolve_job_def("all_assets_job")
    for run_id in release_interrupted_runs(instance):
        print(f"run {run_id} was interrupted: marked failed, its pool slots released")
    # Only M records which workloads it ran (provenance.workloads); an asset without that record
    # matches any value, so a change of FUSION_WORKLOADS makes M (and what reads it) stale, nothing else.
    same = {
        "device": str(resolve_device(device)),
        "backend": backend,
        "backend_options": backend_options,
        "workloads": workloads,
    }
    graph = defs.resolve_asset_graph()
    chosen_assets, chosen_checks = selection_for(defs, only) if only else (None, None)
    if not everything:
        assets, checks = assets_to_run(defs, instance, profile, same)
        if chosen_assets is not None and chosen_checks is not None:
            assets = [a for a in assets if a in chosen_assets]
            checks = [c for c in checks if c in chosen_checks]
        n_assets = len(chosen_assets) if chosen_assets is not None else len(graph.get_all_asset_keys())
        assets = [a for a in assets if a not in skip]
        n_checks = len(chosen_checks) if chosen_checks is not None else len(graph.asset_check_keys)
        scope = "selected " if only else ""
        print(
            f"profile {profile}: {len(assets)} of {n_assets} {scope}assets missing or stale "
            f"(the rest are stored), {len(checks)} of {n_checks} {scope}checks to run; "
            "--all re-runs everything"
        )
        job = job.get_subset(asset_selection=set(assets), asset_check_selection=set(checks))
    elif chosen_assets is not None and chosen_checks is not None:
        job = job.get_subset(asset_selection=chosen_assets - skip, asset_check_selection=chosen_checks)
    elif skip:
        job = job.get_subset(
            asset_selection=set(graph.get_all_asset_keys()) - skip, asset_check_selection=set(graph.asset_check_keys)
        )
    if only:
        print(f"only {', '.join(only)}: their assets, what they need upstream, and the report")
    start = time.perf_counter()
    result = job.execute_in_process(
        instance=instance,
        run_config=run_config,
        raise_on_error=False,
        tags={CLI_PID_TAG: str(os.getpid()), CLI_HOST_TAG: platform.node()},
    )
    seconds = time.perf_counter() - start
    evaluated = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    # A step failure always names its step.
    failed_steps = [e.step_key for e in result.all_events if e.event_type_value == "STEP_FAILURE" and e.step_key]
    materialized = result.get_asset_materialization_events()
    print(
        f"profile {profile}: {len(materialized)} assets materialized, {len(evaluated)} checks in {seconds:.1f} s; "
        f"run {result.run_id}"
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
    reported = any(e.asset_key == dg.AssetKey("report_site") for e in materialized if e.asset_key is not None)
    if causes and not reported and not skip:
        # A failed step skips everything downstream of it, the report included: build the report
        # alone from what was materialized, each failed experiment shown with its reason.
        failed = failed_experiments(causes)
        print(f"building the report from what was materialized ({', '.join(failed)} failed)")
        config = {**run_config, "ops": {"report_site": {"config": {"only": list(only), "failed": failed}}}}
        report_job = defs.resolve_job_def("all_assets_job").get_subset(asset_selection={dg.AssetKey("report_site")})
        report_job.execute_in_process(instance=instance, run_config=config, raise_on_error=False)
    print(outcome_table(defs, _latest_evaluations(defs, instance), failed_steps))
    site = REPO_ROOT / "site" / "build" / "index.html"
    if site.exists():
        print(f"report site: {site}  (serve with: python -m http.server -d {site.parent} 8000)")
    print(f"browse runs and assets: DAGSTER_HOME={os.environ['DAGSTER_HOME']} .venv/bin/dagster dev")
    _print_time_table(instance, result.run_id, profile)
    return 0 if result.success else 1


def _print_time_table(instance: dg.DagsterInstance, run_id: str, profile: str) -> None:
    """Where the run's time went, against the profile's budget (``times`` prints it again later)."""
    from .timing import table_for_run, text_table

    table = table_for_run(instance, run_id, profile)
    if table is not None:
        print(text_table(table))


def promote_baseline(
    profile: str,
    device: str,
    backend: str,
    data_dir: str | None,
    allow_partial: bool,
    note: str,
    include_imported: bool = False,
) -> int:
    """Promote ``<data>/<profile>`` to a new baseline version (provenance from the local instance's
    events: only those made here, unless ``include_imported``)."""
    from .experiments.regression.baseline import BaselineError
    from .experiments.regression.drift import promote_with_instance
    from .resources import ExperimentSettings
    from .storage import default_data_root

    base_dir = data_dir or default_data_root()
    settings = ExperimentSettings(profile=profile, device=device, backend=backend)
    try:
        done = promote_with_instance(
            _instance(), base_dir, settings, allow_partial=allow_partial, note=note, include_imported=include_imported
        )
    except BaselineError as exc:
        print(f"promote-baseline: {exc}", file=sys.stderr)
        return 2
    print(f"promoted {', '.join(done.promoted)} of profile {profile} as baseline {done.version} -> {done.folder}")
    if done.skipped:
        print("not materialized (left out): " + "; ".join(f"{e}: {', '.join(m)}" for e, m in done.skipped.items()))
    print(f"previous baseline: {done.previous or 'none'} (kept)")
    return 0


def export_bundle(profile: str, out: str, data_dir: str | None, no_tensors: bool, max_tensor_mib: float) -> int:
    """Write this instance's results of ``profile`` as a portable bundle folder."""
    from .bundle import BundleError
    from .bundle import export_bundle as export
    from .definitions import defs
    from .storage import default_data_root

    base_dir = data_dir or default_data_root()
    try:
        done = export(
            _instance(),
            defs.resolve_asset_graph(),
            base_dir,
            profile,
            out,
            include_tensors=not no_tensors,
            max_tensor_bytes=int(max_tensor_mib * 2**20),
        )
    except BundleError as exc:
        print(f"export-bundle: {exc}", file=sys.stderr)
        return 2
    print(f"bundle {done.folder}: {done.assets} materializations, {done.checks} check evaluations, {done.files} files")
    if done.left_out:
        print("left out (tensors over the cap): " + "; ".join(f"{a} ({why})" for a, why in done.left_out.items()))
    return 0


def import_bundle(path: str, data_dir: str | None, replace: bool, if_new: bool = False) -> int:
    """Check a bundle and record its results in this instance, next to (never over) local ones;
    ``if_new``: a bundle whose device and profile were imported before is passed over with one line."""
    from .bundle import BundleError, import_target
    from .bundle import import_bundle as load
    from .definitions import defs
    from .storage import default_data_root

    base_dir = data_dir or default_data_root()
    try:
        if if_new and not replace and (before := import_target(path, base_dir)).exists():
            print(f"import-bundle: {path} already imported ({before})")
            return 0
        done = load(_instance(), path, base_dir, defs.resolve_asset_graph(), replace=replace)
    except BundleError as exc:
        print(f"import-bundle: {exc}", file=sys.stderr)
        return 2
    print(
        f"imported {done.assets} materializations and {done.checks} check evaluations of {done.device!r} "
        f"(profile {done.profile}) -> {done.folder}; re-materialize report_site to show them"
    )
    for warning in done.warnings:
        print(f"import-bundle: warning: {warning}", file=sys.stderr)
    return 0


def _repro_case(spec: str, backend: str) -> Case:
    """A case from ``d/<subgraph>/<dtype>/<BxSxH>/<layout>``, ``fuzz/<seed>[/<dtype>]`` or
    ``difftest/<generator>/<seed>[/<dtype>]``."""
    from .repros import d_case, difftest_case, fuzz_case

    parts = spec.strip("/").split("/")
    if parts[0] == "d" and len(parts) == 5:
        try:
            shape = tuple(int(d) for d in parts[3].split("x"))
        except ValueError:
            raise ValueError(f"shape {parts[3]!r} is not BxSxH (e.g. 4x128x256)") from None
        return d_case(parts[1], parts[2], shape, parts[4], backend)
    if parts[0] == "fuzz" and len(parts) in (2, 3) and parts[1].isdigit():
        return fuzz_case(int(parts[1]), backend, parts[2] if len(parts) == 3 else None)
    if parts[0] == "difftest" and len(parts) in (3, 4) and parts[2].isdigit():
        return difftest_case(parts[1], int(parts[2]), parts[3] if len(parts) == 4 else None, backend)
    raise ValueError(
        f"--make {spec!r}: expected d/<subgraph>/<dtype>/<BxSxH>/<layout> (a row of D), fuzz/<seed>[/<dtype>] "
        "or difftest/<generator>/<seed>[/<dtype>]"
    )


def repros(
    profile: str,
    data_dir: str | None,
    planted: list[str] | None,
    make: list[str],
    python: str | None,
    backend: str,
    knobs: bool,
) -> int:
    """Build reproducers (planted bugs, D rows, fuzzer seeds), then list every reproducer of the
    profile with its status, each re-run in a fresh interpreter (``python``: another torch)."""
    from .repros import build, planted_case, rerun, torch_version_of
    from .storage import DataFolder, default_data_root

    root = DataFolder(root=data_dir or default_data_root()).profile_dir(profile) / "repros"
    if python:
        try:
            torch_version_of(python)
        except (OSError, ValueError) as exc:
            print(f"repros: --python {python}: {exc}", file=sys.stderr)
            return 2
    try:
        cases = [_repro_case(spec, backend) for spec in make]
    except ValueError as exc:
        print(f"repros: {exc}", file=sys.stderr)
        return 2
    if planted is not None:
        from .experiments.regression.planted_bugs import PLANTED_BUGS

        unknown = [b for b in planted if b not in PLANTED_BUGS and f"planted_{b}" not in PLANTED_BUGS]
        if unknown:
            print(
                f"repros: unknown planted bug(s) {', '.join(unknown)}; known: {', '.join(PLANTED_BUGS)}",
                file=sys.stderr,
            )
            return 2
        for bug in [b if b in PLANTED_BUGS else f"planted_{b}" for b in planted] or list(PLANTED_BUGS):
            case, tried = planted_case(bug, log=print)
            if case is None:
                print(f"{bug}: no probe shows it ({tried} probes tried)")
                continue
            meta = build(case, root, control="inductor", knobs=knobs, log=print)
            print(f"{bug}: {meta['ops_before']} -> {meta['ops_after']} ops, at fault: {meta['layer_at_fault']}")
    for case in cases:
        meta = build(case, root, knobs=knobs, log=print)
        print(f"{meta['id']}: {meta['status']}, at fault: {meta['layer_at_fault']}; workaround: {meta['workaround']}")
    print(f"reproducers in {root}:")
    rows = rerun(root, python, log=print)
    if not rows:
        print("  none (build some with --planted, --make, or run the report: contradictions get one each)")
    return 0


def main(argv: list[str] | None = None) -> int:
    from .interrupts import terminate_as_interrupt

    terminate_as_interrupt()  # a scheduler's SIGTERM stops a run as Ctrl-C does
    parser = argparse.ArgumentParser(prog="python -m pipeline.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="materialize every asset and run every check")
    rep.add_argument("--profile", default="default", help=f"one of {', '.join(sorted(PROFILES))}")
    rep.add_argument("--device", default="auto")
    rep.add_argument("--backend", default="inductor")
    rep.add_argument("--backend-options", default="{}", help="JSON object of compiler options")
    rep.add_argument(
        "--all",
        dest="everything",
        action="store_true",
        help="materialize every asset, not only those missing or stale for the profile",
    )
    rep.add_argument(
        "--verbose", action="store_true", help="Dagster's full console log (DEBUG) instead of progress lines"
    )
    rep.add_argument(
        "--only",
        default="",
        help="comma list of experiment ids (e.g. M or B,D): materialize those, what they need upstream and the "
        "report; the site marks the others as not run",
    )
    rep.add_argument(
        "--workloads",
        default=None,
        help="your own workloads for experiment M: module:NAME, comma separated (default: $FUSION_WORKLOADS)",
    )
    pro = sub.add_parser("promote-baseline", help="mark the stored materialization as the baseline (new version)")
    pro.add_argument("--profile", default="default", choices=sorted(PROFILES))
    pro.add_argument("--device", default="auto", help="recorded as provenance where no materialization event has it")
    pro.add_argument(
        "--backend", default="inductor", help="recorded as provenance where no materialization event has it"
    )
    pro.add_argument("--data-dir", default=None, help="data root (default: FUSION_DATA_DIR or ./data)")
    pro.add_argument("--allow-partial", action="store_true", help="promote even if some experiment is not materialized")
    pro.add_argument(
        "--include-imported",
        action="store_true",
        help="also take provenance from materializations imported from results bundles (another machine's)",
    )
    pro.add_argument("--note", default="", help="free text stored in the manifest")
    exp = sub.add_parser("export-bundle", help="write a profile's results as a portable bundle (for another checkout)")
    exp.add_argument("--profile", default="default", choices=sorted(PROFILES))
    exp.add_argument("--out", required=True, help="new folder for the bundle, e.g. results/h100-seed")
    exp.add_argument("--data-dir", default=None, help="data root (default: FUSION_DATA_DIR or ./data)")
    exp.add_argument("--no-tensors", action="store_true", help="leave every tensor file out (tables and records only)")
    exp.add_argument("--max-tensor-mib", type=float, default=8.0, help="leave out tensor files larger than this")
    imp = sub.add_parser("import-bundle", help="check a results bundle and add it to this instance and data folder")
    imp.add_argument("path", help="the bundle folder")
    imp.add_argument("--data-dir", default=None, help="data root (default: FUSION_DATA_DIR or ./data)")
    imp.add_argument("--replace", action="store_true", help="replace an earlier import of the same device and profile")
    imp.add_argument("--if-new", action="store_true", help="pass over (exit 0) a device and profile imported before")
    rp = sub.add_parser(
        "repros",
        help="build minimal reproducers (bisected to the layer at fault) and list every reproducer with its status",
    )
    rp.add_argument("--profile", default="default", choices=sorted(PROFILES))
    rp.add_argument("--data-dir", default=None, help="data root (default: FUSION_DATA_DIR or ./data)")
    rp.add_argument(
        "--planted", nargs="*", default=None, metavar="BUG", help="planted bugs of the matrix (none named: all of them)"
    )
    rp.add_argument(
        "--make",
        action="append",
        default=[],
        metavar="SPEC",
        help="d/<subgraph>/<dtype>/<BxSxH>/<layout> (a row of D, e.g. d/transpose_concat/float16/4x128x256/contiguous) "
        "or fuzz/<seed>[/<dtype>] or difftest/<generator>/<seed>[/<dtype>]; repeatable",
    )
    rp.add_argument("--backend", default="inductor", help="backend of the --make cases")
    rp.add_argument("--python", default=None, help="re-run every reproducer under this interpreter (another torch)")
    rp.add_argument("--no-knobs", action="store_true", help="bisect the layers only (no Inductor knobs, no toolchain)")
    tim = sub.add_parser("times", help="where the time of a profile's last run went, against its budget")
    tim.add_argument("--profile", default="default", choices=sorted(PROFILES))
    args = parser.parse_args(argv)
    if args.command == "times":
        from .timing import print_times

        return print_times(_instance(), args.profile)
    if args.command != "report":
        from .storage import default_data_root, is_url

        data_dir = args.data_dir or default_data_root()
        if is_url(data_dir):
            # These commands read and write files under the data folder themselves (baselines, bundles,
            # reproducers); an object-store data folder holds only the values the IO manager stores.
            print(
                f"{args.command}: the data folder {data_dir!r} is a URL; this command needs a local or mounted "
                "folder (--data-dir or FUSION_DATA_DIR set to a path)",
                file=sys.stderr,
            )
            return 2
    if args.command == "repros":
        return repros(
            args.profile, args.data_dir, args.planted, args.make, args.python, args.backend, not args.no_knobs
        )
    if args.command == "export-bundle":
        return export_bundle(args.profile, args.out, args.data_dir, args.no_tensors, args.max_tensor_mib)
    if args.command == "import-bundle":
        return import_bundle(args.path, args.data_dir, args.replace, args.if_new)
    if args.command == "promote-baseline":
        return promote_baseline(
            args.profile, args.device, args.backend, args.data_dir, args.allow_partial, args.note, args.include_imported
        )
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    return report(
        args.profile,
        args.device,
        args.backend,
        args.backend_options,
        args.verbose,
        args.everything,
        only,
        args.workloads,
    )


if __name__ == "__main__":
    sys.exit(main())
