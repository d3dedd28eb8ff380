"""The rule the generators of random programs share (the differential tester's programs, the
fuzzer's graphs): any wrong fused result contradicts; enough clean ones bound the mismatch rate. A
mismatch its compiler's documented precision setting clears (class :data:`BY_DESIGN`, its reason in
the ``by_design`` column) is counted apart: neither a wrong result nor a compared program."""

import math
from collections.abc import Callable
from typing import Any

import dagster as dg
import polars as pl

from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED

#: Confidence of the upper bound on the mismatch rate that a clean run states.
RATE_CONFIDENCE = 0.99

#: The class of a program the rule flagged whose difference the compiler documents as by design: a rerun
#: with the compiler's faithful-casts options (Inductor: ``emulate_precision_casts``) is clean. The row's
#: ``message`` keeps what the rule said, its ``by_design`` column why it is by design.
BY_DESIGN = "by_design"


def by_design_rows(outcomes: pl.DataFrame) -> pl.DataFrame:
    """The rows of class :data:`BY_DESIGN`, with a ``by_design`` reason column ("" where a table has none)."""
    rows = outcomes.filter(pl.col("class") == BY_DESIGN)
    return rows if "by_design" in rows.columns else rows.with_columns(pl.lit("").alias("by_design"))


def judge_wrong_results(
    outcomes: pl.DataFrame,
    *,
    noun: str,
    min_compared: int,
    line: Callable[[dict[str, Any]], str],
    first: Callable[[dict[str, Any]], str],
) -> tuple[str, str, dict[str, Any]]:
    """Verdict, reason and metadata of an outcomes table with a ``class`` column ("ok", "mismatch",
    :data:`BY_DESIGN`, others not compared): contradicted by any mismatch (``first`` describes the first
    one, ``line`` each in the metadata); supported when none of at least ``min_compared`` compared
    ``noun`` mismatches, with the rate bound -ln(1 - confidence) / n; inconclusive with fewer. By-design
    rows are counted and listed apart (``by_design``, ``by_design_results``): they contradict nothing and
    are not compared, as their fused result is not eager's and so no evidence that the fused path is right."""
    wrong = outcomes.filter(pl.col("class") == "mismatch")
    compared = outcomes.filter(pl.col("class").is_in(["ok", "mismatch"])).height
    apart = by_design_rows(outcomes)
    meta: dict[str, Any] = {
        noun: outcomes.height,
        "compared": compared,
        "mismatches": wrong.height,
        "wrong_results": dg.MetadataValue.md("\n".join(line(r) for r in wrong.iter_rows(named=True)) or "none"),
        "by_design": apart.height,
        "by_design_results": dg.MetadataValue.md(
            "\n".join(f"{line(r)} (by design: {r['by_design']})" for r in apart.iter_rows(named=True)) or "none"
        ),
    }
    besides = f" ({apart.height} more by design, counted apart)" if apart.height else ""
    if wrong.height:
        return (
            CONTRADICTED,
            f"{wrong.height} of {compared} compared {noun} have a wrong fused result{besides}; first "
            f"{first(wrong.row(0, named=True))}",
            meta,
        )
    if compared < min_compared:
        return INCONCLUSIVE, f"no mismatch{besides}, but only {compared} {noun} compared (< {min_compared})", meta
    bound = -math.log(1.0 - RATE_CONFIDENCE) / compared
    meta["mismatch_rate_upper_bound"] = bound
    return (
        SUPPORTED,
        f"no mismatch in {compared} compared {noun}{besides}: the rate is below {bound:.3g} at {RATE_CONFIDENCE:g}",
        meta,
    )
