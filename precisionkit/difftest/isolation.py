"""Worker interpreters: a program whose compiled code crashes, hangs or faults the device costs one
program, not the campaign."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..repro import Case
from .runner import Outcome

#: Seconds a fresh worker may take to start (import torch, run ``setup``) before it counts as not
#: starting. Separate from the per-program timeout: a short program timeout (seconds, to kill a hung
#: program quickly) must not fail the start of an interpreter on a loaded machine.
START_TIMEOUT = 120.0


class Isolated:
    """A worker interpreter (``python -m precisionkit._isolated``) that runs programs and minimizes
    mismatches on request: generated programs reach compiled code that reads out of bounds (a real
    defect class), and a crash or hang there must cost one program, not the process that runs the
    campaign. A warm worker pays for its CUDA context once, over all the programs it runs. The
    worker is restarted after each crash; ``setup`` (Python source) runs first in
    every worker, e.g. to register a backend this process registered."""

    def __init__(self, setup: str = "", timeout: float = 600.0) -> None:
        self.setup, self.timeout = setup, timeout
        self.proc: Any = None
        self.conn: Any = None
        self.crashes = 0

    def _start(self) -> None:
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        here, there = socket.socketpair()
        cmd = [sys.executable, "-m", "precisionkit._isolated", "--fd", str(there.fileno())]
        self.proc = subprocess.Popen(cmd, pass_fds=(there.fileno(),))
        there.close()
        self.conn = Connection(here.detach())
        kind, payload = self._call(("setup", self.setup), max(self.timeout, START_TIMEOUT))[:2]
        if kind != "ok":
            self.close()
            raise RuntimeError(f"the difftest worker could not start: {payload}")

    def _call(self, request: tuple[Any, ...], timeout: float | None = None) -> tuple[str, Any, str]:
        """Send ``request``; the reply's kind and payload and the last stage the worker reported.
        Kind ``died`` (payload: how) when the worker exited or ran past ``timeout`` (the
        per-program timeout when None)."""
        timeout = self.timeout if timeout is None else timeout
        stage = ""
        try:
            self.conn.send(request)
            while True:
                if not self.conn.poll(timeout):
                    self.proc.kill()
                    self.proc.wait()
                    return "died", f"no result within {timeout:g} s (killed)", stage
                kind, payload = self.conn.recv()
                if kind == "stage":
                    stage = payload
                    continue
                return kind, payload, stage
        except (EOFError, OSError):
            import signal

            code = self.proc.wait()
            known = code < 0 and -code in signal.Signals._value2member_map_
            how = signal.Signals(-code).name if known else f"exit status {code}"
            return "died", f"the interpreter died ({how})", stage

    def _request(self, request: tuple[Any, ...]) -> tuple[str, Any, str]:
        if self.proc is None:
            self._start()
        kind, payload, stage = self._call(request)
        if kind == "died":
            self.crashes += 1
            self.close()  # the next request starts a fresh worker
        return kind, payload, stage

    def run(self, case: Case, backend: str = "inductor", threads: int | None = None) -> Outcome:
        """:func:`run` in the worker; a worker that dies or hangs gives ``crash`` (in the fused run)
        or ``invalid`` (before it: eager or the fp64 reference). A device fault the worker survived
        (a CUDA error raised in the fused run) is a ``crash`` too, and the worker is replaced."""
        start = time.perf_counter()
        kind, payload, stage = self._request(("run", case, backend, threads))
        if kind == "ok":
            if payload.fault:  # the device's context is unusable after a fault: a fresh worker next
                self.crashes += 1
                self.close()
            return payload  # type: ignore[no-any-return]
        if kind == "died":
            klass = "crash" if stage == "fused" else "invalid"
            where = "fused run" if stage == "fused" else "eager or fp64 run"
            return Outcome(case, klass, f"{where}: {payload}", time.perf_counter() - start, threads or 0)
        raise RuntimeError(f"difftest worker failed on {case.id}: {payload}")

    def minimize(self, case: Case, max_checks: int = 60) -> tuple[Case, str] | None:
        """The minimized case and what the rule says about it; None when a candidate crashed the
        worker (the case is then kept as found)."""
        kind, payload, _ = self._request(("minimize", case, max_checks))
        if kind == "ok":
            return payload  # type: ignore[no-any-return]
        if kind == "died":
            return None
        raise RuntimeError(f"difftest worker failed minimizing {case.id}: {payload}")

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.conn.close()
            self.conn = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except Exception:  # noqa: BLE001 - a worker that does not exit is killed
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def __enter__(self) -> Isolated:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: A program for a worker: a (case, threads), or a function that makes one when a worker is free for it.
Job = tuple[Case, int | None] | Callable[[], tuple[Case, int | None]]


class WorkerPool:
    """Up to ``workers`` worker interpreters (:class:`Isolated`, each started with ``setup`` when first
    needed) that stay warm across calls of :meth:`run`: a step that runs its programs and then reruns
    some of them (with other options) pays for each interpreter's start once."""

    def __init__(self, setup: str = "", workers: int = 1, timeout: float = 600.0) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.setup, self.workers, self.timeout = setup, workers, timeout
        self.started: list[Isolated] = []
        self._idle: queue.SimpleQueue[Isolated] = queue.SimpleQueue()
        self._lock = threading.Lock()

    def _take(self) -> Isolated:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:  # a thread only asks when fewer than ``workers`` are busy: start one
            worker = Isolated(self.setup, self.timeout)
            self.started.append(worker)
        return worker

    def _one(self, job: Job, backend: str) -> Outcome:
        case, threads = job() if callable(job) else job
        worker = self._take()
        try:
            return worker.run(case, backend, threads)
        finally:
            self._idle.put(worker)

    def run(
        self,
        jobs: Sequence[Job],
        backend: str = "inductor",
        log: Callable[[Outcome], None] | None = None,
        return_exceptions: bool = False,
    ) -> list[Any]:
        """The outcome of each job of ``jobs``, a (case, threads) or a function that makes one (called
        when a worker is free for it, so a long plan is generated as it runs), in their order (``log``
        sees each in that order), at most ``workers`` side by side. ``return_exceptions``: a job whose
        worker failed outright (it could not start, or answered with an error) gives its exception in
        its place instead of raising it. Where ``log`` raises (a deadline, a stop), the jobs not yet
        started are dropped and the exception goes on once the running ones end."""
        import concurrent.futures

        out: list[Any] = []
        if not jobs:
            return out
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(self.workers, len(jobs)))
        try:
            futures = [pool.submit(self._one, job, backend) for job in jobs]
            for future in futures:
                try:
                    out.append(future.result())
                except Exception as exc:
                    if not return_exceptions:
                        raise
                    out.append(exc)
                    continue
                if log:
                    log(out[-1])
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return out

    def close(self) -> None:
        for worker in self.started:
            worker.close()
        self.started.clear()
        self._idle = queue.SimpleQueue()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
