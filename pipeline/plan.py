"""What a run of a profile will cost on one H100 or H200, planned from each experiment's sizes before it starts.

Per experiment (S per pool, C2 per step): compiles and the processes compiling them at once
(:mod:`pipeline.compile_pool`), FLOPs, bytes over PCIe, bytes written, and the estimated minutes on each
GPU, as the sum of five terms: compile (warm compiles, per-task and worker start-up, on the pool where the
code uses it: :func:`pool_seconds`), device (``FLOPs / (peak x achieved)`` or ``bytes / (HBM x
achieved)``, whichever is larger, plus a launch cost per call), pcie, disk, and fixed (measured step
seconds, fresh processes, reproducers). A run adds its start-up once (:func:`cost_start`).

The per-compile, per-program, per-process and per-step figures come from the H200 runs of 2026-11-27
(:mod:`pipeline.plan_figures`, each with the log line that gives it; :data:`H200_MEASURED` in
:mod:`pipeline.plan_calibration` holds the step times); the device terms rest on the datasheets where
nothing was measured. Unmeasured on a GPU: B and E at seed sizes, the Diagnostics at gpu and seed sizes,
and the regression matrix (a CPU self-test, left out of a GPU run). ``benchmarks/gpu_budget.py`` prints the
table and the measured-vs-estimated calibration; :func:`plan_estimate` gives ``report`` its plan line
and refuses a run the data folder's disk cannot hold.
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

from .compile_pool import device_lanes, pool_size
from .experiments.accumulated_error.chain_runs import LANE_BYTES as B_LANE_BYTES
from .experiments.accumulated_error.rules import DTYPES_B
from .experiments.accumulated_error.spec import compiles as b_compiles
from .experiments.data_movement.assets import TASK_BYTES_PER_ELEMENT, input_key
from .experiments.data_movement.assets import plan as d_plan
from .experiments.data_movement.spec import SIZES as D_SIZES
from .experiments.determinism.spec import SIZES as A_SIZES
from .experiments.instruction_selection import mechanism as c1_code
from .experiments.models.spec import SIZES as M_SIZES
from .experiments.reduction_order import long as c2_long_code
from .experiments.reduction_order import versions as c2_code
from .experiments.rsqrt_iterations import compute as c3_code
from .experiments.toolkit.spec import SIZES as POOL_SIZES
from .experiments.training.run_set import run_device_bytes
from .experiments.training.spec import SIZES as E_SIZES
from .experiments.training.spec import compiles as e_compiles
from .instruments.diagnostics.spec import SIZES as DIAG_SIZES
from .instruments.regression.spec import PARALLEL_RUNS as MATRIX_PARALLEL_RUNS
from .instruments.regression.spec import PLANTED_BACKENDS
from .instruments.regression.spec import SIZES as MATRIX_SIZES
from .plan_figures import (
    A_COMPILE_S,
    A_SETUP_S,
    B_GPU_GRAPH_S,
    B_GRAPH_S,
    B_SET_ROW_S,
    C_STEP_S,
    COMPILE_S,
    D_TASK_S,
    DIFFTEST_PROGRAM_S,
    DIFFTEST_WARMUP_S,
    DIVERGENCE_PER_LAYER_S,
    E_COMPILE_S,
    E_GPU_STEPS_S,
    FIRST_GPU_S,
    FUZZ_GRAPH_S,
    GPU_HOST_CORES,
    LOCATE_S,
    LOCATED_SHARE,
    MODEL_COMPILE_S,
    MODEL_WORKER_READY_S,
    POOL_BYTES_S,
    REFERENCE_KERNELS,
    REPORT_START_S,
    REPRO_ISA_PROBE_S,  # noqa: F401 - read as plan.REPRO_ISA_PROBE_S
    REPRO_LAYERS_S,  # noqa: F401 - read as plan.REPRO_LAYERS_S
    REPRO_MEASURED_S,  # noqa: F401 - read as plan.REPRO_MEASURED_S
    REPRO_S,
    WORKER_READY_S,
)
from .profiles import PROFILES
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
#: of peak FLOP/s: A's fp16 FFN call took (6.6 - 2.0) s / 999 = 4.6 ms on the H200 (call1), this gives 4.5 ms;
#: its fp32 call took (8.2 - 3.8) s / 99 = 44 ms, this gives 66 ms (fp32 reaches about 75% of its peak)
ACHIEVED_FLOPS = 0.5
ACHIEVED_HBM = 0.7  # of peak bandwidth, for memory-bound kernels (never measured)
PCIE_BYTES_S = 55e9  # PCIe gen5 x16: 64 GB/s per direction on paper, about 55 GB/s in practice
LAUNCH_S = 20e-6  # host cost of one compiled-graph call (Python, guards, kernel launches)
DISK_BYTES_S = 1e9  # writing computed tables and references to a local NVMe disk

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
A_DTYPES = ("float16", "bfloat16", "float32")


@dataclass
class Cost:
    """One experiment's (or step's) estimate: counts from the sizes, and fixed seconds (measured or per step)."""

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
    #: the assets this row materializes where it is a part of its experiment (S's pools, C2's two steps);
    #: empty: all of the experiment's (its id is the name's first word)
    assets: frozenset[str] = frozenset()
    #: per GPU name, the lanes its launch-bound work runs on (:func:`pipeline.compile_pool.device_lanes`);
    #: absent: one at a time
    lanes: dict[str, int] = field(default_factory=dict)
    #: ``fixed_s`` is a measured step that includes writing ``disk_bytes`` (C's): no disk term of its own
    disk_in_fixed: bool = False

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


def gpu_lanes(tasks: int, task_bytes: int) -> dict[str, int]:
    """Per GPU, :func:`pipeline.compile_pool.device_lanes` of ``tasks`` on the GPU host, each holding
    ``task_bytes`` of device memory."""
    return {
        g.name: device_lanes(
            torch.device("cuda"), tasks, task_bytes=task_bytes, device_bytes=int(g.memory_bytes), cores=GPU_HOST_CORES
        )
        for g in GPUS
    }


# --- the compile pool ---------------------------------------------------------------------------------


def pool_workers(tasks: int, task_bytes: int | None = None, gpu: Gpu | None = None) -> int:
    """:func:`pipeline.compile_pool.pool_size` of ``tasks`` on the GPU host, each ``task_bytes`` of ``gpu``."""
    memory = None if gpu is None else int(gpu.memory_bytes)
    return pool_size(torch.device("cuda"), tasks, cores=GPU_HOST_CORES, task_bytes=task_bytes, device_bytes=memory)


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


def pooled(c: Cost, task_seconds: list[float], task_bytes: int | None = None, ready: float | None = None) -> Cost:
    """``c`` with its compiles run as ``task_seconds`` on the pool sized for them (on each GPU, where
    ``task_bytes`` of device memory per task caps the pool)."""
    for gpu in GPUS:
        workers = pool_workers(len(task_seconds), task_bytes, gpu if task_bytes is not None else None)
        c.pool[gpu.name] = (workers, pool_seconds(task_seconds, workers, ready))
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


def _pool_bytes(profile: str) -> tuple[float, dict[str, tuple[float, float]]]:
    """Bytes S writes: A's FFN pool (fp64, one set) and, per chain of B, (its inputs: every set in each
    of B's dtypes, its fp64 references per distribution and dtype)."""
    n = POOL_SIZES[profile].chain_sets
    in_bytes = sum(DTYPE_BYTES[d] for d in DTYPES_B)
    chains = {
        c: (float(n * dists * i * in_bytes), float(n * dists * o * len(DTYPES_B) * 8))
        for c, (i, o, dists) in _chain_elements(profile).items()
    }
    ffn_shapes = WORKLOADS["ffn"].shapes(POOL_SIZES[profile])
    ffn = float(sum(math.prod(shape) for shape in ffn_shapes.values()) * 8)  # 1.07 GB at seed and gpu sizes
    return ffn, chains


def cost_s(profile: str, stored: bool | None = None) -> list[Cost]:
    """S's pools, one row per asset group: A's FFN pool, and per chain its inputs and fp64 references;
    drawn and referenced on the device (one reference call per set, distribution and dtype), copied
    to the host and stored at :data:`POOL_BYTES_S` (fixed), everything written (the disk term)."""
    ffn, chains = _pool_bytes(profile)
    calls = {
        c: POOL_SIZES[profile].chain_sets * dists * len(DTYPES_B)
        for c, (_, _, dists) in _chain_elements(profile).items()
    }
    parts = {"ffn": (ffn, 0, frozenset({"input_pool_ffn"}))} | {
        c: (i + r, calls[c] * REFERENCE_KERNELS, frozenset({f"input_pool_{c}", f"fp64_reference_{c}"}))
        for c, (i, r) in chains.items()
    }
    if not (PROFILES[profile].store_sets if stored is None else stored):
        # A recipe is stored in place of each pool and reference: the sets are drawn and referenced again
        # where they are read (B and the references' check pay it: :func:`cost_b`; A reads one set).
        return [
            Cost(f"S pool {name}", assets=assets, note="a recipe stored; drawn and referenced where read")
            for name, (_, _, assets) in parts.items()
        ]
    return [
        Cost(
            f"S pool {name}",
            device_bytes=nbytes,
            calls=kernels,
            host_bytes=nbytes,
            disk_bytes=nbytes,
            fixed_s=nbytes / POOL_BYTES_S,
            assets=assets,
            note="drawn on the device; stored at the rate measured for the FFN pool on the H200",
        )
        for name, (nbytes, kernels, assets) in parts.items()
    ]


def _a_round_s(profile: str, gpu: Gpu) -> float:
    """Seconds of one of A's rounds on ``gpu`` apart from a fresh process's start: per dtype its setup,
    its compile with the first run, and its runs (the device term of :func:`cost_a`'s one round)."""
    one = cost_a(profile, rounds=1)
    return len(A_DTYPES) * (A_SETUP_S + A_COMPILE_S) + one.terms(gpu)["device"]


def cost_a(profile: str, rounds: int | None = None) -> Cost:
    sizes, pool = A_SIZES[profile], POOL_SIZES[profile]
    batch, seq, hidden = pool.ffn_shape
    tokens, wide = batch * seq, 4 * hidden
    # round 1 and the cold round; the thread round runs on CPUs only
    rounds = (2 if sizes.cold_start else 1) if rounds is None else rounds
    c = Cost("A determinism", note="per dtype: setup, compile, runs; the cold round in a fresh process")
    for dtype in A_DTYPES:
        # round 1's runs, then the cold round's (fewer where the profile says so)
        runs = sizes.runs_for(dtype) + (sizes.cold_runs_for(dtype) if rounds > 1 else 0)
        flops = 2 * tokens * hidden * wide * runs
        if dtype == "float32":
            c.fp32_flops += flops
        else:
            c.flops += flops
        out = tokens * wide * DTYPE_BYTES[dtype]
        # matmul output written, read and written again by the fused layernorm+gelu, compared once
        c.device_bytes += 4 * out * runs
        c.calls += runs
        inputs = (tokens * hidden + hidden * wide + wide) * DTYPE_BYTES[dtype]
        c.host_bytes += rounds * (inputs + 2 * out) + runs  # inputs up; first output hashed and kept; a hash a run
        c.compiles += rounds
        c.compile_s += rounds * (A_SETUP_S + A_COMPILE_S)
        c.disk_bytes += (rounds - 1) * (inputs + out)  # the cold round's inputs and kept output
    c.fixed_s += (rounds - 1) * FRESH_PROCESS_S if rounds > 1 else 0.0  # not yet defined while it is derived
    return c


def cost_b(profile: str) -> Cost:
    _, chains = _pool_bytes(profile)
    pools = sum(i + r for i, r in chains.values())
    n_sets, dtypes = POOL_SIZES[profile].chain_sets, len(DTYPES_B)
    paths = 4  # eager (several ops), fused, fused_emulate, the fp32 single-rounding prediction
    dists = sum(d for _, _, d in _chain_elements(profile).values())
    calls = n_sets * dists * dtypes * paths * 4  # assumed: about 4 launches per call (eager's several ops)
    graphs = b_compiles(len(CHAINS), dtypes)  # B's spec: chains x dtypes x (fused, fused_emulate)
    if PROFILES[profile].store_sets:
        return Cost(
            "B accumulated error",
            compiles=graphs,
            compile_s=graphs * B_GRAPH_S,
            device_bytes=pools * paths,
            calls=calls,
            host_bytes=pools,  # every pool to the device once, per-set errors back (small)
            note="one call per input set and path; measured at smoke only",
        )
    # Pools drawn and references computed on the device where read: per judged row, as measured on the H200
    # (one chain x dtype pair at a time), the pairs now in lanes.
    c = Cost(
        "B accumulated error",
        compiles=graphs,
        compile_s=graphs * B_GPU_GRAPH_S,
        fixed_s=n_sets * dists * dtypes * B_SET_ROW_S,
        lanes=gpu_lanes(len(CHAINS) * dtypes, B_LANE_BYTES),
    )
    c.note = (
        f"{n_sets * dists * dtypes} set rows at the H200's measured {1e3 * B_SET_ROW_S:.1f} ms each (every path, "
        f"the pool drawn and its fp64 reference computed where read), {len(CHAINS) * dtypes} chain x dtype pairs "
        f"on {lanes_text(c)} lanes"
    )
    return c


#: C2's assets other than its long reductions: the reduction-order step's (the Diagnostics need these only).
C2_ORDER_ASSETS = frozenset({"c2_version_outputs", "c2_versions", "c2_ulp_matrix", "c2_row_bounds", "c2_error_vs_fp64"})


def cost_c(profile: str, device_type: str = "cuda") -> list[Cost]:
    """C1, C2's two steps and C3: their measured seconds (:data:`C_STEP_S`, writing included), not modelled;
    the graphs each compiles and the tensor bytes it stores on a ``device_type`` device, from its own code
    (the tables beside them add a few kB)."""
    parts = {"C2 long reductions": frozenset({"c2_long_reductions"}), "C2 reduction order": C2_ORDER_ASSETS}
    c2_bytes = c2_code.stored_tensor_bytes(profile, device_type)
    counts = {
        "C1": (c1_code.planned_compiles(), c1_code.stored_tensor_bytes(profile)),
        "C2 long reductions": (c2_long_code.planned_compiles(device_type), 0),  # a table per row and version
        "C2 reduction order": (c2_code.planned_compiles(device_type), c2_bytes),
        "C3": (c3_code.planned_compiles(device_type), c3_code.stored_tensor_bytes(profile, device_type)),
    }
    note = "measured on the H200 (2026-11-27)"
    return [
        Cost(
            name, n, disk_bytes=nbytes, fixed_s=secs, assets=parts.get(name, frozenset()), note=note, disk_in_fixed=True
        )
        for name, secs in C_STEP_S[profile].items()
        for n, nbytes in [counts[name]]
    ]


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
    pooled(c, [D_TASK_S + n * COMPILE_S for n in per_key.values()], task_bytes)
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
    flops = runs * s.steps * per_step + evals
    c = Cost(
        "E training",
        compiles=e_compiles(s),  # E's spec: training forward and backward and eval forward, per precision
        compile_s=E_COMPILE_S,
        flops=flops,
        host_bytes=runs * s.steps * 64,  # the loss and grad norm per step
        note=f"{runs} runs x {s.steps} steps, {s.layers} layers x {s.width} wide, context {s.context}; a step's "
        "overhead as measured on the H200 at gpu sizes, its FLOPs at the assumed share of peak",
    )
    if profile != "gpu":  # per step, what the H200's measured gpu-size steps took beyond their FLOP time
        gpu = cost_e("gpu")
        steps = E_SIZES["gpu"].steps * 15
        c.fixed_s = runs * s.steps * (E_GPU_STEPS_S - gpu.terms(GPUS[1])["device"]) / steps
    else:
        c.fixed_s = E_GPU_STEPS_S - Cost("", flops=flops).terms(GPUS[1])["device"]
    # measured one run at a time; the runs now go side by side (training/run_set.py: run_lanes)
    c.lanes = gpu_lanes(runs, run_device_bytes(s))
    c.note += f"; {lanes_text(c)} runs at a time"
    return c


def cost_m(profile: str) -> Cost:
    """M: one pool task per architecture (built once, compiled and run per dtype), then the divergence
    located for the share of rows where fused is worse."""
    s = M_SIZES[profile]
    graphs = s.planned_compiles()
    per_sample = 2 * 100e6 * (s.seq_len if s.scale == "real" else 1)  # ~100M-parameter models
    located = math.ceil(graphs * LOCATED_SHARE)
    c = Cost(
        "M models",
        compiles=graphs,
        flops=graphs * s.batches * s.batch_size * per_sample * 2,  # eager and fused
        calls=graphs * s.batches * 200,
        fixed_s=located * LOCATE_S,
    )
    pooled(c, [len(s.dtypes_for(a)) * MODEL_COMPILE_S for a in s.architectures], ready=MODEL_WORKER_READY_S)
    c.note = (
        f"{len(s.architectures)} architectures, {graphs} architecture-dtype pairs ({s.scale}), one pool task per "
        f"architecture, on {c.workers} workers; {located} rows located"
    )
    return c


def diagnostics_steps(profile: str, workers: int | None = None) -> dict[str, float]:
    """Seconds of each Diagnostics step: the tester's warm-up and programs and the fuzzer's graphs,
    each on ``workers`` processes side by side (default: as many as the compile pool gives the GPU
    host, as both run since they took workers; the fuzzer's pool workers start first), the per-layer
    divergence and the reproducers at their cap (D's, the fuzzer's and the tester's), four host cores
    each."""
    s = DIAG_SIZES[profile]
    tester, fuzzer = (workers or pool_workers(n) for n in (s.difftest_programs, s.fuzz_graphs))
    repros = s.contradiction_repro_cap + 2 * s.repro_cap
    return {
        "difftest_outcomes": DIFFTEST_WARMUP_S + math.ceil(s.difftest_programs / tester) * DIFFTEST_PROGRAM_S,
        "fuzz_outcomes": math.ceil(s.fuzz_graphs / fuzzer) * FUZZ_GRAPH_S + (WORKER_READY_S if fuzzer > 1 else 0.0),
        "divergence_per_layer": DIVERGENCE_PER_LAYER_S,
        # built side by side, one per four host cores (diagnostics/reproducers.py: build_workers)
        "reproducers": math.ceil(repros / (workers or max(1, min(repros, GPU_HOST_CORES // 4)))) * REPRO_S,
    }


def cost_diagnostics(profile: str) -> Cost:
    s, steps = DIAG_SIZES[profile], diagnostics_steps(profile)
    programs, repros = s.fuzz_graphs + s.difftest_programs, s.contradiction_repro_cap + 2 * s.repro_cap
    return Cost(
        "Diagnostics",
        compiles=programs,
        compile_s=steps["difftest_outcomes"] + steps["fuzz_outcomes"],
        fixed_s=steps["divergence_per_layer"] + steps["reproducers"],
        note=f"{s.fuzz_graphs} fuzzer graphs, {s.difftest_programs} tester programs, up to {repros} reproducers",
    )


#: One smoke run of B, C2 and D on a CPU (about 45 s per planted bug, cold, loaded 2 cores, 2026-11-27).
MATRIX_RUN_S = 45.0


def cost_matrix(profile: str) -> Cost:
    s = MATRIX_SIZES[profile]
    bugs = len(s.planted_bugs or PLANTED_BACKENDS)  # none named: every planted bug
    runs = bugs + s.healthy_seeds
    smoke_pool = sum(i + r for i, r in _pool_bytes("smoke")[1].values())
    at_once = min(MATRIX_PARALLEL_RUNS, GPU_HOST_CORES)
    return Cost(
        "Regression matrix",
        disk_bytes=runs * smoke_pool,
        fixed_s=math.ceil(runs / at_once) * MATRIX_RUN_S,
        note=f"{runs} smoke runs of B, C2, D on the CPU, {at_once} at a time, ~{MATRIX_RUN_S:g} s each; unmeasured",
    )


#: The row every run has, whatever it selects: the report's start and its process's first GPU work.
START_UP = "start-up"


def costs(profile: str, self_tests: bool = False, device_type: str = "cuda") -> list[Cost]:
    """Every row of a run on a GPU; ``self_tests``: with the planted-bug matrix, a CPU self-test that a run on
    an accelerator leaves to CPU reports unless ``--only Regression`` asks (``cli.run_report.CPU_SELF_TESTS``);
    ``device_type``: the run's, where a step's compiles depend on it (C's knobs and switches per device)."""
    start = Cost(START_UP, fixed_s=REPORT_START_S + FIRST_GPU_S, note="report's start, plan, first GPU work")
    rest = (cost_d, cost_e, cost_m, cost_diagnostics, *((cost_matrix,) if self_tests else ()))
    c_rows = cost_c(profile, device_type)
    return [start, *cost_s(profile), cost_a(profile), cost_b(profile), *c_rows, *(f(profile) for f in rest)]


#: A's fresh process of the cold round: its 49.4 s (call1, one round of three dtypes) less what the model
#: gives that round's setups, compiles and runs at gpu sizes on the H200.
FRESH_PROCESS_S = 49.4 - _a_round_s("gpu", GPUS[1])


# --- the plan-time estimate of a run -----------------------------------------------------------------


def bytes_text(n: float) -> str:
    """``n`` bytes in words: B, kB, MB, GB or TB (powers of 1000), one decimal above B."""
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


def selected_assets(experiments: Collection[str]) -> frozenset[str]:
    """The assets a ``report --only`` run of ``experiments`` materializes: theirs and what they need
    upstream, by the CLI's own selection (:func:`pipeline.cli.staleness.selection_for`)."""
    from .cli.staleness import selection_for
    from .definitions import defs

    chosen, _ = selection_for(defs, list(experiments))
    return frozenset(k.to_user_string() for k in chosen)


def selected_costs(profile: str, experiments: Collection[str] | None = None, device_type: str = "cuda") -> list[Cost]:
    """The rows of :func:`costs` a run on a ``device_type`` device computes: all, or (``experiments`` given)
    the start-up and the rows whose assets the selection materializes (``--only A`` stores A's FFN pool,
    not B's chain pools)."""
    rows = costs(profile, experiments is not None and "Regression" in experiments, device_type)
    if experiments is None:
        return rows
    from .experiments import experiment

    chosen, ids = selected_assets(experiments), {c.experiment.split()[0] for c in rows if not c.assets} - {START_UP}
    owned = {e: frozenset(k.to_user_string() for a in experiment(e).assets() for k in a.keys) for e in ids}
    return [c for c in rows if c.experiment == START_UP or (c.assets or owned[c.experiment.split()[0]]) & chosen]


def plan_estimate(profile: str, device: torch.device, experiments: Collection[str] | None = None) -> PlanEstimate:
    """The estimate of a ``profile`` run on ``device``: every experiment, or those in ``experiments``
    (ids such as ``B`` or ``Diagnostics``) with what they need upstream."""
    rows = selected_costs(profile, experiments, device.type)
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
    """Print the plan-time estimate of a run in one line, saying it is one (``report`` prints what the run
    stored when it ends: :func:`pipeline.run_summary.stored_bytes`); when the data folder's disk cannot hold what
    the run stores, print one line saying so and return 2 (the CLI's exit status for a refused run),
    else None."""
    est = plan_estimate(profile, device, experiments)
    if est.minutes is not None:
        when = f"about {est.minutes:.0f} min on this {est.gpu} (datasheet peaks and the H200 run of 2026-11-27; benchmarks/gpu_budget.py)"
    else:
        when = f"no peak figures for {device}, so no minutes (the {profile} profile's budget applies)"
    out(
        f"plan (estimated from the {profile} profile's sizes before the run): {est.compiles} compiles, "
        f"{est.flops / 1e12:.1f} TFLOP, {bytes_text(est.host_bytes)} between host and device, "
        f"{bytes_text(est.disk_bytes)} stored in {data_dir}; {when}"
    )
    free = free_bytes(data_dir)
    if est.disk_bytes > free:
        out(
            f"refusing to start: the {profile} run stores about {bytes_text(est.disk_bytes)} in {data_dir} and its "
            f"disk has {bytes_text(free)} free"
        )
        return 2
    return None
