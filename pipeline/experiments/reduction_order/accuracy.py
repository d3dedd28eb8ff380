"""C2's paired accuracy rule: each version the framework produces against eager, row by row, in the
fp16 result (exact sign test per version, Holm over the versions). The check that applies it is
``checks.c2_fused_not_less_accurate_than_eager``.
"""

import math
from typing import Any

import dagster as dg
import numpy as np
import polars as pl
import torch

from precisionkit.decide import holm_binomial_tails
from precisionkit.ulp import spacing

from ...scalars import as_int
from ...tables import markdown_table
from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Rule
from .versions import COMPILER_FAMILIES

#: Family-wise level of the paired accuracy test (Holm over the versions judged).
ACCURACY_ALPHA = 0.01


def min_paired_rows(versions: int, alpha: float = ACCURACY_ALPHA) -> int:
    """Fewest paired rows with which a version farther from fp64 than eager on *every* row is rejected
    after Holm over ``versions`` versions: the smallest n with versions * 2^-n <= alpha.

    >>> min_paired_rows(10), min_paired_rows(8), min_paired_rows(1)
    (10, 10, 7)
    """
    if versions < 1:
        raise ValueError(f"versions must be >= 1, got {versions}")
    return math.ceil(math.log2(versions / alpha))


ACCURACY_RULE = Rule(
    claim="Every fused version the framework produces (fused default, each Inductor knob, each framework tiling "
    "setting) is no less accurate than eager in the fp16 result: on the same rows, it is not farther from the fp64 sum "
    "more often than it is closer",
    metric="per version, paired with eager on each row of the seed input and the pool: rows where the version's "
    "|fp16 result - fp64 sum| exceeds eager's (worse) and rows where it falls below (better); equal rows are ties "
    "(c2_row_bounds, output out16)",
    decision="contradicted if the exact one-sided sign test (worse rows ~ Binomial(worse + better, 1/2) under 'as "
    f"accurate as eager') rejects for any version at family-wise level {ACCURACY_ALPHA:g} after Holm's adjustment over "
    "the versions; inconclusive if the rows are too few for a version worse on every row to be rejected "
    f"(fewer than ceil(log2(versions / {ACCURACY_ALPHA:g})) rows); supported otherwise",
    threshold=0.0,
    unit="per-row difference |error_version| - |error_eager| (fp16 result; any positive difference is a worse row)",
    confidence=1 - ACCURACY_ALPHA,
    sample_size="(1 + pool_rows) rows per version, paired with eager (smoke 16, default 257, seed 1025); at least "
    f"ceil(log2(versions / {ACCURACY_ALPHA:g})) rows ({min_paired_rows(10)} for the CPU's ten fused versions: the "
    "default, three Inductor knobs, six framework tilings)",
    derivation="Every correct version accumulates in fp32 (error far below one fp16 ULP) and rounds once to fp16, so "
    "its fp16 result equals eager's except on rows whose two accumulators lie on either side of an fp16 rounding "
    "midpoint; there the two results are neighbours and which one is nearer fp64 depends on where the exact sum "
    "falls between them, not on the version, so worse and better rows are equally likely and the sign test's null "
    "holds. A version that stores or adds partials in fp16 rounds at fp16 precision on top of eager's single "
    "rounding and is farther than eager on most rows. The derived bound (c2_versions_within_fp64_band) cannot see "
    "that: it charges u16*sum|p_j| for fp16 partials and gamma_(n-1)(u32)*sum|x| for any order, many fp16 ULPs "
    "(bound_ulp_median in the result), while eager's own error is at most half an ULP. Threshold 0: a row counts "
    "as worse by any amount, because correct versions tie with eager on nearly every row; the materiality lies in "
    "the share of rows, which the test weighs. Minimum rows: over n paired rows the smallest p-value the sign test "
    "can return is 2^-n (worse on every row), and Holm multiplies the smallest of m p-values by m, so no version can "
    f"be rejected unless m * 2^-n <= {ACCURACY_ALPHA:g}, i.e. n >= log2(m / {ACCURACY_ALPHA:g}); with fewer rows "
    "'supported' would hold whatever the versions computed, so the verdict is inconclusive",
)


def _ulps(errors: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``errors`` in fp16 ULPs of the fp64 sums ``ref`` (the spacing of fp16 at |ref|)."""
    return errors / spacing(torch.from_numpy(np.abs(ref)), torch.float16).numpy()


def _errors(rows: pl.DataFrame) -> np.ndarray:
    """The rows' |error| against fp64, a non-finite result (error NaN) as farther than any finite one."""
    return np.nan_to_num(rows["error"].to_numpy(), nan=np.inf)


def _paired_table(o16: pl.DataFrame, ref_rows: pl.DataFrame, versions: list[str], reference: str) -> pl.DataFrame:
    """Per version: rows worse, better and tied against ``reference``, errors and bounds in fp16 ULPs,
    and the sign test's raw and Holm-adjusted p-values over the versions."""
    ref, e_ref = ref_rows["ref"].to_numpy(), _errors(ref_rows)
    rows = []
    for v in versions:
        mine = o16.filter(pl.col("version") == v).sort("row")
        if mine["row"].to_list() != ref_rows["row"].to_list():
            raise ValueError(f"c2_row_bounds: {v} and {reference} do not hold the same rows")
        e = _errors(mine)
        worse, better = int((e > e_ref).sum()), int((e < e_ref).sum())
        ulp = _ulps(e, ref)
        rows.append(
            {
                "version": v,
                "family": mine["family"][0],
                "rows": len(e),
                "worse_rows": worse,
                "better_rows": better,
                "tied_rows": len(e) - worse - better,
                "median_ulp": float(np.median(ulp)),
                "max_ulp": float(ulp.max()),
                "bound_ulp_median": float(np.median(_ulps(mine["bound"].to_numpy(), ref))),
            }
        )
    table = pl.DataFrame(rows)
    p, rejected, adjusted = holm_binomial_tails(
        table["worse_rows"], table["worse_rows"] + table["better_rows"], 0.5, alpha=ACCURACY_ALPHA
    )
    table = table.with_columns(pl.Series("p", p), pl.Series("p_holm", adjusted), pl.Series("rejected", rejected))
    return table.select(*table.columns[:6], "p", *table.columns[6:9], "p_holm", "rejected")


def _accuracy_meta(table: pl.DataFrame, ref_rows: pl.DataFrame) -> dict[str, Any]:
    ref = ref_rows["ref"].to_numpy()
    ulp_ref = _ulps(_errors(ref_rows), ref)
    meta: dict[str, Any] = {
        "versions_judged": table.height,
        "rows_paired": ref_rows.height,
        "rows_needed": min_paired_rows(table.height),
        "versions_rejected": int(table["rejected"].sum()),
        "eager_median_ulp": float(np.median(ulp_ref)),
        "eager_max_ulp": float(ulp_ref.max()),
        "bound_ulp_median": float(np.median(_ulps(ref_rows["bound"].to_numpy(), ref))),
        "worse_rows_max": as_int(table["worse_rows"].max(), "worse_rows max"),
        "table": dg.MetadataValue.md(
            markdown_table(
                table.with_columns(
                    pl.col("median_ulp").round(3),
                    pl.col("max_ulp").round(3),
                    pl.col("bound_ulp_median").round(2),
                    pl.col("p").map_elements(lambda x: f"{x:.3g}", return_dtype=pl.String),
                    pl.col("p_holm").map_elements(lambda x: f"{x:.3g}", return_dtype=pl.String),
                )
            )
        ),
    }
    for r in table.iter_rows(named=True):
        for key in ("worse_rows", "better_rows", "tied_rows", "p_holm", "rejected"):
            meta[f"{r['version']}.{key}"] = r[key]
    return meta


def judge_accuracy_vs_eager(
    bounds: pl.DataFrame, families: tuple[str, ...] = COMPILER_FAMILIES, reference: str = "eager"
) -> tuple[str, str, dict[str, Any]]:
    """:data:`ACCURACY_RULE` on ``c2_row_bounds``: each version of ``families`` (``reference`` left
    out) against ``reference`` on the fp16 result, row by row. A non-finite result (error NaN) counts
    as farther from fp64 than any finite one."""
    o16 = bounds.filter(pl.col("output") == "out16")
    ref_rows = o16.filter(pl.col("version") == reference).sort("row")
    versions = [
        v
        for v in o16.filter(pl.col("family").is_in(list(families)))["version"].unique(maintain_order=True).to_list()
        if v != reference
    ]
    if ref_rows.height == 0 or not versions:
        return INCONCLUSIVE, f"no {reference} rows or no version to pair with them", {"versions_judged": 0}
    table = _paired_table(o16, ref_rows, versions, reference)
    meta = _accuracy_meta(table, ref_rows)
    n_rows, need, rejected = meta["rows_paired"], meta["rows_needed"], meta["versions_rejected"]
    if rejected:
        w = table.sort("p_holm").row(0, named=True)
        return (
            CONTRADICTED,
            f"{rejected} of {len(versions)} versions are farther from fp64 than eager on more rows than "
            f"closer; worst {w['version']}: worse on {w['worse_rows']} of {w['rows']} rows, better on "
            f"{w['better_rows']} (Holm p {w['p_holm']:.2g}), median {w['median_ulp']:.3g} fp16 ULP vs eager's "
            f"{meta['eager_median_ulp']:.3g}",
            meta,
        )
    if n_rows < need:
        return (
            INCONCLUSIVE,
            f"{n_rows} paired rows: too few to reject even a version worse on every row (needs {need} for "
            f"{len(versions)} versions at {ACCURACY_ALPHA:g})",
            meta,
        )
    return (
        SUPPORTED,
        f"no version of {len(versions)} is farther from fp64 than eager on more rows than closer over {n_rows} rows "
        f"(most worse rows {meta['worse_rows_max']}; eager median {meta['eager_median_ulp']:.3g} fp16 ULP)",
        meta,
    )
