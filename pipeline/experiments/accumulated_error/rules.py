"""B's decision rule and what it compares, declared before any data: the paths and dtypes each chain
runs, the materiality threshold, confidence and bootstrap size of :data:`RULE`, and the verdict table
built from the summary.

Read by B's assets and checks and by its report page, so it imports no asset code.
"""

import math

import polars as pl

from ...verdicts import Rule

DTYPES_B = ("float16", "bfloat16")
PATHS = ("eager", "fused", "fused_emulate")
FUSED_PATHS = ("fused", "fused_emulate")
#: A row of B's tables: one chain x input distribution x dtype.
GROUP_KEYS = ["chain", "distribution", "dtype"]

#: How much worse matters: one ULP at the scale of the data (see precisionkit.stats.scaled_spacing).
MATERIALITY_SULP = 1.0
#: Quantile of per-set errors the seed's claim is about ("AutoFuse P99 / Max error <= Eager's").
TAIL_QUANTILE = 0.99
#: Family-wise confidence of a "contradicted" verdict (Holm over every judged row) and the
#: one-sided confidence of each row's interval.
CONFIDENCE = 0.99
BOOTSTRAP_RESAMPLES = 9999


def min_sets_for_tail_bound(q: float = 0.99, confidence: float = 0.99) -> int:
    """The smallest n whose largest value bounds the ``q`` quantile from above with ``confidence``
    for any continuous distribution: P(max of n < Q_q) = q^n <= 1 - confidence.

    >>> min_sets_for_tail_bound()
    459
    """
    return math.ceil(math.log(1.0 - confidence) / math.log(q))


#: Below this many sets a P99 across sets is an extrapolation: such rows can be contradicted (the
#: evidence against the claim is already there) but not supported. 459 is the smallest sample whose
#: maximum is a distribution-free 99% upper bound of the P99.
MIN_SETS_FOR_SUPPORTED = min_sets_for_tail_bound(TAIL_QUANTILE, CONFIDENCE)
JUDGED_PATHS = FUSED_PATHS

RULE = Rule(
    claim="§3.2: fused accumulated error against fp64 is no worse than eager's, per chain x distribution x dtype",
    metric="per input set: max scale-aware ULP error against fp64 (error in ULPs of the row's largest |reference|), "
    "paired fused vs eager on the same set; statistic: P99 across sets of fused minus P99 of eager; plus the "
    "count of sets where fused is non-finite where eager is finite",
    decision=(
        f"contradicted when any set has a non-finite fused output where eager's is finite, or when the bootstrap "
        f"test rejects 'P99(fused) - P99(eager) <= {MATERIALITY_SULP:g}' after Holm's adjustment over every judged "
        f"row (family-wise confidence {CONFIDENCE:g}); supported when the row has at least "
        f"{MIN_SETS_FOR_SUPPORTED} sets and the one-sided {CONFIDENCE:g} upper bound of the difference is at most "
        f"{MATERIALITY_SULP:g}; inconclusive otherwise"
    ),
    threshold=MATERIALITY_SULP,
    unit="scale-aware ULP (ULPs of the row's largest |fp64 reference|)",
    confidence=CONFIDENCE,
    sample_size=f"every input set of the profile per row (1000 in default and seed); {BOOTSTRAP_RESAMPLES} paired "
    f"bootstrap resamples; supported needs >= {MIN_SETS_FOR_SUPPORTED} sets",
    derivation="Rounding error of a normalization, reduction or smooth elementwise op is proportional to the "
    "magnitudes it combines, so it is measured in ULPs of the row's largest reference value; one such ULP is the "
    "smallest change a single extra rounding at the data's scale can make, so a P99 shift below it is not material. "
    "Pairing removes the input-to-input variation; Holm keeps the healthy backend's chance of any false "
    "'contradicted' across the whole table at most 1 - confidence.",
)


#: Sets per counterexample the ablation re-runs: those where fused is worst relative to eager.
ABLATION_SETS = 32


def verdict_table(summary: pl.DataFrame) -> pl.DataFrame:
    """B's verdict table: one row per chain x distribution x dtype with the rule's figures."""
    return summary.select(
        *GROUP_KEYS,
        pl.col("fused_paired_sets").alias("sets"),
        pl.col("eager_sulp_max_p99").round(3).alias("eager P99"),
        pl.col("fused_sulp_max_p99").round(3).alias("fused P99"),
        pl.col("fused_p99_difference").round(3).alias("difference"),
        pl.col("fused_ci_lower").round(3).alias("CI low"),
        pl.col("fused_ci_upper").round(3).alias("CI high"),
        pl.col("fused_p_holm").round(4).alias("Holm p"),
        pl.col("fused_nonfinite_sets").alias("non-finite sets"),
        pl.col("fused_materially_worse_sets").alias("sets worse > 1 sULP"),
        pl.col("fused_verdict").alias("verdict"),
        pl.col("emulate_verdict").alias("emulate verdict"),
    )
