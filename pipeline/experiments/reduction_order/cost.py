"""C2's cost, one row per step (its long reductions, its reduction order): the steps' measured seconds,
writing included, with the graphs each compiles and the tensor bytes it stores on the run's device from
its own code (the cost model: :mod:`pipeline.costmodel`)."""

from __future__ import annotations

from ...costmodel import Cost, measured_step
from . import long, versions

LONG, ORDER = "C2 long reductions", "C2 reduction order"
#: C2's steps, measured (seconds; call2 of the H200 run of 2026-11-27): at gpu sizes (the seed's sizes too)
#: and smoke; smoke ran no c2_long_reductions, so its gpu figure stands in; default was never measured and
#: takes gpu's. The H100 is assumed to take as long.
STEP_S = {
    "gpu": {LONG: 5.5, ORDER: 9.6},
    "smoke": {LONG: 5.5, ORDER: 3.5},
}
STEP_S["seed"] = STEP_S["default"] = STEP_S["gpu"]

#: C2's assets other than its long reductions: the reduction-order step's (the Diagnostics need these only).
ORDER_ASSETS = frozenset({"c2_version_outputs", "c2_versions", "c2_ulp_matrix", "c2_row_bounds", "c2_error_vs_fp64"})


def costs(profile: str, device_type: str = "cuda") -> list[Cost]:
    counts = {
        LONG: (long.planned_compiles(device_type), 0, frozenset({"c2_long_reductions"})),  # a table per row
        ORDER: (
            versions.planned_compiles(device_type),
            versions.stored_tensor_bytes(profile, device_type),
            ORDER_ASSETS,
        ),
    }
    return [
        measured_step("C2", name, n, nbytes, STEP_S[profile][name], assets)
        for name, (n, nbytes, assets) in counts.items()
    ]
