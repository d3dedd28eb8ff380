"""A campaign: every (generator, seed) of a plan run once, in this process or in worker interpreters
(:class:`.isolation.Isolated`, kept warm by a :class:`.isolation.WorkerPool`), so a program whose
compiled code crashes, hangs or faults the device costs one program, not the campaign."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from ..repro import Case
from .generator import generate, threads_for
from .isolation import WorkerPool
from .runner import Outcome, run


def fuzz(
    todo: Iterable[tuple[str, int]],
    *,
    backend: str = "inductor",
    log: Callable[[Outcome], None] | None = None,
    isolated: bool = False,
    setup: str = "",
    device: str = "cpu",
    workers: int = 1,
    pool: WorkerPool | None = None,
) -> list[Outcome]:
    """Run every (generator, seed) of ``todo`` (see :func:`plan`) once on ``device``; ``log`` sees
    each outcome, in ``todo``'s order. ``isolated``: in a worker interpreter (:class:`Isolated`,
    started with ``setup``), so a program whose compiled code crashes, hangs or faults the device is
    a ``crash`` outcome, not the end of the campaign. ``workers`` (isolated only): that many worker
    interpreters run programs side by side (on an accelerator a program's cost is its compile, host
    work on one core); the outcomes are those of one worker, in the same order. ``pool``: run in
    this :class:`WorkerPool` (isolated, its own ``setup`` and ``workers``), which stays open for the
    caller's next programs."""
    todo = list(todo)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if workers > 1 and not isolated:
        raise ValueError("workers > 1 needs isolated=True: each worker is an interpreter of its own")
    # Each program is generated when it is its turn: a long plan starts at once, and a deadline that
    # ``log`` raises stops before the programs after it are made.
    jobs = [functools.partial(_program, gen, seed, device) for gen, seed in todo]
    if pool is not None:
        return pool.run(jobs, backend, log)
    if isolated:
        with WorkerPool(setup, workers) as own:
            return own.run(jobs, backend, log)
    out = []
    for job in jobs:
        case, threads = job()
        out.append(run(case, backend, threads))
        if log:
            log(out[-1])
    return out


def _program(gen: str, seed: int, device: str) -> tuple[Case, int | None]:
    return generate(seed, gen, device=device), threads_for(gen, seed)
