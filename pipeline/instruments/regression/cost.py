"""The planted-bug matrix's cost: smoke runs of the experiments it judges, on the CPU, a few at a time (the
cost model: :mod:`pipeline.costmodel`). A CPU self-test: a run on an accelerator leaves it out of its
estimate unless asked (:data:`SELF_TEST`)."""

from __future__ import annotations

import math

from ...costmodel import GPU_HOST_CORES, Cost, one_row
from ...experiments import EXPERIMENTS
from ...experiments.toolkit.spec import pool_bytes
from .spec import PARALLEL_RUNS, PLANTED_BACKENDS, SIZES

#: Left out of a run's estimate unless the run asks for the matrix (``pipeline.plan.costs``' ``self_tests``).
SELF_TEST = True
#: One smoke run of the matrix's experiments on a CPU (about 45 s per planted bug, cold, loaded 2 cores,
#: 2026-11-27).
MATRIX_RUN_S = 45.0


def cost_matrix(profile: str) -> Cost:
    s = SIZES[profile]
    bugs = len(s.planted_bugs or PLANTED_BACKENDS)  # none named: every planted bug
    runs = bugs + s.healthy_seeds
    smoke_pool = sum(i + r for i, r in pool_bytes("smoke")[1].values())
    at_once = min(PARALLEL_RUNS, GPU_HOST_CORES)
    judged = ", ".join(sorted(e.id for e in EXPERIMENTS if e.matrix == "judged"))
    return Cost(
        "Regression",
        "Regression matrix",
        disk_bytes=runs * smoke_pool,
        fixed_s=math.ceil(runs / at_once) * MATRIX_RUN_S,
        note=f"{runs} smoke runs of {judged} on the CPU, {at_once} at a time, ~{MATRIX_RUN_S:g} s each; unmeasured",
    )


costs = one_row(cost_matrix)
