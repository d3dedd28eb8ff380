"""Regression: the decision rules of the baseline comparison and of the planted-bug matrix, and the
words and labels their tables and the report page share.

Read by the assets (:mod:`.drift`, :mod:`.matrix`), the harness and the report; no asset code here.
"""

from ...verdicts import Rule

# --- baseline comparison ---------------------------------------------------------------------

#: Bootstrap resamples for a distribution's noise tolerance, and the quantile of the resampled
#: differences used (see :func:`.comparators.bootstrap_tolerance`).
BOOTSTRAP_RESAMPLES = 400
BOOTSTRAP_QUANTILE = 0.99

BASELINE_RULE = Rule(
    claim="numerics unchanged against the promoted baseline of the same profile",
    metric="per compared item (bit-exact outputs and tables: md5s, bit_equal, ulp_max, C1-C3 tables; B's per-set "
    "ULP statistics per chain x dtype x path; E's final eval loss): a move the worse way beyond the item's tolerance",
    decision="contradicted when any compared item moved the worse way beyond its tolerance; supported when a baseline "
    "is promoted, at least one item was compared and none moved the worse way; inconclusive when no baseline is "
    "promoted or nothing could be compared. Improvements and generated-code changes are findings.",
    threshold="per item: 0 for bit-exact items; B: bootstrap quantile of |difference| between two resamples of the "
    "baseline's sets; E: the noise band between its two data orders",
    unit="the item's own unit (hash, ULP, loss)",
    confidence=BOOTSTRAP_QUANTILE,
    sample_size=f"every item of every experiment in both the baseline and the current tables; B: every input set of "
    f"the profile, {BOOTSTRAP_RESAMPLES} bootstrap pairs per statistic",
    derivation="For a fixed seed, code and device the bit-exact items are deterministic, so any change is a change; "
    "B's statistics vary between input draws, so their tolerance is measured from the baseline's own sets (its "
    "quantile is the confidence above); E's tolerance is the spread its own data-order control shows.",
)

# --- planted-bug matrix ----------------------------------------------------------------------

#: Healthy runs need at least this many base seeds for "no false alarm" to be supported.
MIN_HEALTHY_SEEDS = 3
#: Values of the matrix table's ``row`` column: a planted bug's run, a healthy run at one base seed.
BUG_ROW, HEALTHY_ROW = "planted bug", "healthy seed"

SCORING = (
    "a bug is caught when its run has at least one ERROR outcome (claim contradicted, validity check failed, "
    "step failed) that the healthy run at the same base seed does not have; WARN findings and inconclusive "
    "verdicts never count. A healthy run's ERROR outcomes are false alarms."
)

MUTATION_RULE = Rule(
    claim="the harness catches every planted bug at ERROR, by the claim built to catch it",
    metric="per bug run: ERROR outcomes that the healthy run at the same base seed does not have (a claim "
    "verdict contradicted, a validity check failed, a step failed, e.g. FusionError for missing fusion "
    "evidence), among them the one of the claim designed for the bug (Experiment.planted); "
    "WARN findings and inconclusive verdicts are not counted",
    decision="contradicted when any bug run has no such ERROR outcome of its designed claim (a catch only by "
    "another experiment is scored 'not by its claim': that claim lacks the power it is credited with); supported "
    "when every bug run has one; inconclusive when no bug ran",
    threshold=1.0,
    unit="ERROR outcomes per bug run, beyond the healthy run's",
    confidence=None,
    sample_size="one run per planted bug (every bug of pipeline.instruments.regression.planted_bugs unless configured or limited by the "
    "profile's planted_bugs: smoke runs one bug per way of being caught), at the first healthy base seed",
    derivation="A planted bug is a known wrong result: a harness that lets it through with only WARN findings or "
    "inconclusive verdicts would let the same real fault through (DESIGN principle 6: planted faults must flip a "
    "verdict at ERROR). Outcomes the healthy run already has are subtracted so a standing failure is not credited.",
)

FALSE_ALARM_RULE = Rule(
    claim="the healthy backend raises no ERROR outcome, over several base seeds",
    metric="per healthy run: ERROR outcomes (claim verdicts contradicted, validity checks failed, steps failed)",
    decision=f"contradicted when any healthy run has an ERROR outcome; supported when at least {MIN_HEALTHY_SEEDS} "
    f"base seeds ran and none has one; inconclusive with fewer than {MIN_HEALTHY_SEEDS} seeds",
    threshold=0.0,
    unit="ERROR outcomes per healthy run",
    confidence=None,
    sample_size=f">= {MIN_HEALTHY_SEEDS} base seeds (the run's seed and the next ones unless configured), one healthy "
    "run each",
    derivation="Every experiment's rule is built so the healthy backend does not reach ERROR (derived bounds, "
    "Holm-adjusted tests, bit-exactness where the plan promises it); inputs drawn from other seeds expose a rule "
    "that only holds for one draw. A single ERROR here is a defect of the harness, not noise.",
)
