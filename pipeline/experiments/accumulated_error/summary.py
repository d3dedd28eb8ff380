"""B's rule applied to the per-set table (:func:`judge`) and the summary built on it
(:func:`summarize`): one row per chain x distribution x dtype with the path metrics, the verdicts,
the better / equal / worse shares and the fusion evidence; and which rows are counterexamples.
"""

from typing import Any

import numpy as np
import polars as pl

from precisionkit.decide import holm

from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED
from ...workloads import CHAINS
from .row_statistics import (
    bias_margin_of,
    bias_statistics,
    element_cannot_judge,
    element_row,
    floats,
    gross_statistics,
    masked_row,
    paired_statistics,
)
from .rules import (
    BIAS_MARGIN_SULP,
    BOOTSTRAP_RESAMPLES,
    CONFIDENCE,
    GROUP_KEYS,
    JUDGED_PATHS,
    MATERIALITY_SULP,
    MIN_SETS_FOR_SUPPORTED,
    PATHS,
    TAIL_QUANTILE,
)


def _eager_side(per_set: pl.DataFrame) -> pl.DataFrame:
    """Eager's per-set error (and bias) under the names the judged paths are paired with."""
    bias_cols = [pl.col("sulp_bias").alias("eager_bias_set")] if "sulp_bias" in per_set.columns else []
    return per_set.filter(pl.col("path") == "eager").select(
        *GROUP_KEYS, "set_index", pl.col("sulp_max").alias("eager"), *bias_cols
    )


def _judge_row(key: tuple, grp: pl.DataFrame, path: str, test_bias_margin: float, **test: Any) -> dict[str, Any]:
    """Every statistic of one chain x distribution x dtype x path from its sets paired with eager's."""
    chain, dist, dtype = key
    f, e = floats(grp, "sulp_max"), floats(grp, "eager")
    ok = np.isfinite(f) & np.isfinite(e)
    row: dict[str, Any] = {
        "chain": chain,
        "distribution": dist,
        "dtype": dtype,
        "path": path,
        "sets": grp.height,
        "paired_sets": int(ok.sum()),
        "unpaired_sets": int((~ok).sum()),
        "nonfinite_sets": int((grp["nonfinite_vs_eager"] > 0).sum()),
        "nonfinite_elements": int(grp["nonfinite_vs_eager"].sum()),
    }
    seed = int.from_bytes(f"{chain}/{dist}/{dtype}/{path}".encode()[:8].ljust(8, b"\0"), "little")
    row.update(paired_statistics(f[ok], e[ok], seed, **test))
    if "eager_bias_set" in grp.columns:
        fb, eb = floats(grp, "sulp_bias"), floats(grp, "eager_bias_set")
        both = np.isfinite(fb) & np.isfinite(eb)
        row.update(bias_statistics(fb[both], eb[both]))
    else:
        row.update({"eager_bias": None, "fused_bias": None, "bias_difference": None, "bias_p_value": 1.0})
    row.update(gross_statistics(f[ok], e[ok]))
    row.update(element_row(grp, path))
    row.update(masked_row(grp))
    row["cannot_judge"] = element_cannot_judge(row)
    row["bias_margin"] = bias_margin_of(row, test_bias_margin)
    return row


#: The tests of one Holm family, per row: the P99 test, the bias test and the per-element test.
_HOLM_TESTS = ("p_value", "bias_p_value", "element_p_value")


def _verdicts(
    table: pl.DataFrame, *, confidence: float, family: int | None, margin: float, min_sets: int, bias_margin: float
) -> pl.DataFrame:
    """``table`` with one Holm adjustment over every test of every row and each row's verdict."""
    n = table.height
    p_values = np.concatenate([table[t].to_numpy() for t in _HOLM_TESTS])
    if family is not None and family > p_values.size:  # the rest of the family: tests of other rows
        p_values = np.concatenate([p_values, np.ones(family - p_values.size)])
    rejected, adjusted = holm(p_values, alpha=1.0 - confidence)
    table = table.with_columns(
        *[pl.Series(t.replace("p_value", "p_holm"), adjusted[i * n : (i + 1) * n]) for i, t in enumerate(_HOLM_TESTS)],
        *[pl.Series(f"_rejected_{i}", rejected[i * n : (i + 1) * n]) for i in range(len(_HOLM_TESTS))],
    )
    material_bias = pl.col("bias_difference").fill_null(0.0) >= pl.col("bias_margin").fill_null(bias_margin)
    biased = pl.col("_rejected_1") & material_bias
    elements = pl.col("_rejected_2")
    gross = pl.col("gross_sets") >= pl.col("gross_sets_needed").fill_null(1 << 62)
    masked = pl.col("masked_wrong_rows") > 0  # a class of answer no rounding explains: no statistics needed
    verdict = (
        pl.when((pl.col("nonfinite_sets") > 0) | pl.col("_rejected_0") | biased | elements | gross | masked)
        .then(pl.lit(CONTRADICTED))
        .when(
            (pl.col("paired_sets") >= min_sets)
            & (pl.col("ci_upper") <= margin)
            & ~material_bias
            & (pl.col("misrounded_sets").fill_null(0) == 0)
            & (pl.col("gross_sets") == 0)
            & pl.col("cannot_judge").is_null()
        )
        .then(pl.lit(SUPPORTED))
        .otherwise(pl.lit(INCONCLUSIVE))
    )
    return table.with_columns(
        verdict.alias("verdict"),
        biased.alias("bias_contradicts"),
        elements.alias("element_contradicts"),
        gross.alias("gross_contradicts"),
        masked.alias("masked_contradicts"),
    ).drop([f"_rejected_{i}" for i in range(len(_HOLM_TESTS))])


def judge(
    per_set: pl.DataFrame,
    *,
    margin: float = MATERIALITY_SULP,
    confidence: float = CONFIDENCE,
    q: float = TAIL_QUANTILE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    min_sets: int = MIN_SETS_FOR_SUPPORTED,
    paths: tuple[str, ...] = JUDGED_PATHS,
    bias_margin: float = BIAS_MARGIN_SULP,
    family: int | None = None,
) -> pl.DataFrame:
    """B's rule applied to the per-set table: one row per chain x distribution x dtype x judged path.

    Pairs each path's per-set ``sulp_max`` with eager's on the same ``set_index``; sets where
    either side has no finite element to compare are counted (``unpaired_sets``) and left out of
    the bootstrap; sets where the path is non-finite where eager is finite contradict the claim
    outright, and so does a fully masked row whose answer is of another class than fp64's (NaN or zeros
    where the chain defines a finite average). Deterministic: each row's bootstrap is seeded from its
    key. ``family``: the number of tests Holm adjusts over when this table is a part of a larger one (a
    simulation of a few rows judged as B's whole table is); the default is every test of these rows.
    """
    eager = _eager_side(per_set)
    test = {"q": q, "margin": margin, "confidence": confidence, "resamples": resamples}
    rows: list[dict[str, Any]] = []
    for path in paths:
        pair = per_set.filter(pl.col("path") == path).join(eager, on=[*GROUP_KEYS, "set_index"])
        for key, grp in pair.group_by(GROUP_KEYS, maintain_order=True):
            rows.append(_judge_row(key, grp, path, bias_margin, **test))
    table = pl.DataFrame(rows, schema=JUDGE_SCHEMA)
    if table.height == 0:
        return table.with_columns(  # no judged path ran (the compiler fused none of these rows): the same columns
            *[pl.lit(None, pl.Float64).alias(c) for c in ("p_holm", "bias_p_holm", "element_p_holm")],
            pl.lit(None, pl.String).alias("verdict"),
            *[pl.lit(None, pl.Boolean).alias(f"{t}_contradicts") for t in ("bias", "element", "gross", "masked")],
        )
    return _verdicts(
        table, confidence=confidence, family=family, margin=margin, min_sets=min_sets, bias_margin=bias_margin
    )


JUDGE_SCHEMA = {
    "chain": pl.String,
    "distribution": pl.String,
    "dtype": pl.String,
    "path": pl.String,
    "sets": pl.Int64,
    "paired_sets": pl.Int64,
    "unpaired_sets": pl.Int64,
    "nonfinite_sets": pl.Int64,
    "nonfinite_elements": pl.Int64,
    "eager_p99": pl.Float64,
    "fused_p99": pl.Float64,
    "p99_difference": pl.Float64,
    "ci_lower": pl.Float64,
    "ci_upper": pl.Float64,
    "p_value": pl.Float64,
    "eager_max": pl.Float64,
    "fused_max": pl.Float64,
    "materially_worse_sets": pl.Int64,
    "materially_better_sets": pl.Int64,
    "sign_test_p": pl.Float64,
    "eager_bias": pl.Float64,
    "fused_bias": pl.Float64,
    "bias_difference": pl.Float64,
    "bias_p_value": pl.Float64,
    "gross_threshold": pl.Float64,
    "gross_sets": pl.Int64,
    "gross_sets_needed": pl.Int64,
    "worst_over_eager_worst": pl.Float64,
    "decisive_elements": pl.Int64,
    "misrounded_elements": pl.Int64,
    "misrounded_sets": pl.Int64,
    "single_rounding_misrounded_sets": pl.Int64,
    "bound_violated": pl.Boolean,
    "set_failure_rate": pl.Float64,
    "element_p_value": pl.Float64,
    "element_test": pl.String,
    "bound_use_max": pl.Float64,
    "bound_half_ulps_median": pl.Float64,
    "masked_rows": pl.Int64,
    "masked_wrong_rows": pl.Int64,
    "bias_room": pl.Float64,
    "cannot_judge": pl.String,
    "bias_margin": pl.Float64,
}


def _g(value: Any, fmt: str = "+.3g") -> str:
    return "-" if value is None else format(value, fmt)


def _bias_margin_text(row: dict[str, Any]) -> str:
    """The bias margin a row was judged with, and where it comes from."""
    margin = row.get("bias_margin")
    if margin is None:
        return f"{BIAS_MARGIN_SULP:g} sULP"
    if row.get("bias_room") is not None and row.get("decisive_elements") == 0 and margin > BIAS_MARGIN_SULP:
        return f"{margin:.3g} sULP, twice the row's fp32 bound averaged over a set's elements"
    return f"{margin:.3g} sULP"


def reason(row: dict[str, Any]) -> str:
    where = f"{row['chain']}/{row['distribution']}/{row['dtype']} ({row['path']})"
    if row.get("unavailable"):
        return f"{where}: not run, so not judged: {row['unavailable']}"
    if row["nonfinite_sets"]:
        return (
            f"{where}: {row['nonfinite_sets']} of {row['sets']} sets have non-finite outputs where eager's are "
            f"finite ({row['nonfinite_elements']} elements)"
        )
    if row["p99_difference"] is None:
        return f"{where}: fewer than two sets with finite errors on both paths"
    if row.get("gross_contradicts"):
        return (
            f"{where}: {row['gross_sets']} of {row['paired_sets']} sets have errors beyond {row['gross_threshold']:.3g} "
            f"sULP (twice eager's worst set plus one unit; {row['gross_sets_needed']} contradict): {row['verdict']}"
        )
    if row.get("masked_contradicts"):
        return (
            f"{where}: {row['masked_wrong_rows']} of {row['masked_rows']} fully masked rows answer with another "
            f"class (NaN, zeros, infinity) than the chain's defined finite answer: {row['verdict']}"
        )
    if row.get("element_contradicts") and row.get("element_test") == "absolute":
        return (
            f"{where}: {row['misrounded_elements']} of {row['decisive_elements']} elements lie beyond the chain's "
            f"absolute bound (any fp32-accumulating library with its 16-bit boundaries and the fp32 epilogue stays "
            f"within it; fused used up to {row['bound_use_max']:.3g} of it) in {row['misrounded_sets']} of "
            f"{row['sets']} sets; the bound allows a set {row['set_failure_rate']:.2g} (Holm p "
            f"{row['element_p_holm']:.2g}): {row['verdict']}"
        )
    if row.get("element_contradicts"):
        return (
            f"{where}: fused misrounds {row['misrounded_elements']} of {row['decisive_elements']} decisive elements "
            f"(where no fp32 computation within the chain's error bound can round otherwise) in "
            f"{row['misrounded_sets']} of {row['sets']} sets; the bound allows a set {row['set_failure_rate']:.2g} "
            f"(Holm p {row['element_p_holm']:.2g}): {row['verdict']}"
        )
    if row.get("bound_violated"):
        return (
            f"{where}: the fp32 single rounding misrounds decisive elements in "
            f"{row['single_rounding_misrounded_sets']} sets, so the chain's error bound does not hold on this "
            f"machine and no element is judged; P99 difference {row['p99_difference']:+.3g} sULP: {row['verdict']}"
        )
    if row.get("bias_contradicts"):
        return (
            f"{where}: magnitude bias {row['fused_bias']:+.3g} sULP vs eager {row['eager_bias']:+.3g} "
            f"(difference {row['bias_difference']:+.3g}, margin {_bias_margin_text(row)}, Holm p "
            f"{row['bias_p_holm']:.2g}) over {row['paired_sets']} sets; P99 difference {row['p99_difference']:+.3g}: "
            f"{row['verdict']}"
        )
    if row.get("cannot_judge") and row["verdict"] == INCONCLUSIVE:
        return (
            f"{where}: inconclusive: {row['cannot_judge']}; the tail and bias tests alone do not support the claim "
            f"(P99 difference {row['p99_difference']:+.3g} sULP, upper bound {row['ci_upper']:+.3g}; bias excess "
            f"{_g(row.get('bias_difference'))} sULP against the margin {_bias_margin_text(row)}, Holm p "
            f"{_g(row.get('bias_p_holm'), '.2g')})"
        )
    return (
        f"{where}: P99 {row['fused_p99']:.3g} vs eager {row['eager_p99']:.3g} sULP, difference "
        f"{row['p99_difference']:+.3g} [{row['ci_lower']:+.3g}, {row['ci_upper']:+.3g}], Holm p {row['p_holm']:.2g}, "
        f"{row['paired_sets']} sets: {row['verdict']}"
    )


#: Per-set metrics summarized per path (each by P99 and max across sets), for the summary table.
METRICS = ("abs_max", "rel_max", "ulp_p99", "ulp_max", "sulp_p99", "sulp_max")


def _path_aggregates(per_set: pl.DataFrame) -> pl.DataFrame:
    """p99 (linear) and max across sets of every per-set metric, one row per chain/dist/dtype/path."""
    return per_set.group_by([*GROUP_KEYS, "path"]).agg(
        pl.len().alias("sets"),
        *[pl.col(m).quantile(0.99, interpolation="linear").alias(f"{m}__p99") for m in METRICS],
        *[pl.col(m).max().alias(f"{m}__max") for m in METRICS],
        (pl.col("max_ulp_vs_eager") == 0).mean().alias("bit_equal_eager_fraction"),
        pl.col("nonfinite_vs_ref").sum().alias("nonfinite_vs_ref"),
    )


#: Columns of :func:`judge` carried into the summary per judged path (prefixed ``fused_`` / ``emulate_``).
SUMMARY_VERDICT_COLUMNS = (
    "verdict",
    "p99_difference",
    "ci_lower",
    "ci_upper",
    "p_value",
    "p_holm",
    "nonfinite_sets",
    "nonfinite_elements",
    "materially_worse_sets",
    "materially_better_sets",
    "sign_test_p",
    "paired_sets",
    "eager_bias",
    "fused_bias",
    "bias_difference",
    "bias_p_holm",
    "bias_contradicts",
    "gross_threshold",
    "gross_sets",
    "gross_sets_needed",
    "gross_contradicts",
    "worst_over_eager_worst",
    "decisive_elements",
    "misrounded_elements",
    "misrounded_sets",
    "single_rounding_misrounded_sets",
    "bound_violated",
    "set_failure_rate",
    "element_p_holm",
    "element_contradicts",
    "element_test",
    "bound_use_max",
    "bound_half_ulps_median",
    "masked_rows",
    "masked_wrong_rows",
    "masked_contradicts",
    "bias_room",
    "cannot_judge",
    "bias_margin",
)
#: Columns of the fusion evidence carried into the summary per fused path.
_SUMMARY_EVIDENCE_COLUMNS = (
    "kernel_count",
    "graph_breaks",
    "recompiles",
    "code_sha256",
    "extern_calls",
    "fused_library_calls",
    "sets_per_second",
)
#: Judged paths and the prefix of their summary columns.
_SUMMARY_LABELS = (("fused", "fused"), ("fused_emulate", "emulate"))


def _path_metrics_wide(per_set: pl.DataFrame) -> pl.DataFrame:
    """Per chain x distribution x dtype: the set count and, per path, P99 and max across sets of each
    metric, non-finite elements against fp64 and (fused paths) the share of sets bit-equal to eager."""
    aggs = _path_aggregates(per_set)
    wide = aggs.filter(pl.col("path") == "eager").select([*GROUP_KEYS, "sets"])
    for p in PATHS:
        part = aggs.filter(pl.col("path") == p).select(
            GROUP_KEYS
            + [pl.col(f"{m}__{s}").alias(f"{p}_{m}_{s}") for m in METRICS for s in ("p99", "max")]
            + [pl.col("nonfinite_vs_ref").alias(f"{p}_nonfinite_vs_ref")]
            + ([pl.col("bit_equal_eager_fraction").alias(f"{p}_bit_equal_eager_fraction")] if p != "eager" else [])
        )
        # left: a fused path this torch could not compile has no rows, and its columns stay null
        wide = wide.join(part, on=GROUP_KEYS, how="left" if p != "eager" else "inner")
    return wide


def _with_verdicts_and_shares(wide: pl.DataFrame, per_set: pl.DataFrame) -> pl.DataFrame:
    """``wide`` with each judged path's verdict columns and its shares of sets better / equal / worse than eager."""
    verdicts = judge(per_set)
    for p, label in _SUMMARY_LABELS:
        v = verdicts.filter(pl.col("path") == p).select(
            *GROUP_KEYS,
            # the judged path's own bias is "<label>_bias"; eager's is "<label>_eager_bias"
            *[pl.col(c).alias(f"{label}_{c.removeprefix('fused_')}") for c in SUMMARY_VERDICT_COLUMNS],
        )
        wide = wide.join(v, on=GROUP_KEYS, how="left")
        # Per set, by scale-aware error: is this path strictly better / equal / worse than eager on the same inputs?
        pair = per_set.filter(pl.col("path") == p).join(
            per_set.filter(pl.col("path") == "eager"), on=[*GROUP_KEYS, "set_index"], suffix="_eager"
        )
        shares = pair.group_by(GROUP_KEYS).agg(
            (pl.col("sulp_max") < pl.col("sulp_max_eager")).mean().alias(f"{label}_better_fraction"),
            (pl.col("sulp_max") == pl.col("sulp_max_eager")).mean().alias(f"{label}_equal_fraction"),
            (pl.col("sulp_max") > pl.col("sulp_max_eager")).mean().alias(f"{label}_worse_fraction"),
        )
        wide = wide.join(shares, on=GROUP_KEYS, how="left")
    return wide


def summary_table(per_set: pl.DataFrame, evidence: pl.DataFrame) -> pl.DataFrame:
    """B's summary table (one row per chain x distribution x dtype, in :data:`CHAINS` order): path
    metrics, the rule's verdicts, better/equal/worse shares and the fusion evidence."""
    wide = _with_verdicts_and_shares(_path_metrics_wide(per_set), per_set)
    for p, label in _SUMMARY_LABELS:
        ev = evidence.filter(pl.col("path") == p).select(
            "chain",
            "dtype",
            *[pl.col(c).alias(f"{label}_{c.removeprefix('fused_')}") for c in _SUMMARY_EVIDENCE_COLUMNS],
        )
        wide = wide.join(ev, on=["chain", "dtype"], how="left")
    eager_tp = evidence.filter(pl.col("path") == "eager").select(
        "chain", "dtype", pl.col("sets_per_second").alias("eager_sets_per_second")
    )
    why = evidence.filter(pl.col("path") == "fused_emulate").select(
        "chain", "dtype", pl.col("unavailable").alias("emulate_unavailable")
    )
    # a fused path the compiler ran in torch, or fused none of, is not run as fused: its reason
    fused_why = evidence.filter(pl.col("path") == "fused").select(
        "chain", "dtype", pl.col("unavailable").alias("fused_unavailable")
    )
    wide = (
        wide.join(eager_tp, on=["chain", "dtype"], how="left")
        .join(why, on=["chain", "dtype"], how="left")
        .join(fused_why, on=["chain", "dtype"], how="left")
        .with_columns(
            (pl.col("fused_code_sha256") == pl.col("emulate_code_sha256")).alias("emulate_same_code_as_fused"),
            (pl.col("fused_sulp_max_p99") <= pl.col("eager_sulp_max_p99")).alias("fused_p99_not_above_eager"),
            # a path that could not run is not judged: inconclusive, with the reason beside it
            pl.col("emulate_verdict").fill_null(pl.lit(INCONCLUSIVE)),
            pl.col("fused_verdict").fill_null(pl.lit(INCONCLUSIVE)),
        )
    )
    order = {c: i for i, c in enumerate(CHAINS)}
    return (
        wide.with_columns(pl.col("chain").replace_strict(order, return_dtype=pl.Int64).alias("_o"))
        .sort("_o", "distribution", "dtype")
        .drop("_o")
    )


def is_counterexample(row: dict[str, Any]) -> bool:
    """A row where fused's P99 (or max) of per-set scale-aware error is above eager's, or any fused
    output is non-finite where eager's is finite: a contradiction when the rule says so, a finding
    to read otherwise. A row whose fused path did not run (``fused_unavailable``) has no fused result to be one."""
    if row.get("fused_unavailable") or row["fused_sulp_max_p99"] is None:
        return False
    if row["fused_nonfinite_sets"]:
        return True
    if row["fused_verdict"] == CONTRADICTED:
        return True
    return bool(
        row["fused_sulp_max_p99"] > row["eager_sulp_max_p99"] or row["fused_sulp_max_max"] > row["eager_sulp_max_max"]
    )
