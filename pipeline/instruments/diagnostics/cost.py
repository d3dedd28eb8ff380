"""The Diagnostics' cost: the tester's and the fuzzer's programs on the compile pool, the per-layer
divergence and the reproducers (the cost model: :mod:`pipeline.costmodel`)."""

from __future__ import annotations

import math

from ...costmodel import (
    DIFFTEST_PROGRAM_S,
    DIFFTEST_WARMUP_S,
    FUZZ_GRAPH_S,
    GPU_HOST_CORES,
    WORKER_READY_S,
    Cost,
    one_row,
    pool_workers,
)
from .spec import SIZES

#: divergence_per_layer at smoke sizes (call2 of the H200 run of 2026-11-27), the only measurement; used for
#: every profile.
DIVERGENCE_PER_LAYER_S = 11.6
#: One D reproducer, from 1m40s to 4m04s in call2's smoke Diagnostics run (144 s): minimizing and its
#: fresh run (26 s), four bisection layers one after another (13, 11, 13 and 26 s), then 55 s to the next
#: case. Since 5514dcc the layers run at once on an accelerator host: the longest layer, not their sum.
#: That case did not reproduce, so no knob variant ran; a reproducing case's knob variants now start with
#: the layers there, adding what runs beyond the layers' wave, and torch's bisector after them (unmodelled).
REPRO_LAYERS_S = (13.0, 11.0, 13.0, 26.0)
#: Of those 55 s, the reproducer's environment record ran Inductor's CPU vector-ISA probe for the CUDA case
#: (a C++ test build per candidate ISA, in the step's own process); a CUDA case is no longer probed. Its
#: share is an estimate: one candidate's build took 9.8 s on an AVX2-only EPYC (the only candidate there),
#: and the H200 host's Xeon offers three (AVX2, AVX-512, AMX), so about 30 s; the first analysis of that
#: run put a process's first stored output (this probe and nvidia-smi) at about 35 s. 30 s is taken.
REPRO_ISA_PROBE_S = 3 * 9.8
REPRO_S = 26.0 + max(REPRO_LAYERS_S) + 55.0 - REPRO_ISA_PROBE_S
REPRO_MEASURED_S = 244.0 - 100.0


def diagnostics_steps(profile: str, workers: int | None = None) -> dict[str, float]:
    """Seconds of each Diagnostics step: the tester's warm-up and programs and the fuzzer's graphs,
    each on ``workers`` processes side by side (default: as many as the compile pool gives the GPU
    host, as both run since they took workers; the fuzzer's pool workers start first), the per-layer
    divergence and the reproducers at their cap (those of every experiment that declares reproducer
    cases, the fuzzer's and the tester's), four host cores each."""
    s = SIZES[profile]
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
    s, steps = SIZES[profile], diagnostics_steps(profile)
    programs, repros = s.fuzz_graphs + s.difftest_programs, s.contradiction_repro_cap + 2 * s.repro_cap
    return Cost(
        "Diagnostics",
        "Diagnostics",
        compiles=programs,
        compile_s=steps["difftest_outcomes"] + steps["fuzz_outcomes"],
        fixed_s=steps["divergence_per_layer"] + steps["reproducers"],
        note=f"{s.fuzz_graphs} fuzzer graphs, {s.difftest_programs} tester programs, up to {repros} reproducers",
    )


costs = one_row(cost_diagnostics)
