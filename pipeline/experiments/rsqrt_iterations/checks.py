"""C3's checks. Claims, on the framework's own ops (torch.rsqrt and x / y, eager and fused, against fp64
on inputs with special values mixed in): the numeric results are correctly rounded up to a tie-flip
margin and never more than one fp16 ULP off, and every special value's class comes out exact.
Findings: the Newton-iteration tables (harness code, the plan's fallback) and the approximate-math
switches.
"""

import itertools
from typing import Any

import dagster as dg
import polars as pl

from precisionkit.decide import holm_binomial_tails

from ...scalars import as_float
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
)
from .compute import ITERATIONS, rounding_per_path
from .rules import METHOD, ROUNDING_ALPHA, TIE_FLIP_DERIVATION, TIE_FLIP_MARGIN


def _nonincreasing(values: list[float], slack: float = 0.0) -> bool:
    return all(b <= a + slack for a, b in itertools.pairwise(values))


#: Metrics that must not grow with the iteration count, per compute dtype of the Newton steps.
MONOTONE_METRICS = ("pre_round_rel_max", "ulp_max", "ulp_mean")


def judge_iterations(table: pl.DataFrame, what: str) -> tuple[list[str], dict[str, Any]]:
    """The Newton-iteration observations on one table (rsqrt or div): per compute dtype, each of
    MONOTONE_METRICS that grows from N to N + 1 iterations, and a 0-iteration estimate equal to path A
    everywhere. Returns the findings (empty: nothing to report) and the metadata."""
    meta: dict[str, Any] = {"method": METHOD}
    findings = []
    for compute in ("float32", "float16"):
        b = table.filter(pl.col("compute_dtype") == compute).sort("iterations")
        if b.height != len(ITERATIONS):
            raise ValueError(f"the {what} table lacks iteration rows for {compute}: {b['iterations'].to_list()}")
        for metric in MONOTONE_METRICS:
            vals = b[metric].to_list()
            meta[f"{compute}.{metric}"] = ", ".join(f"{v:.4g}" for v in vals)
            if not _nonincreasing(vals):
                findings.append(f"{compute} {metric} increases with iterations: {meta[f'{compute}.{metric}']}")
    a = table.filter(pl.col("path") == "B_newton0_float32")["vs_A_eager_equal_fraction"][0]
    meta["A_vs_B_newton0_equal_fraction"] = a
    if a >= 1.0:
        findings.append(
            f"the 0-iteration estimate equals the framework's {what} everywhere: no algorithm difference to show"
        )
    return findings, meta


_ITERATION_WORDS = (
    "The Newton-iteration table is the harness's own code (the plan's fallback: the framework has no iteration "
    "switch), so it is an observation, not a verdict on the framework. Reported when an error (pre-rounding max "
    "relative error, fp16 max or mean ULP error, on the U(0.01, 100) elements) grows from N to N + 1 iterations "
    "(a Newton step maps relative error e to about 1.5 e^2, so it should only shrink to the arithmetic's floor), or "
    "when the 0-iteration estimate equals the framework's result everywhere."
)


@finding_check(
    asset="c3_iteration_table",
    description="C3 finding (§1.2 (4), the plan's fallback): rsqrt by bit-trick estimate + N Newton steps. "
    + _ITERATION_WORDS,
)
def c3_error_nonincreasing_with_iterations(c3_iteration_table: pl.DataFrame) -> dg.AssetCheckResult:
    findings, meta = judge_iterations(c3_iteration_table, "torch.rsqrt")
    return finding_result(findings, meta)


@finding_check(
    asset="c3_div_table",
    description="C3 finding (§1.2 (4), the plan's div(x, y) example): x * (bit-trick reciprocal + N Newton steps). "
    + _ITERATION_WORDS,
)
def c3_div_error_nonincreasing_with_iterations(c3_div_table: pl.DataFrame) -> dg.AssetCheckResult:
    findings, meta = judge_iterations(c3_div_table, "x / y")
    return finding_result(findings, meta)


# --- claims on the framework's own ops ------------------------------------------------------------

#: The paths the claims judge: torch's own op, eager and fused with the default options. The fused
#: paths under an approximate-math switch (A_fused[...]) are reported by a finding: the switch asks
#: for approximate results.
JUDGED_PATHS = ("A_eager", "A_fused")
#: fp16 ULPs a numeric result may be from the correctly rounded value (a tie flip lands on the neighbour).
BOUND_ULP = 1


def _judged(table: pl.DataFrame) -> pl.DataFrame:
    """Per op and judged path: the counts of ``c3_framework_rounding`` summed over the input classes."""
    rows = table.filter(pl.col("path").is_in(list(JUDGED_PATHS)))
    if rows.height == 0:
        raise ValueError("c3_framework_rounding has no rows for the framework paths (A_eager, A_fused)")
    return rounding_per_path(rows)


ROUNDING_RULE = Rule(
    claim="§1.2 (4), the framework side: torch's own rsqrt and division of fp16 inputs, eager and fused, return the "
    "correctly rounded fp16 result (the fp64 value rounded to nearest, ties to even) except for rare tie flips, and "
    "never a result more than one fp16 ULP away",
    metric="per op (rsqrt, div) and path (A_eager, A_fused): the share of numeric results (the exact result is not "
    "NaN, +-inf or +-0) whose fp16 bits differ from the correctly rounded value, over every element of C3's input "
    "(the U(0.01, 100) body, wide-range normals, +-subnormals); and the count of numeric results more than one fp16 "
    "ULP from it (c3_framework_rounding)",
    decision=f"contradicted if any numeric result is more than {BOUND_ULP} fp16 ULP from the correctly rounded value, "
    f"or if the exact binomial test rejects 'share <= {TIE_FLIP_MARGIN:.6g}' for any op and path at family-wise level "
    f"{ROUNDING_ALPHA:g} (Holm over the op x path rows); inconclusive if a share exceeds the margin without the test "
    "rejecting; supported otherwise",
    threshold=TIE_FLIP_MARGIN,
    unit="share of numeric results not correctly rounded (tie-flip margin 2^-10)",
    confidence=1 - ROUNDING_ALPHA,
    sample_size="every element of C3's seeded fp16 inputs (spec.py: 64 x 64 smoke, 1024 x 1024 default and seed) for "
    "rsqrt, and of the (x, y) pairs for div, each path once",
    derivation=TIE_FLIP_DERIVATION + ". One ULP: the tie flip lands on the neighbour of the correctly rounded value, "
    "never further; a flushed subnormal, an infinity for a finite result or a skipped Newton step lands further",
)


def judge_rounding(table: pl.DataFrame) -> tuple[str, str, dict[str, Any]]:
    """:data:`ROUNDING_RULE` on ``c3_framework_rounding``."""
    rows = _judged(table)
    _, rejected, adjusted = holm_binomial_tails(
        rows["not_correctly_rounded"], rows["numeric_results"], TIE_FLIP_MARGIN, alpha=ROUNDING_ALPHA
    )
    rows = rows.with_columns(pl.Series("p_holm", adjusted), pl.Series("rejected", rejected))
    meta: dict[str, Any] = {"tie_flip_margin": TIE_FLIP_MARGIN, "bound_ulp": BOUND_ULP, "paths_judged": rows.height}
    for r in rows.iter_rows(named=True):
        key = f"{r['op']}.{r['path']}"
        meta[f"{key}.not_correctly_rounded_share"] = r["not_correctly_rounded_share"]
        meta[f"{key}.not_correctly_rounded"] = r["not_correctly_rounded"]
        meta[f"{key}.numeric_results"] = r["numeric_results"]
        meta[f"{key}.beyond_one_ulp"] = r["beyond_one_ulp"]
    meta["table"] = dg.MetadataValue.md(
        markdown_table(
            rows.select(
                "op",
                "path",
                "numeric_results",
                "not_correctly_rounded",
                pl.col("not_correctly_rounded_share").map_elements(
                    lambda v: f"{100 * v:.3f} %", return_dtype=pl.String
                ),
                "beyond_one_ulp",
                pl.col("p_holm").map_elements(lambda v: f"{v:.3g}", return_dtype=pl.String),
            )
        )
    )
    far = rows.filter(pl.col("beyond_one_ulp") > 0)
    failures = [
        f"{r['op']} {r['path']}: {r['beyond_one_ulp']} results more than {BOUND_ULP} fp16 ULP off"
        for r in far.iter_rows(named=True)
    ]
    failures += [
        f"{r['op']} {r['path']}: {100 * r['not_correctly_rounded_share']:.3f} % not correctly rounded "
        f"({r['not_correctly_rounded']} of {r['numeric_results']}; margin {100 * TIE_FLIP_MARGIN:.3f} %, Holm p "
        f"{r['p_holm']:.2g})"
        for r in rows.filter(pl.col("rejected")).iter_rows(named=True)
    ]
    if failures:
        return CONTRADICTED, "; ".join(failures), meta
    above = rows.filter(pl.col("not_correctly_rounded_share") > TIE_FLIP_MARGIN)
    if above.height:
        return (
            INCONCLUSIVE,
            "; ".join(
                f"{r['op']} {r['path']}: {100 * r['not_correctly_rounded_share']:.3f} % not correctly rounded, above the "
                f"margin but not significantly (Holm p {r['p_holm']:.2g})"
                for r in above.iter_rows(named=True)
            ),
            meta,
        )
    worst = as_float(rows["not_correctly_rounded_share"].max(), "not_correctly_rounded_share max")
    return (
        SUPPORTED,
        f"all {rows.height} op x path rows within the tie-flip margin (largest share not correctly rounded "
        f"{100 * worst:.3f} %, margin {100 * TIE_FLIP_MARGIN:.3f} %) and within {BOUND_ULP} fp16 ULP everywhere",
        meta,
    )


@claim_check(
    rule=ROUNDING_RULE,
    asset="c3_framework_rounding",
    description="Claim (§1.2 (4)), the framework side: torch.rsqrt and x / y in fp16, eager and fused, are correctly "
    "rounded against fp64 up to a tie-flip margin of 2^-10 of the numeric results, and never more than one fp16 ULP "
    "off, on inputs that mix +-subnormals and the whole fp16 range into U(0.01, 100).",
)
def c3_framework_correctly_rounded(c3_framework_rounding: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_rounding(c3_framework_rounding)
    return claim_result(verdict, ROUNDING_RULE, reason, meta)


SPECIAL_RULE = Rule(
    claim="§1.2 (4), the framework side at the edges: torch's rsqrt and division in fp16, eager and fused, give the "
    "exact special value wherever the exact result is one (rsqrt: +0 -> +inf, -0 -> -inf, +inf -> +0, a negative "
    "number, -inf or NaN -> NaN; division: x / +-0 -> +-inf, 0 / 0 and inf / inf -> NaN, x / inf -> +-0, ...), and "
    "never NaN where a number is expected",
    metric="per op and path (A_eager, A_fused): elements whose exact (fp64) result is NaN, +-inf or +-0 and whose fp16 "
    "result differs from it (any NaN matches NaN; the sign of an infinity or a zero counts), plus numeric results "
    "returned as NaN (c3_framework_rounding.class_mismatches)",
    decision="contradicted if any element of any judged path has a class mismatch; supported otherwise",
    threshold=0,
    unit="elements with a wrong special-value class",
    confidence=None,
    sample_size="C3's special inputs mixed into each input at seeded positions (compute.special_inputs: +-0, +-inf, "
    "NaN, 32 +-subnormals, 16 negative and 64 wide-range normals), for rsqrt and for both operands of div",
    derivation="IEEE 754 defines these results exactly (no rounding is involved), so any correct implementation "
    "returns them bit for bit up to the NaN payload; an approximation by bit tricks or by Newton steps from an "
    "estimate, or a flush of subnormals to zero, gets them wrong. A deterministic statement: threshold 0",
)


def judge_special_values(table: pl.DataFrame) -> tuple[str, str, dict[str, Any]]:
    """:data:`SPECIAL_RULE` on ``c3_framework_rounding``."""
    rows = _judged(table)
    meta: dict[str, Any] = {
        "paths_judged": rows.height,
        "special_results": int(rows["special_results"].sum()),
        "class_mismatches": int(rows["class_mismatches"].sum()),
    }
    for r in rows.iter_rows(named=True):
        meta[f"{r['op']}.{r['path']}.class_mismatches"] = r["class_mismatches"]
    bad = table.filter(pl.col("path").is_in(list(JUDGED_PATHS)) & (pl.col("class_mismatches") > 0))
    if bad.height:
        return (
            CONTRADICTED,
            "; ".join(
                f"{r['op']} {r['path']}, input {r['input_class']}: {r['class_mismatches']} of {r['elements']} elements "
                "with the wrong special-value class"
                for r in bad.iter_rows(named=True)
            ),
            meta,
        )
    return (
        SUPPORTED,
        f"all {meta['special_results']} special results exact and no NaN for a number over {rows.height} op x path rows",
        meta,
    )


@claim_check(
    rule=SPECIAL_RULE,
    asset="c3_framework_rounding",
    description="Claim (§1.2 (4)), the framework side at the edges: torch.rsqrt and x / y in fp16, eager and fused, "
    "return the exact IEEE special value (NaN, +-inf, signed zero) wherever the exact result is one.",
)
def c3_framework_special_values(c3_framework_rounding: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_special_values(c3_framework_rounding)
    return claim_result(verdict, SPECIAL_RULE, reason, meta)


@finding_check(
    asset="c3_framework_rounding",
    description="C3 finding: the fused paths under the device's approximate-math switches (A_fused[...]) against the "
    "same measures as the claims (share not correctly rounded against the 2^-10 margin, results beyond one fp16 ULP, "
    "special-value class mismatches). Not a verdict: such a switch asks for approximate results.",
)
def c3_approx_math_switches(c3_framework_rounding: pl.DataFrame) -> dg.AssetCheckResult:
    per = rounding_per_path(c3_framework_rounding.filter(pl.col("path").str.starts_with("A_fused[")))
    findings, meta = [], {"paths": per.height}
    for r in per.iter_rows(named=True):
        share = r["not_correctly_rounded_share"]
        meta[f"{r['op']}.{r['path']}.not_correctly_rounded_share"] = share
        if share > TIE_FLIP_MARGIN or r["beyond_one_ulp"] or r["class_mismatches"]:
            findings.append(
                f"{r['op']} {r['path']}: {100 * share:.3f} % not correctly rounded, {r['beyond_one_ulp']} beyond one "
                f"ULP, {r['class_mismatches']} special-value class mismatches"
            )
    return finding_result(findings, meta)
