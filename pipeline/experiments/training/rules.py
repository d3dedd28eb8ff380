"""E's decision rule, fixed before any run: its parameters, the rule as stated in the claim's metadata,
and the columns of a judged eval point. Read by the assets (:mod:`.assets`, :mod:`.judge`) and the
report (:mod:`.report`); no asset code here."""

from ...verdicts import Rule

#: Data orders of the eager replicates; "A" is also fused's and the control's order.
REPLICATE_ORDERS = ("A", "B", "C", "D")
#: The envelope [min, max] over replicates is widened by this many replicate spreads on each side.
ENVELOPE_WIDENING = 2.0
#: Contradicted when fused is outside the widened envelope at more than this fraction of judged points.
MAX_OUTSIDE_FRACTION = 0.5
#: ... or when |fused - eager| of the final eval loss exceeds this many final replicate spreads.
FINAL_SPREAD_MULTIPLE = 3.0
#: Fewest judged eval points: "more than half" of 4 is 3, so one or two transient excursions never
#: decide on their own (and 4 is what the smoke profile has: 20 steps / eval every 5).
MIN_POINTS = 4
#: Per-point and final-point false-contradiction probabilities under the least favourable null (fused
#: an independent replicate, replicate values iid normal; Monte Carlo, 4e6 draws, R = 4); see RULE.
PER_POINT_FALSE_ALARM = 0.0158
FINAL_FALSE_ALARM = 0.0104
#: Finding: fused's RMS deviation from eager exceeds this multiple of the control's.
CONTROL_FACTOR = 3.0


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
    "control_minus_eager",
    "outside_envelope",
)

RULE = Rule(
    claim="Fused training learns what eager learns: its eval-loss curve stays within the run-to-run variation of "
    "eager replicates that differ only in data order (main document §3.2; a deviation feeds §6.1)",
    metric="eval loss (mean next-byte cross-entropy on fixed eval windows) at every eval step after step 0; "
    "envelope = [min, max] over the eager replicates, spread s = max - min",
    decision=(
        f"contradicted if fused lies outside [min - {ENVELOPE_WIDENING:g}s, max + {ENVELOPE_WIDENING:g}s] at more "
        f"than {MAX_OUTSIDE_FRACTION:.0%} of the judged eval points, or if |fused - eager| of the final eval loss "
        f"exceeds {FINAL_SPREAD_MULTIPLE:g}x the final spread; inconclusive if fewer than {len(REPLICATE_ORDERS)} "
        f"replicates or {MIN_POINTS} judged points, or if the spread is zero or undefined at any judged point; "
        "supported otherwise"
    ),
    threshold=ENVELOPE_WIDENING,
    unit="replicate spreads (max - min over replicates at the same eval step) beyond the envelope",
    confidence=0.95,
    sample_size=f"{len(REPLICATE_ORDERS)} replicates x every eval point after step 0 (steps / eval_every: "
    "4 in smoke, 20 in default), plus fused and eager on the same points",
    derivation=(
        "Least favourable null: fused behaves like one more independent replicate (as far from eager as a new data "
        "order, the most 'normal fluctuation' allows); replicate values at a step iid normal. Monte Carlo (4e6 draws, "
        f"R = {len(REPLICATE_ORDERS)}): P(outside the envelope widened by {ENVELOPE_WIDENING:g}s) = "
        f"{PER_POINT_FALSE_ALARM}, P(|fused - eager| > {FINAL_SPREAD_MULTIPLE:g}s) = {FINAL_FALSE_ALARM}. Eval points "
        "of one run are correlated, so the point count is not binomial; Markov's inequality holds for any "
        f"correlation: P(outside fraction > {MAX_OUTSIDE_FRACTION:g}) <= {PER_POINT_FALSE_ALARM}/"
        f"{MAX_OUTSIDE_FRACTION:g} = {PER_POINT_FALSE_ALARM / MAX_OUTSIDE_FRACTION:.4f}. Union with the final-point "
        f"test: false contradiction <= {PER_POINT_FALSE_ALARM / MAX_OUTSIDE_FRACTION + FINAL_FALSE_ALARM:.3f} < 0.05. "
        f"Step 0 is not judged (no training yet: all replicates share the init, spread 0). At least {MIN_POINTS} "
        "points, so that 'more than half' takes at least 3 of them. Fused shares eager's data order, so under a true null it is "
        "closer than that; smaller numerics effects are the control finding's job."
    ),
)
