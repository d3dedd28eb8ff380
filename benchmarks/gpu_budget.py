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

from pipeline.experiments.data_movement.spec import SIZES as D_SIZES
from pipeline.experiments.determinism.spec import SIZES as A_SIZES
from pipeline.experiments.diagnostics.spec import SIZES as DIAG_SIZES
from pipeline.experiments.models.spec import SIZES as M_SIZES
from pipeline.experiments.regression.spec import SIZES as MATRIX_SIZES
from pipeline.experiments.toolkit.spec import SIZES as POOL_SIZES
from pipeline.experiments.training.spec import SIZES as E_SIZES

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
COMPILE_S = 20.0  # one cold Triton graph of a small subgraph (the H200 run: D's first seven
# combinations took about a minute, so 20 s per graph is on the safe side; see --compile-s)
MODEL_COMPILE_S = 90.0  # one cold graph of a 12-layer model (forward or backward)
FRESH_PROCESS_S = 15.0  # start of a fresh interpreter (A's cold round), before its compiles
REPRO_S = 300.0  # one reproducer: minimization and bisection, each step a fresh interpreter compiling cold
#: C1, C2 and C3 at their seed sizes on the H200 (2026-11-27), seconds; gpu uses the same sizes.
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


def _pool_bytes(profile: str) -> tuple[float, dict[str, float]]:
    """Bytes S writes (each chain's sets in fp16, bf16 and fp32 plus the fp64 reference) per chain."""
    p = POOL_SIZES[profile]
    n = p.chain_sets
    heads, seq, dim = p.attention
    per_set_elems = {  # input elements per set, output elements per set
        "mul_add_gelu_mul": (p.rows * p.width + 3 * p.width, p.rows * p.width),
        "layernorm": (p.rows * p.width + 2 * p.width, p.rows * p.width),
        "softmax": (p.rows * p.width, p.rows * p.width),
        "matmul_add_layernorm": (p.rows * p.width + p.width * p.width + p.width, p.rows * p.width),
        "attention": (3 * heads * seq * dim, heads * seq * dim),
        "attention_masked": (3 * heads * seq * dim + seq, heads * seq * dim),
        "layernorm_long": (3 * p.long_width, p.long_width),
        "rmsnorm_long": (2 * p.long_width, p.long_width),
    }
    distributions = {
        "mul_add_gelu_mul": 3,
        "layernorm": 2,
        "softmax": 3,
        "matmul_add_layernorm": 2,
        "attention": 2,
        "attention_masked": 3,
        "layernorm_long": 2,
        "rmsnorm_long": 1,
    }
    # Inputs: the H200 run's pools measured 4 bytes per input element (attention 2.36 GB, masked
    # attention 3.54 GB at seed sizes); the fp64 references add 8 bytes per output element and dtype.
    chains = {c: float(n * distributions[c] * (i * 4 + o * 3 * 8)) for c, (i, o) in per_set_elems.items()}
    batch, s, hidden = p.ffn_shape
    ffn = float(batch * s * hidden + hidden * 4 * hidden + 4 * hidden) * 8  # 1.07 GB at seed sizes, as measured
    return ffn, chains


def _pool_input_bytes(profile: str) -> float:
    """The input part of the pools (drawn on the host), without the fp64 references."""
    p = POOL_SIZES[profile]
    heads, seq, dim = p.attention
    per_set = {  # input elements per set x distributions
        "mul_add_gelu_mul": (p.rows * p.width + 3 * p.width) * 3,
        "layernorm": (p.rows * p.width + 2 * p.width) * 2,
        "softmax": p.rows * p.width * 3,
        "matmul_add_layernorm": (p.rows * p.width + p.width * p.width + p.width) * 2,
        "attention": 3 * heads * seq * dim * 2,
        "attention_masked": (3 * heads * seq * dim + seq) * 3,
        "layernorm_long": 3 * p.long_width * 2,
        "rmsnorm_long": 2 * p.long_width,
    }
    return p.chain_sets * sum(per_set.values()) * 4 + _pool_bytes(profile)[0]


def cost_s(profile: str) -> Cost:
    ffn, chains = _pool_bytes(profile)
    inputs = _pool_input_bytes(profile)
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
    _, chains = _pool_bytes(profile)
    p = POOL_SIZES[profile]
    n_dists = {"mul_add_gelu_mul": 3, "layernorm": 2, "softmax": 3, "matmul_add_layernorm": 2}
    n_dists.update({"attention": 2, "attention_masked": 3, "layernorm_long": 2, "rmsnorm_long": 1})
    paths = 4  # eager (several ops), fused, fused_emulate, the fp32 single-rounding prediction
    calls = sum(p.chain_sets * d * 3 * paths * 4 for d in n_dists.values())  # eager counts ~4 launches
    return Cost(
        "B accumulated error",
        compiles=len(n_dists) * 3 * 3,  # chains x dtypes x (fused, fused_emulate, prediction)
        compile_s=len(n_dists) * 3 * 3 * COMPILE_S,
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


def cost_matrix(profile: str) -> Cost:
    s = MATRIX_SIZES[profile]
    bugs = len(s.planted_bugs) or 13
    runs = bugs + s.healthy_seeds
    smoke_pool = sum(_pool_bytes("smoke")[1].values())
    # each run re-materializes B, C2 and D at smoke size: B's compiles, C2's ~15 versions, D's combinations
    per_run = 8 * 3 * 3 + 15 + _d_combinations(D_SIZES["smoke"].shapes)
    return Cost(
        "Regression matrix",
        compiles=runs * per_run,
        compile_s=runs * per_run * COMPILE_S,
        disk_bytes=runs * smoke_pool,
        note=f"{runs} smoke runs of B, C2, D on the run's device ({per_run} compiles each)",
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
    gpus = "; ".join(
        f"{g.name}: {g.tensor_flops / 1e12:.0f} TFLOP/s fp16/bf16 dense, {g.fp32_flops / 1e12:.0f} TFLOP/s fp32, "
        f"HBM {g.hbm_bytes_s / 1e12:.2f} TB/s"
        for g in GPUS
    )
    return (
        f"Peaks (NVIDIA H100 / H200 Tensor Core GPU datasheets, SXM): {gpus}. Assumed: {ACHIEVED_FLOPS:.0%} of peak "
        f"FLOP/s and {ACHIEVED_HBM:.0%} of HBM achieved; PCIe gen5 x16 at {PCIE_BYTES_S / 1e9:.0f} GB/s effective; "
        f"{COMPILE_S:.0f} s per cold Triton graph, {MODEL_COMPILE_S:.0f} s per 12-layer model graph, "
        f"{FRESH_PROCESS_S:.0f} s per fresh interpreter, {REPRO_S / 60:.0f} min per reproducer; input pools drawn "
        f"and written at {POOL_BYTES_S / 1e6:.0f} MB/s (the H200 run of 2026-11-27); C1-C3 as timed on that H200."
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
    summary = []
    for profile in [p for p in args.profiles.split(",") if p]:
        text, totals = table(profile)
        print(text + "\n")
        summary.append(f"{profile}: {totals['H100']:.1f} min on an H100, {totals['H200']:.1f} min on an H200")
    print("Totals: " + "; ".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
