"""C1's checks: the §1.2 (2) claim on the ULP distribution under :data:`.rules.RULE`, and two
findings about the mechanism (route or value) and the error against fp64.
"""

from typing import Any

import dagster as dg
import polars as pl
import torch

from precisionkit import bit_equal

from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    claim_check,
    claim_result,
    combine,
    finding_check,
    finding_result,
)
from .paths import path_a_multiplier, rounded_scalar
from .rules import MAX_FRACTION_ABOVE_1ULP, ROUTE_RULE, RULE


def _row(df: pl.DataFrame, comparison: str) -> dict[str, Any]:
    match = df.filter(pl.col("comparison") == comparison)
    if match.height != 1:
        raise ValueError(f"c1_ulp_distribution has no single row {comparison!r}")
    return match.row(0, named=True)


@claim_check(
    rule=RULE,
    asset="c1_ulp_distribution",
    description="Claim (§1.2 (2)): paths A and B are not bit-identical, most elements within 1 ULP (judged per mode, eager and fused).",
)
def c1_paths_differ_mostly_within_1ulp(c1_ulp_distribution: pl.DataFrame) -> dg.AssetCheckResult:
    meta, verdicts, reasons = {}, [], []
    for mode in ("eager", "fused"):
        r = _row(c1_ulp_distribution, f"{mode} A vs B")
        meta.update(
            {
                f"{mode}.ulp0_pct": r["ulp0_pct"],
                f"{mode}.ulp1_pct": r["ulp1_pct"],
                f"{mode}.ulp_ge2_pct": r["ulp_ge2_pct"],
                f"{mode}.ulp_max": r["ulp_max"],
            }
        )
        if r["ulp_ge2_pct"] > 100 * MAX_FRACTION_ABOVE_1ULP:
            verdicts.append(CONTRADICTED)
            reasons.append(
                f"{mode}: {r['ulp_ge2_pct']:.3f}% of elements differ by >= 2 ULP (rule: at most {100 * MAX_FRACTION_ABOVE_1ULP:g}%)"
            )
        elif r["bit_equal"]:
            verdicts.append(INCONCLUSIVE)
            reasons.append(f"{mode}: A and B are bit-identical on this backend (no difference to explain)")
        else:
            verdicts.append(SUPPORTED)
            reasons.append(
                f"{mode}: {100 - r['ulp0_pct']:.2f}% of elements differ, {r['ulp_ge2_pct']:.3f}% by >= 2 ULP"
            )
    return claim_result(combine(verdicts), RULE, "; ".join(reasons), meta)


def judge_route(distribution: pl.DataFrame, records: pl.DataFrame) -> tuple[str, str, dict[str, Any]]:
    """:data:`ROUTE_RULE` on the ULP distribution and the route records, per mode then combined."""
    meta: dict[str, Any] = {}
    verdicts, reasons = [], []
    for mode in ("eager", "fused"):
        route = _row(distribution, f"{mode} route only: control_route_only vs A")
        rec = records.filter((pl.col("mode") == mode) & pl.col("path").is_in(["B", "control_route_only"]))
        differ = rec.filter(pl.col("instruction_vs_A") == "different")["path"].to_list()
        changes = not route["bit_equal"]
        meta[f"{mode}.route_alone_changes_bits"] = changes
        meta[f"{mode}.instructions_differ"] = ", ".join(differ) or "none recorded"
        if changes:
            verdicts.append(SUPPORTED)
            reasons.append(f"{mode}: the route alone changes {100 - route['ulp0_pct']:.2f}% of elements")
        elif differ:
            verdicts.append(CONTRADICTED)
            reasons.append(
                f"{mode}: the recorded instructions differ ({', '.join(differ)}) but the route alone changes no bit: "
                "the A/B difference is the multiplier's value"
            )
        else:
            verdicts.append(INCONCLUSIVE)
            reasons.append(f"{mode}: the route alone changes no bit and no instruction difference is recorded")
    return combine(verdicts), "; ".join(reasons), meta


@claim_check(
    rule=ROUTE_RULE,
    asset="c1_ulp_distribution",
    additional_ins={"c1_route_records": dg.AssetIn("c1_route_records")},
    description="Claim (§1.2 (2), the mechanism): the route alone (value held fixed) changes bits; contradicted when "
    "it never does although the recorded instructions differ.",
)
def c1_route_alone_changes_bits(
    c1_ulp_distribution: pl.DataFrame, c1_route_records: pl.DataFrame
) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_route(c1_ulp_distribution, c1_route_records)
    return claim_result(verdict, ROUTE_RULE, reason, meta)


@finding_check(
    asset="c1_mechanism_evidence",
    additional_ins={"outputs": dg.AssetIn("c1_path_outputs")},
    description="Finding about the mechanism: the plan attributes the A/B difference to instruction selection. The two "
    "controls separate route from value: WARN when changing only the value (path A's route fed B's fp16 value) "
    "reproduces B bit for bit while changing only the route (B's broadcast route fed A's value) reproduces A, i.e. the "
    "operand's value, not the route, explains the difference. Judged per mode (eager, fused). Not a verdict on the "
    "claim (the ULP distribution is).",
)
def c1_difference_is_instruction_selection(
    c1_mechanism_evidence: pl.DataFrame, outputs: dict[str, torch.Tensor]
) -> dg.AssetCheckResult:
    meta: dict[str, Any] = {}
    findings = []
    code_rows = c1_mechanism_evidence.filter((pl.col("source") == "generated_code") & (pl.col("path") == "A vs B"))
    same_code = bool(code_rows.height) and code_rows["detail"][0].endswith("True")
    for mode in ("eager", "fused"):
        value_is_b = bit_equal(outputs[f"{mode}_control_value_only"], outputs[f"{mode}_B"])
        route_is_a = bit_equal(outputs[f"{mode}_control_route_only"], outputs[f"{mode}_A"])
        meta[f"{mode}.control_value_only_equals_B"] = value_is_b
        meta[f"{mode}.control_route_only_equals_A"] = route_is_a
        if value_is_b and route_is_a and not bit_equal(outputs[f"{mode}_A"], outputs[f"{mode}_B"]):
            findings.append(
                f"{mode}: the A/B difference is the scalar's value, not the route: path A's route fed B's value "
                f"({rounded_scalar(outputs['input'].dtype)!r}) reproduces B bit for bit, and B's broadcast route fed A's value "
                f"({path_a_multiplier(outputs['input'].dtype)!r}) reproduces A bit for bit"
                + (
                    "; the fused kernels of A and B are identical except for that constant"
                    if mode == "fused" and same_code
                    else ""
                )
            )
    meta["control_0dim_tensor_equals_B"] = bit_equal(outputs["eager_control_0dim_tensor"], outputs["eager_B"])
    meta["fused_kernels_identical_but_constants"] = same_code
    meta["finding"] = "; ".join(findings) or "none"
    return finding_result(findings, meta)


@finding_check(
    asset="c1_error_vs_fp64",
    description="Finding: error against fp64 with the route held fixed and the value changed (A vs control_value_only: "
    "does the higher-precision multiplier give the smaller error?) and with the value held fixed and the route changed "
    "(A vs control_route_only: does the route alone change the error?), in each mode; WARN when the higher-precision "
    "value is farther from fp64, or when the route alone changes the mean error.",
)
def c1_higher_precision_scalar_is_closer(c1_error_vs_fp64: pl.DataFrame) -> dg.AssetCheckResult:
    err = {r["path"]: r for r in c1_error_vs_fp64.iter_rows(named=True)}
    meta, findings = {}, []
    for mode in ("eager", "fused"):
        a, b = err[f"{mode}_A"]["ulp_mean"], err[f"{mode}_B"]["ulp_mean"]
        meta[f"{mode}.A_ulp_mean"], meta[f"{mode}.B_ulp_mean"] = a, b
        value = err.get(f"{mode}_control_value_only")
        route = err.get(f"{mode}_control_route_only")
        if value is not None:
            meta[f"{mode}.control_value_only_ulp_mean"] = value["ulp_mean"]
            if a > value["ulp_mean"]:
                findings.append(
                    f"{mode}: with the route fixed, A's value gives mean ULP error {a:.4f} > {value['ulp_mean']:.4f} with B's value"
                )
        elif a > b:
            findings.append(f"{mode}: A mean ULP error {a:.4f} > B {b:.4f}")
        if route is not None:
            meta[f"{mode}.control_route_only_ulp_mean"] = route["ulp_mean"]
            if route["ulp_mean"] != a:
                findings.append(
                    f"{mode}: with the value fixed, the broadcast route's mean ULP error {route['ulp_mean']:.4f} differs from A's {a:.4f}"
                )
    meta["finding"] = "; ".join(findings) or "none"
    return finding_result(findings, meta)
