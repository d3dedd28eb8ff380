"""C3's cost: its step's measured seconds, writing included, with the graphs it compiles and the tensor
bytes it stores on the run's device from its own code (the cost model: :mod:`pipeline.costmodel`)."""

from __future__ import annotations

from ...costmodel import Cost, measured_step
from . import compute

#: C3's step, measured (seconds; call2 of the H200 run of 2026-11-27): at gpu sizes (the seed's sizes too)
#: and smoke; default was never measured and takes gpu's. The H100 is assumed to take as long.
STEP_S = {"gpu": 6.4, "smoke": 3.4, "seed": 6.4, "default": 6.4}


def costs(profile: str, device_type: str = "cuda") -> list[Cost]:
    stored = compute.stored_tensor_bytes(profile, device_type)
    return [measured_step("C3", "C3", compute.planned_compiles(device_type), stored, STEP_S[profile])]
