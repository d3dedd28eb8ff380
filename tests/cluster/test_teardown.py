"""Teardown leaves nothing behind, also when the code between start and stop fails: a Postgres, a
Redis, a Celery worker (with its pool process) and an S3 server are started, a failure is raised, and
afterwards every pid is gone, every port closed and the folder removed. (The session's own cluster is
checked the same way when it stops: see the ``services`` fixture.)"""

from __future__ import annotations

import os

import pytest
from _cluster_services import LIGHT_QUEUE, Services, group_members, pid_alive, port_open, wait_for

pytestmark = pytest.mark.cluster


def test_teardown_leaves_no_process_port_or_folder_also_when_a_test_fails(services):
    # ``services`` (the session's) only makes sure the extras are installed; this test has its own.
    started: dict = {}
    with pytest.raises(RuntimeError, match="a failing test"), Services() as s:
        s.start_postgres()
        broker = s.start_redis()
        s3 = s.start_s3()
        env = {**os.environ, "DAGSTER_DISABLE_TELEMETRY": "1"}
        worker = s.start_worker("teardown", LIGHT_QUEUE, f"{broker}/0", f"{broker}/1", env)
        # Wait for the worker's pool process, so there is a child to leave behind.
        wait_for(lambda: len(group_members(worker.pid)) >= 2, 120, "the worker's pool process")
        started = {
            "pids": {s.pg_pid, *group_members(worker.pid), *(p.pid for p in s.processes)},
            "ports": set(s.seen_ports),
            "root": s.root,
            "s3": s3,
        }
        assert all(pid_alive(p) for p in started["pids"]) and all(port_open(p) for p in started["ports"])
        assert len(started["ports"]) == 3 and started["root"].is_dir()
        raise RuntimeError("a failing test")
    assert started, "the services did not start"
    assert s.leftovers() == []
    assert not any(pid_alive(p) for p in started["pids"])
    assert not any(port_open(p) for p in started["ports"])
    assert not started["root"].exists()
