"""C2's checks: the run's validity, the seed's claims (self-determinism; every row within its
derived bound, for the fp32-accumulation family and for fp16-stored partials; the framework's own
versions no less accurate than eager in the fp16 result, by a paired sign test) and the findings,
each declared with its outcome kind (:mod:`pipeline.verdicts`), with the decision helpers behind them.
"""

from typing import Any

import dagster as dg
import polars as pl

from precisionkit.decide import holm, poisson_two_sided, sign_test_counts

from ...scalars import as_float, as_int
from ...tables import markdown_table
from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    Rule,
    claim_check,
    claim_result,
    finding_check,
    finding_result,
    validity_check,
    validity_result,
)
from .accuracy import ACCURACY_ALPHA, ACCURACY_RULE, judge_accuracy_vs_eager
from .bounds import BAND_WORDS, LAMBDA, PROB_CONFIDENCE
from .versions import COMPILER_FAMILIES, FP16_PARTIALS_FAMILY, PARTIALS, SEED_FAMILIES, TILES

# --- decision helpers (plain functions, unit-tested) ----------------------------------------------


def judge_bounds(bounds: pl.DataFrame, families: tuple[str, ...]) -> tuple[str, str, dict[str, Any]]:
    """The "within the derived bound" rule on the rows of ``families``: contradicted when any row's
    margin (error / deterministic bound) exceeds 1 or is not finite, supported when every row is
    within, inconclusive when the families have no rows."""
    fam = bounds.filter(pl.col("family").is_in(list(families)))
    if fam.height == 0:
        return INCONCLUSIVE, f"no rows for {', '.join(families)}", {"rows_judged": 0}
    margin = fam["margin"].fill_nan(float("inf")).fill_null(float("inf"))
    fam = fam.with_columns(
        margin.alias("_m"), fam["margin_prob"].fill_nan(float("inf")).fill_null(float("inf")).alias("_mp")
    )
    above = fam.filter(pl.col("_m") > 1.0)
    above_prob = fam.filter(pl.col("_mp") > 1.0)
    per_version = fam.group_by("version", "output", maintain_order=True).agg(
        pl.col("_m").max().alias("margin_max"), (pl.col("_m") > 1.0).sum().alias("rows_above")
    )
    worst = fam.sort("_m", descending=True).head(5)
    meta: dict[str, Any] = {
        "rows_judged": fam.height,
        "versions_judged": fam["version"].n_unique(),
        "rows_above_bound": above.height,
        "margin_max": as_float(fam["_m"].max(), "margin_max"),
        "margin_prob_max": as_float(fam["_mp"].max(), "margin_prob_max"),
        "rows_above_probabilistic_bound": above_prob.height,
        "lambda": float(fam["lambda"][0]),
        "margin_max_out16": as_float(fam.filter(pl.col("output") == "out16")["_m"].max() or 0.0, "out16 margin_max"),
        "margin_max_acc32": as_float(fam.filter(pl.col("output") == "acc32")["_m"].max() or 0.0, "acc32 margin_max"),
        "per_version": dg.MetadataValue.md(markdown_table(per_version)),
        "worst_rows": dg.MetadataValue.md(
            markdown_table(worst.select("version", "output", "row", "abs_ref", "abs_sum", "error", "bound", "margin"))
        ),
    }
    if above.height:
        w = above.sort("_m", descending=True).row(0, named=True)
        return (
            CONTRADICTED,
            (
                f"{above.height} of {fam.height} rows exceed their deterministic bound; worst {w['version']}/{w['output']} "
                f"row {w['row']}: |error| {w['error']:.4g} > bound {w['bound']:.4g} (margin {w['_m']:.3g})"
            ),
            meta,
        )
    if above_prob.height:
        w = above_prob.sort("_mp", descending=True).row(0, named=True)
        return (
            CONTRADICTED,
            (
                f"{above_prob.height} of {fam.height} rows exceed the probabilistic bound (lambda "
                f"{meta['lambda']:.3g}, all rows together at confidence {PROB_CONFIDENCE:g}); worst "
                f"{w['version']}/{w['output']} row {w['row']}: |error| {w['error']:.4g} > {w['bound_prob']:.4g} "
                f"(margin {w['_mp']:.3g}; deterministic margin {w['_m']:.3g})"
            ),
            meta,
        )
    return (
        SUPPORTED,
        (
            f"all {fam.height} rows within their deterministic bound (largest margin {meta['margin_max']:.3g}) "
            f"and their probabilistic bound (largest margin {meta['margin_prob_max']:.3g})"
        ),
        meta,
    )


# --- checks -----------------------------------------------------------------------------------

_BOUND_DERIVATION = (
    "Higham, Accuracy and Stability of Numerical Algorithms, ch. 3-4: the worst-case forward error of the "
    "version's summation order from the row's own sum|x| (and sum|p_j| for stored partials); see "
    "c2_row_bounds.bound_formula. " + BAND_WORDS
)

_BOUND_DERIVATION += (
    " Probabilistic part: Higham & Mary 2019, lambda = sqrt(2 ln(2 R N / (1 - confidence))) for R "
    "rows of N terms (a union bound over every rounding of every row)."
)
_BOUND_DECISION = (
    "contradicted if any row's error exceeds its deterministic bound (impossible for any correct "
    "implementation of that order and precision), or exceeds its probabilistic bound (the seed's 'random "
    "error range'; lambda chosen so that all judged rows hold together at the stated confidence); "
    "supported if every row is within both; inconclusive if the family has no rows"
)

SEED_RULE = Rule(
    claim="Every C2 version with fp32 accumulation (eager, fused default, each Inductor knob, each framework-tiled version, "
    "hand-written tilings 512/1024/2048 with fp32 partials) falls within the rounding-error range of the fp64 baseline "
    "on every row",
    metric="margin = |result - fp64 sum| / B, B the deterministic error bound derived for the row, the version's "
    "summation order and the output (fp16 result and fp32 accumulator)",
    decision=_BOUND_DECISION,
    threshold=1.0,
    unit="margin (error / derived bound)",
    confidence=PROB_CONFIDENCE,
    sample_size="(1 + pool_rows) rows x every version of the family x 2 outputs",
    derivation=_BOUND_DERIVATION,
)

FP16_PARTIALS_RULE = Rule(
    claim="The tilings with fp16-stored partials (512/1024/2048) fall within their own rounding-error range of the "
    "fp64 baseline on every row (the bound includes one fp16 rounding per stored partial)",
    metric="margin = |result - fp64 sum| / B, B the deterministic bound of fp32 tile sums, fp16-stored partials and an "
    "fp32 sum of the partials (fp16 result and fp32 accumulator)",
    decision=_BOUND_DECISION,
    threshold=1.0,
    unit="margin (error / derived bound)",
    confidence=PROB_CONFIDENCE,
    sample_size="(1 + pool_rows) rows x 3 tilings x 2 outputs",
    derivation=_BOUND_DERIVATION,
)

LONG_RULE = Rule(
    claim="Long fp32 reductions (2^24 terms in the default profile, 2^27 in the seed's) by eager, the fused default "
    "(every thread) and the fused path on one thread fall within the rounding-error range of the fp64 sum on every "
    "row, for symmetric and for non-negative terms",
    metric="margin = |result - fp64 sum| / B, B the probabilistic bound gamma~_(n-1)(lambda) * sum|x| of an fp32 sum "
    "of n terms in any order (the deterministic gamma_(n-1) is undefined once (n-1) u32 >= 1 and is reported as inf)",
    decision=_BOUND_DECISION,
    threshold=1.0,
    unit="margin (error / derived bound)",
    confidence=PROB_CONFIDENCE,
    sample_size="long_rows x 2 distributions x 3 versions",
    derivation=_BOUND_DERIVATION,
)

ORDER_RULE = Rule(
    claim="§1.2 (3), the plan's thesis: changing the reduction's tiling (order of the additions) changes the last "
    "bits, seen in the fp32 accumulator, where an order effect is not hidden by the final fp16 rounding; judged on "
    "the orders the framework produces (eager, the fused default, each Inductor knob and framework tiling setting)",
    metric="pairs of framework-produced versions (families compiler and framework_tiled; the harness's hand-written "
    "tilings are excluded and shown by the c2_tilings_differ finding) whose fp32 accumulators differ on at least one "
    "row (c2_ulp_matrix, acc32)",
    decision="contradicted if every pair of framework-produced versions is bit-identical in the fp32 accumulator on "
    "every row (no setting of the framework changes the order); supported if at least one pair differs; inconclusive "
    "if fewer than two such versions ran",
    threshold=0,
    unit="pairs of framework-produced versions whose fp32 accumulators differ",
    confidence=None,
    sample_size="(1 + pool_rows) rows x every pair of the compiler and framework_tiled versions",
    derivation="reordering additions of fp32 values changes the rounded partial sums unless every partial is exact; "
    "with 16,384 fp16 terms of U(-1, 1) per row that is practically impossible, so framework versions that never "
    "differ in the accumulator do not reorder anything. The hand-written tilings are left out because the harness "
    "writes their order itself: a pair that includes one differs whatever the framework does, so counting it would "
    "make the thesis unfalsifiable. A deterministic statement: threshold 0",
)

DETERMINISM_RULE = Rule(
    claim="Each C2 version's repeated runs on the same input are bit-identical (fp16 result and fp32 accumulator)",
    metric="distinct bit patterns among the repeated runs (spec.py) of the seed input, minus one, per version and output",
    decision="contradicted if any version has a run whose bits differ from its first run; supported otherwise",
    threshold=0.0,
    unit="differing runs",
    confidence=None,
    sample_size="the profile's runs of the seed input x every version (profile: 1000 full, 200 default, 5 smoke)",
    derivation="the seed's step 2 (bit_equal over repeated runs): determinism is exact, so no tolerance",
)


@validity_check(
    asset="c2_versions",
    description="C2 run validity: every planned version ran (eager, fused default, the device's Inductor knobs, three tiles x "
    "two partial dtypes); no version produced a non-finite output. That each fused version fused is the generated "
    "check c2_versions_shows_fusion.",
)
def c2_run_valid(c2_versions: pl.DataFrame) -> dg.AssetCheckResult:
    problems = []
    names = set(c2_versions["version"].to_list())
    planned = {"eager", "fused_default", *(f"tile{t}_{p}_partials" for t in TILES for p in PARTIALS)}
    missing = sorted(planned - names)
    if missing:
        problems.append(f"versions missing: {', '.join(missing)}")
    for r in c2_versions.iter_rows(named=True):
        if r["nonfinite_outputs"]:
            problems.append(f"{r['version']}: {r['nonfinite_outputs']} non-finite output(s)")
    fused_versions = c2_versions.filter(pl.col("mode") == "fused")
    return validity_result(
        problems,
        {
            "versions": c2_versions.height,
            "fused_versions": fused_versions.height,
            "knob_versions": fused_versions.height - int("fused_default" in names),
        },
    )


@claim_check(
    rule=DETERMINISM_RULE,
    asset="c2_versions",
    description="Seed C2 step 2: every version's repeated runs are bit-identical (fp16 result and fp32 accumulator).",
)
def c2_versions_self_deterministic(c2_versions: pl.DataFrame) -> dg.AssetCheckResult:
    bad = c2_versions.filter(~pl.col("self_deterministic"))
    runs = int(c2_versions["runs"][0])
    meta = {
        "versions": c2_versions.height,
        "runs_per_version": runs,
        "nondeterministic": ", ".join(
            f"{r['version']} ({r['unique_out16']} distinct fp16 / {r['unique_acc32']} distinct fp32 results)"
            for r in bad.iter_rows(named=True)
        )
        or "none",
    }
    if bad.height:
        return claim_result(
            CONTRADICTED,
            DETERMINISM_RULE,
            f"{bad.height} of {c2_versions.height} versions gave differing bits over {runs} runs",
            meta,
        )
    return claim_result(
        SUPPORTED, DETERMINISM_RULE, f"all {c2_versions.height} versions bit-identical over {runs} runs", meta
    )


@claim_check(
    rule=SEED_RULE,
    asset="c2_row_bounds",
    description="Seed C2 claim, on the seed's family (fp32 accumulation: eager, Inductor default and knobs, framework-tiled "
    "versions, hand-written tilings with fp32 partials): every row's error against fp64 is within the deterministic bound derived for that row and that version's "
    "summation order (not a tolerance-matrix band).",
)
def c2_versions_within_fp64_band(c2_row_bounds: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_bounds(c2_row_bounds, SEED_FAMILIES)
    return claim_result(verdict, SEED_RULE, reason, meta)


@claim_check(
    rule=FP16_PARTIALS_RULE,
    asset="c2_row_bounds",
    description="C2, fp16-stored partials (not the seed's configuration): every row within the family's own deterministic "
    "bound, which adds one fp16 rounding per stored partial. Exceeding it would contradict 'within the error range' for "
    "this family too, since the bound holds for any correct implementation of that order and precision.",
)
def c2_fp16_partials_within_bound(c2_row_bounds: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_bounds(c2_row_bounds, (FP16_PARTIALS_FAMILY,))
    return claim_result(verdict, FP16_PARTIALS_RULE, reason, meta)


@finding_check(
    asset="c2_row_bounds",
    description="C2 finding: per tile, fp16-stored partials against fp32 partials on the same rows (fp16 result): rows where "
    "each is closer to fp64, an exact one-sided sign test, mean |error| and margins. Reported when fp16 partials are "
    "measurably less accurate (sign test p < 0.01); a cost of the storage precision, not an error.",
)
def c2_fp16_partials_less_accurate(c2_row_bounds: pl.DataFrame) -> dg.AssetCheckResult:
    o16 = c2_row_bounds.filter(pl.col("output") == "out16")
    findings, meta = [], {}
    for tile in TILES:
        a = o16.filter(pl.col("version") == f"tile{tile}_fp16_partials").sort("row")
        b = o16.filter(pl.col("version") == f"tile{tile}_fp32_partials").sort("row")
        if a.height == 0 or a.height != b.height:
            raise ValueError(f"c2_row_bounds lacks paired rows for tile {tile}")
        ea, eb = a["error"].to_numpy(), b["error"].to_numpy()
        worse, better = int((ea > eb).sum()), int((ea < eb).sum())
        p = sign_test_counts(worse, better).p_value
        margin16 = as_float(a["margin"].max(), f"tile{tile}_fp16_partials margin_max")
        meta.update(
            {
                f"tile{tile}.fp16_worse_rows": worse,
                f"tile{tile}.fp16_better_rows": better,
                f"tile{tile}.equal_rows": int(a.height - worse - better),
                f"tile{tile}.sign_test_p": p,
                f"tile{tile}.fp16_mean_error": float(ea.mean()),
                f"tile{tile}.fp32_mean_error": float(eb.mean()),
                f"tile{tile}.fp16_margin_max": margin16,
                f"tile{tile}.fp32_margin_max": as_float(b["margin"].max(), f"tile{tile}_fp32_partials margin_max"),
            }
        )
        if p < 0.01:
            findings.append(
                f"tile {tile}: fp16-stored partials farther from fp64 on {worse} rows, closer on {better} (sign test p = {p:.2g}); "
                f"mean |error| {ea.mean():.3g} vs {eb.mean():.3g} with fp32 partials, largest margin {margin16:.3g}"
            )
    return finding_result(findings, meta)


@finding_check(
    asset="c2_ulp_matrix",
    description="Seed C2 expectation 'tilings differ by >= 1 ULP', per partial dtype, over the seed input and the pool. A finding, "
    "not a claim: it is an existence statement with no error budget. An fp16 ULP is 2^13 fp32 ULP, so a reordering's "
    "fp32-accumulator difference shows in the fp16 result only when the accumulator lies within that difference of an "
    "fp16 rounding boundary: whether an fp16 difference shows depends on how many rows are drawn, not on correctness. "
    "Reported when a family's fp16 results never differ, with the measured fp32-accumulator differences (row-pairs, "
    "max fp32 ULP) as the evidence of whether the order changed.",
)
def c2_tilings_differ(c2_ulp_matrix: pl.DataFrame) -> dg.AssetCheckResult:
    meta, findings = {}, []
    for partials in PARTIALS:
        names = [f"tile{t}_{partials}_partials" for t in TILES]
        fam = c2_ulp_matrix.filter(pl.col("version_a").is_in(names) & pl.col("version_b").is_in(names))
        if fam.height == 0:
            raise ValueError(f"c2_ulp_matrix has no pairs for the {partials} tilings")
        o16 = fam.filter(pl.col("output") == "out16")
        a32 = fam.filter(pl.col("output") == "acc32")
        meta[f"{partials}.out16_differ_rows"] = int(o16["differ_rows"].sum())
        meta[f"{partials}.out16_ulp_max"] = as_int(o16["ulp_max"].max(), f"{partials} out16 ulp_max")
        meta[f"{partials}.acc32_differ_rows"] = int(a32["differ_rows"].sum())
        meta[f"{partials}.acc32_ulp_max"] = as_int(a32["ulp_max"].max(), f"{partials} acc32 ulp_max")
        if meta[f"{partials}.out16_differ_rows"] == 0:
            findings.append(
                f"{partials} partials: the three tilings give bit-identical fp16 sums on every row; the order does change the "
                f"fp32 accumulator ({meta[f'{partials}.acc32_differ_rows']} differing row-pairs, max {meta[f'{partials}.acc32_ulp_max']} fp32 ULP), "
                "and those differences vanish in the final rounding"
                if meta[f"{partials}.acc32_differ_rows"]
                else f"{partials} partials: the three tilings agree bit for bit in both the fp16 sum and the fp32 accumulator on every row"
            )
    return finding_result(findings, meta)


@finding_check(
    asset="c2_row_bounds",
    description="C2 finding: every row above its probabilistic bound (Higham & Mary 2019, lambda chosen so that all rows "
    f"hold together with probability >= {PROB_CONFIDENCE:g} under independent, mean-zero rounding errors), in any family, "
    "with its version and output: the rows behind a contradicted 'random error range' claim, listed for a human "
    "(systematic rounding bias shows here first).",
)
def c2_probabilistic_margin(c2_row_bounds: pl.DataFrame) -> dg.AssetCheckResult:
    mp = c2_row_bounds["margin_prob"].fill_nan(float("inf"))
    above = c2_row_bounds.filter(mp > 1.0)
    expected = float((1 - c2_row_bounds["prob_bound_probability"]).sum())
    meta = {
        "lambda": float(c2_row_bounds["lambda"][0]) if c2_row_bounds.height else LAMBDA,
        "rows_judged": c2_row_bounds.height,
        "rows_above": above.height,
        "expected_above_at_most": expected,
        "margin_prob_max": as_float(mp.max(), "margin_prob_max"),
        "min_probability": as_float(c2_row_bounds["prob_bound_probability"].min(), "prob_bound_probability"),
    }
    findings = [
        f"{r['version']}/{r['output']} row {r['row']}: |error| {r['error']:.4g} > probabilistic bound {r['bound_prob']:.4g}"
        for r in above.sort("margin_prob", descending=True).head(10).iter_rows(named=True)
    ]
    if above.height > 10:
        findings.append(f"... {above.height - 10} more")
    return finding_result(findings, meta)


@claim_check(
    rule=LONG_RULE,
    asset="c2_long_reductions",
    description="C2, long reductions: every row of 2^24 fp32 terms (2^27 seed), one thread and many, within the bound "
    "derived for an fp32 sum of that many terms (probabilistic: the deterministic bound is undefined at this length).",
)
def c2_long_reductions_within_bound(c2_long_reductions: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_bounds(c2_long_reductions, ("compiler",))
    threads = c2_long_reductions.filter(pl.col("version") != "fused_one_thread")
    meta["terms"] = int(c2_long_reductions["terms"][0]) if c2_long_reductions.height else 0
    meta["rows_bit_equal_to_eager"] = int(c2_long_reductions["bit_equal_eager"].sum())
    meta["rows_where_thread_count_changes_bits"] = int((~threads["bit_equal_one_thread"].fill_null(True)).sum())
    return claim_result(verdict, LONG_RULE, reason, meta)


def judge_order(matrix: pl.DataFrame, versions: list[str]) -> tuple[str, str, dict[str, Any]]:
    """:data:`ORDER_RULE` on the ULP matrix restricted to ``versions``."""
    acc = matrix.filter(
        (pl.col("output") == "acc32") & pl.col("version_a").is_in(versions) & pl.col("version_b").is_in(versions)
    )
    if acc.height == 0:
        return INCONCLUSIVE, "no fp32-accumulator pairs among the judged versions", {"pairs": 0}
    per_pair = acc.group_by("version_a", "version_b").agg(pl.col("differ_rows").sum(), pl.col("ulp_max").max())
    differing = per_pair.filter(pl.col("differ_rows") > 0)
    meta: dict[str, Any] = {
        "pairs": per_pair.height,
        "pairs_differing": differing.height,
        "acc32_ulp_max": as_int(per_pair["ulp_max"].max(), "acc32 ulp_max"),
    }
    if differing.height == 0:
        return (
            CONTRADICTED,
            f"all {per_pair.height} version pairs have bit-identical fp32 accumulators on every row: no order effect",
            meta,
        )
    w = differing.sort("ulp_max", descending=True).row(0, named=True)
    return (
        SUPPORTED,
        f"{differing.height} of {per_pair.height} version pairs differ in the fp32 accumulator (largest "
        f"{w['ulp_max']} fp32 ULP, {w['version_a']} vs {w['version_b']})",
        meta,
    )


@claim_check(
    rule=ORDER_RULE,
    asset="c2_ulp_matrix",
    additional_ins={"c2_versions": dg.AssetIn("c2_versions")},
    description="Claim (§1.2 (3)): the order of the additions shows in the last bits of the fp32 accumulator for at "
    "least one pair of framework-produced versions (eager, fused default, Inductor knobs, framework tilings); "
    "contradicted when all of them are bit-identical there. Hand-written tilings are not counted.",
)
def c2_order_changes_accumulator(c2_ulp_matrix: pl.DataFrame, c2_versions: pl.DataFrame) -> dg.AssetCheckResult:
    framework = c2_versions.filter(pl.col("family").is_in(list(COMPILER_FAMILIES)))["version"].to_list()
    verdict, reason, meta = judge_order(c2_ulp_matrix, framework)
    hand = c2_ulp_matrix.filter(
        (pl.col("output") == "acc32") & ~(pl.col("version_a").is_in(framework) & pl.col("version_b").is_in(framework))
    )
    pairs = hand.group_by("version_a", "version_b").agg(pl.col("differ_rows").sum())
    meta["versions_judged"] = len(framework)
    meta["pairs_with_a_hand_written_tiling"] = pairs.height
    meta["pairs_with_a_hand_written_tiling_differing"] = int((pairs["differ_rows"] > 0).sum())
    return claim_result(verdict, ORDER_RULE, reason, meta)


#: Fewest expected fp16-differing rows over every judged pair for "supported": below it the test
#: cannot tell a hidden change of the final rounding from chance.
MIN_EXPECTED_DIFFERENCES = 5.0

RATE_RULE = Rule(
    claim="§1.2 (3) in the fp16 result: an order change shows in the fp16 sum exactly as often as the fp32 "
    "accumulators' differences predict, so the final rounding adds nothing of its own",
    metric="per pair of versions that each round their fp32 accumulator once to fp16: rows whose fp16 sums differ, "
    "against the expected count sum_rows min(1, |acc_a - acc_b| / fp16 spacing) (c2_ulp_matrix)",
    decision="contradicted if for any pair the two-sided Poisson test of the observed count against the expected one "
    "rejects after Holm's adjustment over the pairs at 0.01; supported if none does and the expected counts add up "
    f"to at least {MIN_EXPECTED_DIFFERENCES:g}; inconclusive otherwise",
    threshold=0.01,
    unit="p-value of the observed fp16-differing rows against the predicted count",
    confidence=0.99,
    sample_size="(1 + pool_rows) rows x every pair of versions that round their accumulator once",
    derivation="An fp16 ULP is 2^13 fp32 ULPs, so fp16 sums of two orders differ only where an fp16 rounding boundary "
    "lies between the accumulators; with the accumulator's position on the fp16 grid uniform that happens with "
    "probability |a - b| / spacing per row. A count far above the prediction is a final rounding that differs "
    "between versions (a double rounding, a truncation, an fp16 step the accumulator does not record); far below, "
    "results that do not come from the recorded accumulators.",
)


def judge_fp16_rate(matrix: pl.DataFrame) -> tuple[str, str, dict[str, Any]]:
    """:data:`RATE_RULE` on the ULP matrix."""
    judged = matrix.filter((pl.col("output") == "out16") & pl.col("expected_differ_rows").is_not_null())
    if judged.height == 0:
        return INCONCLUSIVE, "no pair of versions that both round their accumulator once", {"pairs": 0}
    pairs = judged.group_by("version_a", "version_b", maintain_order=True).agg(
        pl.col("differ_rows").sum().alias("observed"), pl.col("expected_differ_rows").sum().alias("expected")
    )
    p = [poisson_two_sided(int(o), float(e)) for o, e in zip(pairs["observed"], pairs["expected"], strict=True)]
    rejected, adjusted = holm(p, alpha=0.01)
    pairs = pairs.with_columns(pl.Series("p_holm", adjusted), pl.Series("rejected", rejected))
    expected_total = float(pairs["expected"].sum())
    meta: dict[str, Any] = {
        "pairs": pairs.height,
        "observed_total": int(pairs["observed"].sum()),
        "expected_total": expected_total,
        "table": dg.MetadataValue.md(markdown_table(pairs.with_columns(pl.col("expected").round(2)))),
    }
    if rejected.any():
        w = pairs.sort("p_holm").row(0, named=True)
        return (
            CONTRADICTED,
            f"{int(rejected.sum())} of {pairs.height} pairs differ in the fp16 sum on a count the accumulators do not "
            f"predict; worst {w['version_a']} vs {w['version_b']}: {w['observed']} rows vs {w['expected']:.2f} expected "
            f"(Holm p {w['p_holm']:.2g})",
            meta,
        )
    if expected_total < MIN_EXPECTED_DIFFERENCES:
        return (
            INCONCLUSIVE,
            f"{meta['observed_total']} fp16-differing rows vs {expected_total:.2f} expected over {pairs.height} pairs: "
            f"too few expected (< {MIN_EXPECTED_DIFFERENCES:g}) to test",
            meta,
        )
    return (
        SUPPORTED,
        f"{meta['observed_total']} fp16-differing rows vs {expected_total:.2f} expected over {pairs.height} pairs; no "
        "pair departs from its prediction",
        meta,
    )


@claim_check(
    rule=RATE_RULE,
    asset="c2_ulp_matrix",
    description="Claim (§1.2 (3), fp16 result): per pair of versions that round their fp32 accumulator once, the rows "
    "whose fp16 sums differ match the count the accumulators predict (two-sided Poisson test, Holm over pairs).",
)
def c2_fp16_differences_as_predicted(c2_ulp_matrix: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_fp16_rate(c2_ulp_matrix)
    return claim_result(verdict, RATE_RULE, reason, meta)


# --- the framework's versions against eager, row by row (paired; the rule in :mod:`.accuracy`) --------


@claim_check(
    rule=ACCURACY_RULE,
    asset="c2_row_bounds",
    description="Claim: each fused version of the framework (default, Inductor knobs, framework tilings) is no less "
    f"accurate than eager in the fp16 sum, row by row (exact sign test, Holm over the versions at {ACCURACY_ALPHA:g}). "
    "Catches a "
    "version that stores or adds partials in fp16, which the derived bound's slack lets through.",
)
def c2_fused_not_less_accurate_than_eager(c2_row_bounds: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_accuracy_vs_eager(c2_row_bounds)
    return claim_result(verdict, ACCURACY_RULE, reason, meta)
