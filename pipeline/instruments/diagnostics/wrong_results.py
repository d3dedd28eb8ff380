"""The rule the generators of random programs share (the differential tester's programs, the
fuzzer's graphs): any wrong fused result contradicts; enough clean ones bound the mismatch rate."""

import math
from collections.abc import Callable
from typing import Any

import dagster as dg
import polars as pl

from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED

#: Confidence of the upper bound on the mismatch rate that a clean run states.
RATE_CONFIDENCE = 0.99


def judge_wrong_results(
    outcomes: pl.DataFrame,
    *,
    noun: str,
    min_compared: int,
    line: Callable[[dict[str, Any]], str],
    first: Callable[[dict[str, Any]], str],
) -> tuple[str, str, dict[str, Any]]:
    """Verdict, reason and metadata of an outcomes table with a ``class`` column ("ok", "mismatch",
    others not compared): contradicted by any mismatch (``first`` describes the first one, ``line``
    each in the metadata); supported when none of at least ``min_compared`` compared ``noun``
    mismatches, with the rate bound -ln(1 - confidence) / n; inconclusive with fewer."""
    wrong = outcomes.filter(pl.col("class") == "mismatch")
    compared = outcomes.filter(pl.col("class").is_in(["ok", "mismatch"])).height
    meta: dict[str, Any] = {
        noun: outcomes.height,
        "compared": compared,
        "mismatches": wrong.height,
        "wrong_results": dg.MetadataValue.md("\n".join(line(r) for r in wrong.iter_rows(named=True)) or "none"),
    }
    if wrong.height:
        return (
            CONTRADICTED,
            f"{wrong.height} of {compared} compared {noun} have a wrong fused result; first {first(wrong.row(0, named=True))}",
            meta,
        )
    if compared < min_compared:
        return INCONCLUSIVE, f"no mismatch, but only {compared} {noun} compared (< {min_compared})", meta
    bound = -math.log(1.0 - RATE_CONFIDENCE) / compared
    meta["mismatch_rate_upper_bound"] = bound
    return (
        SUPPORTED,
        f"no mismatch in {compared} compared {noun}: the rate is below {bound:.3g} at {RATE_CONFIDENCE:g}",
        meta,
    )
