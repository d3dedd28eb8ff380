"""The cost model's machinery, below the experiments: the GPUs it plans for, one row of an estimate
(:class:`Cost`), and how a row's compiles and launch-bound work share out over the compile pool and the
device's lanes. Each experiment declares its own rows in its ``cost.py`` (read through
``Experiment.cost``) with the figures measured for it; :mod:`pipeline.plan` adds them up for a run.

A row's minutes on a GPU are the sum of five terms: compile (warm compiles, per-task and worker start-up,
on the pool where the code uses it: :func:`pool_seconds`), device (``FLOPs / (peak x achieved)`` or
``bytes / (HBM x achieved)``, whichever is larger, plus a launch cost per call), pcie, disk, and fixed
(measured step seconds, fresh processes, reproducers).

The figures every experiment's rows share come from the H200 runs of 2026-11-27 (commit ed50613, torch
2.11.0+cu130, Triton 3.6.0, 16 CPU threads, cold Inductor cache; logs
results/gpu-logs/2026-11-27-h200-gpu/call1-log.txt and call2-log.txt), each with the log lines it was
taken from; the device terms rest on the datasheets where nothing was measured.

This module imports no experiment, so every experiment's ``cost.py`` may import it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .compile_pool import pool_size

# --- the machines (peak figures: NVIDIA's H100 and H200 Tensor Core GPU datasheets, SXM parts) ------


@dataclass(frozen=True)
class Gpu:
    name: str
    tensor_flops: float  # dense fp16/bf16 Tensor Core FLOP/s (without sparsity)
    fp32_flops: float  # fp32 FLOP/s on the CUDA cores (torch keeps TF32 off for matmul by default)
    hbm_bytes_s: float  # memory bandwidth
    memory_bytes: float  # HBM capacity


GPUS = (
    Gpu("H100", tensor_flops=989e12, fp32_flops=67e12, hbm_bytes_s=3.35e12, memory_bytes=80e9),  # H100 SXM datasheet
    Gpu("H200", tensor_flops=989e12, fp32_flops=67e12, hbm_bytes_s=4.8e12, memory_bytes=141e9),  # H200 SXM datasheet
)

#: Assumptions (not datasheet figures): what a run achieves of the peaks, and the host side.
#: of peak FLOP/s: A's fp16 FFN call took (6.6 - 2.0) s / 999 = 4.6 ms on the H200 (call1), this gives 4.5 ms;
#: its fp32 call took (8.2 - 3.8) s / 99 = 44 ms, this gives 66 ms (fp32 reaches about 75% of its peak)
ACHIEVED_FLOPS = 0.5
ACHIEVED_HBM = 0.7  # of peak bandwidth, for memory-bound kernels (never measured)
PCIE_BYTES_S = 55e9  # PCIe gen5 x16: 64 GB/s per direction on paper, about 55 GB/s in practice
LAUNCH_S = 20e-6  # host cost of one compiled-graph call (Python, guards, kernel launches)
DISK_BYTES_S = 1e9  # writing computed tables and references to a local NVMe disk

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}

# --- figures every run shares, from the H200 run of 2026-11-27 ---------------------------------------

#: One ``report`` invocation's start, plan and staleness scan before its first step: the invocation's wall
#: time minus its run's (call1: 113 - 90.4, 58 - 34.3, 145 - 123.9; call2: 47 - 29.6 s), their mean.
REPORT_START_S = (22.6 + 23.7 + 21.1 + 17.4) / 4
#: The first GPU work of the report's process (CUDA context, Inductor's first compile): D's first combination
#: took 11.4 s in a cold process (call1) and 4.0 s in a warm one (call2's smoke D). Paid once per run.
FIRST_GPU_S = 11.4 - 4.0
#: A fuzzer graph and a tester program, each compiled and run warm: the fuzzer's graphs after the first,
#: (3.5 - 0.4) / 5 s, the tester's after the first, (26.2 - 18.4) / 9 s (call2, smoke); the tester's first
#: took 18.4 s, its warm-up the rest beyond one program. A warm small-subgraph compile: their mean.
FUZZ_GRAPH_S = (3.5 - 0.4) / 5
DIFFTEST_PROGRAM_S = (26.2 - 18.4) / 9
DIFFTEST_WARMUP_S = 18.4 - DIFFTEST_PROGRAM_S
COMPILE_S = (FUZZ_GRAPH_S + DIFFTEST_PROGRAM_S) / 2
#: A compile worker from its start until it takes its first task on the GPU host: 14 s makes the pool model
#: give 36.8 s for gpu D (measured 33.1 s, call1, cold process) and 21.7 s for smoke D (measured 24.4 s,
#: call2), 11% off each way: the whole second with the smaller worst relative error of the two (13 s: 15%).
WORKER_READY_S = 14.0
#: Compile workers on the GPU machine: pipeline.compile_pool.pool_size on a CUDA device gives one per CPU
#: core, and the lent H100/H200 machines have 16 (the H200 run: 16 CPU threads).
GPU_HOST_CORES = 16


@dataclass
class Cost:
    """One row of an estimate: an experiment's (or one of its steps'), counts from the sizes, and fixed
    seconds (measured or per step)."""

    experiment: str  # the id of the experiment whose row it is ("" for the run's start-up)
    label: str = ""  # the row's name in a table ("": the experiment's id)
    compiles: int = 0
    compile_s: float = 0.0
    flops: float = 0.0  # on the tensor cores
    fp32_flops: float = 0.0  # on the CUDA cores
    device_bytes: float = 0.0  # HBM traffic of memory-bound work
    calls: int = 0  # compiled-graph calls (launch cost each)
    host_bytes: float = 0.0  # over PCIe, both directions
    disk_bytes: float = 0.0
    fixed_s: float = 0.0  # measured seconds, fresh processes, reproducers
    note: str = ""
    workers: int = 1  # processes compiling at once (the compile pool's; 1: compiles one after another)
    #: per GPU name, (workers, compile seconds) where the pool's size depends on the GPU's memory
    pool: dict[str, tuple[int, float]] = field(default_factory=dict)
    #: the assets this row materializes where it is a part of its experiment (S's pools, C2's two steps);
    #: empty: all of the experiment's
    assets: frozenset[str] = frozenset()
    #: per GPU name, the lanes its launch-bound work runs on (:func:`per_gpu` of the experiment's own
    #: placement); absent: one at a time
    lanes: dict[str, int] = field(default_factory=dict)
    #: ``fixed_s`` is a measured step that includes writing ``disk_bytes`` (C's): no disk term of its own
    disk_in_fixed: bool = False

    @property
    def name(self) -> str:
        return self.label or self.experiment

    def terms(self, gpu: Gpu) -> dict[str, float]:
        device = max(
            self.flops / (gpu.tensor_flops * ACHIEVED_FLOPS) + self.fp32_flops / (gpu.fp32_flops * ACHIEVED_FLOPS),
            self.device_bytes / (gpu.hbm_bytes_s * ACHIEVED_HBM),
        )
        compile_s = self.pool[gpu.name][1] if gpu.name in self.pool else self.compile_s
        fixed_s, lanes = self.fixed_s, self.lanes.get(gpu.name, 1)
        if lanes > 1:  # the host-bound compiles and steps shared out; the device's own work is not
            compile_s, fixed_s = compile_s / lane_speedup(lanes), fixed_s / lane_speedup(lanes) + WORKER_READY_S
        return {
            "compile": compile_s,
            "device": device + self.calls * LAUNCH_S,
            "pcie": self.host_bytes / PCIE_BYTES_S,
            "disk": 0.0 if self.disk_in_fixed else self.disk_bytes / DISK_BYTES_S,
            "fixed": fixed_s,
        }

    def seconds(self, gpu: Gpu) -> float:
        return sum(self.terms(gpu).values())

    def minutes(self, gpu: Gpu) -> float:
        return self.seconds(gpu) / 60


def one_row(cost: Callable[[str], Cost]) -> Callable[..., list[Cost]]:
    """An experiment's ``costs(profile, device_type)`` where it is one row, the same on every device."""
    return lambda profile, device_type="cuda": [cost(profile)]


def measured_step(
    experiment: str, label: str, compiles: int, stored: int, seconds: float, assets: frozenset[str] = frozenset()
) -> Cost:
    """A step's row by its measured seconds on the H200 (2026-11-27), writing included (no disk term of its
    own), with the graphs it compiles and the tensor bytes it stores from the step's own code (the tables
    beside them add a few kB): C1's, C2's and C3's, which the model does not break into terms."""
    note = "measured on the H200 (2026-11-27)"
    return Cost(
        experiment, label, compiles, disk_bytes=stored, fixed_s=seconds, assets=assets, note=note, disk_in_fixed=True
    )


# --- placement: the experiment's own placement function, asked about each GPU's host -----------------

#: An experiment's placement function as the cost model asks it: ``(device, device_bytes, cores)`` to the
#: processes its tasks run on. The run asks the same function about its own device (``device_bytes`` and
#: ``cores`` None: the device's free memory and the host's cores now), so both place the work alike.
Placement = Callable[[torch.device, int | None, int | None], int]


def per_gpu(place: Placement) -> dict[str, int]:
    """Per GPU of :data:`GPUS`, the processes ``place`` gives on the GPU host (its cores, the GPU's memory)."""
    return {g.name: place(torch.device("cuda"), int(g.memory_bytes), GPU_HOST_CORES) for g in GPUS}


# --- lanes: launch-bound loops side by side on one GPU -----------------------------------------------

#: Assumed, not measured: what each lane beyond the first adds of one lane's throughput when launch-bound
#: loops (E's runs, B's chain x dtype pairs) share one GPU as separate processes. The host side of each
#: is its own (a core each); the GPU time-slices between the processes' contexts, and the device was idle
#: through most of such a loop on the H200 (E: 49 ms per step for 2.4 ms of FLOPs; B: 0.2 to 0.4 ms of
#: path calls per 3.2 ms set row), so most of a lane is taken to be gained and a quarter lost to context
#: switches and contention. A GPU run measures it: B's and E's metadata record their lanes and wall time.
LANE_EFFICIENCY = 0.75


def lane_speedup(lanes: int) -> float:
    """How many times faster ``lanes`` lanes do launch-bound work than one (:data:`LANE_EFFICIENCY`)."""
    return 1 + LANE_EFFICIENCY * (lanes - 1)


# --- the compile pool ---------------------------------------------------------------------------------


def pool_workers(tasks: int) -> int:
    """:func:`pipeline.compile_pool.pool_size` of ``tasks`` on the GPU host, memory not counted."""
    return pool_size(torch.device("cuda"), tasks, cores=GPU_HOST_CORES)


def pool_seconds(task_seconds: list[float], workers: int, ready: float | None = None) -> float:
    """Wall seconds of tasks on the pool, as :func:`pipeline.compile_pool.run_tasks` shares them: this
    process takes tasks from the start, each worker once ready (``ready`` seconds after the pool starts,
    WORKER_READY_S by default); whoever is free takes the next task in order. The last task's end."""
    free = [0.0] + [WORKER_READY_S if ready is None else ready] * (workers - 1)
    heapq.heapify(free)
    end = 0.0
    for seconds in task_seconds:
        done = heapq.heappop(free) + seconds
        end = max(end, done)
        heapq.heappush(free, done)
    return end


def pooled(c: Cost, task_seconds: list[float], place: Placement | None = None, ready: float | None = None) -> Cost:
    """``c`` with its compiles run as ``task_seconds`` on the pool, sized on each GPU by ``place`` (the
    experiment's placement function; default: :func:`pool_workers`, memory not counted)."""
    workers = per_gpu(place) if place is not None else {g.name: pool_workers(len(task_seconds)) for g in GPUS}
    for gpu in GPUS:
        c.pool[gpu.name] = (workers[gpu.name], pool_seconds(task_seconds, workers[gpu.name], ready))
    c.workers, c.compile_s = c.pool[GPUS[-1].name]
    return c


def lanes_text(c: Cost) -> str:
    """The lanes: one figure, or H100's and H200's where their memory sizes them apart."""
    sizes = [c.lanes.get(g.name, 1) for g in GPUS]
    return " / ".join(map(str, sizes)) if len(set(sizes)) > 1 else str(sizes[0])


def workers_text(c: Cost) -> str:
    """The workers column: one figure, or H100's and H200's where their memory sizes the pool apart; a row
    whose work runs on lanes counts its lanes."""
    if c.lanes and not c.pool:
        return lanes_text(c)
    sizes = [c.pool[g.name][0] for g in GPUS if g.name in c.pool]
    return " / ".join(map(str, sizes)) if len(set(sizes)) > 1 else str(c.workers)
