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
#: A systematic magnitude bias that matters: fused's mean signed error (sign(ref) * error, in sULP) differs
#: from eager's by an eighth of a unit at the data's scale on average over every element. Unbiased rounding
#: to nearest moves a set's mean by far less (its sd is about 0.29 / sqrt(elements) sULP), so a shift this
#: size over hundreds of sets is a change of the computation (an epsilon, a variance divisor, values flushed
#: to zero), not rounding.
BIAS_MARGIN_SULP = 0.125
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
    "count of sets where fused is non-finite where eager is finite; plus per set the magnitude bias (mean of "
    "sign(ref) * error in sULP over the set's elements), paired fused minus eager",
    decision=(
        f"contradicted when any set has a non-finite fused output where eager's is finite, when the bootstrap "
        f"test rejects 'P99(fused) - P99(eager) <= {MATERIALITY_SULP:g}' after Holm's adjustment over every judged "
        f"row (family-wise confidence {CONFIDENCE:g}), or when fused's magnitude bias departs from eager's: the "
        f"two-sided exact sign test of the per-set bias differences rejects 0 after Holm's adjustment and their mean "
        f"is at least {BIAS_MARGIN_SULP:g} sULP in size; supported when the row has at least "
        f"{MIN_SETS_FOR_SUPPORTED} sets, the one-sided {CONFIDENCE:g} upper bound of the P99 difference is at most "
        f"{MATERIALITY_SULP:g} and the mean bias difference is under {BIAS_MARGIN_SULP:g} sULP; inconclusive otherwise"
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
        *(
            [
                pl.col("fused_bias_difference").round(4).alias("bias difference (sULP)"),
                pl.col("fused_bias_p_holm").round(4).alias("bias Holm p"),
            ]
            if "fused_bias_difference" in summary.columns  # a summary stored before the bias test has none
            else []
        ),
        pl.col("fused_verdict").alias("verdict"),
        pl.col("emulate_verdict").alias("emulate verdict"),
    )
