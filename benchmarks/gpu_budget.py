"""Estimate what the gpu and seed profiles cost on one H100 or H200, from each experiment's sizes.

    python benchmarks/gpu_budget.py [--profiles gpu,seed] [--compile-s S] [--workers N]

Prints, per profile and experiment, what :mod:`pipeline.plan` estimates from each experiment's declared
cost (:mod:`pipeline.costmodel` describes the model): compiles and the workers compiling them at once, FLOPs, host and disk bytes, and minutes on
an H100 and an H200, which term dominates each row, every assumption with its source, and each total
against the profile's budget. Then the calibration: per step timed on the H200 run of 2026-11-27, the
measured seconds beside the model's estimate now and before that run recalibrated it. The last lines
weigh the one assumption the totals lean on most, what launch-bound lanes gain on one GPU (B's chain x
dtype pairs and E's runs side by side): each profile's minutes if the lanes gained nothing, and the
smallest gain per lane that keeps it within its budget.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline import costmodel as model
from pipeline.compile_pool import DEVICE_LANES, LANES_ENV, WORKERS_ENV
from pipeline.costmodel import GPUS, Gpu, workers_text
from pipeline.plan import cost_of, costs
from pipeline.plan_calibration import H200_MEASURED, step_estimate
from pipeline.profiles import PROFILES

__all__ = ["main"]


# --- the table ----------------------------------------------------------------------------------------


def _si(x: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.1f} {prefix}{unit}"
    return f"{x:.0f} {unit}"


def table(profile: str) -> tuple[str, dict[str, float]]:
    """The profile's table (Markdown) and its total minutes per GPU."""
    rows = costs(profile)
    head = (
        "| experiment | compiles | workers | FLOPs | host bytes | disk bytes | H100 min | H200 min | dominant term "
        "| note |"
    )
    lines = [f"### profile `{profile}`", "", head, "|" + "---|" * 10]
    totals = dict.fromkeys((g.name for g in GPUS), 0.0)
    for c in rows:
        mins = {g.name: c.minutes(g) for g in GPUS}
        for name, m in mins.items():
            totals[name] += m
        terms = c.terms(GPUS[1])
        dominant = max(terms, key=lambda k: terms[k])
        lines.append(
            f"| {c.name} | {c.compiles} | {workers_text(c)} | {_si(c.flops + c.fp32_flops, 'FLOP')} | "
            f"{_si(c.host_bytes, 'B')} | "
            f"{_si(c.disk_bytes, 'B')} | {mins['H100']:.1f} | {mins['H200']:.1f} | {dominant} | {c.note} |"
        )
    all_terms = {k: sum(c.terms(GPUS[1])[k] for c in rows) / 60 for k in ("compile", "device", "pcie", "disk", "fixed")}
    lines.append(
        f"| **total** | {sum(c.compiles for c in rows)} | | {_si(sum(c.flops + c.fp32_flops for c in rows), 'FLOP')} | "
        f"{_si(sum(c.host_bytes for c in rows), 'B')} | {_si(sum(c.disk_bytes for c in rows), 'B')} | "
        f"**{totals['H100']:.1f}** | **{totals['H200']:.1f}** | "
        + ", ".join(f"{k} {v:.1f}" for k, v in all_terms.items())
        + " (H200 min) | |"
    )
    matrix = cost_of("Regression").cost_matrix(profile)
    lines.append(
        f"\nNot in the total: the planted-bug matrix ({matrix.minutes(GPUS[1]):.1f} min, {matrix.note}). It tests the "
        "harness on the CPU whatever the device, so a run on an accelerator leaves it to CPU reports unless "
        "`--only Regression` asks for it."
    )
    return "\n".join(lines), totals


def without_lane_gain(profile: str) -> float:
    """The profile's H200 minutes if lanes gained nothing (their workers' start still paid): a what-if
    that shows how much of the total rests on :data:`pipeline.costmodel.LANE_EFFICIENCY`."""
    return _minutes_at(profile, 0.0, GPUS[1])


def _minutes_at(profile: str, efficiency: float, gpu: Gpu) -> float:
    saved = model.LANE_EFFICIENCY
    model.LANE_EFFICIENCY = efficiency
    try:
        return sum(c.minutes(gpu) for c in costs(profile))
    finally:
        model.LANE_EFFICIENCY = saved


def break_even_efficiency(profile: str) -> float | None:
    """The smallest :data:`pipeline.costmodel.LANE_EFFICIENCY` (to 0.01) at which the profile fits its budget on
    both GPUs; None when it fits with no gain at all or does not fit even with perfect lanes."""
    budget = PROFILES[profile].budget
    if budget is None:
        return None
    limit = budget.seconds / 60

    def fits(e: float) -> bool:
        return all(_minutes_at(profile, e, g) <= limit for g in GPUS)

    if fits(0.0) or not fits(1.0):
        return None
    return next(e / 100 for e in range(0, 101) if fits(e / 100))


def assumptions() -> str:
    """What the estimate rests on, in three groups: datasheet peaks, assumed figures nobody measured for
    this project, and figures taken from the H200 run of 2026-11-27."""
    gpus = "; ".join(
        f"{g.name} {g.tensor_flops / 1e12:.0f} TFLOP/s fp16/bf16 dense, {g.fp32_flops / 1e12:.0f} TFLOP/s fp32, "
        f"HBM {g.hbm_bytes_s / 1e12:.2f} TB/s"
        for g in GPUS
    )
    # each experiment's own figures, from the cost it declares
    s, a, b, c1, c2, c3 = (cost_of(e) for e in ("S", "A", "B", "C1", "C2", "C3"))
    d, m, diag, matrix = (cost_of(e) for e in ("D", "M", "Diagnostics", "Regression"))
    assumed = [
        f"{model.ACHIEVED_FLOPS:.0%} of peak FLOP/s (the H200's fp16 FFN call: model 4.5 ms, measured 4.6 ms) and "
        f"{model.ACHIEVED_HBM:.0%} of peak HBM bandwidth achieved",
        f"{model.GPU_HOST_CORES} CPU cores on the GPU host, so {model.GPU_HOST_CORES} compile workers at most "
        "(pipeline.compile_pool.pool_size: one per core on an accelerator, capped by the tasks; "
        "FUSION_COMPILE_WORKERS overrides it); the lent H100/H200 machines have 16",
        f"{model.LAUNCH_S * 1e6:.0f} us of host time per compiled-graph call; PCIe gen5 x16 at "
        f"{model.PCIE_BYTES_S / 1e9:.0f} GB/s; disk writes at {model.DISK_BYTES_S / 1e9:.0f} GB/s",
        f"pools drawn on the device, about {s.REFERENCE_KERNELS} kernels per fp64 reference call; "
        f"the regression matrix never ran on a GPU ({matrix.MATRIX_RUN_S:.0f} s per CPU run)",
        f"launch-bound lanes on one GPU (B's chain x dtype pairs, E's runs; {DEVICE_LANES} by default, "
        f"{LANES_ENV} overrides it): each lane beyond the first adds {model.LANE_EFFICIENCY:.0%} of one lane's "
        "throughput, and a lane's worker starts as a compile worker does; B and E were measured one at a time",
        f"work side by side on the {model.GPU_HOST_CORES} host cores does not slow down: the tester's and the "
        "fuzzer's workers, and four reproducers at once, each bisecting with its own interpreters",
        f"M locates the divergence of {m.LOCATED_SHARE:.0%} of its rows (the H200 run's share; it depends on "
        "the outcome); C1-C3 and compiles take as long on an H100 as on the H200",
    ]
    c_steps = {"C1": c1.STEP_S["gpu"], **c2.STEP_S["gpu"], "C3": c3.STEP_S["gpu"]}
    measured = [
        f"{model.REPORT_START_S:.1f} s per report invocation before its first step, "
        f"{model.FIRST_GPU_S:.1f} s for its process's first GPU work",
        f"{model.COMPILE_S:.2f} s per warm small-subgraph compile, {d.D_TASK_S:.2f} s per D pool task, "
        f"{model.WORKER_READY_S:.0f} s until a compile worker takes its first task",
        f"tester {model.DIFFTEST_WARMUP_S:.1f} s warm-up + {model.DIFFTEST_PROGRAM_S:.2f} s per program, fuzzer "
        f"{model.FUZZ_GRAPH_S:.2f} s per graph, {diag.DIVERGENCE_PER_LAYER_S:.1f} s per-layer divergence, "
        f"{diag.REPRO_MEASURED_S:.0f} s per reproducer with its layers one after another "
        f"({diag.REPRO_S:.0f} s modelled with them at once and without the CPU ISA probe a CUDA case no longer "
        "runs)",
        f"{m.MODEL_COMPILE_S:.1f} s per model x dtype of M, its workers ready after "
        f"{m.MODEL_WORKER_READY_S:.1f} s, {m.LOCATE_S:.1f} s per row located",
        f"A: {a.A_SETUP_S:.1f} s setup + {a.A_COMPILE_S:.1f} s compile per dtype, "
        f"{a.FRESH_PROCESS_S:.1f} s for the cold round's fresh process; a pool stored at "
        f"{s.POOL_BYTES_S / 1e6:.0f} MB/s (A's FFN pool, then drawn on the host: an upper bound)",
        f"B {b.B_GRAPH_S:.2f} s per graph (smoke); C1-C3 per step: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in c_steps.items()),
    ]
    return "\n".join(
        [
            f"Peaks (NVIDIA H100 / H200 Tensor Core GPU datasheets, SXM): {gpus}.",
            "",
            "Assumed, not measured:",
            *(f"* {a}" for a in assumed),
            "",
            "From the H200 run of 2026-11-27 (logs results/gpu-logs/2026-11-27-h200-gpu/; pipeline/costmodel.py "
            "and each experiment's cost.py say which line gives each):",
            *(f"* {m}" for m in measured),
        ]
    )


#: What the model gave each measured step before the H200 run recalibrated it (commit ed50613, H200 row),
#: None where it had no term for the step; C2 was one 54.0 s figure for both its steps.
OLD_ESTIMATE_S = {
    ("input_pool_ffn", "gpu"): 21.5,
    ("determinism", "gpu"): 71.6,
    ("data_movement_check_table", "gpu"): 64.2,
    ("model_runs", "gpu"): 199.9,
    ("c1_instruction_selection", "gpu"): 52.6,
    ("c3_rsqrt_iterations", "gpu"): 5.9,
    ("difftest_outcomes", "smoke"): 37.0,
    ("fuzz_outcomes", "smoke"): 22.2,
    ("accumulated_error_runs", "smoke"): 177.7,
    ("data_movement_check_table", "smoke"): 42.0,
    ("reproducers (one of D's)", "smoke"): 300.0,
}


def calibration() -> str:
    """Per step timed on the H200 run, measured seconds beside the model's estimate now and before."""
    h200 = GPUS[1]
    lines = [
        "### measured vs estimated: the H200 run of 2026-11-27",
        "",
        "| step | profile | log | measured s | estimate s | estimate / measured | old estimate s |",
        "|" + "---|" * 7,
    ]
    for m in H200_MEASURED:
        new, old = step_estimate(m, h200), OLD_ESTIMATE_S.get((m.step, m.profile))
        lines.append(
            f"| {m.step} | {m.profile} | {m.log} | {m.seconds:.1f} | {new:.1f} | {new / m.seconds:.2f} | "
            f"{'-' if old is None else f'{old:.1f}'} |"
        )
    lines.append("")
    lines.append(
        "Cold steps (the first GPU step of their process) include the run's first GPU work "
        f"({model.FIRST_GPU_S:.1f} s), which a whole run pays once in its start-up row."
    )
    return "\n".join(lines)


def report(profiles: list[str]) -> None:
    """Print the assumptions, each profile's table, the totals against the budgets and the what-ifs."""
    print("# GPU budget estimate\n")
    print(assumptions() + "\n")
    summary, against = [], []
    for profile in profiles:
        text, totals = table(profile)
        print(text + "\n")
        summary.append(f"{profile}: {totals['H100']:.1f} min on an H100, {totals['H200']:.1f} min on an H200")
        budget = PROFILES[profile].budget
        if budget is not None:
            worst = max(totals.values())
            verdict = "within" if worst <= budget.seconds / 60 else f"{worst / (budget.seconds / 60):.1f}x over"
            against.append(f"{profile}: {budget.seconds / 60:.0f} min, estimate {verdict}")
    print(calibration() + "\n")
    print("Totals: " + "; ".join(summary))
    if against:
        print("Against each profile's stated budget (pipeline/profiles.py): " + "; ".join(against))
    for profile in profiles:
        line = (
            f"What-if, not the code: {profile} at {without_lane_gain(profile):.1f} min on an H200 if lanes gained "
            "nothing"
        )
        needed = break_even_efficiency(profile)
        if needed is not None:
            line += f"; within its budget while each extra lane adds at least {needed:.0%} of a lane"
        print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default="gpu,seed", help="comma-separated profile names")
    parser.add_argument(
        "--compile-s",
        type=float,
        default=model.COMPILE_S,
        help="seconds per warm small-subgraph compile in D's pool tasks",
    )
    parser.add_argument("--workers", type=int, default=None, help="compile workers (default: as the pool sizes them)")
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be at least 1, got {args.workers}")
    if args.compile_s <= 0:
        parser.error(f"--compile-s must be positive, got {args.compile_s}")
    unknown = [p for p in args.profiles.split(",") if p and p not in PROFILES]
    if unknown:
        parser.error(f"unknown profiles {unknown}; expected some of {', '.join(PROFILES)}")
    # The figures this run changes are put back afterwards: the model is shared with the CLI's plan.
    saved_compile, saved_workers = model.COMPILE_S, os.environ.get(WORKERS_ENV)
    model.COMPILE_S = args.compile_s
    if args.workers is not None:
        os.environ[WORKERS_ENV] = str(args.workers)
    try:
        report([p for p in args.profiles.split(",") if p])
    finally:
        model.COMPILE_S = saved_compile
        if saved_workers is None:
            os.environ.pop(WORKERS_ENV, None)
        else:
            os.environ[WORKERS_ENV] = saved_workers
    return 0


if __name__ == "__main__":
    sys.exit(main())
