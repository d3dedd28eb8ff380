"""Independent compiles several at a time, in warm worker processes.

An experiment whose work splits into independent tasks that each compile their own graphs (D's
inputs per dtype, shape and layout; M's architectures) hands them to :func:`run_tasks`. With one
worker the tasks run here, one after the other, exactly as a plain loop would. With more, this
process and ``workers - 1`` fresh interpreters (``python -m pipeline.compile_pool``) each take the
next task as they become free. A worker imports torch and the task's module once and, on an
accelerator, creates its device context once, then runs task after task: those one-off costs are
paid per worker, not per task.

Which process ran a task changes nothing in its result: a worker has this process's environment
(so the same Inductor cache folder), CPU thread count and device, and a task gets everything it
uses (seeds included) as arguments. Results come back in task order. A task is a module-level
function and picklable arguments; its result must pickle too.

:func:`pool_size` says how many workers a run uses: ``FUSION_COMPILE_WORKERS`` when set, else one
per CPU core on an accelerator (fewer where the tasks' device memory would not fit) and one on a CPU
(see its text for why).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import torch

from .backends import offered, register_by, registrar
from .pipe_worker import PipeWorker, serve

#: Overrides the number of workers (an integer >= 1); unset, :func:`pool_size` decides.
WORKERS_ENV = "FUSION_COMPILE_WORKERS"


#: Device memory one worker holds besides its tasks' tensors: its CUDA context and the caching
#: allocator's slack, about half a GiB on recent drivers (CUDA's lazy module loading keeps it there).
CONTEXT_BYTES = 512 * 2**20


#: Fewest compile-bound tasks per process on a CPU (:func:`pool_size`): a worker's start (13 s on a
#: loaded 2-core CPU) is paid back over about ten small graphs of 1 to 2 s each.
CPU_TASKS_PER_WORKER = 10


def pool_size(
    device: torch.device,
    tasks: int,
    requested: int | None = None,
    cores: int | None = None,
    task_bytes: int | None = None,
    device_bytes: int | None = None,
    compile_bound: bool = False,
    compiles_per_task: float = 1.0,
) -> int:
    """Processes that run ``tasks`` independent compile tasks on ``device`` (this one included).

    ``requested`` (else ``FUSION_COMPILE_WORKERS``) wins when given, capped by the task count. Otherwise:

    * on an accelerator, one per CPU core: a Triton compile is single-threaded host work (Python,
      LLVM, ptxas) while the device sits idle, so compiles scale with the cores, and each worker holds
      one device context;
    * on a CPU, one. A CPU run's kernels already use every core through torch's intra-op threads,
      and Inductor builds its C++ with a parallel compiler pool of its own, so a second process only
      contends with them, and a fresh interpreter must first import torch and the experiment
      (13 s measured on a loaded 2-core CPU: :class:`Worker` to ready) before it has saved anything;
    * on a CPU, for ``compile_bound`` tasks (graphs of a few small tensors, the fuzzer's and the
      differential tester's, whose cost is Dynamo's and Inductor's Python on one core), one per core as
      on an accelerator, as long as each has :data:`CPU_TASKS_PER_WORKER` compiles or more to pay for its
      start (a task is ``compiles_per_task`` compiles): 20 fuzzer graphs, cold, took 39.2 s in this process alone and 32.0 s with one worker
      beside it on an idle AVX2-only 2-core CPU, the worker's start included.

    On an accelerator, ``task_bytes`` (the most device memory one task holds at once) caps the count
    so that every worker's tasks and context fit in ``device_bytes`` (default: the device's free
    memory now), nine tenths of it, the rest left to the allocator's fragmentation.
    """
    if tasks < 0:
        raise ValueError(f"task count must be >= 0, got {tasks}")
    if requested is None:
        requested = _count_from_env(WORKERS_ENV)
    if requested is not None and requested < 1:
        raise ValueError(f"compile workers must be at least 1, got {requested}")
    if requested is None:
        if device.type != "cpu":
            requested = cores or os.cpu_count() or 1
        elif compile_bound:
            requested = min(cores or os.cpu_count() or 1, int(tasks * compiles_per_task) // CPU_TASKS_PER_WORKER)
        else:
            requested = 1
        if device.type != "cpu" and task_bytes is not None:
            requested = min(requested, _fitting(device, task_bytes, device_bytes))
    return max(1, min(requested, tasks))


#: Overrides the number of lanes (an integer >= 1); unset, :func:`device_lanes` decides.
LANES_ENV = "FUSION_DEVICE_LANES"
#: Launch-bound loops run side by side on one accelerator (:func:`device_lanes`). Such a loop (E's training
#: runs, B's chains over their input sets) keeps one host core busy with Python and kernel launches while
#: the device idles through most of it: E's gpu-size step took 49 ms on the H200 where its FLOPs need
#: about 2.4 ms at half the datasheet peak, and B's three paths took 0.2 to 0.4 ms of its 3.2 ms per judged
#: set row (the sets-per-second lines of the 2026-11-27 runs; the rest is small judging kernels and
#: Python). Processes sharing one GPU are time-sliced, so what four lanes gain is an estimate until a GPU
#: run measures it (:data:`pipeline.costmodel.LANE_EFFICIENCY`); four leave most of a 16-core host to compiles.
DEVICE_LANES = 4


def device_lanes(
    device: torch.device,
    tasks: int,
    *,
    task_bytes: int | None = None,
    device_bytes: int | None = None,
    cores: int | None = None,
) -> int:
    """Processes that run ``tasks`` launch-bound tasks side by side on ``device`` (this one included).

    On a CPU, one: a CPU run's kernels already use every core (a caller with its own CPU policy, such as
    E's one-thread lanes, decides there). On an accelerator, ``FUSION_DEVICE_LANES`` when set, else
    :data:`DEVICE_LANES`, never more than the tasks or the host's cores, and (``task_bytes``: the most
    device memory one task holds) no more than nine tenths of ``device_bytes`` (default on CUDA: the
    device's free memory now) hold with a context each."""
    if tasks < 0:
        raise ValueError(f"task count must be >= 0, got {tasks}")
    if device.type == "cpu":
        return 1
    lanes = min(_count_from_env(LANES_ENV) or DEVICE_LANES, cores or os.cpu_count() or 1)
    if task_bytes is not None and (device_bytes is not None or device.type == "cuda"):
        lanes = min(lanes, _fitting(device, task_bytes, device_bytes))
    return max(1, min(lanes, tasks))


def _count_from_env(name: str) -> int | None:
    """A process count set in the environment variable ``name`` (None when unset); anything but an
    integer >= 1 is refused, naming the variable."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {text!r}")
    return count


def _fitting(device: torch.device, task_bytes: int, device_bytes: int | None) -> int:
    """Processes whose tasks of ``task_bytes`` and contexts fit in nine tenths of ``device_bytes``
    (default: the device's free memory now), the rest left to the allocator's fragmentation."""
    free = device_bytes if device_bytes is not None else _free_device_bytes(device)
    return int(0.9 * free) // (task_bytes + CONTEXT_BYTES)


def _free_device_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    raise ValueError(f"no free-memory query for {device}; pass device_bytes")


def _reference(fn: Callable[..., Any]) -> tuple[str, str]:
    """``fn`` as (module, name) a worker can import; a nested function or lambda is refused."""
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not name or "<" in name or "." in name:
        raise ValueError(f"a compile-pool task must be a module-level function, got {fn!r}")
    if module == "__main__":
        raise ValueError(f"a compile-pool task must live in an importable module, not __main__: {name}")
    return module, name


class Worker(PipeWorker):
    """One warm interpreter (``python -m pipeline.compile_pool``) that runs tasks on request."""

    def __init__(self, device: torch.device, threads: int) -> None:
        # The pool is the parallelism: Inductor's own compile subprocesses per worker would multiply it.
        env = {"TORCHINDUCTOR_COMPILE_THREADS": "1", **os.environ}
        # every offered backend (planted bugs) registered as the parent has them, named by its registrar
        registrars = sorted({r for name in offered() if (r := registrar(name)) is not None})
        args = ["--threads", str(threads), "--device", str(device)]
        super().__init__(
            "pipeline.compile_pool", [*args, *(f"--register={r}" for r in registrars)], "compile worker", env
        )

    def call(self, ref: tuple[str, str], args: tuple[Any, ...]) -> Any:
        status, value = self.request((ref, args))
        if status != "ok":
            raise RuntimeError(f"compile task {ref[0]}.{ref[1]} failed in worker {self.proc.pid}:\n{value}")
        return value


def run_tasks(
    fn: Callable[..., Any],
    tasks: Sequence[tuple[Any, ...]],
    device: torch.device,
    workers: int = 1,
    on_result: Callable[[int, Any], None] | None = None,
    here: bool = True,
) -> list[Any]:
    """``[fn(*t) for t in tasks]``, ``workers`` processes at a time: this one and ``workers - 1``
    workers, or with ``here=False`` ``workers`` workers and none here (the tests use it to be sure a
    worker ran the tasks).

    ``on_result(i, result)`` is called in this thread in task order (task ``i`` once ``0..i`` are
    done), so logs read the same however the tasks were shared out. A task that raises stops the
    rest and its error is raised here; the workers are stopped either way."""
    if workers < 1:
        raise ValueError(f"compile workers must be at least 1, got {workers}")
    ref = _reference(fn)
    n_workers = min(workers, len(tasks)) - (1 if here else 0) if os.name == "posix" else 0
    if n_workers < 1:
        out = []
        for i, t in enumerate(tasks):
            out.append(fn(*t))
            if on_result is not None:
                on_result(i, out[-1])
        return out
    return _run_pooled(fn if here else None, ref, list(tasks), device, n_workers, on_result)


def _run_pooled(
    fn: Callable[..., Any] | None,
    ref: tuple[str, str],
    tasks: list[tuple[Any, ...]],
    device: torch.device,
    n_workers: int,
    on_result: Callable[[int, Any], None] | None,
) -> list[Any]:
    pending = deque(enumerate(tasks))
    results: dict[int, Any] = {}
    errors: list[BaseException] = []
    lock = threading.Condition()
    reported = 0

    def take() -> tuple[int, tuple[Any, ...]] | None:
        with lock:
            return pending.popleft() if pending and not errors else None

    def store(i: int, value: Any) -> None:
        with lock:
            results[i] = value
            lock.notify_all()

    def report() -> None:
        nonlocal reported
        while reported in results:
            if on_result is not None:
                on_result(reported, results[reported])
            reported += 1

    def feed(worker: Worker) -> None:
        try:
            worker.ready()
            while (item := take()) is not None:
                store(item[0], worker.call(ref, item[1]))
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            with lock:
                errors.append(exc)
                lock.notify_all()

    pool = [Worker(device, torch.get_num_threads()) for _ in range(n_workers)]
    feeders = [threading.Thread(target=feed, args=(w,), daemon=True) for w in pool]
    for t in feeders:
        t.start()
    try:
        while fn is not None and (item := take()) is not None:
            store(item[0], fn(*item[1]))
            report()
        while True:
            with lock:
                done = len(results) == len(tasks) or bool(errors) or not any(t.is_alive() for t in feeders)
                if not done:
                    lock.wait(timeout=1.0)
            report()
            if done:
                break
    except BaseException as exc:
        with lock:
            errors.append(exc)
        raise
    finally:
        for w in pool:
            w.close(kill=bool(errors), wait=False)  # reaped in the background: nothing waits on it
        for t in feeders:
            t.join()
    if errors:
        raise errors[0]
    missing = [i for i in range(len(tasks)) if i not in results]
    if missing:
        raise RuntimeError(f"compile tasks never finished: {missing}")
    report()
    return [results[i] for i in range(len(tasks))]


def _task_runner() -> Callable[[tuple[tuple[str, str], tuple[Any, ...]]], Any]:
    """Run a ``((module, name), args)`` request, importing each task's function once."""
    functions: dict[tuple[str, str], Callable[..., Any]] = {}

    def run(request: tuple[tuple[str, str], tuple[Any, ...]]) -> Any:
        ref, args = request
        if ref not in functions:
            functions[ref] = getattr(importlib.import_module(ref[0]), ref[1])
        return functions[ref](*args)

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a warm compile worker (started by pipeline.compile_pool)")
    parser.add_argument("--fd", type=int, required=True, help="this end of the socket pair")
    parser.add_argument("--threads", type=int, required=True, help="torch CPU threads")
    parser.add_argument("--device", required=True, help="the run's torch device")
    parser.add_argument(
        "--register", action="append", default=[], help="module:function registering offered backends (repeatable)"
    )
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    conn = Connection(args.fd)
    from .interrupts import exit_with_parent

    exit_with_parent()  # a stopped run never leaves a worker compiling
    try:
        torch.set_num_threads(args.threads)
        device = torch.device(args.device)
        if device.type != "cpu":
            torch.empty(1, device=device)  # the device context, once per worker
        for spec in args.register:  # a fresh interpreter knows only torch's own backends
            register_by(spec)
    except Exception:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", traceback.format_exc()))
        return 1
    conn.send(("ready", os.getpid()))
    return serve(conn, _task_runner())


if __name__ == "__main__":
    sys.exit(main())
