"""Fixtures of the cluster tests (``make test-cluster``): a throwaway Postgres, Redis, two Celery workers
and a local S3 server, all on free 127.0.0.1 ports under one temporary folder, started once per session
and stopped (with a check that nothing is left) also when a test fails.

Without the cluster extra or a server binary the tests skip and say what is missing; under CI (``CI``
set), where ``make test-cluster`` installs both, a missing piece fails instead of skipping.
"""

from __future__ import annotations

import importlib.util
import os
import time

import pytest
from _cluster_services import (
    HEAVY_QUEUE,
    HEAVY_WORKER,
    LIGHT_QUEUE,
    LIGHT_WORKER,
    PG_ENV,
    SUMMARY,
    Cluster,
    MissingServer,
    Services,
    instance_yaml,
)

_EXTRAS = ("dagster_celery", "dagster_postgres", "celery", "redis", "s3fs", "moto")


def pytest_terminal_summary(terminalreporter):
    if SUMMARY:
        terminalreporter.section("cluster runs")
        for line in SUMMARY:
            terminalreporter.write_line(line)


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"cluster tests cannot run under CI: {why}")
    pytest.skip(why)


def _require_extras() -> None:
    missing = [m for m in _EXTRAS if importlib.util.find_spec(m) is None]
    if missing:
        _unavailable(f"the cluster extra is not installed ({', '.join(missing)}): pip install -e '.[cluster]'")


@pytest.fixture(scope="session")
def services():
    """The session's :class:`Services`; stopped at the end, and then nothing of it may be left."""
    _require_extras()
    s = Services()
    try:
        yield s
    finally:
        s.stop()
    left = s.leftovers()
    assert not left, f"cluster teardown left {left}"


@pytest.fixture(scope="session")
def cluster(services: Services):
    """Postgres-backed Dagster instance, Redis broker and two workers: ``heavy`` on queue
    ``compute_device``, ``light`` on queue ``dagster``."""
    try:
        postgres_url = services.start_postgres()
        redis_url = services.start_redis()
    except MissingServer as exc:
        _unavailable(str(exc))
    home = services.root / "dagster_home"
    home.mkdir()
    assert services.pg_port is not None
    (home / "dagster.yaml").write_text(instance_yaml(services.pg_port))
    monkeypatch = pytest.MonkeyPatch()
    for name, value in PG_ENV.items():  # this process reads the instance too
        monkeypatch.setenv(name, value)
    data_root = services.root / "data"
    data_root.mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "FUSION_DATA_DIR": str(data_root),
        "PYTHONUNBUFFERED": "1",
        **PG_ENV,
    }
    env.pop("FUSION_DEVICE", None)
    cl = Cluster(services, home, data_root, postgres_url, redis_url, {}, env)
    with cl.instance() as instance:  # creates the schema once, before two workers race to
        instance.get_runs(limit=1)
    broker, backend = cl.broker, cl.backend
    cl.workers[HEAVY_WORKER] = services.start_worker(HEAVY_WORKER, HEAVY_QUEUE, broker, backend, env)
    cl.workers[LIGHT_WORKER] = services.start_worker(LIGHT_WORKER, LIGHT_QUEUE, broker, backend, env)
    deadline = time.monotonic() + 120
    while cl.ping() != {HEAVY_WORKER, LIGHT_WORKER}:
        dead = [n for n, w in cl.workers.items() if w.popen.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = {n: w.log.read_text()[-3000:] if w.log else "" for n, w in cl.workers.items()}
            raise RuntimeError(f"celery workers not ready (exited: {dead}); logs: {logs}")
        time.sleep(0.5)
    yield cl
    monkeypatch.undo()


@pytest.fixture(scope="session")
def s3_endpoint(services: Services) -> str:
    """A local S3-compatible server (moto) on a free 127.0.0.1 port."""
    return services.start_s3()
