"""A, fused-path determinism: id, asset group and sizes per profile (the FFN's shape is S's pool)."""

from dataclasses import dataclass

ID, GROUP = "A", "A_determinism"


@dataclass(frozen=True)
class DeterminismSizes:
    runs: int  # runs per round
    #: Whether the cold-start rounds run (fresh interpreters with an empty compiler cache): about 15 s
    #: each whatever the size, so the smoke profile leaves them out and its cold-start claim is inconclusive.
    cold_start: bool


SIZES = {
    "smoke": DeterminismSizes(runs=5, cold_start=False),
    # 100 runs per dtype: each fp16/bf16 run of the FFN costs about 0.25 s where 16-bit matmul has no native
    # instructions, and a nondeterministic kernel shows within a few runs (the planted one on every call).
    "default": DeterminismSizes(runs=100, cold_start=True),
    "seed": DeterminismSizes(runs=1000, cold_start=True),
}
