"""D's cost from its own code: one compile per combination, one pool task per input draw, the pool sized
by D's own placement (the cost model: :mod:`pipeline.costmodel`)."""

from __future__ import annotations

import math
from collections import Counter

from ... import costmodel
from ...costmodel import DTYPE_BYTES, Cost, one_row, pooled, workers_text
from .assets import TASK_BYTES_PER_ELEMENT, compile_plan, compile_workers, input_key
from .spec import SIZES

#: Device reads back per D combination: the comparison's counts and maxima (about a dozen 8-byte scalars).
D_READBACK_BYTES = 16 * 8
#: Per D pool task (one input draw on the device, then its compiles): the warm first combination's 4.0 s
#: (call2 of the H200 run of 2026-11-27) less one compile.
D_TASK_S = 4.0 - costmodel.COMPILE_S


def cost_d(profile: str) -> Cost:
    """D's plan from its own code: one compile per combination, one pool task per input draw (the counts
    come from the sizes a run uses; a test holds each spec's declared ``compiles`` to them)."""
    sizes = SIZES[profile]
    combos = compile_plan(sizes.shapes)
    per_key = Counter(input_key(*c) for c in combos)  # compiles per draw, in plan order
    elems = {k: math.prod(k[1]) for k in per_key}
    nbytes = sum(math.prod(s) for s in sizes.shapes) * 2 * 6 * 3 * 8  # shape x graph x dtype x layout, passes
    draws = sum(e * 2 * (8 + DTYPE_BYTES[k[0]]) for k, e in elems.items())  # x and y: fp64 drawn, then cast
    c = Cost(
        "D",
        "D data movement",
        compiles=len(combos),
        device_bytes=nbytes + draws,
        calls=len(combos) * 2,
        host_bytes=len(combos) * D_READBACK_BYTES,
    )
    # COMPILE_S read when called: benchmarks/gpu_budget.py --compile-s sets it
    pooled(c, [D_TASK_S + n * costmodel.COMPILE_S for n in per_key.values()], lambda *gpu: compile_workers(sizes, *gpu))
    task_bytes = TASK_BYTES_PER_ELEMENT * max(elems.values())
    c.note = (
        f"{len(per_key)} input draws on the device, one pool task each, on {workers_text(c)} workers "
        f"(each task up to {task_bytes / 1e9:.1f} GB of device memory)"
    )
    return c


costs = one_row(cost_d)
