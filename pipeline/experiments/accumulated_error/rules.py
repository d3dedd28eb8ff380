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
#: A systematic magnitude bias that matters: fused's mean signed error (sign(ref) * error, in sULP) is larger
#: in size than eager's by an eighth of a unit at the data's scale on average over every element. Unbiased rounding
#: to nearest moves a set's mean by far less (its sd is about 0.29 / sqrt(elements) sULP), so a shift this
#: size over hundreds of sets is a change of the computation (an epsilon, a variance divisor, values flushed
#: to zero), not rounding.
BIAS_MARGIN_SULP = 0.125
#: The per-element rule (see :mod:`.bounds`): on a decisive element (every fp32 computation of the chain
#: within its derived error bound rounds to the same 16-bit value) a fused kernel that keeps its
#: intermediates in fp32 and rounds once must return the correctly rounded fp64 value. No margin: a
#: healthy kernel misrounds a decisive element only when a reduction's rounding error exceeds its
#: probabilistic bound, which happens with probability at most :func:`.bounds.reduction_failure_probability`
#: per reduction; the p-value of the misrounded sets is the binomial tail at that rate.
#:
#: A gross set: fused's error is beyond twice eager's worst over the row's sets plus one unit. Rounding
#: error of a fixed computation is bounded; over every healthy row and seed fused stayed within eager's
#: worst plus a few hundredths of a unit (the page shows each row's headroom), so one such set
#: contradicts: a fault that garbles one set in a thousand moves no quantile.
GROSS_FACTOR = 2.0
#: Gross sets that contradict a row.
GROSS_SETS_NEEDED = 1


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
    "paired fused vs eager on the same set; statistic: P99 across sets of fused minus P99 of eager; the count of "
    "sets where fused is non-finite where eager is finite; the count of gross sets (fused beyond twice eager's worst "
    "set plus one unit); per set the magnitude bias (mean of sign(ref) * error in sULP over the set's elements), "
    "paired as |fused| - |eager|; where fused's own code computes the whole chain, per set the decisive elements "
    "(every fp32 computation within the chain's derived error bound rounds to the same 16-bit value) fused does not "
    "hold as the correctly rounded fp64 result; for a chain with a library call (matmul, attention), per set the "
    "elements beyond the chain's derived absolute bound against fp64 (library matmul gamma_K sum |a||b|, its "
    "legitimate 16-bit boundaries, the fp32 epilogue, the final rounding); and the fully masked rows whose answer is "
    "of another class (NaN, zeros, infinity) than fp64's",
    decision=(
        f"contradicted when any set has a non-finite fused output where eager's is finite; when any fully masked row "
        f"answers NaN, zeros or infinity where the chain defines a finite average; when any set is gross "
        f"(beyond {GROSS_FACTOR:g} x eager's worst set plus one unit); or when, after one Holm adjustment over every "
        f"test of every judged row (family-wise confidence {CONFIDENCE:g}), the bootstrap test rejects 'P99(fused) - "
        f"P99(eager) <= {MATERIALITY_SULP:g}', the exact sign test finds fused's per-set bias larger in size than "
        f"eager's with a mean excess of at least {BIAS_MARGIN_SULP:g} sULP, or the binomial test rejects 'the sets "
        f"with a misrounded decisive element (a library chain: an element beyond its absolute bound) are no more than "
        f"the bound's failure rate explains'; supported when the "
        f"row has at least {MIN_SETS_FOR_SUPPORTED} sets, the one-sided {CONFIDENCE:g} upper bound of the P99 "
        f"difference is at most {MATERIALITY_SULP:g}, the mean bias excess is under {BIAS_MARGIN_SULP:g} sULP, no "
        f"decisive element is misrounded and no set is gross; inconclusive otherwise, and always where the element "
        f"test cannot judge (a whole-chain row with no decisive element, or whose bound fails its own check): "
        f"there the bias margin is derived from the row's rounding, twice the chain's fp32 bound averaged over a "
        f"set's elements in sULP (never below {BIAS_MARGIN_SULP:g}), and the row can be contradicted but not "
        f"supported"
    ),
    threshold=MATERIALITY_SULP,
    unit="scale-aware ULP (ULPs of the row's largest |fp64 reference|); share of judged elements",
    confidence=CONFIDENCE,
    sample_size=f"every input set of the profile per row (1000 in default and seed); {BOOTSTRAP_RESAMPLES} paired "
    f"bootstrap resamples; supported needs >= {MIN_SETS_FOR_SUPPORTED} sets",
    derivation="Rounding error of a normalization, reduction or smooth elementwise op is proportional to the "
    "magnitudes it combines, so the tail rule measures it in ULPs of the row's largest reference value; one such ULP "
    "is the smallest change a single extra rounding at the data's scale can make. That unit cannot see a fault of a "
    "few ULP on small elements (an approximated GELU tail, flushed subnormals, a wrong epsilon), so fused is also "
    "judged per element in absolute terms: it keeps intermediates in fp32 and rounds once, so wherever the "
    "chain's fp32 error bound (derived per element, probabilistic for reductions: Azuma-Hoeffding with lambda 6) "
    "cannot reach a rounding midpoint it must return the correctly rounded value, whatever its reduction order or "
    "thread count. A library call rounds its output to the 16-bit dtype, so those chains are judged against an "
    "absolute bound instead, derived the same way: no fp32-accumulating library and fp32 epilogue can leave it. "
    "A fully masked row has a defined finite answer (softmax ignores a shift common to the row). A fault in one "
    "set in a thousand moves no quantile, so a set beyond twice eager's worst is a "
    "contradiction on its own. Pairing removes the input-to-input variation; one Holm family over every test "
    "keeps the healthy backend's chance of any false 'contradicted' across the whole table at most 1 - confidence.",
)


#: Sets per counterexample the ablation re-runs: those where fused is worst relative to eager.
ABLATION_SETS = 32


def element_bounds_table(summary: pl.DataFrame) -> pl.DataFrame:
    """Per row of a library chain (judged against its absolute bound): the bound's median width in half-ULPs
    of the output at each element's own reference, the most of it fused used, the elements beyond it and
    the fully masked rows with their wrong answers. Empty for a summary stored before the absolute bound."""
    if "fused_element_test" not in summary.columns:
        return pl.DataFrame()
    return summary.filter(pl.col("fused_element_test") == "absolute").select(
        *GROUP_KEYS,
        pl.col("fused_paired_sets").alias("sets"),
        pl.col("fused_bound_half_ulps_median").round(2).alias("bound (median, half-ULPs)"),
        pl.col("fused_bound_use_max").round(3).alias("most of the bound fused used"),
        pl.col("fused_decisive_elements").alias("elements judged"),
        pl.col("fused_misrounded_elements").alias("elements beyond the bound"),
        pl.col("fused_element_p_holm").round(4).alias("element Holm p"),
        pl.col("fused_masked_rows").alias("fully masked rows"),
        pl.col("fused_masked_wrong_rows").alias("with another answer"),
        pl.col("fused_verdict").alias("verdict"),
    )


def cannot_judge_table(summary: pl.DataFrame) -> pl.DataFrame:
    """The rows where B's element test has nothing to judge (no decisive element, or a bound that fails its own
    check) and so cannot be supported: why, the bias margin derived from the row's rounding, and what the tail
    and bias tests measured there. Empty for a summary stored before the test said so."""
    if "fused_cannot_judge" not in summary.columns:
        return pl.DataFrame()
    return summary.filter(pl.col("fused_cannot_judge").is_not_null()).select(
        *GROUP_KEYS,
        pl.col("fused_paired_sets").alias("sets"),
        pl.col("fused_decisive_elements").alias("decisive elements"),
        pl.col("fused_cannot_judge").alias("why the element test cannot judge"),
        pl.col("fused_bias_room").round(3).alias("fp32 bound, mean over a set (sULP)"),
        pl.col("fused_bias_margin").round(3).alias("bias margin (sULP)"),
        pl.col("fused_bias_difference").round(4).alias("bias excess (sULP)"),
        pl.col("fused_ci_upper").round(3).alias("P99 difference, upper bound"),
        pl.col("fused_verdict").alias("verdict"),
    )


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
                pl.col("fused_bias_difference").round(4).alias("bias excess (sULP)"),
                *(
                    [pl.col("fused_bias_margin").round(3).alias("bias margin")]
                    if "fused_bias_margin" in summary.columns
                    else []
                ),
                pl.col("fused_bias_p_holm").round(4).alias("bias Holm p"),
            ]
            if "fused_bias_difference" in summary.columns  # a summary stored before the bias test has none
            else []
        ),
        *(
            [
                pl.col("fused_gross_sets").alias("gross sets"),
                pl.col("fused_worst_over_eager_worst").round(3).alias("worst - eager worst (sULP)"),
                pl.col("fused_decisive_elements").alias("decisive elements"),
                pl.col("fused_misrounded_sets").alias("sets misrounding a decisive element"),
                pl.col("fused_element_p_holm").round(4).alias("element Holm p"),
            ]
            if "fused_decisive_elements" in summary.columns  # a summary stored before the decisive-element rule
            else []
        ),
        pl.col("fused_verdict").alias("verdict"),
        pl.col("emulate_verdict").alias("emulate verdict"),
    )
