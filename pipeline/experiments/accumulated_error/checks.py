"""B's asset checks: the run's validity, the §3.2 claim per chain under :data:`.rules.RULE`, and the
rows where fused is worse but within the rule (a finding)."""

import dagster as dg
import polars as pl

from ...experiment import selected_parts
from ...resources import ExperimentSettings
from ...tables import markdown_table
from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    claim_check,
    claim_result,
    combine,
    finding_check,
    finding_result,
    validity_check,
    validity_result,
)
from ...workloads import CHAINS, WORKLOADS
from ..toolkit.spec import ID as POOL_ID
from .rules import DTYPES_B, GROUP_KEYS, MATERIALITY_SULP, PATHS, RULE
from .spec import ID
from .summary import SUMMARY_VERDICT_COLUMNS, is_counterexample, reason


@validity_check(
    asset="accumulated_error_summary",
    name="accumulated_error_run_valid",
    additional_ins={
        "per_set": dg.AssetIn("accumulated_error_per_set"),
        "evidence": dg.AssetIn("accumulated_error_fusion_evidence"),
    },
    required_resource_keys={"settings"},
    description="The B run did what it claims: every chain x distribution x dtype x path has every input set; eager "
    "outputs are finite wherever the fp64 reference is (the input distributions stay inside the dtype's finite range, "
    "as the plan says). That each fused path fused is the generated check accumulated_error_fusion_evidence_shows_fusion.",
)
def accumulated_error_run_valid(
    context: dg.AssetCheckExecutionContext,
    accumulated_error_summary: pl.DataFrame,
    per_set: pl.DataFrame,
    evidence: pl.DataFrame,
) -> dg.AssetCheckResult:
    settings: ExperimentSettings = context.resources.settings
    expected_sets = settings.sizes(POOL_ID).chain_sets
    problems = []
    counts = per_set.group_by([*GROUP_KEYS, "path"]).agg(pl.len().alias("n"))
    short = counts.filter(pl.col("n") != expected_sets)
    if short.height:
        problems.append(
            f"{short.height} chain/distribution/dtype/path groups lack sets (expected {expected_sets} each)"
        )
    # a fused path this torch cannot compile, or the compiler ran in torch or fused none of, is not run (its
    # evidence row says why): a finding about the compiler on that chain, not a defect of the run
    skipped = evidence.filter(pl.col("unavailable").is_not_null()).height
    chains = selected_parts(ID) or CHAINS  # a run narrowed to some chains (report --select) plans those
    expected_groups = (
        sum(len(WORKLOADS[c].distributions) for c in chains) * len(DTYPES_B) * len(PATHS)
        - per_set.select(*GROUP_KEYS)
        .unique()
        .join(evidence.filter(pl.col("unavailable").is_not_null()).select("chain", "dtype"), on=["chain", "dtype"])
        .height
    )
    if counts.height != expected_groups:
        problems.append(f"{counts.height} groups in the per-set table, expected {expected_groups}")
    eager_nonfinite = per_set.filter((pl.col("path") == "eager") & (pl.col("nonfinite_vs_ref") > 0))
    if eager_nonfinite.height:
        where = eager_nonfinite.select(*GROUP_KEYS).unique().sort(pl.all())
        problems.append(
            f"eager is non-finite where the fp64 reference is finite on {eager_nonfinite.height} sets ("
            + ", ".join("/".join(r) for r in where.iter_rows())
            + "): inputs outside the planned finite range"
        )
    not_run = evidence.filter(pl.col("unavailable").is_not_null())
    return validity_result(
        problems,
        {
            "groups": counts.height,
            "chains_planned": ", ".join(chains),
            "sets_per_group": expected_sets,
            "paths_not_run": skipped,
            "paths_not_run_why": "; ".join(
                sorted({f"{r['path']}: {r['unavailable']}" for r in not_run.iter_rows(named=True)})
            )
            or "none",
        },
    )


def _chain_check(chain: str) -> dg.AssetChecksDefinition:
    @claim_check(
        rule=RULE,
        asset="accumulated_error_summary",
        name=f"fused_not_worse_than_eager_{chain}",
        description=f"§3.2 for {chain}: fused (and fused with emulate_precision_casts) is no worse than eager against "
        "fp64, per distribution x dtype, by B's rule (P99 across sets of per-set max scale-aware ULP error, paired "
        f"bootstrap, materiality {MATERIALITY_SULP:g} sULP, Holm over all rows, any non-finite output where eager "
        "is finite contradicts).",
    )
    def check(accumulated_error_summary: pl.DataFrame) -> dg.AssetCheckResult:
        rows = accumulated_error_summary.filter(pl.col("chain") == chain)
        judged = [
            {
                # every verdict figure of the path, so the reason names the part of the rule that decided
                **{v: r.get(f"{label}_{v.removeprefix('fused_')}") for v in SUMMARY_VERDICT_COLUMNS},
                **{k: r[k] for k in GROUP_KEYS},
                "path": p,
                "sets": r[f"{label}_paired_sets"],
                "verdict": r[f"{label}_verdict"],
                "nonfinite_sets": r[f"{label}_nonfinite_sets"],
                "nonfinite_elements": r[f"{label}_nonfinite_elements"],
                "p99_difference": r[f"{label}_p99_difference"],
                "ci_lower": r[f"{label}_ci_lower"],
                "ci_upper": r[f"{label}_ci_upper"],
                "p_holm": r[f"{label}_p_holm"],
                "paired_sets": r[f"{label}_paired_sets"],
                "fused_p99": r[f"{p}_sulp_max_p99"],
                "eager_p99": r["eager_sulp_max_p99"],
                "unavailable": r.get(f"{label}_unavailable"),
            }
            for r in rows.iter_rows(named=True)
            for p, label in (("fused", "fused"), ("fused_emulate", "emulate"))
        ]
        if not judged:
            left_out = (selected_parts(ID) or CHAINS) != CHAINS and chain not in (selected_parts(ID) or ())
            why = "the run was narrowed to other chains (report --select)" if left_out else "no rows in the summary"
            return claim_result(INCONCLUSIVE, RULE, f"{chain} not judged: {why}")
        verdict = combine(j["verdict"] for j in judged)
        deciding = [j for j in judged if j["verdict"] == verdict] or judged
        meta = {
            "rows_judged": len(judged),
            **{f"rows_{v}": sum(j["verdict"] == v for j in judged) for v in (SUPPORTED, CONTRADICTED, INCONCLUSIVE)},
            "nonfinite_sets": sum(j["nonfinite_sets"] or 0 for j in judged),
            "sets_per_row": max(j["sets"] or 0 for j in judged),
            "rows": dg.MetadataValue.md(
                markdown_table(
                    pl.DataFrame(judged).select(
                        *GROUP_KEYS,
                        "path",
                        "sets",
                        pl.col("eager_p99").round(3),
                        pl.col("fused_p99").round(3),
                        pl.col("p99_difference").round(3),
                        pl.col("ci_lower").round(3),
                        pl.col("ci_upper").round(3),
                        pl.col("p_holm").round(4),
                        "nonfinite_sets",
                        "verdict",
                    )
                )
            ),
        }
        return claim_result(verdict, RULE, "; ".join(reason(j) for j in deciding[:3]), meta)

    return check


chain_checks = [_chain_check(c) for c in CHAINS]


@finding_check(
    asset="accumulated_error_summary",
    name="fused_worse_within_rule",
    description="Rows where fused's P99 or max of per-set scale-aware error is above eager's but B's rule does not "
    "call it a contradiction (below the materiality threshold or not significant): for a human to read, with the "
    "reproducers in accumulated_error_counterexamples.",
)
def fused_worse_within_rule(accumulated_error_summary: pl.DataFrame) -> dg.AssetCheckResult:
    rows = [
        r
        for r in accumulated_error_summary.iter_rows(named=True)
        if is_counterexample(r) and r["fused_verdict"] != CONTRADICTED
    ]
    findings = [
        f"{r['chain']}/{r['distribution']}/{r['dtype']}: P99 {r['fused_sulp_max_p99']:.3g} vs {r['eager_sulp_max_p99']:.3g}, "
        f"max {r['fused_sulp_max_max']:.3g} vs {r['eager_sulp_max_max']:.3g} sULP ({r['fused_verdict']})"
        for r in rows
    ]
    return finding_result(findings, {"rows_compared": accumulated_error_summary.height})


@claim_check(
    rule=RULE,
    asset="accumulated_error_summary",
    name="fully_masked_rows_answer_defined",
    description="§3.2 for the rows a mask masks entirely (attention_masked, fully_masked inputs): the chain adds "
    "-1e4 to every score of such a row, which softmax ignores, so its defined answer is the finite softmax-weighted "
    "average of the values that fp64 and eager return. Each fused path must answer every such row with the same "
    "class (finite, not all zero): NaN, zeros or an infinity on any fully masked row contradicts, without statistics.",
)
def fully_masked_rows_answer_defined(accumulated_error_summary: pl.DataFrame) -> dg.AssetCheckResult:
    summary = accumulated_error_summary
    if "fused_masked_rows" not in summary.columns:
        return claim_result(
            INCONCLUSIVE, RULE, "the stored summary predates the fully-masked-row test: rematerialize B"
        )
    judged = [
        {
            **{k: r[k] for k in GROUP_KEYS},
            "path": path,
            "masked_rows": r[f"{label}_masked_rows"] or 0,
            "wrong_rows": r[f"{label}_masked_wrong_rows"] or 0,
        }
        for r in summary.iter_rows(named=True)
        for path, label in (("fused", "fused"), ("fused_emulate", "emulate"))
        if (r[f"{label}_masked_rows"] or 0) > 0
    ]
    if not judged:
        return claim_result(INCONCLUSIVE, RULE, "no input set has a fully masked row: the defined answer is not tested")
    wrong = [j for j in judged if j["wrong_rows"] > 0]
    verdict = CONTRADICTED if wrong else SUPPORTED
    reason_text = (
        "; ".join(
            f"{j['chain']}/{j['distribution']}/{j['dtype']} ({j['path']}): {j['wrong_rows']} of {j['masked_rows']} "
            "fully masked rows answer NaN, zeros or infinity where the chain defines a finite average"
            for j in wrong
        )
        if wrong
        else f"every one of {sum(j['masked_rows'] for j in judged)} fully masked rows over {len(judged)} judged rows "
        "answers with the finite average fp64 defines"
    )
    meta = {
        "rows_judged": len(judged),
        "fully_masked_rows": sum(j["masked_rows"] for j in judged),
        "rows_with_another_answer": sum(j["wrong_rows"] for j in judged),
        "defined_answer": "finite, not all zero (softmax ignores the -1e4 added to every score of the row)",
        "rows": dg.MetadataValue.md(markdown_table(pl.DataFrame(judged))),
    }
    return claim_result(verdict, RULE, reason_text, meta)
