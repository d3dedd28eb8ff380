"""The statistics of one row of B's rule (one chain x distribution x dtype x judged path), from its input
sets paired with eager's: the tail test (:func:`paired_statistics`), the magnitude bias, the per-element test,
the gross sets, the fully masked rows, and when the element test cannot judge. :mod:`.summary` applies them
to every row of the per-set table and decides the verdicts.
"""

from typing import Any

import numpy as np
import polars as pl

from precisionkit.decide import binomial_tail, paired_quantile_test, sign_test

from .bounds import reduction_failure_probability
from .rules import BOOTSTRAP_RESAMPLES, CONFIDENCE, GROSS_FACTOR, GROSS_SETS_NEEDED, MATERIALITY_SULP, TAIL_QUANTILE

#: Columns of :func:`paired_statistics`, None when fewer than two sets pair up (``p_value`` is then 1).
_PAIRED_COLUMNS = (
    "eager_p99",
    "fused_p99",
    "p99_difference",
    "ci_lower",
    "ci_upper",
    "eager_max",
    "fused_max",
    "materially_worse_sets",
    "materially_better_sets",
    "sign_test_p",
)


def paired_statistics(
    f: np.ndarray,
    e: np.ndarray,
    seed: int,
    *,
    q: float = TAIL_QUANTILE,
    margin: float = MATERIALITY_SULP,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> dict[str, Any]:
    """The rule's statistics of one row from paired per-set errors (fused ``f``, eager ``e``, both
    finite): the bootstrap test of the ``q`` quantiles' difference against ``margin`` (seeded by
    ``seed``), the maxima and the sign test's counts of materially worse and better sets."""
    if len(f) < 2:
        return {**dict.fromkeys(_PAIRED_COLUMNS), "p_value": 1.0}
    test = paired_quantile_test(f, e, q=q, margin=margin, confidence=confidence, resamples=resamples, seed=seed)
    if test.p_value <= 1.0 / (resamples + 1):
        # No resample came within the margin: the p-value is only bounded by the resample count, which
        # Holm over B's whole table (about 200 tests) would not let reject. Ten times the resamples
        # resolve it; only rows this far from the margin pay for them.
        test = paired_quantile_test(
            f, e, q=q, margin=margin, confidence=confidence, resamples=10 * resamples + 9, seed=seed
        )
    sign = sign_test(f, e, margin=margin)
    return {
        "eager_p99": test.y_quantile,
        "fused_p99": test.x_quantile,
        "p99_difference": test.estimate,
        "ci_lower": test.lower,
        "ci_upper": test.upper,
        "p_value": test.p_value,
        "eager_max": float(e.max()),
        "fused_max": float(f.max()),
        "materially_worse_sets": sign.positive,
        "materially_better_sets": int((e - f > margin).sum()),
        "sign_test_p": sign.p_value,
    }


def bias_statistics(f: np.ndarray, e: np.ndarray) -> dict[str, Any]:
    """Magnitude bias of one row from paired per-set biases (fused ``f``, eager ``e``, finite): the
    means, and how much larger fused's bias is in size than eager's on the same set (``bias_difference``:
    the mean of |f| - |e|) with the exact one-sided sign test of |f| > |e|. A fused path less biased
    than eager (eager's rounding of masked scores next to -1e4, say) is not held against it."""
    if len(f) == 0:
        return {"eager_bias": None, "fused_bias": None, "bias_difference": None, "bias_p_value": 1.0}
    af, ae = np.abs(f), np.abs(e)
    return {
        "eager_bias": float(e.mean()),
        "fused_bias": float(f.mean()),
        "bias_difference": float((af - ae).mean()),
        "bias_p_value": sign_test(af, ae).p_value,
    }


def element_statistics(
    misrounded: np.ndarray, predicted: np.ndarray, decisive: np.ndarray, reductions: np.ndarray
) -> dict[str, Any]:
    """The per-element rule's statistics of one row from per-set counts: decisive elements the path
    misrounds (``misrounded``), decisive elements the fp32 single rounding misrounds (``predicted``, the
    bound's own check), decisive elements per set and reductions per set. The p-value is the binomial tail
    of the sets with a misrounded decisive element at the rate the bound allows a set
    (reductions x :func:`.bounds.reduction_failure_probability`); where the fp32 single rounding itself
    misrounds a decisive element, the bound does not hold on this machine and the row is not judged."""
    n = len(misrounded)
    bad_sets = int((misrounded > 0).sum())
    predicted_bad = int((predicted > 0).sum())
    # an elementwise chain makes no reduction and its bound is first-order: it is given one reduction's
    # failure rate all the same, so no set's p-value is exactly 0
    rate = max(float(reductions.max()) if n else 0.0, 1.0) * reduction_failure_probability()
    violated = predicted_bad > 0
    return {
        "decisive_elements": int(decisive.sum()),
        "misrounded_elements": int(misrounded.sum()),
        "misrounded_sets": bad_sets,
        "single_rounding_misrounded_sets": predicted_bad,
        "bound_violated": violated,
        "set_failure_rate": rate,
        "element_p_value": 1.0 if violated or bad_sets == 0 else binomial_tail(bad_sets, n, min(rate, 1.0)),
    }


_ELEMENT_COLUMNS = (
    "element_test",
    "bias_room",
    "bound_use_max",
    "bound_half_ulps_median",
    "decisive_elements",
    "misrounded_elements",
    "misrounded_sets",
    "single_rounding_misrounded_sets",
    "bound_violated",
    "set_failure_rate",
)


def gross_statistics(f: np.ndarray, e: np.ndarray) -> dict[str, Any]:
    """The rare-set rule's figures of one row from paired finite per-set errors: the threshold
    (:data:`.rules.GROSS_FACTOR` times eager's worst plus one unit), the sets of ``f`` beyond it, how
    many contradict, and the headroom fused's worst set left (fused's worst minus eager's worst, sULP;
    the healthy distribution of this statistic is on B's page)."""
    if len(f) == 0:
        return {"gross_threshold": None, "gross_sets": 0, "gross_sets_needed": None, "worst_over_eager_worst": None}
    threshold = GROSS_FACTOR * float(e.max()) + MATERIALITY_SULP
    return {
        "gross_threshold": threshold,
        "gross_sets": int((f > threshold).sum()),
        "gross_sets_needed": GROSS_SETS_NEEDED,
        "worst_over_eager_worst": float(f.max() - e.max()),
    }


def floats(grp: pl.DataFrame, column: str) -> np.ndarray:
    return grp[column].to_numpy().astype(np.float64)


def element_row(grp: pl.DataFrame, path: str) -> dict[str, Any]:
    """The per-element test's figures of one row (only for fused: fused_emulate rounds intermediates by
    design), in its rounding or absolute form; empty figures where the row has no bound or no check."""
    predicted = grp["single_rounding_misrounded"] if "single_rounding_misrounded" in grp.columns else None
    if path != "fused" or predicted is None or predicted.null_count() > 0:
        return {**dict.fromkeys(_ELEMENT_COLUMNS), "element_p_value": 1.0}
    out = {**dict.fromkeys(("element_test", "bias_room", "bound_use_max", "bound_half_ulps_median"))}
    out |= element_statistics(
        floats(grp, "decisive_misrounded"),
        floats(grp, "single_rounding_misrounded"),
        floats(grp, "decisive_elements"),
        floats(grp, "bound_reductions"),
    )
    if "element_test" in grp.columns:
        use, width = grp["bound_use_max"].drop_nulls(), grp["bound_half_ulps_p50"].drop_nulls()
        out["element_test"] = grp["element_test"][0]
        out["bound_use_max"] = float(use.max()) if use.len() else None  # type: ignore[arg-type]
        out["bound_half_ulps_median"] = float(width.median()) if width.len() else None  # type: ignore[arg-type]
    if "bound_bias_sulp" in grp.columns:
        room = grp["bound_bias_sulp"].drop_nulls()
        out["bias_room"] = float(room.mean()) if room.len() else None  # type: ignore[arg-type]
    return out


def element_cannot_judge(row: dict[str, Any]) -> str | None:
    """Why the per-element test has nothing to judge on a row whose fused code computes the whole chain (None
    when it judges, or the row has no such test): no element is decisive (the chain's fp32 bound is wider than
    half a ULP of the dtype at every element, so a legitimate computation may round any of them either way), or
    the fp32 single rounding misrounds a decisive element (the bound does not hold on this machine). Such a row
    cannot be supported: the claim would rest on the tail and bias tests alone, which a fault within a unit of
    the row's scale passes (issue: eps 1e-3, a one-pass variance, rounding toward zero and a 3x error all passed
    on layernorm_long / near_cancellation / float16)."""
    if row.get("element_test") != "rounding" or row.get("decisive_elements") is None:
        return None
    if row.get("bound_violated"):
        return (
            f"the fp32 single rounding misrounds decisive elements in {row['single_rounding_misrounded_sets']} sets, "
            "so the chain's error bound does not hold on this machine and the element test judges nothing"
        )
    if row["decisive_elements"] == 0:
        return (
            f"no element of the {row['sets']} sets is decisive (the chain's fp32 error bound is wider than half a "
            f"{row['dtype']} ULP at every element), so the element test judges nothing"
        )
    return None


def bias_margin_of(row: dict[str, Any], fixed: float) -> float:
    """The bias test's margin on one row: ``fixed`` (:data:`.rules.BIAS_MARGIN_SULP`), except on a row whose
    element test has no decisive element, where it is derived from the row's own rounding as the element
    test's decisiveness is: twice the mean over its sets of :func:`.per_set.bias_room` (the chain's fp32
    bound averaged over a set's elements, in sULP). Fused and eager each lie within the bound, so their
    magnitude biases may differ by that much without a fault; a larger excess is a change of the computation.
    The larger of the two is taken: the derived margin never makes the test stricter than the fixed one."""
    room = row.get("bias_room")
    if row.get("decisive_elements") == 0 and row.get("element_test") == "rounding" and room is not None:
        return max(fixed, 2.0 * float(room))
    return fixed


def masked_row(grp: pl.DataFrame) -> dict[str, Any]:
    """Fully masked rows of one judged row and those whose answer is of another class than fp64's."""
    if "fully_masked_rows" not in grp.columns:
        return {"masked_rows": 0, "masked_wrong_rows": 0}
    return {
        "masked_rows": int(grp["fully_masked_rows"].sum()),
        "masked_wrong_rows": int(grp["fully_masked_wrong"].sum()),
    }
