"""The scale-out path for real: a Dagster instance on Postgres, the code location's ``all_assets_celery``
job on two Celery workers (Redis broker), the history page and the regression baseline read from
Postgres, a worker killed mid-step and the re-execution from failure.

The selection: experiment S for one workload (``input_pool_softmax``, ``fp64_reference_softmax`` and its
check, ``toolkit_selfcheck`` and its check: the slice the multiprocess test runs) plus experiment A
(``input_pool_ffn`` and the ``determinism`` multi-asset with ``determinism_summary``'s five checks). It
has heavy steps (four, pool ``compute_device``) and light ones (eight: the self-check and seven check
steps), so both queues get work; A is the smallest experiment with a summary, claims that the history
page shows and a baseline to promote and compare; and it runs in about a minute on 2 cores. The
selection is the same as in production: the smoke profile's sizes, nothing stubbed.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
from _cluster_jobs import (
    TIMING_COLUMNS,
    celery_job,
    heavy_steps,
    in_process_job,
    step_events,
    value_differences,
    worker_of_steps,
)
from _cluster_services import HEAVY_WORKER, LIGHT_WORKER, SUMMARY, Cluster

from pipeline import storage
from pipeline.cluster import CELERY_JOB
from pipeline.definitions import defs
from pipeline.resources import ExperimentSettings
from pipeline.runs import evaluation_in_run, plain

pytestmark = [
    pytest.mark.cluster,
    # dagster-celery registers its task again for every step it submits (harmless; the first one runs).
    pytest.mark.filterwarnings("ignore:Task name 'execute_plan' is already registered"),
]

S_ASSETS = ["input_pool_softmax", "fp64_reference_softmax", "toolkit_selfcheck"]
A_ASSETS = ["input_pool_ffn", "determinism_runs", "determinism_artifacts", "determinism_summary"]
SELECTION = [dg.AssetKey(a) for a in S_ASSETS + A_ASSETS]
#: The heavy step a worker is killed in, and the selection of that run.
KILLED_STEP = "determinism"
KILL_SELECTION = [dg.AssetKey(a) for a in A_ASSETS]


@pytest.fixture(scope="module")
def celery_run(cluster: Cluster, tmp_path_factory):
    """The selection run twice on the Postgres instance: by the Celery workers, then in process (into
    another data folder). Returns (celery run id, in-process run id, in-process data root, seconds)."""
    with cluster.instance() as instance:
        start = time.perf_counter()
        result = dg.execute_job(celery_job(), instance, run_config=cluster.run_config(), asset_selection=SELECTION)
        seconds = time.perf_counter() - start
        assert result.success, [str(e.message) for e in result.all_events if e.is_failure]
        local_root = tmp_path_factory.mktemp("in_process_data")
        local = in_process_job(local_root, SELECTION).execute_in_process(instance=instance)
        assert local.success
    return result.run_id, local.run_id, local_root, seconds


def test_every_step_ran_in_a_worker_on_its_queue(cluster: Cluster, celery_run):
    run_id, _, _, seconds = celery_run
    heavy = heavy_steps(SELECTION)
    assert heavy == {"input_pool_softmax", "fp64_reference_softmax", "input_pool_ffn", "determinism"}
    with cluster.instance() as instance:
        run = instance.get_run_by_id(run_id)
        assert run.status == dg.DagsterRunStatus.SUCCESS and run.job_name == CELERY_JOB
        starts = step_events(instance, run_id, dg.DagsterEventType.STEP_START)
        workers = worker_of_steps(instance, run_id)
    steps = {r.step_key for r in starts}
    # A's two generated checks (it fused: validity; it computed below the workload's dtype: finding) are steps
    assert len(steps) == 14 and heavy < steps and "determinism_summary_determinism_summary_shows_fusion" in steps
    assert "determinism_summary_determinism_summary_computes_in_workload_dtype" in steps
    # Every step started in a worker's pool process, never in this (the orchestrating) process.
    pids = {r.step_key: r.dagster_event.pid for r in starts}
    assert os.getpid() not in pids.values()
    assert set(workers) == steps, f"steps without a worker's engine event: {steps - set(workers)}"
    by_worker = {name: sorted(s for s, w in workers.items() if w.startswith(f"{name}@")) for name in cluster.workers}
    assert set(by_worker[HEAVY_WORKER]) == heavy
    assert set(by_worker[LIGHT_WORKER]) == steps - heavy
    for name, worker_steps in by_worker.items():
        pool = cluster.worker_pool_pids(name)
        assert {pids[s] for s in worker_steps} <= pool, f"{name}: steps ran outside its processes"
    counts = {name: len(s) for name, s in by_worker.items()}
    SUMMARY.append(f"celery run {run_id}: {seconds:.1f} s, steps per worker {counts}")
    assert counts == {HEAVY_WORKER: 4, LIGHT_WORKER: 10}


def test_celery_values_and_checks_equal_the_in_process_run(cluster: Cluster, celery_run):
    run_id, local_run_id, local_root, _ = celery_run
    for key in SELECTION:
        name = key.to_user_string()
        remote = storage.read_value(cluster.data_root / "smoke" / name)
        local = storage.read_value(Path(local_root) / "smoke" / name)
        differences = value_differences(remote, local)
        assert not differences, f"{name} differs between the Celery run and the in-process run: {differences}"
    graph = defs.resolve_asset_graph()
    checks = sorted((c for c in graph.asset_check_keys if c.asset_key in SELECTION), key=str)
    assert len(checks) == 9 and "determinism_summary_shows_fusion" in {c.name for c in checks}
    assert "determinism_summary_computes_in_workload_dtype" in {c.name for c in checks}
    with cluster.instance() as instance:
        for check in checks:
            celery = evaluation_in_run(instance, check, run_id)
            local = evaluation_in_run(instance, check, local_run_id)
            assert celery is not None and local is not None, check
            assert (celery.passed, celery.severity) == (local.passed, local.severity), check
            a, b = plain(celery.metadata), plain(local.metadata)
            assert {k: v for k, v in a.items() if k not in TIMING_COLUMNS} == {
                k: v for k, v in b.items() if k not in TIMING_COLUMNS
            }, check


def test_history_and_baseline_read_from_postgres(cluster: Cluster, celery_run, tmp_path):
    from pipeline.instruments.regression.drift import baseline_comparison, promote_with_instance
    from pipeline.pagekit.render import Report
    from pipeline.reporting import history

    run_id, local_run_id, _, _ = celery_run
    graph = defs.resolve_asset_graph()
    with cluster.instance() as instance:
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        report = Report(instance, graph, cluster.data_root / "smoke", tmp_path / "docs", "smoke", "", device="cpu")
        claims = [key for exp_id, key in history._claims(report) if exp_id == "A"]
        assert claims, "experiment A has no claim check"
        for key in claims:
            points = history.claim_history(report, key)
            # Both runs of this instance, the Celery one first, agree on the verdict and every figure.
            assert [p.run_id for p in points][-2:] == [run_id, local_run_id], key
            assert history.moved(points[-2:]) == [], key
        page = history.history_page(report)
        assert claims[0].name in page and "No claim has been evaluated" not in page

        settings = ExperimentSettings(profile="smoke", device="cpu")
        done = promote_with_instance(instance, str(cluster.data_root), settings, allow_partial=True, note="cluster")
        assert "A" in done.promoted
        manifest = storage.read_value(done.folder / "manifest")
        source = manifest["experiments"]["A"]["provenance_source"]
        # The provenance comes from the Celery run's materialization event, read from Postgres.
        assert source.endswith(f"in run {run_id}"), source
        compared = in_process_job(cluster.data_root, [baseline_comparison.key]).execute_in_process(instance=instance)
        assert compared.success
        verdicts = {
            e.asset_check_key.name: (e.passed, plain(e.metadata))
            for e in compared.get_asset_check_evaluations()
            if e.asset_check_key is not None
        }
        passed, meta = verdicts["no_moves_against_baseline"]
        assert passed and meta["verdict"] == "supported" and meta["items_compared"] > 0 and meta["moved"] == 0
        assert meta["provenance_changed"] == "none"


def _kill_when_started(cluster: Cluster, tag: str, step: str, killed: dict, stop: threading.Event) -> None:
    """Wait for ``step`` to start in the run tagged ``tag``, then SIGKILL the process running it."""
    with cluster.instance() as instance:
        deadline = time.monotonic() + 300
        while not stop.is_set() and time.monotonic() < deadline:
            runs = instance.get_runs(filters=dg.RunsFilter(tags={"fusion/test": tag}))
            for run in runs:
                for record in step_events(instance, run.run_id, dg.DagsterEventType.STEP_START):
                    if record.step_key == step:
                        pid = record.dagster_event.pid
                        killed["pid"], killed["run_id"] = pid, run.run_id
                        # Only ever a process of the heavy worker this session started.
                        killed["in_heavy_worker"] = pid in cluster.worker_pool_pids(HEAVY_WORKER)
                        if killed["in_heavy_worker"] and pid != cluster.workers[HEAVY_WORKER].pid:
                            os.kill(pid, signal.SIGKILL)
                        return
            time.sleep(0.1)


def test_a_worker_killed_mid_step_fails_the_run_and_a_reexecution_resumes(cluster: Cluster):
    tag = uuid.uuid4().hex
    killed: dict = {}
    stop = threading.Event()
    killer = threading.Thread(target=_kill_when_started, args=(cluster, tag, KILLED_STEP, killed, stop))
    killer.start()
    try:
        with cluster.instance() as instance:
            failed = dg.execute_job(
                celery_job(),
                instance,
                run_config=cluster.run_config(),
                asset_selection=KILL_SELECTION,
                tags={"fusion/test": tag},
            )
    finally:
        stop.set()
        killer.join()
    assert killed.get("pid"), "the step never started"
    assert killed["in_heavy_worker"] and killed["run_id"] == failed.run_id
    assert not failed.success
    with cluster.instance() as instance:
        run = instance.get_run_by_id(failed.run_id)
        assert run.status == dg.DagsterRunStatus.FAILURE
        failure = step_events(instance, failed.run_id, dg.DagsterEventType.RUN_FAILURE)
        text = " ".join(
            str(r.dagster_event.message) + str(getattr(r.dagster_event.event_specific_data, "error", "") or "")
            for r in failure
        )
        assert f"[{KILLED_STEP}]" in text and "WorkerLostError" in text, text
        succeeded = {r.step_key for r in step_events(instance, failed.run_id, dg.DagsterEventType.STEP_SUCCESS)}
        assert "input_pool_ffn" in succeeded and KILLED_STEP not in succeeded
        # The killed step's slot of pool compute_device stays claimed (no step failure was recorded):
        # free it as the daemon's run monitoring does for a finished run, or the re-execution waits on it.
        instance.event_log_storage.free_concurrency_slots_for_run(failed.run_id)

        resumed = dg.execute_job(
            celery_job(),
            instance,
            run_config=cluster.run_config(),
            reexecution_options=dg.ReexecutionOptions.from_failure(failed.run_id, instance),
        )
        assert resumed.success
        rerun = {r.step_key for r in step_events(instance, resumed.run_id, dg.DagsterEventType.STEP_START)}
        workers = worker_of_steps(instance, resumed.run_id)
        counts = {n: sum(w.startswith(f"{n}@") for w in workers.values()) for n in cluster.workers}
        SUMMARY.append(
            f"killed pid {killed['pid']} (step {KILLED_STEP}) in run {failed.run_id}; "
            f"re-execution {resumed.run_id}: steps per worker {counts}"
        )
    assert KILLED_STEP in rerun and not rerun & succeeded, f"re-ran {sorted(rerun)}; had succeeded {sorted(succeeded)}"
    assert rerun == {KILLED_STEP} | {s for s in rerun if s.startswith("determinism_summary_")}
    assert counts == {HEAVY_WORKER: 1, LIGHT_WORKER: len(rerun) - 1}
    # The resumed values are those of the first Celery run (same inputs, same seeds).
    summary = storage.read_value(cluster.data_root / "smoke" / "determinism_summary")
    assert isinstance(summary, pl.DataFrame) and summary.height > 0
