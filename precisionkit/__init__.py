"""precisionkit: compare floating-point results bit by bit, in ULPs and against fp64.

Public API::

    bit_equal, bit_mismatch, ulp_diff, ULP_NAN, ULP_SATURATED  # bits
    error_stats, error_stats_per_set, round_to_dtype  # statistics vs a reference
    fp64_reference  # fp64 re-execution
    tolerance, assert_bit_equal, assert_ulp_within, assert_close_to_reference
    MeasuredTolerances, tolerance_from_table  # measured tolerance tables
    FusedFunction, FusionEvidence, FusionError, eager, fused  # execution paths
    HostTraffic  # device-to-host reads (transfers and syncs) of a block, for budget tests
    locate_divergence  # per-layer divergence locator
    unit_roundoff, gamma, gamma_tilde, rounding_error  # error-bound maths (from precisionkit.bounds)
    summation_error_bound, SummationBound, matmul_error_bound  # derived summation and matmul bounds
    precisionkit.fuzz  # differential graph fuzzer
    binomial_tail, poisson_two_sided, sign_test_counts  # count tails (from precisionkit.decide)
    ulp_histogram  # binned integer ULP distances (from precisionkit.ulp)
    precisionkit.decide  # paired sign test, bootstrap, Holm
"""

from .batched import error_stats_per_set
from .bits import ULP_NAN, ULP_SATURATED, BitMismatch, bit_equal, bit_mismatch, ulp_diff
from .bounds import (
    SummationBound,
    gamma,
    gamma_tilde,
    matmul_error_bound,
    rounding_error,
    summation_error_bound,
    unit_roundoff,
)
from .decide import binomial_tail, poisson_two_sided, sign_test_counts
from .hosttraffic import HostTraffic
from .locator import locate_divergence
from .paths import FusedFunction, FusionError, FusionEvidence, eager, fused
from .reference import fp64_reference
from .stats import error_stats, round_to_dtype
from .tolerance import (
    MeasuredTolerances,
    Tolerance,
    assert_bit_equal,
    assert_close_to_reference,
    assert_ulp_within,
    tolerance,
    tolerance_from_table,
)
from .ulp import ulp_histogram

__all__ = [
    "ULP_NAN",
    "ULP_SATURATED",
    "BitMismatch",
    "FusedFunction",
    "FusionError",
    "FusionEvidence",
    "HostTraffic",
    "MeasuredTolerances",
    "SummationBound",
    "Tolerance",
    "assert_bit_equal",
    "assert_close_to_reference",
    "assert_ulp_within",
    "binomial_tail",
    "bit_equal",
    "bit_mismatch",
    "eager",
    "error_stats",
    "error_stats_per_set",
    "fp64_reference",
    "fused",
    "gamma",
    "gamma_tilde",
    "locate_divergence",
    "matmul_error_bound",
    "poisson_two_sided",
    "round_to_dtype",
    "rounding_error",
    "sign_test_counts",
    "summation_error_bound",
    "tolerance",
    "tolerance_from_table",
    "ulp_diff",
    "ulp_histogram",
    "unit_roundoff",
]
__version__ = "0.1.0"
