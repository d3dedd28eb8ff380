"""M's cost: one pool task per architecture (built once, compiled and run per dtype), then the divergence
located for the share of rows where fused is worse (the cost model: :mod:`pipeline.costmodel`)."""

from __future__ import annotations

import math

from ...costmodel import Cost, one_row, pooled
from .spec import SIZES

#: One model x dtype of M (a real model's compile and its batches): gpt2 bf16 14.1 s, resnet50 bf16 16.9 s,
#: vit fp16 15.0 s (call1 of the H200 run of 2026-11-27, gpu), their mean.
MODEL_COMPILE_S = (14.1 + 16.9 + 15.0) / 3
#: M's workers until their first task (they build the models too): the last of 4 architecture tasks of two
#: dtypes each ended at 55.8 s (call1), so 55.8 - 2 x MODEL_COMPILE_S.
MODEL_WORKER_READY_S = 55.8 - 2 * MODEL_COMPILE_S
#: Locating the divergence of one model x dtype row: 65 s for two rows (call1, gpu). Which rows need it
#: depends on the outcome; the run located 2 of its 8, taken as the share for every profile.
LOCATE_S = 65.0 / 2
LOCATED_SHARE = 2 / 8


def cost_m(profile: str) -> Cost:
    """M: one pool task per architecture (built once, compiled and run per dtype), then the divergence
    located for the share of rows where fused is worse."""
    s = SIZES[profile]
    graphs = s.planned_compiles()
    per_sample = 2 * 100e6 * (s.seq_len if s.scale == "real" else 1)  # ~100M-parameter models
    located = math.ceil(graphs * LOCATED_SHARE)
    c = Cost(
        "M",
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


costs = one_row(cost_m)
