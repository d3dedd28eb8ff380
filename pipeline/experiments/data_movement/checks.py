"""Task D's checks on ``data_movement_check_table``: the §2 claim (every pure data-movement row the compiler
fused keeps every bit, NaN payloads included) under :data:`RULE`, the run's validity (every planned
combination ran; that each fused is the generated check ``data_movement_check_table_shows_fusion``), and
three findings: NaN payloads changed by an arithmetic op (with the op measured), the counterexamples that
hide arithmetic, and the combinations the compiler did not fuse.
"""

import dagster as dg
import polars as pl

from ...experiment import selected_parts
from ...resources import ExperimentSettings
from ...scalars import as_int
from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    Rule,
    claim_check,
    claim_result,
    finding_check,
    finding_result,
    validity_check,
    validity_result,
)
from .assets import compile_plan, data_movement_check_table
from .spec import ID


def payload_excused(frame: pl.DataFrame) -> pl.Expr:
    """Rows whose only mismatches are NaN payloads and whose measured cause is an op that does
    arithmetic (e.g. neg): counterexamples of arithmetic inside a pure-looking graph, not movement."""
    nan_only = ~pl.col("bit_equal") & (pl.col("mismatched_elements") == pl.col("nan_encoding_mismatches"))
    if "cause_op_moves_data_only" not in frame.columns:  # a table from before the measurement: as before
        return nan_only
    return nan_only & pl.col("cause_op").is_not_null() & ~pl.col("cause_op_moves_data_only").fill_null(True)


def _row_names(frame: pl.DataFrame) -> str:
    return (
        ", ".join(f"{r['subgraph']}/{r['dtype']}/{r['shape']}/{r['layout']}" for r in frame.iter_rows(named=True))
        or "none"
    )


def _row_notes(frame: pl.DataFrame) -> str:
    return "\n".join(
        f"- {r['subgraph']} {r['dtype']} {r['shape']} {r['layout']}: {r['notes']}" for r in frame.iter_rows(named=True)
    )


RULE = Rule(
    claim="§2: operators that only move data (transpose, reshape, slice, concat, split, broadcast) give bit-identical "
    "results fused and eager",
    metric="per pure-movement row (subgraph x dtype x shape x layout): elements whose bits differ between eager and "
    "fused, NaN payloads included; for a NaN-payload difference, the first op whose output bits differ when the graph "
    "is re-run op by op eagerly and fused (measured)",
    decision="contradicted when any pure row has one element whose value differs, or a NaN payload that differs where "
    "the measured first differing op only moves data (or no single op is found); supported otherwise; inconclusive when "
    "the table has no pure row. A NaN-payload difference whose measured cause is an arithmetic op inside the graph "
    "(e.g. neg) is a counterexample listed with its cause (pure_movement_nan_encodings), not a movement defect",
    threshold=0,
    unit="elements with a changed value",
    confidence=None,
    sample_size="every element of every pure subgraph x dtype (fp16, bf16, fp32) x profile movement shape x layout, "
    "inputs seeded and salted with special values (NaN, +-inf, -0.0, subnormals)",
    derivation="moving data performs no rounding, so any changed value is a defect and a single element "
    "contradicts the claim",
)


@claim_check(
    rule=RULE,
    asset=data_movement_check_table,
    description="Claim (§2): every pure data-movement row keeps every bit, NaN payloads included; a NaN payload changed by "
    "an arithmetic op inside the graph (measured op by op) is a listed counterexample, not a movement defect.",
)
def pure_movement_rows_bit_exact(data_movement_check_table: pl.DataFrame) -> dg.AssetCheckResult:
    table = fused_rows(data_movement_check_table)[0]
    all_pure = data_movement_check_table.filter(~pl.col("has_implicit_computation"))
    pure = table.filter(~pl.col("has_implicit_computation"))
    failed = pure.filter(~pl.col("bit_equal"))
    excused = failed.filter(payload_excused(failed))
    value_failed = failed.filter(pl.col("mismatched_elements") != pl.col("nan_encoding_mismatches"))
    payload_failed = failed.filter(
        (pl.col("mismatched_elements") == pl.col("nan_encoding_mismatches")) & ~payload_excused(failed)
    )
    if pure.height == 0 and all_pure.height:
        verdict, reason = INCONCLUSIVE, f"the compiler fused no pure data-movement row ({all_pure.height} not fused)"
    elif pure.height == 0:
        verdict, reason = INCONCLUSIVE, "the table has no pure data-movement row"
    elif value_failed.height or payload_failed.height:
        verdict, reason = (
            CONTRADICTED,
            (
                f"values changed in {value_failed.height} and NaN payloads changed by data movement (or "
                f"unattributed) in {payload_failed.height} of {pure.height} pure rows: "
                f"{_row_names(pl.concat([value_failed, payload_failed]))}"
            ),
        )
    else:
        verdict = SUPPORTED
        reason = f"every bit kept by data movement in {pure.height} pure rows" + (
            f" ({excused.height} with NaN payloads changed by an arithmetic op, measured; see pure_movement_nan_encodings)"
            if excused.height
            else ""
        )
    not_judged = all_pure.height - pure.height
    if not_judged:
        reason += f"; {not_judged} pure rows not fused by the compiler, not judged (see movement_rows_not_fused)"
    return claim_result(
        verdict,
        RULE,
        reason,
        {
            "pure_rows": pure.height,
            "pure_rows_not_fused": not_judged,
            "not_bit_exact": failed.height,
            "value_differences": value_failed.height,
            "payload_differences_from_movement": payload_failed.height,
            "payload_counterexamples": excused.height,
            "changed_values": dg.MetadataValue.md(
                _row_notes(pl.concat([value_failed, payload_failed]))
                or "none: no pure row changed a bit by moving data"
            ),
        },
    )


@finding_check(
    asset=data_movement_check_table,
    description="Finding (counterexample list): pure-looking rows whose NaN payloads differ bit for bit between eager and "
    "fused, each with its cause measured by re-running the graph op by op eagerly and fused: the first op whose output "
    "bits differ, and which path departs from that op's bitwise result.",
)
def pure_movement_nan_encodings(data_movement_check_table: pl.DataFrame) -> dg.AssetCheckResult:
    pure = fused_rows(data_movement_check_table)[0].filter(~pl.col("has_implicit_computation"))
    nan_only = pure.filter(payload_excused(pure))
    causes: dict[str, int] = {}
    if "cause_op" in nan_only.columns:
        for r in nan_only.iter_rows(named=True):
            key = f"{r['cause_op']} ({r['cause_path']} path departs from the bitwise result)"
            causes[key] = causes.get(key, 0) + 1
    return finding_result(
        [
            f"{r['subgraph']}/{r['dtype']}/{r['shape']}/{r['layout']}: {r['notes']}"
            for r in nan_only.iter_rows(named=True)
        ],
        {
            "rows": nan_only.height,
            "nan_elements": int(nan_only["nan_encoding_mismatches"].sum()) if nan_only.height else 0,
            "measured_causes": "; ".join(f"{k}: {v} rows" for k, v in causes.items()) or "none",
            "finding": dg.MetadataValue.md(_row_notes(nan_only) or "none: no NaN payload changed"),
        },
    )


@finding_check(
    asset=data_movement_check_table,
    description="Finding: the counterexamples that hide arithmetic (promotion then downcast, a scalar scale), each "
    "with its observed eager-vs-fused difference and cause; they are outside §2's claim.",
)
def implicit_computation_counterexamples(data_movement_check_table: pl.DataFrame) -> dg.AssetCheckResult:
    implicit = data_movement_check_table.filter(pl.col("has_implicit_computation"))
    differ = implicit.filter(~pl.col("bit_equal"))
    return finding_result(
        [
            f"{r['subgraph']}/{r['dtype']}/{r['shape']}/{r['layout']}: {r['notes']}"
            for r in differ.iter_rows(named=True)
        ],
        {
            "implicit_rows": implicit.height,
            "not_bit_exact": differ.height,
            "max_ulp": as_int(differ["ulp_max"].max(), "ulp_max") if differ.height else 0,
            "counterexamples": dg.MetadataValue.md(_row_notes(implicit) or "none ran"),
        },
    )


def fused_rows(table: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rows the compiler fused, and those it did not (``not_fused``; a table stored before the column has
    only fused rows)."""
    if "not_fused" not in table.columns:
        return table, table.clear()
    return table.filter(pl.col("not_fused").is_null()), table.filter(pl.col("not_fused").is_not_null())


@finding_check(
    asset=data_movement_check_table,
    description="Finding: the combinations the compiler did not fuse (it compiled each operation on its own, ran "
    "the graph in torch after failing it, or failed to compile it), each with the compiler's reason and whether "
    "what it ran kept every bit anyway. They are measured where they ran, but no claim about fusion counts them.",
)
def movement_rows_not_fused(data_movement_check_table: pl.DataFrame) -> dg.AssetCheckResult:
    fused, left = fused_rows(data_movement_check_table)
    return finding_result(
        [
            f"{r['subgraph']}/{r['dtype']}/{r['shape']}/{r['layout']}: {r['not_fused']}"
            + ("" if r["bit_equal"] is None else f" ({'bit-exact' if r['bit_equal'] else 'not bit-exact'})")
            for r in left.iter_rows(named=True)
        ],
        {
            "rows": data_movement_check_table.height,
            "fused_rows": fused.height,
            "not_fused_rows": left.height,
            "not_fused_bit_exact": int(left["bit_equal"].fill_null(False).sum()) if left.height else 0,
            "not_compiled": int(left["bit_equal"].is_null().sum()) if left.height else 0,
        },
    )


@validity_check(
    asset=data_movement_check_table,
    description="Run validity: every planned (subgraph, dtype, shape, layout) ran (that each fused is the generated "
    "check data_movement_check_table_shows_fusion).",
)
def every_movement_combination_ran(
    data_movement_check_table: pl.DataFrame, settings: ExperimentSettings
) -> dg.AssetCheckResult:
    table = data_movement_check_table
    expected = len(compile_plan(settings.sizes(ID).shapes, selected_parts(ID)))  # a narrowed run (--select) plans fewer
    problems = [f"{table.height} rows, planned {expected}"] if table.height != expected else []
    # A combination the compiler failed to compile is its finding (movement_rows_not_fused); a compiler that
    # compiled none of them leaves the run nothing to measure.
    failed = table.filter(pl.col("bit_equal").is_null()) if "not_fused" in table.columns else table.clear()
    if table.height and failed.height == table.height:
        problems.append(f"no planned combination compiled: {failed['not_fused'][0]}")
    return validity_result(
        problems, {"rows": table.height, "expected_rows": expected, "rows_not_compiled": failed.height}
    )
