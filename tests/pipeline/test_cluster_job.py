"""The code location's Celery job (pipeline.cluster): present only with dagster-celery installed, and
each step routed to its pool's queue. Running it for real is tests/cluster (make test-cluster)."""

import importlib.util

import pytest

from pipeline import cluster
from pipeline.definitions import defs


def test_a_step_goes_to_its_tagged_queue_else_its_pool_else_the_light_queue():
    assert cluster.step_queue({cluster.QUEUE_TAG: "gpu-a100"}, "compute_device") == "gpu-a100"
    assert cluster.step_queue({"other": "x"}, "compute_device") == "compute_device"
    assert cluster.step_queue(None, None) == cluster.LIGHT_QUEUE == "dagster"
    assert cluster.step_queue({}, None, default="elsewhere") == "elsewhere"


def test_the_code_location_loads_without_dagster_celery(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "dagster_celery" else real(name, *a)
    )
    assert not cluster.celery_available()
    assert cluster.celery_jobs() == []


def test_heavy_steps_of_the_celery_job_go_to_the_compute_device_queue():
    if not cluster.celery_available():
        pytest.skip("dagster-celery is not installed (the cluster extra)")
    job = defs.resolve_job_def(cluster.CELERY_JOB)
    assert job.executor_def.name == "celery_by_pool"
    queues = {node.name: cluster.step_queue(dict(node.tags), node.pool) for node in job.graph.node_defs}
    heavy = {name for name, queue in queues.items() if queue == "compute_device"}
    pools = {node.name: node.pool for node in job.graph.node_defs}
    assert heavy == {name for name, pool in pools.items() if pool == "compute_device"}
    assert {"determinism", "input_pool_ffn", "training_curves", "planted_bug_matrix"} <= heavy
    assert queues["report_site"] == queues["toolkit_selfcheck"] == "dagster"
