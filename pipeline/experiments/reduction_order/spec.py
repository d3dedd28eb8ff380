"""C2, reduction accumulation order: id, asset group and sizes per profile."""

from dataclasses import dataclass

from ...fusion_checks import ExpectedFusion

ID, GROUP = "C2", "C2_reduction_order"

#: The fused versions (Inductor's default, its knobs, the tilings); the eager version carries no fusion.
#: The fused rows sum fp16 inputs (the fp32-accumulated output computes in fp32, higher, which is allowed).
FUSION = (
    ExpectedFusion("c2_versions", names=("version",), fused_where=(("mode", ("fused",)),), workload_dtype="float16"),
)


@dataclass(frozen=True)
class ReductionSizes:
    length: int  # row length (terms per reduction)
    pool_rows: int  # rows of the input pool
    runs: int  # runs per version
    long_length: int  # fp32 terms per long reduction (one thread and many threads)
    long_rows: int  # long rows per input distribution


SIZES = {
    # 16 rows in all: the paired sign test against eager needs ceil(log2(versions / 0.01)) = 10 rows for the
    # CPU's ten fused versions before it can reject anything (checks.min_paired_rows).
    "smoke": ReductionSizes(length=4096, pool_rows=15, runs=5, long_length=2**21, long_rows=1),
    # 2^24 fp32 terms: where per-lane or per-thread partial sums that are not cascaded show their error
    # (a running fp32 sum of 2^24 terms of U(0, 1) passes 2^23, where the spacing is 1); 64 MiB a row.
    "default": ReductionSizes(length=16384, pool_rows=256, runs=200, long_length=2**24, long_rows=2),
    "gpu": ReductionSizes(length=16384, pool_rows=1024, runs=1000, long_length=2**27, long_rows=1),
    "seed": ReductionSizes(length=16384, pool_rows=1024, runs=1000, long_length=2**27, long_rows=1),
}
