"""A counterexample row of B's summary in words (:func:`explain`): the rule's figures, what the fused
path with faithful casts (Inductor's ``emulate_precision_casts``) shows and which ops the fused code covers."""

from typing import Any

from ...verdicts import CONTRADICTED
from .rules import CONFIDENCE, MATERIALITY_SULP


def explain(row: dict[str, Any], fused_ops: list[str], casts: str = "emulate_precision_casts") -> str:
    """A counterexample row of the summary in words: the rule's figures, what the fused path with faithful
    casts (``casts``: what it sets, Inductor's ``emulate_precision_casts``) shows, and which op types the fused
    code covers."""
    dtype = row["dtype"]
    verdict = row["fused_verdict"]
    parts = [
        f"Fused P99 of per-set scale-aware error {row['fused_sulp_max_p99']:.3g} vs eager {row['eager_sulp_max_p99']:.3g} "
        f"(difference {row['fused_p99_difference']:+.3g} sULP, one-sided {CONFIDENCE:g} interval "
        f"[{row['fused_ci_lower']:+.3g}, {row['fused_ci_upper']:+.3g}]); non-finite sets {row['fused_nonfinite_sets']}; "
        f"verdict {verdict} under B's rule (materiality {MATERIALITY_SULP:g} sULP). Fused is worse than eager on "
        f"{row['fused_worse_fraction']:.1%} of sets, better on {row['fused_better_fraction']:.1%}, bit-identical to "
        f"eager on {row['fused_bit_equal_eager_fraction']:.1%}."
    ]
    if row.get("emulate_unavailable"):
        parts.append(f"fused with {casts} was not run: {row['emulate_unavailable']}.")
    elif row["emulate_same_code_as_fused"]:
        parts.append(
            f"{casts} generated the same code as plain fusion here, so it cannot separate "
            "intermediate precision from the fused kernel's own arithmetic."
        )
    elif row["emulate_verdict"] != CONTRADICTED and (row["fused_emulate_sulp_max_p99"] or 0) <= (
        row["eager_sulp_max_p99"] or 0
    ):
        parts.append(
            f"With {casts} (intermediates rounded to {dtype} as eager rounds them) fused is "
            "no worse than eager: the difference comes from the precision fused intermediates are kept in."
        )
    else:
        parts.append(f"{casts} does not remove it, so it is not only intermediate rounding.")
    parts.append(
        f"Fused code covers: {', '.join(fused_ops) or 'none'}; the ablation table names the op whose removal "
        "from the fused region measurably reduces the error."
    )
    return " ".join(parts)
