"""What a run of a profile will cost on one H100 or H200, planned from each experiment's sizes before it starts.

Per experiment: compiles (graphs Inductor compiles with Triton) and the processes compiling them at once
(:mod:`pipeline.compile_pool`), FLOPs of the device work, bytes over PCIe (inputs up, read-backs down),
bytes written to disk, and the estimated minutes on each GPU. Every figure comes from the experiment's
sizes in its ``spec.py`` (D's plan from its own code) and the constants below; nothing is measured here.
An estimate is the sum of five terms:

* compile: the compiles' wall time, one after another or on the compile pool (:func:`pool_seconds`);
* device: ``FLOPs / (peak x achieved fraction)`` or ``bytes / (HBM bandwidth x achieved fraction)``,
  whichever is larger, plus a launch cost per kernel call;
* pcie: host bytes at the effective PCIe bandwidth;
* disk: bytes written; S's input pools at the host's rate of drawing seeded inputs and writing them;
* fixed: measured seconds (C1, C2 and C3 were timed on an H200 at seed sizes, the same in gpu), fresh
  interpreters and reproducers.

``benchmarks/gpu_budget.py`` prints the table per profile with the assumptions and their sources;
:func:`plan_estimate` gives ``report`` its plan-time lines and refuses a run the data folder's disk
cannot hold.
"""

from __future__ import annotations

import heapq
import math
import shutil
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .compile_pool import pool_size
from .experiments.accumulated_error.rules import DTYPES_B
from .experiments.data_movement.assets import TASK_BYTES_PER_ELEMENT, input_key
from .experiments.data_movement.assets import plan as d_plan
from .experiments.data_movement.spec import SIZES as D_SIZES
from .experiments.determinism.spec import SIZES as A_SIZES
from .experiments.diagnostics.spec import SIZES as DIAG_SIZES
from .experiments.models.spec import SIZES as M_SIZES
from .experiments.regression.spec import PLANTED_BACKENDS
from .experiments.regression.spec import SIZES as MATRIX_SIZES
from .experiments.toolkit.spec import SIZES as POOL_SIZES
from .experiments.training.spec import SIZES as E_SIZES
from .workloads import CHAINS, WORKLOADS

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
ACHIEVED_FLOPS = 0.5  # of peak, for the large matmuls of A's FFN and E's and M's models
ACHIEVED_HBM = 0.7  # of peak bandwidth, for memory-bound kernels
PCIE_BYTES_S = 55e9  # PCIe gen5 x16: 64 GB/s per direction on paper, about 55 GB/s in practice
LAUNCH_S = 20e-6  # host cost of one compiled-graph call (Python, guards, kernel launches)
DISK_BYTES_S = 1e9  # writing computed tables and references to a local NVMe disk
POOL_BYTES_S = 50e6  # host rate of drawing and writing input pools: the 2026-11-27 H200 run wrote its
# pools (1.07 to 3.54 GB each) at 24 to 120 MB/s, CPU-bound fp64 sampling
#: One cold Triton graph of a small subgraph, from the H200 run's log (log-seed.txt): D's combinations 2 to 7
#: took 22.2 s (10.2 s elapsed at 1/117, 32.4 s at 7/117), each a distinct cold compile (dynamic=False) with
#: the old host-side input draws included, so an upper bound. The first took 10.2 s: a process's first
#: compile costs FIRST_COMPILE_S more. --compile-s changes it.
COMPILE_S = (32.4 - 10.2) / 6
FIRST_COMPILE_S = 10.2 - COMPILE_S
MODEL_COMPILE_S = 90.0  # one cold graph of a 12-layer model (forward or backward): assumed, never measured
#: Compile workers on the GPU machine: pipeline.compile_pool.pool_size on a CUDA device gives one per CPU
#: core, and the lent H100/H200 machines have 16 (the 2026-11-27 H200 run: 16 CPU threads).
GPU_HOST_CORES = 16
#: Start of one warm compile worker until it takes a task: 13.3 s measured on the 2-core development CPU
#: (pipeline.compile_pool.Worker to ready, 2026-11-27, loaded); assumed the same on the GPU host, where it
#: also creates its CUDA context. Its first compile then pays FIRST_COMPILE_S.
WORKER_START_S = 13.3
#: The one measurement of a differential-tester program on a GPU: the first smoke program took 67 s on the
#: H200 (log-smoke.txt, a mismatch, process warm-up included). Shown beside the estimate, not used in it.
DIFFTEST_FIRST_PROGRAM_S = 67.0
FRESH_PROCESS_S = 15.0  # start of a fresh interpreter (A's cold round), before its compiles
REPRO_S = 300.0  # one reproducer: minimization and bisection, each step a fresh interpreter compiling cold
#: C1, C2 and C3 at their seed sizes on the H200 (2026-11-27), seconds; gpu uses the same sizes. Not
#: recorded in results/bundles/2026-11-27-h200-seed; the H100 is assumed to take as long.
MEASURED_S = {"C1": 52.6, "C2": 54.0, "C3": 5.9}

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
A_DTYPES = ("float16", "bfloat16", "float32")


@dataclass
class Cost:
    """One experiment's estimate: counts from the sizes, and fixed seconds (measured or per step)."""

    experiment: str
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

    def terms(self, gpu: Gpu) -> dict[str, float]:
        device = max(
            self.flops / (gpu.tensor_flops * ACHIEVED_FLOPS) + self.fp32_flops / (gpu.fp32_flops * ACHIEVED_FLOPS),
            self.device_bytes / (gpu.hbm_bytes_s * ACHIEVED_HBM),
        )
        return {
            "compile": self.pool[gpu.name][1] if gpu.name in self.pool else self.compile_s,
            "device": device + self.calls * LAUNCH_S,
            "pcie": self.host_bytes / PCIE_BYTES_S,
            "disk": 0.0 if self.experiment == "S pools" else self.disk_bytes / DISK_BYTES_S,
            "fixed": self.fixed_s,
        }

    def minutes(self, gpu: Gpu) -> float:
        return sum(self.terms(gpu).values()) / 60


# --- the compile pool ---------------------------------------------------------------------------------


def pool_workers(tasks: int, task_bytes: int | None = None, gpu: Gpu | None = None) -> int:
    """Processes :func:`pipeline.compile_pool.pool_size` gives ``tasks`` tasks on a CUDA device of the GPU
    host, each holding ``task_bytes`` of ``gpu``'s memory (all of it free at the start)."""
    memory = None if gpu is None else int(gpu.memory_bytes)
    return pool_size(torch.device("cuda"), tasks, cores=GPU_HOST_CORES, task_bytes=task_bytes, device_bytes=memory)


def pool_seconds(task_seconds: list[float], workers: int) -> float:
    """Wall seconds of compile tasks on the pool, as :func:`pipeline.compile_pool.run_tasks` shares them:
    this process takes tasks from the start, each worker once started and warmed up (WORKER_START_S +
    FIRST_COMPILE_S); whoever is free takes the next task in order. The last task's end."""
    free = [0.0] + [WORKER_START_S + FIRST_COMPILE_S] * (workers - 1)
    heapq.heapify(free)
    end = 0.0
    for seconds in task_seconds:
        done = heapq.heappop(free) + seconds
        end = max(end, done)
        heapq.heappush(free, done)
    return end


def pooled(c: Cost, task_seconds: list[float], task_bytes: int | None = None) -> Cost:
    """``c`` with its compiles run as ``task_seconds`` on the pool sized for them (on each GPU, where
    ``task_bytes`` of device memory per task caps the pool)."""
    for gpu in GPUS:
        workers = pool_workers(len(task_seconds), task_bytes, gpu if task_bytes is not None else None)
        c.pool[gpu.name] = (workers, pool_seconds(task_seconds, workers))
    c.workers, c.compile_s = c.pool[GPUS[-1].name]
    return c


def workers_text(c: Cost) -> str:
    """The workers column: one figure, or H100's and H200's where their memory sizes the pool apart."""
    sizes = [c.pool[g.name][0] for g in GPUS if g.name in c.pool]
    return " / ".join(map(str, sizes)) if len(set(sizes)) > 1 else str(c.workers)


# --- the experiments ----------------------------------------------------------------------------------


def _chain_elements(profile: str) -> dict[str, tuple[int, int, int]]:
    """Per chain of B: (input elements per set, output elements per set, distributions), from the
    workloads' own shapes (the output's through the meta device, as S's references take it)."""
    pool = POOL_SIZES[profile]
    elements = {}
    for chain in CHAINS:
        w = WORKLOADS[chain]
        shapes = w.shapes(pool)
        out = w.fn(*(torch.empty(shapes[a], device="meta") for a in w.arg_names))
        elements[chain] = (sum(math.prod(shape) for shape in shapes.values()), out.numel(), len(w.distributions))
    return elements


def _pool_bytes(profile: str) -> tuple[float, float, dict[str, float]]:
    """Bytes S writes: A's FFN pool (fp64, one set), the inputs B's chains are drawn into (every set in
    each of B's dtypes) and, per chain, those inputs plus the fp64 reference per distribution and dtype."""
    n = POOL_SIZES[profile].chain_sets
    in_bytes = sum(DTYPE_BYTES[d] for d in DTYPES_B)
    elements = _chain_elements(profile)
    chains = {c: float(n * dists * (i * in_bytes + o * len(DTYPES_B) * 8)) for c, (i, o, dists) in elements.items()}
    inputs = float(sum(n * dists * i * in_bytes for i, _, dists in elements.values()))
    ffn_shapes = WORKLOADS["ffn"].shapes(POOL_SIZES[profile])
    ffn = float(sum(math.prod(shape) for shape in ffn_shapes.values()) * 8)  # 1.07 GB at seed sizes
    return ffn, inputs, chains


def cost_s(profile: str) -> Cost:
    ffn, chain_inputs, chains = _pool_bytes(profile)
    inputs = ffn + chain_inputs  # drawn on the host
    written = ffn + sum(chains.values())
    return Cost(
        "S pools",
        disk_bytes=written,
        fixed_s=inputs / POOL_BYTES_S + (written - inputs) / DISK_BYTES_S,
        note="inputs drawn on the host; fp64 references computed on the device and written",
    )


def cost_a(profile: str) -> Cost:
    sizes, pool = A_SIZES[profile], POOL_SIZES[profile]
    batch, seq, hidden = pool.ffn_shape
    tokens, wide = batch * seq, 4 * hidden
    rounds = 2 if sizes.cold_start else 1  # round 1 and the cold round; the thread round runs on CPUs only
    c = Cost("A determinism", note="per run: compare with the first output on the device, 1 byte read back")
    for dtype in A_DTYPES:
        runs = sizes.runs_for(dtype)
        flops = 2 * tokens * hidden * wide * runs * rounds
        if dtype == "float32":
            c.fp32_flops += flops
        else:
            c.flops += flops
        out = tokens * wide * DTYPE_BYTES[dtype]
        # matmul output written, read and written again by the fused layernorm+gelu, compared once
        c.device_bytes += 4 * out * runs * rounds
        c.calls += runs * rounds
        inputs = (tokens * hidden + hidden * wide + wide) * DTYPE_BYTES[dtype]
        c.host_bytes += rounds * (inputs + 2 * out + runs)  # inputs up; first output hashed and kept
        c.compiles += rounds
        c.compile_s += rounds * COMPILE_S
        c.disk_bytes += (rounds - 1) * (inputs + out)  # the cold round's inputs and kept output
    c.fixed_s += (rounds - 1) * FRESH_PROCESS_S
    return c


def cost_b(profile: str) -> Cost:
    _, _, chains = _pool_bytes(profile)
    n_sets, dtypes = POOL_SIZES[profile].chain_sets, len(DTYPES_B)
    paths = 4  # eager (several ops), fused, fused_emulate, the fp32 single-rounding prediction
    dists = sum(d for _, _, d in _chain_elements(profile).values())
    calls = n_sets * dists * dtypes * paths * 4  # assumed: about 4 launches per call (eager's several ops)
    graphs = len(CHAINS) * dtypes * 3  # chains x dtypes x (fused, fused_emulate, prediction)
    return Cost(
        "B accumulated error",
        compiles=graphs,
        compile_s=graphs * COMPILE_S,
        device_bytes=sum(chains.values()) * paths,
        calls=calls,
        host_bytes=sum(chains.values()),  # every pool to the device once, per-set errors back (small)
        note="one call per input set and path",
    )


def cost_measured(exp: str) -> Cost:
    return Cost(exp, fixed_s=MEASURED_S[exp], note="timed on the H200 at seed sizes (2026-11-27)")


#: Device reads back per D combination: the comparison's counts and maxima (about a dozen 8-byte scalars).
D_READBACK_BYTES = 16 * 8


def cost_d(profile: str) -> Cost:
    """D's plan from its own code: one compile per combination, one pool task per input draw (the counts
    come from the sizes a run uses; a test holds each spec's declared ``compiles`` to them)."""
    sizes = D_SIZES[profile]
    combos = d_plan(sizes.shapes)
    per_key = Counter(input_key(*c) for c in combos)  # compiles per draw, in plan order
    elems = {k: math.prod(k[1]) for k in per_key}
    nbytes = sum(math.prod(s) for s in sizes.shapes) * 2 * 6 * 3 * 8  # shape x graph x dtype x layout, passes
    draws = sum(e * 2 * (8 + DTYPE_BYTES[k[0]]) for k, e in elems.items())  # x and y: fp64 drawn, then cast
    c = Cost(
        "D data movement",
        compiles=len(combos),
        device_bytes=nbytes + draws,
        calls=len(combos) * 2,
        host_bytes=len(combos) * D_READBACK_BYTES,
    )
    task_bytes = TASK_BYTES_PER_ELEMENT * max(elems.values())
    pooled(c, [n * COMPILE_S for n in per_key.values()], task_bytes)
    c.note = (
        f"{len(per_key)} input draws on the device, one pool task each, on {workers_text(c)} workers "
        f"(each task up to {task_bytes / 1e9:.1f} GB of device memory)"
    )
    return c


def cost_e(profile: str) -> Cost:
    s = E_SIZES[profile]
    params = 12 * s.layers * s.width**2
    tokens = s.batch * s.context
    per_step = 6 * params * tokens + 12 * s.layers * s.context * s.width * tokens  # weights and attention
    runs = 5 * 3 + 2 * s.fp32_control  # five orders x (eager, fused, control); the fp32 pair
    evals = runs * (s.steps // max(1, s.eval_every)) * s.eval_batches * (2 * params * tokens)
    return Cost(
        "E training",
        compiles=4,  # forward and backward, autocast and fp32 control
        compile_s=4 * MODEL_COMPILE_S,
        flops=runs * s.steps * per_step + evals,
        calls=runs * s.steps * 3 * s.layers * 10,  # eager runs launch per op
        host_bytes=runs * s.steps * 64,  # the loss and grad norm per step
        note=f"{runs} runs x {s.steps} steps, {s.layers} layers x {s.width} wide, context {s.context}",
    )


def cost_m(profile: str) -> Cost:
    """M: one pool task per architecture (built once, compiled per dtype)."""
    s = M_SIZES[profile]
    graphs = len(s.architectures) * len(s.dtypes)
    per_sample = 2 * 100e6 * (s.seq_len if s.scale == "real" else 1)  # ~100M-parameter models
    c = Cost(
        "M models",
        compiles=graphs,
        flops=graphs * s.batches * s.batch_size * per_sample * 2,  # eager and fused
        calls=graphs * s.batches * 200,
    )
    pooled(c, [len(s.dtypes) * MODEL_COMPILE_S] * len(s.architectures))
    c.note = (
        f"{len(s.architectures)} architectures x {len(s.dtypes)} dtypes ({s.scale}), one pool task per "
        f"architecture, on {c.workers} workers"
    )
    return c


def cost_diagnostics(profile: str) -> Cost:
    s = DIAG_SIZES[profile]
    programs = s.fuzz_graphs + s.difftest_programs
    repros = s.d_repro_cap + 2 * s.repro_cap  # at most: D's, the fuzzer's and the tester's
    return Cost(
        "Diagnostics",
        compiles=programs,
        compile_s=programs * COMPILE_S,
        calls=programs * 4,
        fixed_s=repros * REPRO_S,
        note=f"{s.fuzz_graphs} fuzzer graphs, {s.difftest_programs} tester programs, up to {repros} reproducers",
    )


#: Wall seconds of one smoke run of B, C2 and D on a CPU (a cold, loaded 2-core machine took about 45 s
#: per planted bug on 2026-11-27): the matrix runs on the CPU on any machine (regression/matrix_runs.py).
MATRIX_RUN_S = 45.0


def cost_matrix(profile: str) -> Cost:
    s = MATRIX_SIZES[profile]
    bugs = len(s.planted_bugs or PLANTED_BACKENDS)  # none named: every planted bug
    runs = bugs + s.healthy_seeds
    smoke_pool = sum(_pool_bytes("smoke")[2].values())
    return Cost(
        "Regression matrix",
        disk_bytes=runs * smoke_pool,
        fixed_s=runs * MATRIX_RUN_S,
        note=f"{runs} smoke runs of B, C2 and D on the CPU, about {MATRIX_RUN_S:g} s each (no GPU work)",
    )


def costs(profile: str) -> list[Cost]:
    return [
        cost_s(profile),
        cost_a(profile),
        cost_b(profile),
        cost_measured("C1"),
        cost_measured("C2"),
        cost_measured("C3"),
        cost_d(profile),
        cost_e(profile),
        cost_m(profile),
        cost_diagnostics(profile),
        cost_matrix(profile),
    ]


# --- the plan-time estimate of a run -----------------------------------------------------------------


def _bytes(n: float) -> str:
    for factor, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= factor:
            return f"{n / factor:.1f} {unit}"
    return f"{n:.0f} B"


def gpu_of(device: torch.device) -> Gpu | None:
    """The GPU of :data:`GPUS` that ``device`` is (by its CUDA name), or None: no peak figures for it."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return next((g for g in GPUS if g.name in name), None)


@dataclass(frozen=True)
class PlanEstimate:
    """What a run will cost, from :func:`costs` over the experiments that run."""

    profile: str
    compiles: int
    flops: float
    host_bytes: float
    disk_bytes: float
    minutes: float | None  # on ``gpu``; None where there are no peak figures for the device
    gpu: str | None


#: Experiments that read S's input pools: selecting one of them (``report --only A``) stores the pools too.
POOL_READERS = frozenset({"A", "B"})


def plan_estimate(profile: str, device: torch.device, experiments: Collection[str] | None = None) -> PlanEstimate:
    """The estimate of a ``profile`` run on ``device``: every experiment, or those in ``experiments``
    (ids such as ``B`` or ``Diagnostics``; S's pools come with A and B, which read them)."""
    chosen = None if experiments is None else set(experiments) | ({"S"} if POOL_READERS & set(experiments) else set())
    rows = [c for c in costs(profile) if chosen is None or c.experiment.split()[0] in chosen]
    gpu = gpu_of(device)
    return PlanEstimate(
        profile,
        sum(c.compiles for c in rows),
        sum(c.flops + c.fp32_flops for c in rows),
        sum(c.host_bytes for c in rows),
        sum(c.disk_bytes for c in rows),
        None if gpu is None else sum(c.minutes(gpu) for c in rows),
        None if gpu is None else gpu.name,
    )


def free_bytes(folder: Path) -> int:
    """Free bytes on the disk that holds ``folder`` (its nearest existing parent when it is not there yet)."""
    here = folder.resolve()
    while not here.exists() and here != here.parent:
        here = here.parent
    return shutil.disk_usage(here).free


def announce(
    profile: str,
    device: torch.device,
    data_dir: Path,
    experiments: Collection[str] | None = None,
    out: Callable[[str], None] = print,
) -> int | None:
    """Print the plan-time estimate of a run in one line; when the data folder's disk cannot hold what
    the run stores, print one line saying so and return 2 (the CLI's exit status for a refused run),
    else None."""
    est = plan_estimate(profile, device, experiments)
    if est.minutes is not None:
        when = f"about {est.minutes:.0f} min on this {est.gpu} (from its datasheet peaks; benchmarks/gpu_budget.py)"
    else:
        when = f"no peak figures for {device}, so no minutes (the {profile} profile's budget applies)"
    out(
        f"plan: {est.compiles} compiles, {est.flops / 1e12:.1f} TFLOP, {_bytes(est.host_bytes)} between host and "
        f"device, {_bytes(est.disk_bytes)} stored in {data_dir}; {when}"
    )
    free = free_bytes(data_dir)
    if est.disk_bytes > free:
        out(
            f"refusing to start: the {profile} run stores about {_bytes(est.disk_bytes)} in {data_dir} and its disk "
            f"has {_bytes(free)} free"
        )
        return 2
    return None
