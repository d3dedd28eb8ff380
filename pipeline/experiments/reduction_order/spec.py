"""C2, reduction accumulation order: id, asset group and sizes per profile."""

from dataclasses import dataclass

ID, GROUP = "C2", "C2_reduction_order"


@dataclass(frozen=True)
class ReductionSizes:
    length: int  # row length (terms per reduction)
    pool_rows: int  # rows of the input pool
    runs: int  # runs per version


SIZES = {
    "smoke": ReductionSizes(length=4096, pool_rows=8, runs=5),
    "default": ReductionSizes(length=16384, pool_rows=256, runs=200),
    "seed": ReductionSizes(length=16384, pool_rows=1024, runs=1000),
}
