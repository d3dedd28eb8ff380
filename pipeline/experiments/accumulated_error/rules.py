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
#: Chains whose rounding error is relative to each output element (no cancellation against the row):
#: elementwise ops, softmax, RMSNorm. Every finite element of theirs is judged on its own ULP. The others
#: (layer norms, attention's weighted sums) make errors at the row's scale, judged per element above a floor.
ELEMENT_SCALE_CHAINS = frozenset({"mul_add_gelu_mul", "softmax", "rmsnorm_long"})
#: An fp32 computation of a row chain is good to about 16 fp32 units at the row's scale (2^-20 of the row's
#: largest |value|); an element's correct rounding is decided by that error on at most a few percent of
#: elements only where its own ULP is at least 2^6 times larger: |ref| >= row max * 2^(p - 14) for a
#: format with p significand bits (1/8 of the row max in fp16, 1/64 in bf16). Below it the row-scale rule
#: judges alone.
ROW_FLOOR_EXPONENT = 14
#: Significand bits (with the implicit bit) of the 16-bit formats.
PRECISION_BITS = {"float16": 11, "bfloat16": 8}


def element_floor_factor(chain: str, dtype: str) -> float:
    """The share of a row's largest |reference| above which ``chain``'s elements are judged on their own
    ULP: 0 for a chain of :data:`ELEMENT_SCALE_CHAINS`, 2^(p - 14) for a row-scale chain."""
    return 0.0 if chain in ELEMENT_SCALE_CHAINS else 2.0 ** (PRECISION_BITS[dtype] - ROW_FLOOR_EXPONENT)


#: How much more often fused may round an element wrongly than the chain computed in fp32 and rounded
#: once: two fp32 computations of the same value differ by up to about 16 fp32 units, which moves the
#: final rounding on at most 2 * 16 * 2^-24 / 2^(1-p) of elements (0.2% in fp16, 0.02% in bf16). Fused
#: keeps its intermediates in fp32 and rounds once, so a larger excess in the median set is a change
#: of the computation (an approximated transcendental, a flushed subnormal, a wrong epsilon), however
#: small each element's error.
def element_margin(dtype: str) -> float:
    """The largest healthy excess share of wrongly rounded elements of ``dtype`` (see above)."""
    return 2.0 * 16.0 * 2.0**-24 / 2.0 ** (1 - PRECISION_BITS[dtype])


#: A gross set: fused's error is beyond twice eager's worst over the row's sets plus one unit. Rounding
#: error of a fixed computation is bounded, and a fused path that rounds no more often than eager has
#: no healthy way to double eager's worst case. Under health each set has at most a 1/n chance (the
#: chance of being eager's own worst of n) of being gross; the row is contradicted when the gross sets
#: reach the smallest k with P(Binomial(n, 1/n) >= k) <= 1 - confidence (5 of 1000 sets): a fault that
#: garbles a few sets in a thousand, which no quantile sees.
GROSS_FACTOR = 2.0


def gross_sets_threshold(n: int, confidence: float = 0.99) -> int:
    """The smallest k with P(Binomial(n, 1/n) >= k) <= 1 - confidence.

    >>> gross_sets_threshold(1000), gross_sets_threshold(6)
    (5, 4)
    """
    if n < 1:
        return 1
    p = 1.0 / n
    tail, k = 1.0, 0
    while tail > 1.0 - confidence and k < n:
        tail -= math.comb(n, k) * p**k * (1.0 - p) ** (n - k)
        k += 1
    return max(k, 1)


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
    "paired as |fused| - |eager|; and, where fused's own code computes the whole chain, per set the share of judged "
    "elements (each chain's magnitude floor) fused does not hold as the correctly rounded fp64 result, paired with "
    "the share the chain computed in fp32 and rounded once misses",
    decision=(
        f"contradicted when any set has a non-finite fused output where eager's is finite; when the gross sets reach "
        f"the binomial threshold (5 of 1000); or when, after one Holm adjustment over every test of every judged row "
        f"(family-wise confidence {CONFIDENCE:g}), the bootstrap test rejects 'P99(fused) - P99(eager) <= "
        f"{MATERIALITY_SULP:g}', the exact sign test finds fused's per-set bias larger in size than eager's with a "
        f"mean excess of at least {BIAS_MARGIN_SULP:g} sULP, or the exact sign test rejects 'the median set's excess of wrongly "
        f"rounded elements over the fp32 single rounding is at most the margin' (0.2% of elements in fp16, 0.02% in "
        f"bf16); supported when the row has at least {MIN_SETS_FOR_SUPPORTED} sets, the one-sided {CONFIDENCE:g} upper "
        f"bound of the P99 difference is at most {MATERIALITY_SULP:g}, the mean bias excess is under "
        f"{BIAS_MARGIN_SULP:g} sULP, the median element excess is within its margin and no set is gross; "
        f"inconclusive otherwise"
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
    "judged per element in absolute terms: it keeps intermediates in fp32 and rounds once, so it should round as "
    "often correctly as the same chain computed in fp32 and rounded once, up to the tie flips two fp32 computations "
    "can cause (the margin). A fault in a few sets in a thousand moves no quantile, so a set beyond twice eager's "
    "worst is counted on its own. Pairing removes the input-to-input variation; one Holm family over every test "
    "keeps the healthy backend's chance of any false 'contradicted' across the whole table at most 1 - confidence.",
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
                pl.col("fused_bias_difference").round(4).alias("bias excess (sULP)"),
                pl.col("fused_bias_p_holm").round(4).alias("bias Holm p"),
            ]
            if "fused_bias_difference" in summary.columns  # a summary stored before the bias test has none
            else []
        ),
        *(
            [
                pl.col("fused_gross_sets").alias("gross sets"),
                (pl.col("fused_wrongly_rounded_share") * 100).round(3).alias("wrongly rounded %"),
                (pl.col("fused_single_rounding_share") * 100).round(3).alias("fp32 single rounding %"),
                (pl.col("fused_element_excess") * 100).round(3).alias("median excess %"),
                pl.col("fused_element_p_holm").round(4).alias("element Holm p"),
            ]
            if "fused_element_excess" in summary.columns  # a summary stored before the per-element rule has none
            else []
        ),
        pl.col("fused_verdict").alias("verdict"),
        pl.col("emulate_verdict").alias("emulate verdict"),
    )
