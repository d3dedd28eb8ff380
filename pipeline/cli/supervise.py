"""A compiler's native code may crash the process that runs it (a segfault in a runtime, an abort in a
code generator). ``report`` with any compiler other than Inductor therefore runs the plan in a child
process of its own (``python -m pipeline.cli.child``) and watches it: when the child dies of a signal
while a step runs, that step is recorded as failed in the child's run ("NativeCrash: the process died
of SIGSEGV while running this step"), so the experiment reads as an invalid run with that reason on the
site and in the outcome table, and the plan goes on without that experiment in a new child. Every other
exit of the child is the command's exit status. ``FUSION_REPORT_IN_PROCESS=1`` runs every compiler in
this process instead.

The child sees this process's import path (``PYTHONPATH``), so a compiler registered from a folder on
``sys.path`` is found there too; it runs in its own session, and this process forwards Ctrl-C and a
scheduler's SIGTERM to it once, so it stops as a run in this process would.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg

from ..runs import DEFAULT_BACKEND
from . import local

#: Set in the child: run the plan here, do not supervise again.
CHILD_ENV = "FUSION_REPORT_CHILD"
#: Run every compiler in this process (no crash isolation).
IN_PROCESS_ENV = "FUSION_REPORT_IN_PROCESS"
#: JSON object, experiment id -> [step, reason], of experiments a crash took out: the child leaves them
#: out of its run and shows them failed with the reason.
CRASHED_ENV = "FUSION_REPORT_CRASHED"
#: A signal the supervisor forwarded (a stop asked for, not a crash).
_STOPS = (signal.SIGINT, signal.SIGTERM)


def isolated(backend: str) -> bool:
    """Whether ``report`` runs ``backend``'s plan in a child process (every compiler but Inductor's
    default path, unless :data:`IN_PROCESS_ENV` is set or this is the child)."""
    return backend != DEFAULT_BACKEND and not os.environ.get(CHILD_ENV) and not os.environ.get(IN_PROCESS_ENV)


def crashed_experiments() -> dict[str, tuple[str, str]]:
    """In the child: the experiments earlier children's crashes took out: id -> (step, reason)."""
    raw = os.environ.get(CRASHED_ENV, "")
    return {str(k): (str(v[0]), str(v[1])) for k, v in json.loads(raw).items()} if raw else {}


def signal_name(returncode: int) -> str:
    """``-11`` -> ``"SIGSEGV"``."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def unfinished_steps(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The steps of ``run_id`` that started and neither succeeded, failed nor were skipped."""
    from dagster._core.events import DagsterEventType

    kinds = {
        DagsterEventType.STEP_START,
        DagsterEventType.STEP_SUCCESS,
        DagsterEventType.STEP_FAILURE,
        DagsterEventType.STEP_SKIPPED,
    }
    started: list[str] = []
    ended: set[str] = set()
    for record in instance.all_logs(run_id, of_type=kinds):
        event = record.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type == DagsterEventType.STEP_START:
            started.append(event.step_key)
        else:
            ended.add(event.step_key)
    return [s for s in started if s not in ended]


def record_crash(instance: dg.DagsterInstance, pid: int, returncode: int) -> dict[str, tuple[str, str]]:
    """After the child ``pid`` died of a signal: each step its runs had started and not ended is
    recorded as failed with the signal (a ``STEP_FAILURE`` event in that run), and the run is marked
    failed. Returns experiment id -> (step, reason) for those steps' experiments."""
    from dagster._core.events import DagsterEvent, DagsterEventType, StepFailureData
    from dagster._utils.error import SerializableErrorInfo

    from ..run_summary import step_owners

    owners = step_owners()
    why = signal_name(returncode)
    out: dict[str, tuple[str, str]] = {}
    runs = instance.get_runs(filters=dg.RunsFilter(tags={local.CLI_PID_TAG: str(pid)}))
    for run in runs:
        for step in unfinished_steps(instance, run.run_id):
            message = f"the process died of {why} while running this step (native code: the compiler's or a library's)"
            error = SerializableErrorInfo(f"NativeCrash: {message}", [], "NativeCrash")
            event = DagsterEvent(
                event_type_value=DagsterEventType.STEP_FAILURE.value,
                job_name=run.job_name,
                step_key=step,
                event_specific_data=StepFailureData(error=error, user_failure_data=None),
                message=f'Execution of step "{step}" failed: {message}.',
                pid=pid,
            )
            instance.report_dagster_event(event, run_id=run.run_id, log_level=logging.ERROR)
            exp_id = owners.get(step)
            if exp_id is not None:
                out.setdefault(exp_id, (step, f"step {step}: NativeCrash: {message}"))
    local.release_interrupted_runs(instance)
    return out


def supervise(kwargs: Mapping[str, Any], out: Callable[[str], None] = print, max_restarts: int | None = None) -> int:
    """Run ``report(**kwargs)`` in a child process until it ends without a crash. After a crash during a
    step, that step's experiment is recorded failed (:func:`record_crash`) and a new child runs the rest
    without it; a crash outside any step ends the command with status 1."""
    from ..experiments import EXPERIMENTS

    crashed: dict[str, tuple[str, str]] = {}
    limit = len(EXPERIMENTS) if max_restarts is None else max_restarts
    while True:
        returncode, pid = _run_child(kwargs, crashed)
        if returncode >= 0 or signal.Signals(-returncode) in _STOPS:
            return returncode if returncode >= 0 else 130
        found = record_crash(local.local_instance(), pid, returncode)
        backend = kwargs.get("backend", DEFAULT_BACKEND)
        if not found:
            out(f"report: the process running {backend} died of {signal_name(returncode)} outside any step")
            return 1
        crashed.update(found)
        out(
            f"{backend} crashed the process ({signal_name(returncode)}) in {', '.join(found)}: recorded as an "
            "invalid run with that reason; running the rest of the plan in a new process"
        )
        if len(crashed) > limit:
            return 1


def _run_child(kwargs: Mapping[str, Any], crashed: Mapping[str, tuple[str, str]]) -> tuple[int, int]:
    """One child: (its exit status, negative for a signal; its pid). Ctrl-C and SIGTERM here are
    forwarded to it once; it then stops as a run stops."""
    env = {
        **os.environ,
        CHILD_ENV: "1",
        CRASHED_ENV: json.dumps({k: list(v) for k, v in crashed.items()}),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)),
    }
    cmd = [sys.executable, "-m", "pipeline.cli.child", json.dumps(dict(kwargs))]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    forwarded: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        if not forwarded and proc.poll() is None:
            forwarded.append(signum)
            proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in _STOPS}
    try:
        returncode = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if forwarded and returncode < 0:
        returncode = -int(forwarded[0])  # stopped as asked, not crashed
    return returncode, proc.pid
