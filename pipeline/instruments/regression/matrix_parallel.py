"""Runs of the planted-bug matrix several at a time: this process and worker processes.

The runs are mostly single-threaded tracing and compilation, so :func:`run_matrix_plan` runs them two at
a time by default: here and in a worker process (:class:`MatrixWorker`, running
:mod:`.matrix_worker`) with the same environment and CPU thread count. Which process ran a run
changes nothing in it; results come back in plan order.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...pipe_worker import PipeWorker
from ...resources import ExperimentSettings
from .matrix_runs import HEALTHY_BACKEND, MATRIX_DEVICE, MATRIX_PROFILE, MatrixRun, PlannedRun, run_experiments


def parallel_runs_here(requested: int) -> int:
    """How many runs go at a time: ``requested``, at most one per CPU core (the runs are mostly
    single-threaded tracing and compilation, so more would only contend)."""
    if requested < 1:
        raise ValueError(f"parallel runs must be at least 1, got {requested}")
    return max(1, min(requested, os.cpu_count() or 1))


class MatrixWorker(PipeWorker):
    """A fresh interpreter (``python -m pipeline.instruments.regression.matrix_worker``) that loads the matrix's
    definitions once and then runs whole matrix runs on request (:class:`pipeline.pipe_worker.PipeWorker`).
    It inherits this process's environment (so the same Inductor cache folder) and CPU thread count, so a
    run gives the same numbers whichever process runs it."""

    def __init__(self, experiments: list[str], threads: int) -> None:
        super().__init__(
            "pipeline.instruments.regression.matrix_worker",
            ["--threads", str(threads), "--experiments", ",".join(experiments)],
            "planted-bug matrix worker",
        )

    def run(self, run: PlannedRun, base_dir: Path, like: dict[str, Any], prune: bool) -> MatrixRun:
        status, value = self.request((tuple(run), str(base_dir), like, prune))
        if status != "ok":
            raise RuntimeError(f"matrix run {run.label} failed in the worker: {value}")
        out: MatrixRun = value
        return out


class _SharedPlan:
    """The runs of a plan not yet taken, the results in by index, and the first error, shared
    between this thread and the threads feeding the workers; results are handed to ``on_result``
    in plan order, in the thread that calls :meth:`report`."""

    def __init__(
        self,
        plan: list[PlannedRun],
        on_result: Callable[[int, MatrixRun], None] | None,
        order: list[int] | None = None,
    ) -> None:
        self.plan = plan
        order = list(range(len(plan))) if order is None else order
        if sorted(order) != list(range(len(plan))):
            raise ValueError(f"an execution order must name every run of the plan once, got {order}")
        self.pending = deque((i, plan[i]) for i in order)
        self.results: dict[int, MatrixRun] = {}
        self.errors: list[BaseException] = []
        self.lock = threading.Condition()
        self.on_result = on_result
        self.reported = 0

    def take(self) -> tuple[int, PlannedRun] | None:
        """The next run to do; None when none is left or a run has failed."""
        with self.lock:
            return self.pending.popleft() if self.pending and not self.errors else None

    def store(self, i: int, out: MatrixRun) -> None:
        with self.lock:
            self.results[i] = out
            self.lock.notify_all()

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(exc)
            self.lock.notify_all()

    def report(self) -> None:
        """Hand every result whose predecessors are all in to ``on_result``, in plan order."""
        while self.reported in self.results:
            if self.on_result is not None:
                self.on_result(self.reported, self.results[self.reported])
            self.reported += 1

    def wait_for_workers(self, feeders: list[threading.Thread]) -> None:
        """Report results as they come until every run is in, a run failed or no feeder is left."""
        while True:
            with self.lock:
                done = (
                    len(self.results) == len(self.plan) or bool(self.errors) or not any(t.is_alive() for t in feeders)
                )
                if not done:
                    self.lock.wait(timeout=1.0)
            self.report()
            if done:
                return

    def outcome(self) -> list[MatrixRun]:
        """The results in plan order; the first error raised, or a RuntimeError naming runs that never finished."""
        if self.errors:
            raise self.errors[0]
        missing = [self.plan[i].label for i in range(len(self.plan)) if i not in self.results]
        if missing:
            raise RuntimeError(f"matrix runs never finished: {', '.join(missing)}")
        self.report()
        return [self.results[i] for i in range(len(self.plan))]


def _feed(shared: _SharedPlan, worker: MatrixWorker, work_dir: Path, plain: dict[str, Any], prune: bool) -> None:
    """Give ``worker`` the plan's next run until none is left (in a thread of its own); an error is
    handed to the calling thread through ``shared``."""
    try:
        worker.ready()  # loaded before it takes a run: this process keeps taking runs meanwhile
        while (item := shared.take()) is not None:
            i, run = item
            shared.store(i, worker.run(run, work_dir / run.label, plain, prune))
    except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
        shared.fail(exc)


def run_matrix_plan(
    plan: list[PlannedRun],
    experiments: list[str],
    defs: list[Any],
    like: ExperimentSettings,
    work_dir: Path,
    prune: bool = True,
    parallel: int = 1,
    on_result: Callable[[int, MatrixRun], None] | None = None,
    order: list[int] | None = None,
) -> list[MatrixRun]:
    """Every run of ``plan`` (folder ``work_dir / label``) over ``defs``, the
    :func:`matrix_definitions` of ``experiments`` (a worker loads its own), in plan order.

    With ``parallel`` > 1, this process and ``parallel - 1`` :class:`MatrixWorker` processes each
    take the next run as they become free. ``on_result(index, run)`` is called in this thread and
    in plan order (run ``i`` once runs ``0..i`` are finished), so logs read the same however the
    runs were shared out. A run that raises (here or in a worker) stops the plan and its error is
    raised; the workers are stopped either way. ``order`` (indices into ``plan``) is the order runs are
    taken in, where it is not the plan's; results still come back, and are reported, in plan order."""
    shared = _SharedPlan(plan, on_result, order)

    def run_here(run: PlannedRun) -> MatrixRun:
        return run_experiments(run.backend, defs, work_dir / run.label, like, seed=run.seed, prune=prune, only=run.only)

    workers = min(parallel, len(plan)) - 1 if os.name == "posix" else 0
    if workers < 1:
        while (item := shared.take()) is not None:
            shared.store(item[0], run_here(item[1]))
            shared.report()
        return shared.outcome()
    plain = {
        "profile": MATRIX_PROFILE,
        "device": MATRIX_DEVICE,
        "backend": HEALTHY_BACKEND,
        "backend_options": like.backend_options,
        "seed": like.seed,
    }
    import torch

    pool = [MatrixWorker(experiments, torch.get_num_threads()) for _ in range(workers)]
    feeders = [threading.Thread(target=_feed, args=(shared, w, work_dir, plain, prune), daemon=True) for w in pool]
    for t in feeders:
        t.start()
    failed = False
    try:
        while (item := shared.take()) is not None:
            i, run = item
            shared.store(i, run_here(run))
            shared.report()
        shared.wait_for_workers(feeders)
    except BaseException as exc:
        failed = True
        shared.fail(exc)
        raise
    finally:
        failed = failed or bool(shared.errors)
        for w in pool:
            if failed:
                w.close(kill=True)
        for t in feeders:
            t.join()
        for w in pool:
            if not failed:
                w.close(wait=False)
    return shared.outcome()
