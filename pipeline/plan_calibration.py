"""The cost model's calibration: the step times of the H200 run of 2026-11-27 (logs under
``results/gpu-logs/2026-11-27-h200-gpu/``) beside the model's estimate of each (:mod:`pipeline.plan`, each experiment's ``cost.py``).
``benchmarks/gpu_budget.py`` prints them; a test holds every estimate within a stated factor."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .costmodel import FIRST_GPU_S, Gpu
from .plan import cost_of, costs


@dataclass(frozen=True)
class Measured:
    step: str  # the report's step name, as its "done <step> in Xs" line gives it
    row: str  # the row of :func:`costs` that models it, or the key of :func:`diagnostics_steps`
    profile: str
    seconds: float
    cold: bool  # the first GPU step of its process: the model adds FIRST_GPU_S (once per run) to compare
    log: str  # which log under results/gpu-logs/2026-11-27-h200-gpu/ and which invocation


_A, _D, _M, _C, _DIAG = "call1 --only A", "call1 --only D", "call1 --only M", "call2 --only C1,C2,C3", "call2 smoke"
H200_MEASURED = (
    # Stored then; the gpu profile stores a recipe since (compared with the stored model: cost_s(stored=True)).
    Measured("input_pool_ffn", "S pool ffn", "gpu", 5.8, False, _A),
    Measured("determinism", "A determinism", "gpu", 84.0, True, _A),
    Measured("data_movement_check_table", "D data movement", "gpu", 33.1, True, _D),
    Measured("model_runs", "M models", "gpu", 123.0, True, _M),
    Measured("c1_instruction_selection", "C1", "gpu", 6.1, False, _C),
    Measured("c2_long_reductions", "C2 long reductions", "gpu", 5.5, False, _C),
    Measured("c2_reduction_order", "C2 reduction order", "gpu", 9.6, False, _C),
    Measured("c3_rsqrt_iterations", "C3", "gpu", 6.4, False, _C),
    Measured("difftest_outcomes", "difftest_outcomes", "smoke", 29.3, False, _DIAG),
    Measured("fuzz_outcomes", "fuzz_outcomes", "smoke", 3.5, False, _DIAG),
    Measured("divergence_per_layer", "divergence_per_layer", "smoke", 11.6, False, _DIAG),
    Measured("accumulated_error_runs", "B accumulated error", "smoke", 15.8, False, _DIAG),
    Measured("data_movement_check_table", "D data movement", "smoke", 24.4, False, _DIAG),
    # The second session (results/gpu-logs/2026-11-27-h200-gpu-2): B with its pools drawn where read; E with
    # the fused graphs cached by the session's first, capped try.
    Measured("accumulated_error_runs", "B accumulated error", "gpu", 143.0, False, "session 2 call1 --only B"),
    Measured("training_curves", "E training", "gpu", 152.4, True, "session 2 call2 --only E"),
    # Measured with the layers one after another and the CPU ISA probe in its environment record; the model
    # has the layers at once since, and compares the probe's share as it ran then (see REPRO_S).
    Measured("reproducers (one of D's)", "one reproducer", "smoke", 144.0, False, _DIAG + " 1m40s-4m04s"),
)


def step_estimate(m: Measured, gpu: Gpu) -> float:
    """The model's seconds for the measured step ``m`` on ``gpu`` (with FIRST_GPU_S where ``m`` was cold)."""
    # The H200 run's tester and fuzzer ran one program at a time (they run one per core since).
    diagnostics = cost_of("Diagnostics")
    steps = {
        **diagnostics.diagnostics_steps(m.profile, workers=1),
        "one reproducer": diagnostics.REPRO_S + diagnostics.REPRO_ISA_PROBE_S,
    }
    stored = cost_of("S").costs(m.profile, stored=True)
    rows = {c.name: c for c in costs(m.profile)} | {c.name: c for c in stored}
    # Every measured step ran one chain x dtype pair and one training run at a time: no lanes.
    secs = steps[m.row] if m.row in steps else replace(rows[m.row], lanes={}).seconds(gpu)
    return secs + (FIRST_GPU_S if m.cold else 0.0)
