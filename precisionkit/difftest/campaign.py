"""A campaign: every (generator, seed) of a plan run once, in this process or in worker interpreters
(:class:`.isolation.Isolated`), so a program whose compiled code crashes, hangs or faults the device
costs one program, not the campaign."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .generator import generate, threads_for
from .isolation import Isolated
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
) -> list[Outcome]:
    """Run every (generator, seed) of ``todo`` (see :func:`plan`) once on ``device``; ``log`` sees
    each outcome, in ``todo``'s order. ``isolated``: in a worker interpreter (:class:`Isolated`,
    started with ``setup``), so a program whose compiled code crashes, hangs or faults the device is
    a ``crash`` outcome, not the end of the campaign. ``workers`` (isolated only): that many worker
    interpreters run programs side by side (on an accelerator a program's cost is its compile, host
    work on one core); the outcomes are those of one worker, in the same order."""
    todo = list(todo)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if workers > 1 and not isolated:
        raise ValueError("workers > 1 needs isolated=True: each worker is an interpreter of its own")
    if workers > 1 and len(todo) > 1:
        return _fuzz_side_by_side(todo, backend, log, setup, device, min(workers, len(todo)))
    out = []
    worker = Isolated(setup) if isolated else None
    try:
        for gen, seed in todo:
            case, threads = generate(seed, gen, device=device), threads_for(gen, seed)
            o = worker.run(case, backend, threads) if worker is not None else run(case, backend, threads)
            if log:
                log(o)
            out.append(o)
    finally:
        if worker is not None:
            worker.close()
    return out


def _fuzz_side_by_side(
    todo: list[tuple[str, int]],
    backend: str,
    log: Callable[[Outcome], None] | None,
    setup: str,
    device: str,
    workers: int,
) -> list[Outcome]:
    """:func:`fuzz` on ``workers`` worker interpreters, one per thread; outcomes and ``log`` in
    ``todo``'s order."""
    import concurrent.futures
    import threading

    mine = threading.local()
    started: list[Isolated] = []
    lock = threading.Lock()

    def one(gen: str, seed: int) -> Outcome:
        worker = getattr(mine, "worker", None)
        if worker is None:
            worker = mine.worker = Isolated(setup)
            with lock:
                started.append(worker)
        return worker.run(generate(seed, gen, device=device), backend, threads_for(gen, seed))

    out = []
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(one, gen, seed) for gen, seed in todo]
            for future in futures:
                out.append(future.result())
                if log:
                    log(out[-1])
    finally:
        for worker in started:
            worker.close()
    return out
