"""C3's claims: more Newton iterations never increase the error (rsqrt, and the plan's div example),
and the framework's result differs from the 0-iteration estimate.
"""

import itertools
from typing import Any

import dagster as dg
import polars as pl

from ...verdicts import CONTRADICTED, SUPPORTED, Rule, claim_check, claim_result
from .compute import ITERATIONS
from .rules import METHOD


def _nonincreasing(values: list[float], slack: float = 0.0) -> bool:
    return all(b <= a + slack for a, b in itertools.pairwise(values))


#: Metrics that must not grow with the iteration count, per compute dtype of the Newton steps.
MONOTONE_METRICS = ("pre_round_rel_max", "ulp_max", "ulp_mean")

RULE = Rule(
    claim="§1.2 (4): an iterative approximation's implementation shows in the last bits: the bit-trick rsqrt (path B, "
    "the plan's fallback: a same-semantics implementation with a controlled iteration count, since the framework "
    "exposes none) is not completely consistent with the framework's (path A), and more Newton iterations give no "
    "larger error",
    metric=f"per compute dtype (fp32, fp16) of path B, across N = {', '.join(map(str, ITERATIONS))} iterations: "
    "pre-rounding max relative error, fp16 max and mean ULP error against fp64; and the share of elements where "
    "B with 0 iterations equals torch.rsqrt",
    decision="contradicted when any of those errors increases from N to N + 1 iterations (by any amount), or when "
    "the 0-iteration estimate equals torch.rsqrt on every element; supported otherwise",
    threshold=0,
    unit="increase of the error from one iteration count to the next (relative error or fp16 ULP)",
    confidence=None,
    sample_size="one seeded fp16 U(0.01, 100) input of C3's shape (spec.py; [1024, 1024] in the seed profile), "
    "every element, each iteration count once",
    derivation="a Newton step maps relative error e to about 1.5 e^2, so the error can only shrink until the "
    "arithmetic's floor, and once at the floor the result is the same correctly rounded fp16 value: a "
    "deterministic computation on a fixed input either grows or it does not, so the threshold is 0",
)


def judge_iterations(table: pl.DataFrame, what: str) -> tuple[str, str, dict[str, Any]]:
    """The iteration rule on one table (rsqrt or div): every MONOTONE_METRICS value non-increasing
    in N per compute dtype, and the 0-iteration estimate not equal to path A everywhere."""
    meta: dict[str, Any] = {"method": METHOD}
    failures = []
    for compute in ("float32", "float16"):
        b = table.filter(pl.col("compute_dtype") == compute).sort("iterations")
        if b.height != len(ITERATIONS):
            raise ValueError(f"the {what} table lacks iteration rows for {compute}: {b['iterations'].to_list()}")
        for metric in MONOTONE_METRICS:
            vals = b[metric].to_list()
            meta[f"{compute}.{metric}"] = ", ".join(f"{v:.4g}" for v in vals)
            if not _nonincreasing(vals):
                failures.append(f"{compute} {metric} increases with iterations: {meta[f'{compute}.{metric}']}")
    a = table.filter(pl.col("path") == "B_newton0_float32")["vs_A_eager_equal_fraction"][0]
    meta["A_vs_B_newton0_equal_fraction"] = a
    if a >= 1.0:
        failures.append(
            f"the 0-iteration estimate equals the framework's {what} everywhere: no algorithm difference to show"
        )
    verdict = CONTRADICTED if failures else SUPPORTED
    reason = (
        "; ".join(failures)
        or f"every error is non-increasing in the iteration count, and A differs from B with 0 iterations ({what})"
    )
    return verdict, reason, meta


@claim_check(
    rule=RULE,
    asset="c3_iteration_table",
    description="Claim (§1.2 (4)), under the plan's fallback (framework rsqrt vs a same-semantics implementation with a "
    "controlled iteration count): more Newton iterations never increase the error (pre-rounding max relative error, "
    "fp16 max and mean ULP error), and A differs from the bit-trick paths with few iterations.",
)
def c3_error_nonincreasing_with_iterations(c3_iteration_table: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_iterations(c3_iteration_table, "torch.rsqrt")
    return claim_result(verdict, RULE, reason, meta)


DIV_RULE = Rule(
    claim="§1.2 (4), the plan's div(x, y) example: x * reciprocal(y) by bit-trick estimate + Newton steps (path B) is "
    "not completely consistent with true division (path A), and more Newton iterations give no larger error",
    metric=f"per compute dtype (fp32, fp16) of path B, across N = {', '.join(map(str, ITERATIONS))} iterations: "
    "pre-rounding max relative error, fp16 max and mean ULP error against fp64; and the share of elements where "
    "B with 0 iterations equals x / y",
    decision=RULE.decision.replace("torch.rsqrt", "x / y"),
    threshold=0,
    unit=RULE.unit,
    confidence=None,
    sample_size="one seeded pair of fp16 U(0.01, 100) inputs of C3's shape (spec.py), every element, each iteration "
    "count once",
    derivation="a Newton step for 1/y maps relative error e to e^2, so the error can only shrink until the arithmetic's "
    "floor (then the multiply by x and the final fp16 rounding); a deterministic computation on a fixed input either "
    "grows or it does not, so the threshold is 0",
)


@claim_check(
    rule=DIV_RULE,
    asset="c3_div_table",
    description="Claim (§1.2 (4)), div(x, y) under the plan's fallback: more Newton iterations of the reciprocal never "
    "increase the error of x * reciprocal(y), and true division differs from the 0-iteration estimate.",
)
def c3_div_error_nonincreasing_with_iterations(c3_div_table: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_iterations(c3_div_table, "x / y")
    return claim_result(verdict, DIV_RULE, reason, meta)


#: fp16 ULPs that torch's own fp16 rsqrt or division may be from the correctly rounded value.
FRAMEWORK_BOUND_ULP = 1

FRAMEWORK_RULE = Rule(
    claim="§1.2 (4), the framework side: torch's own rsqrt and division of fp16 inputs (eager, fused, and fused under "
    "each approximate-math switch of the device) stay within one fp16 ULP of the correctly rounded result on every "
    "element",
    metric="per framework path (A_eager, A_fused, A_fused[switch]) of the rsqrt and div tables: the largest distance, "
    "in fp16 ULPs, between its fp16 result and the fp64 result rounded to fp16",
    decision=f"contradicted if any element of any framework path is more than {FRAMEWORK_BOUND_ULP} fp16 ULP from the "
    "correctly rounded value; supported otherwise",
    threshold=FRAMEWORK_BOUND_ULP,
    unit="fp16 ULP from the correctly rounded result",
    confidence=None,
    sample_size="C3's seeded fp16 inputs (spec.py), every element, each framework path once",
    derivation="Each path computes in fp32 (or better) and rounds once to fp16: its error is at most half an fp16 ULP "
    "from the final rounding plus the fp32 computation's own error, a few fp32 ULPs (CUDA's approximate rsqrt: "
    "relative 2^-22.9; a correctly rounded division: half an fp32 ULP), i.e. a few 2^-13 fp16 ULPs. The total is "
    "below one fp16 ULP, so the result is the correctly rounded value or its neighbour. A path that computes in fp16, "
    "skips a Newton step of an approximate reciprocal or flushes subnormals lands further away",
)


def judge_framework(tables: dict[str, pl.DataFrame]) -> tuple[str, str, dict[str, Any]]:
    """:data:`FRAMEWORK_RULE` on the rsqrt and div tables' framework rows (paths ``A_*``)."""
    meta: dict[str, Any] = {"bound_ulp": FRAMEWORK_BOUND_ULP}
    above = []
    judged = 0
    for op, table in tables.items():
        rows = table.filter(pl.col("path").str.starts_with("A_"))
        if rows.height == 0:
            raise ValueError(f"the {op} table has no framework rows (A_eager, A_fused)")
        for r in rows.iter_rows(named=True):
            judged += 1
            meta[f"{op}.{r['path']}.ulp_vs_rounded_max"] = int(r["int_ulp_vs_rounded_ref_max"])
            if r["int_ulp_vs_rounded_ref_max"] > FRAMEWORK_BOUND_ULP:
                above.append(
                    f"{op} {r['path']}: {r['int_ulp_vs_rounded_ref_max']} fp16 ULP from the correctly rounded value"
                )
    meta["paths_judged"] = judged
    if above:
        return CONTRADICTED, "; ".join(above), meta
    return (
        SUPPORTED,
        f"all {judged} framework paths within {FRAMEWORK_BOUND_ULP} fp16 ULP of the correctly rounded result",
        meta,
    )


@claim_check(
    rule=FRAMEWORK_RULE,
    asset="c3_iteration_table",
    additional_ins={"c3_div_table": dg.AssetIn("c3_div_table")},
    description="Claim (§1.2 (4)), the framework side: torch's rsqrt and x / y in fp16, eager, fused and fused under "
    "each approximate-math switch, within one fp16 ULP of the correctly rounded result.",
)
def c3_framework_within_one_ulp(c3_iteration_table: pl.DataFrame, c3_div_table: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_framework({"rsqrt": c3_iteration_table, "div": c3_div_table})
    return claim_result(verdict, FRAMEWORK_RULE, reason, meta)
