"""C1's cost: its step's measured seconds, writing included, with the graphs it compiles and the tensor
bytes it stores from its own code (the cost model: :mod:`pipeline.costmodel`)."""

from __future__ import annotations

from ...costmodel import Cost, measured_step
from . import mechanism

#: C1's step, measured (seconds; call2 of the H200 run of 2026-11-27): at gpu sizes (the seed's sizes too)
#: and smoke; default was never measured and takes gpu's. The H100 is assumed to take as long.
STEP_S = {"gpu": 6.1, "smoke": 5.2, "seed": 6.1, "default": 6.1}


def costs(profile: str, device_type: str = "cuda") -> list[Cost]:
    stored = mechanism.stored_tensor_bytes(profile)
    return [measured_step("C1", "C1", mechanism.planned_compiles(), stored, STEP_S[profile])]
