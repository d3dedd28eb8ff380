"""E's cost: its runs' FLOPs at the assumed share of peak, a step's overhead as measured on the H200, the
runs side by side on E's own lanes (the cost model: :mod:`pipeline.costmodel`)."""

from __future__ import annotations

from ...costmodel import GPUS, Cost, lanes_text, one_row, per_gpu
from .rules import REPLICATE_ORDERS
from .run_set import run_device_bytes, run_lanes
from .spec import SIZES, compiles

#: E at gpu sizes on the H200 (results/gpu-logs/2026-11-27-h200-gpu-2): 15 runs x 200 steps in 152.4 s, 6 s
#: of it compiling (the fused graphs cached by the session's first, capped try); cold, the first fused run
#: took 28 s more than eager's.
E_GPU_STEPS_S, E_COMPILE_S = 152.4 - 6.0, 28.0


def cost_e(profile: str) -> Cost:
    s = SIZES[profile]
    params = 12 * s.layers * s.width**2
    tokens = s.batch * s.context
    per_step = 6 * params * tokens + 12 * s.layers * s.context * s.width * tokens  # weights and attention
    runs = len(REPLICATE_ORDERS) * 3 + 2 * s.fp32_control  # five orders x (eager, fused, control); the fp32 pair
    evals = runs * (s.steps // max(1, s.eval_every)) * s.eval_batches * (2 * params * tokens)
    flops = runs * s.steps * per_step + evals
    c = Cost(
        "E",
        "E training",
        compiles=compiles(s),  # E's spec: training forward and backward and eval forward, per precision
        compile_s=E_COMPILE_S,
        flops=flops,
        host_bytes=runs * s.steps * 64,  # the loss and grad norm per step
        note=f"{runs} runs x {s.steps} steps, {s.layers} layers x {s.width} wide, context {s.context}; a step's "
        "overhead as measured on the H200 at gpu sizes, its FLOPs at the assumed share of peak",
    )
    if profile != "gpu":  # per step, what the H200's measured gpu-size steps took beyond their FLOP time
        gpu = cost_e("gpu")
        steps = SIZES["gpu"].steps * 15
        c.fixed_s = runs * s.steps * (E_GPU_STEPS_S - gpu.terms(GPUS[1])["device"]) / steps
    else:
        c.fixed_s = E_GPU_STEPS_S - Cost("", flops=flops).terms(GPUS[1])["device"]
    # measured one run at a time; the runs now go side by side, placed as a run places them (run_lanes)
    c.lanes = per_gpu(
        lambda device, memory, cores: run_lanes(device, cores or 1, runs, run_device_bytes(s), memory, cores)[0]
    )
    c.note += f"; {lanes_text(c)} runs at a time"
    return c


costs = one_row(cost_e)
