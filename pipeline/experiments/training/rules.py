"""E's decision rule, fixed before any run: its parameters, the rule as stated in the claim's metadata,
and the columns of a judged eval point. Read by the assets (:mod:`.assets`, :mod:`.judge`) and the
report (:mod:`.report`); no asset code here."""

from ...verdicts import Rule

#: Data orders. Each trains three runs from the same initial weights: eager, fused, and the one-ULP
#: control (eager with every initial weight nudged one ULP). The eager runs double as the data-order
#: replicates whose spread sets the margin. "A" is the plain eager / fused pair.
REPLICATE_ORDERS = ("A", "B", "C", "D", "E")
#: Fewest data orders for "supported" (the plan's K >= 5 pairs); "contradicted" needs at least 3.
MIN_ORDERS = 5
MIN_ORDERS_TO_CONTRADICT = 3
#: Metrics judged on every curve: held-out loss, training loss and gradient norm.
JUDGED_METRICS = ("eval_loss", "train_loss", "grad_norm")
#: Statistics of one paired difference curve (fused - eager on the same data order, judged eval points):
#: ``final`` the last point, ``area`` the mean over the judged points, ``drift`` the least-squares slope
#: times the judged span (how far the difference travels from the first judged point to the last).
STATISTICS = ("final", "area", "drift")
#: The margin of each test: this many data-order standard deviations of the eager runs' same statistic
#: (for drift, of the final value). A fused deviation smaller than what reshuffling the data does is not
#: material; one larger is, whatever its sign.
MARGIN_ORDER_SDS = 1.0
#: Family-wise confidence of "contradicted" (Holm over every metric x statistic) and the level of each
#: one-sided test of the equivalence (TOST; an intersection-union test needs no adjustment).
CONFIDENCE = 0.95
#: Fewest judged eval points (the drift slope needs a few).
MIN_POINTS = 4
#: Effects of the power table, in data-order standard deviations of the final eval loss.
POWER_EFFECTS = (1.0, 2.0, 3.0)
POWER_DRAWS = 20_000


#: The columns of one judged eval point, as the claim's metadata and the report's table show them.
EVAL_POINT_COLUMNS = (
    "step",
    "replicate_min",
    "replicate_max",
    "replicate_spread",
    "eager",
    "fused",
    "control",
    "fused_minus_eager",
    "paired_mean_diff",
    "paired_sd_diff",
    "control_mean_diff",
)

RULE = Rule(
    claim="Fused training learns what eager learns: on the same data orders and initial weights, its eval loss, "
    "training loss and gradient norm stay within the variation that reshuffling the data causes (main document "
    "§3.2; a deviation feeds §6.1)",
    metric=f"per data order (K = {len(REPLICATE_ORDERS)}), the paired difference fused - eager of each of "
    f"{', '.join(JUDGED_METRICS)} at the judged eval points (after step 0); statistics: final value, mean over the "
    "points (curve area) and drift (least-squares slope times the span); margin: "
    f"{MARGIN_ORDER_SDS:g} standard deviation over data orders of the eager runs' same statistic",
    decision=(
        f"contradicted if fused is non-finite where eager is finite, or if for any metric x statistic the t test "
        f"of the {len(REPLICATE_ORDERS)} paired differences rejects '|mean| <= margin' after Holm's adjustment over "
        f"the {len(JUDGED_METRICS) * len(STATISTICS)} tests (family-wise confidence {CONFIDENCE:g}); supported if "
        f"every one is equivalent within +-margin (two one-sided t tests, each at {1 - CONFIDENCE:g}) with at least "
        f"{MIN_ORDERS} data orders and {MIN_POINTS} judged points; inconclusive otherwise (too few orders or points, "
        "a margin of zero, or neither)"
    ),
    threshold=MARGIN_ORDER_SDS,
    unit="data-order standard deviations of the eager runs' statistic",
    confidence=CONFIDENCE,
    sample_size=f"{len(REPLICATE_ORDERS)} data orders x (eager, fused, one-ULP control) x every eval point after "
    "step 0 (steps / eval_every)",
    derivation=(
        "Fused trains on the same data order from the same initial weights as its eager partner, so their difference "
        "removes the data-order variation the two share: what is left is the numerics of fusion plus the chaotic "
        "growth of any rounding difference. The margin comes from the variation fusion must be compared with, the "
        "spread over data orders of the eager runs, so the claim's scale is set by the experiment and not by the "
        "tester. The equivalence test makes 'supported' a statement with error control (a curve can be inside a "
        "band by luck only with probability at most 1 - confidence); Holm over the metric x statistic tests keeps "
        "a healthy fused path's chance of a false 'contradicted' at most 1 - confidence. The one-ULP controls are "
        "the rank null of a pure rounding perturbation: the finding compares |fused - eager| with |control - eager| "
        "by an exact rank test. The report's power table simulates the rule with the measured paired noise."
    ),
)
