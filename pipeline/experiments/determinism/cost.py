"""A's cost: per dtype its setup, compile and runs, and the cold round in a fresh process (the cost model:
:mod:`pipeline.costmodel`)."""

from __future__ import annotations

from ...costmodel import DTYPE_BYTES, GPUS, Cost, Gpu, one_row
from ..toolkit.spec import SIZES as POOL_SIZES
from .spec import SIZES

#: A's per-dtype setup (inputs cast and moved) before each dtype's first run: the gaps of 2.4 s and 2.8 s
#: between fp16's end and bf16's start and bf16's end and fp32's start (call1), their mean. A's FFN compile
#: with its first run: fp16 2.0 s, bf16 1.9 s, fp32 3.8 s (call1), their mean.
A_SETUP_S = (2.4 + 2.8) / 2
A_COMPILE_S = (2.0 + 1.9 + 3.8) / 3
A_DTYPES = ("float16", "bfloat16", "float32")


def _a_round_s(profile: str, gpu: Gpu) -> float:
    """Seconds of one of A's rounds on ``gpu`` apart from a fresh process's start: per dtype its setup,
    its compile with the first run, and its runs (the device term of :func:`cost_a`'s one round)."""
    one = cost_a(profile, rounds=1)
    return len(A_DTYPES) * (A_SETUP_S + A_COMPILE_S) + one.terms(gpu)["device"]


def cost_a(profile: str, rounds: int | None = None) -> Cost:
    sizes, pool = SIZES[profile], POOL_SIZES[profile]
    batch, seq, hidden = pool.ffn_shape
    tokens, wide = batch * seq, 4 * hidden
    # round 1 and the cold round; the thread round runs on CPUs only
    rounds = (2 if sizes.cold_start else 1) if rounds is None else rounds
    c = Cost("A", "A determinism", note="per dtype: setup, compile, runs; the cold round in a fresh process")
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


#: A's fresh process of the cold round: its 49.4 s (call1, one round of three dtypes) less what the model
#: gives that round's setups, compiles and runs at gpu sizes on the H200.
FRESH_PROCESS_S = 49.4 - _a_round_s("gpu", GPUS[1])


costs = one_row(cost_a)
