"""Estimate what the gpu and seed profiles cost on one H100 or H200, from each experiment's sizes.

    python benchmarks/gpu_budget.py [--profiles gpu,seed]

Per profile and experiment: compiles (graphs Inductor compiles with Triton), FLOPs of the device
work, bytes over PCIe (inputs up, read-backs down), bytes written to disk, and the estimated
minutes on each GPU. Every figure comes from the experiment's sizes in its ``spec.py`` and the
constants below; nothing is measured here. An estimate is the sum of four terms, and the table says
which one dominates each row:

* compile: ``compiles x`` the seconds a graph of that kind takes to compile cold;
* device: ``FLOPs / (peak x achieved fraction)`` or ``bytes / (HBM bandwidth x achieved fraction)``,
  whichever is larger, plus a launch cost per kernel call;
* PCIe: host bytes at the effective PCIe bandwidth;
* disk: bytes written; S's input pools at the host's rate of drawing seeded inputs and writing them.

Experiments C1, C2 and C3 are not modelled: their seed sizes (the same in gpu) were timed on an H200
and those seconds are used for both GPUs.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from pipeline.experiments.accumulated_error.rules import DTYPES_B
from pipeline.experiments.data_movement.spec import SIZES as D_SIZES
from pipeline.experiments.determinism.spec import SIZES as A_SIZES
from pipeline.experiments.diagnostics.spec import SIZES as DIAG_SIZES
from pipeline.experiments.models.spec import SIZES as M_SIZES
from pipeline.experiments.regression.spec import PLANTED_BACKENDS
from pipeline.experiments.regression.spec import SIZES as MATRIX_SIZES
from pipeline.experiments.toolkit.spec import SIZES as POOL_SIZES
from pipeline.experiments.training.spec import SIZES as E_SIZES
from pipeline.profiles import PROFILES
from pipeline.workloads import CHAINS, WORKLOADS

# --- the machines (peak figures: NVIDIA's H100 and H200 Tensor Core GPU datasheets, SXM parts) ------


@dataclass(frozen=True)
class Gpu:
    name: str
    tensor_flops: float  # dense fp16/bf16 Tensor Core FLOP/s (without sparsity)
    fp32_flops: float  # fp32 FLOP/s on the CUDA cores (torch keeps TF32 off for matmul by default)
    hbm_bytes_s: float  # memory bandwidth


GPUS = (
    Gpu("H100", tensor_flops=989e12, fp32_flops=67e12, hbm_bytes_s=3.35e12),  # H100 SXM datasheet
    Gpu("H200", tensor_flops=989e12, fp32_flops=67e12, hbm_bytes_s=4.8e12),  # H200 SXM datasheet
)

#: Assumptions (not datasheet figures): what a run achieves of the peaks, and the host side.
ACHIEVED_FLOPS = 0.5  # of peak, for the large matmuls of A's FFN and E's and M's models
ACHIEVED_HBM = 0.7  # of peak bandwidth, for memory-bound kernels
PCIE_BYTES_S = 55e9  # PCIe gen5 x16: 64 GB/s per direction on paper, about 55 GB/s in practice
LAUNCH_S = 20e-6  # host cost of one compiled-graph call (Python, guards, kernel launches)
DISK_BYTES_S = 1e9  # writing computed tables and references to a local NVMe disk
POOL_BYTES_S = 50e6  # host rate of drawing and writing input pools: the 2026-11-27 H200 run wrote its
# pools (1.07 to 3.54 GB each) at 24 to 120 MB/s, CPU-bound fp64 sampling
COMPILE_S = 20.0  # one cold Triton graph of a small subgraph (the H200 run got through 7 of D's
# 117 combinations inside its 120 s cap, setup included: at most about 17 s each; see --compile-s)
MODEL_COMPILE_S = 90.0  # one cold graph of a 12-layer model (forward or backward)
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

    def terms(self, gpu: Gpu) -> dict[str, float]:
        device = max(
            self.flops / (gpu.tensor_flops * ACHIEVED_FLOPS) + self.fp32_flops / (gpu.fp32_flops * ACHIEVED_FLOPS),
            self.device_bytes / (gpu.hbm_bytes_s * ACHIEVED_HBM),
        )
        return {
            "compile": self.compile_s,
            "device": device + self.calls * LAUNCH_S,
            "pcie": self.host_bytes / PCIE_BYTES_S,
            "disk": 0.0 if self.experiment == "S pools" else self.disk_bytes / DISK_BYTES_S,
            "fixed": self.fixed_s,
        }

    def minutes(self, gpu: Gpu) -> float:
        return sum(self.terms(gpu).values()) / 60


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


def _d_combinations(shapes: tuple[tuple[int, ...], ...]) -> int:
    pure, counterexamples, dtypes, layouts = 6, 3, 3, 2  # data_movement.movement: PURE, COUNTEREXAMPLES
    return pure * dtypes * len(shapes) * layouts + counterexamples * dtypes


def cost_d(profile: str) -> Cost:
    shapes = D_SIZES[profile].shapes
    combos = _d_combinations(shapes)
    elems = sum(math.prod(s) for s in shapes)
    nbytes = elems * 2 * 6 * 3 * 8  # each shape x graph x dtype x layout, a few passes, eager and fused
    return Cost(
        "D data movement",
        compiles=combos,
        compile_s=combos * COMPILE_S,
        device_bytes=nbytes,
        calls=combos * 2,
        host_bytes=nbytes / 4,  # outputs compared and mismatches located on the host
        note="one compile per subgraph x dtype x shape x layout",
    )


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
    s = M_SIZES[profile]
    graphs = len(s.architectures) * len(s.dtypes)
    per_sample = 2 * 100e6 * (s.seq_len if s.scale == "real" else 1)  # ~100M-parameter models
    return Cost(
        "M models",
        compiles=graphs,
        compile_s=graphs * MODEL_COMPILE_S,
        flops=graphs * s.batches * s.batch_size * per_sample * 2,  # eager and fused
        calls=graphs * s.batches * 200,
        note=f"{len(s.architectures)} architectures x {len(s.dtypes)} dtypes ({s.scale})",
    )


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


# --- the table ----------------------------------------------------------------------------------------


def _si(x: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.1f} {prefix}{unit}"
    return f"{x:.0f} {unit}"


def table(profile: str) -> tuple[str, dict[str, float]]:
    """The profile's table (Markdown) and its total minutes per GPU."""
    rows = costs(profile)
    head = "| experiment | compiles | FLOPs | host bytes | disk bytes | H100 min | H200 min | dominant term | note |"
    lines = [f"### profile `{profile}`", "", head, "|" + "---|" * 9]
    totals = dict.fromkeys((g.name for g in GPUS), 0.0)
    for c in rows:
        mins = {g.name: c.minutes(g) for g in GPUS}
        for name, m in mins.items():
            totals[name] += m
        terms = c.terms(GPUS[1])
        dominant = max(terms, key=lambda k: terms[k])
        lines.append(
            f"| {c.experiment} | {c.compiles} | {_si(c.flops + c.fp32_flops, 'FLOP')} | {_si(c.host_bytes, 'B')} | "
            f"{_si(c.disk_bytes, 'B')} | {mins['H100']:.1f} | {mins['H200']:.1f} | {dominant} | {c.note} |"
        )
    all_terms = {k: sum(c.terms(GPUS[1])[k] for c in rows) / 60 for k in ("compile", "device", "pcie", "disk", "fixed")}
    lines.append(
        f"| **total** | {sum(c.compiles for c in rows)} | {_si(sum(c.flops + c.fp32_flops for c in rows), 'FLOP')} | "
        f"{_si(sum(c.host_bytes for c in rows), 'B')} | {_si(sum(c.disk_bytes for c in rows), 'B')} | "
        f"**{totals['H100']:.1f}** | **{totals['H200']:.1f}** | "
        + ", ".join(f"{k} {v:.1f}" for k, v in all_terms.items())
        + " (H200 min) | |"
    )
    return "\n".join(lines), totals


def assumptions() -> str:
    """What the estimate rests on, in three groups: datasheet peaks, assumed figures nobody measured for
    this project, and figures taken from the one H200 run (2026-11-27)."""
    gpus = "; ".join(
        f"{g.name} {g.tensor_flops / 1e12:.0f} TFLOP/s fp16/bf16 dense, {g.fp32_flops / 1e12:.0f} TFLOP/s fp32, "
        f"HBM {g.hbm_bytes_s / 1e12:.2f} TB/s"
        for g in GPUS
    )
    assumed = [
        f"{ACHIEVED_FLOPS:.0%} of peak FLOP/s and {ACHIEVED_HBM:.0%} of peak HBM bandwidth achieved",
        f"{COMPILE_S:.0f} s per cold Triton graph of a small subgraph (the H200 run's D stayed under about 17 s "
        f"per combination; --compile-s changes it), {MODEL_COMPILE_S:.0f} s per 12-layer model graph",
        f"{FRESH_PROCESS_S:.0f} s per fresh interpreter, {REPRO_S / 60:.0f} min per reproducer",
        f"{LAUNCH_S * 1e6:.0f} us of host time per compiled-graph call; PCIe gen5 x16 at "
        f"{PCIE_BYTES_S / 1e9:.0f} GB/s; disk writes at {DISK_BYTES_S / 1e9:.0f} GB/s",
        "per-experiment counts modelled in this script (kernel launches per eager call, passes over D's tensors, "
        "C2's versions, M's parameter count); compiles take as long on either GPU",
        f"C1-C3 take as long on an H100 as on the H200; input pools drawn and written at {POOL_BYTES_S / 1e6:.0f} "
        "MB/s, within the 24 to 120 MB/s reported for the H200 run",
    ]
    taken = ", ".join(f"{exp} {secs:.1f} s" for exp, secs in MEASURED_S.items())
    return "\n".join(
        [
            f"Peaks (NVIDIA H100 / H200 Tensor Core GPU datasheets, SXM): {gpus}.",
            "",
            "Assumed, not measured:",
            *(f"* {a}" for a in assumed),
            "",
            f"From the H200 run of 2026-11-27 at seed sizes (not recorded in its results bundle): {taken}.",
        ]
    )


def _set_compile_seconds(seconds: float) -> None:
    global COMPILE_S
    COMPILE_S = seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default="gpu,seed", help="comma-separated profile names")
    parser.add_argument(
        "--compile-s", type=float, default=COMPILE_S, help="seconds per cold Triton graph of a small subgraph"
    )
    args = parser.parse_args(argv)
    _set_compile_seconds(args.compile_s)
    print("# GPU budget estimate\n")
    print(assumptions() + "\n")
    summary, against = [], []
    for profile in [p for p in args.profiles.split(",") if p]:
        text, totals = table(profile)
        print(text + "\n")
        summary.append(f"{profile}: {totals['H100']:.1f} min on an H100, {totals['H200']:.1f} min on an H200")
        budget = PROFILES[profile].budget
        if budget is not None:
            worst = max(totals.values())
            verdict = "within" if worst <= budget.seconds / 60 else f"{worst / (budget.seconds / 60):.1f}x over"
            against.append(f"{profile}: {budget.seconds / 60:.0f} min, estimate {verdict}")
    print("Totals: " + "; ".join(summary))
    if against:
        print("Against each profile's stated budget (pipeline/profiles.py): " + "; ".join(against))
    return 0


if __name__ == "__main__":
    sys.exit(main())
