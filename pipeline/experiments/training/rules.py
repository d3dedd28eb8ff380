"""E's decision rule, fixed before any run: its parameters, the rule as stated in the claim's metadata,
and the columns of a judged eval point. Read by the assets (:mod:`.assets`, :mod:`.judge`) and the
report (:mod:`.report`); no asset code here."""

from ...verdicts import Rule

#: Data orders. Each trains three runs from the same initial weights: eager, fused, and the one-ULP
#: control (eager with every initial weight nudged one ULP). "A" is the plain eager / fused pair. The
#: eager runs' spread over orders is reported beside the verdict for scale; it does not set the margin.
REPLICATE_ORDERS = ("A", "B", "C", "D", "E")
#: Fewest data orders for "supported" (the plan's K >= 5 pairs); "contradicted" needs at least 3.
MIN_ORDERS = 5
MIN_ORDERS_TO_CONTRADICT = 3
#: Metrics judged on every curve: held-out loss, training loss and gradient norm.
JUDGED_METRICS = ("eval_loss", "train_loss", "grad_norm")
#: Metrics whose paired difference is taken relative to eager (``fused / eager - 1``); the others are
#: compared as ``fused - eager`` in their own unit (nats for the losses).
RELATIVE_METRICS = ("grad_norm",)
#: Statistics of one paired difference curve (fused - eager on the same data order, judged eval points):
#: ``final`` the last point, ``area`` the mean over the judged points, ``drift`` the least-squares slope
#: times the judged span (how far the difference travels from the first judged point to the last).
STATISTICS = ("final", "area", "drift")

#: Pre-registered materiality margin of each metric, the same for its three statistics. Chosen from what
#: a change means for the model, never from a run's own spread:
#:
#: * losses, 0.01 nats: exp(0.01) = 1.010, a 1 % change of perplexity on the same data and weights.
#:   A systematic change of that size is one a user comparing two checkpoints would notice; anything
#:   smaller changes no decision made on the model.
#: * gradient norm, 5 % relative: the norm is a symptom of the backward pass rather than an outcome
#:   (Adam normalizes the step per parameter and the norm is clipped at 1), so the margin is looser than
#:   the loss's 1 %; a systematic 5 % change of the pre-clip norm means the backward numerics moved
#:   enough to change when clipping acts.
MARGINS = {"eval_loss": 0.01, "train_loss": 0.01, "grad_norm": 0.05}
MARGIN_UNITS = {"eval_loss": "nats", "train_loss": "nats", "grad_norm": "relative to eager"}
#: Family-wise confidence of "contradicted" (Holm over every metric x statistic) and the level of each
#: one-sided test of the equivalence (TOST; an intersection-union test needs no adjustment).
CONFIDENCE = 0.95
#: Fewest judged eval points (the drift slope needs a few).
MIN_POINTS = 4

#: The rule's simulated error rates (:func:`.error_rates.rule_error_rates`), computed by the claim check and
#: stored with it. Effects on the eval loss in margins (below 1: immaterial, a "contradicted" there is a
#: false alarm; 1 and above: material), as a constant shift and as a drift growing from 0.
POWER_EFFECTS = (0.0, 0.5, 1.0, 1.5, 2.0)
#: Paired noise levels simulated besides the run's own: sd of one order's fused - eager statistic, in
#: margins (they show the rule at noise comparable to the margin, whatever a given run measured).
POWER_NOISE_IN_MARGINS = (0.25, 0.5)
#: Draws per simulated rate: a rate near :data:`MAX_ERROR_RATE` (0.05) then has a binomial standard
#: error of sqrt(0.05 * 0.95 / 20000) = 0.0015, at most 0.0035 for any rate.
POWER_DRAWS = 20_000
POWER_SEED = 20_240_601
#: The effects the judge is run on to measure its error rates (:func:`.error_rates.measured_error_rates`), in margins of
#: the eval loss: below 1 a "contradicted" is a false alarm (0.99 is the worst case, just below the margin), at 1
#: and beyond a "supported" is one, and the sizes above show the power.
MEASURED_EFFECTS = (
    ("shift", 0.0),
    ("shift", 0.5),
    ("shift", 0.9),
    ("shift", 0.99),
    ("shift", 1.0),
    ("shift", 1.5),
    ("shift", 2.0),
    ("shift", 3.0),
    ("drift", 0.5),
    ("drift", 0.99),
    ("drift", 1.0),
    ("drift", 1.5),
    ("drift", 2.0),
    ("drift", 3.0),
)
#: Simulated runs per effect of the declared table (stored in ``power.json``; a rate's Monte-Carlo sd is
#: at most 0.5 / sqrt(500) = 0.022) and of the claim check's run at this run's noise (fewer: it runs each time).
MEASURED_DRAWS = 500
MEASURED_DRAWS_THIS_RUN = 60
#: The effect the plan sizes E for, in margins of the eval loss: the page's power figure was at 1.5 margins, and
#: the claim's own table (measured at this run's noise) includes it.
PLAN_EFFECT_IN_MARGINS = 1.5
#: Judged eval points of the simulated runs of the declared table (the default profile: 150 steps, every 15).
MEASURED_POINTS = 10

#: Largest acceptable simulated false-alarm rate ("contradicted" for an effect below the margin) and
#: rate of "supported" for an effect at or beyond it.
MAX_ERROR_RATE = 1.0 - CONFIDENCE


def margin_text() -> str:
    """The margins as one phrase, e.g. ``eval_loss 0.01 nats, ...``."""
    return ", ".join(f"{m} {MARGINS[m]:g} {MARGIN_UNITS[m]}" for m in JUDGED_METRICS)


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
    "training loss and gradient norm stay within a margin fixed before the runs (main document §3.2; a deviation "
    "feeds §6.1)",
    metric=f"per data order (K = {len(REPLICATE_ORDERS)}), the paired difference fused - eager of each of "
    f"{', '.join(JUDGED_METRICS)} at the judged eval points (after step 0; "
    f"{', '.join(RELATIVE_METRICS)} relative to eager); statistics: final value, mean over the points (curve area) "
    f"and drift (least-squares slope times the span); margins: {margin_text()}; the one-ULP controls' "
    "control - eager, taken the same way, are the reference of pure rounding noise",
    decision=(
        f"contradicted if fused is non-finite where eager is finite, or if for any metric x statistic the t test "
        f"of the paired differences (sd estimated from them, {len(REPLICATE_ORDERS) - 1} degrees of freedom) rejects "
        f"'|mean| <= margin' after Holm's adjustment over the {len(JUDGED_METRICS) * len(STATISTICS)} tests "
        f"(family-wise confidence {CONFIDENCE:g}; at least {MIN_ORDERS_TO_CONTRADICT} data orders); supported if "
        f"every one is equivalent within +-margin (two one-sided t tests, each at {1 - CONFIDENCE:g}) and so is "
        f"every test of the one-ULP controls, with at least {MIN_ORDERS} data orders and {MIN_POINTS} judged points; "
        "inconclusive otherwise (too few orders or points, a fused test neither beyond nor within, or one-ULP "
        "controls missing or not shown within the margin, as when rounding alone moves training by about it)"
    ),
    threshold=f"{MARGINS['eval_loss']:g} nats (losses), {MARGINS['grad_norm']:g} relative (grad norm)",
    unit="nats of loss; grad norm relative to eager",
    confidence=CONFIDENCE,
    sample_size=f"{len(REPLICATE_ORDERS)} data orders x (eager, fused, one-ULP control) x every eval point after "
    "step 0 (steps / eval_every)",
    derivation=(
        "Fused trains on the same data order from the same initial weights as its eager partner, so their difference "
        "removes the data-order variation the two share: what is left is the numerics of fusion plus the chaotic "
        "growth of any rounding difference. Materiality is an absolute margin declared before the runs (0.01 nats is "
        "a 1 % change of perplexity; the gradient norm, a symptom rather than an outcome, gets 5 %), so the claim "
        "does not move with a spread estimated from a handful of runs. The paired differences' own sd, with its "
        "degrees of freedom, is the noise of each t test: 'contradicted' for a true effect inside the margin has "
        "probability at most 1 - confidence (Holm over the metric x statistic family), and 'supported' for one at or "
        "beyond it at most 1 - confidence (an intersection of two one-sided tests per statistic). The one-ULP "
        "controls measure what rounding alone does to training: they must be shown within the margin too, else the "
        "margin is finer than rounding noise and nothing can be supported; the finding compares |fused - eager| with "
        "|control - eager| by an exact rank test. Those levels hold under a normal model of the statistics; the "
        "rule's error rates are instead measured by running the judge on simulated runs (normal and heavy-tailed "
        "paired noise, a shift or a drift planted on the eval loss, false alarms up to 0.99 margins), at this run's "
        "noise and at declared noise levels (power.json), and shown on the page; a supported verdict whose test "
        "detects only effects above the margin with 80% power says so."
    ),
)
