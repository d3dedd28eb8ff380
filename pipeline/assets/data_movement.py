"""Task D: pure data-movement subgraphs are bit-exact between eager and fused (main document §2).

Every catalogue subgraph (``pipeline.movement``) runs eager and fused for each dtype, profile
shape and memory layout; ``precisionkit.bit_equal`` decides. Counterexamples that hide arithmetic
(type promotion then downcast, a Python-scalar scale) run on one shape per dtype and are
reported with their cause, not failed.

Checks: the claim (every pure row keeps every value bit for bit) under :data:`RULE`; run validity
(every planned combination ran and fused, no graph break, no recompile); and two findings: NaN
encodings that differ while the value (NaN) is the same, and the implicit-computation
counterexamples.
"""


import time

import dagster as dg
import polars as pl
import torch

from precisionkit import bit_equal, bit_mismatch, fused, ulp_diff

from ..movement import CATALOGUE, COUNTEREXAMPLES, LAYOUTS, PURE, MovementGraph, make_input
from ..resources import ExperimentSettings
from ..verdicts import (CONTRADICTED, INCONCLUSIVE, SUPPORTED, Rule, claim_check, claim_result, finding_check,
                        finding_result, validity_check, validity_result)
from ..workloads import DTYPES

GROUP = "D_data_movement"
MOVEMENT_DTYPES = ("float16", "bfloat16", "float32")


def plan(shapes: tuple[tuple[int, ...], ...]) -> list[tuple[str, str, tuple[int, ...], str]]:
    """Every (subgraph, dtype, shape, layout) to compile: pure graphs on every shape and layout,
    counterexamples on the last (odd-sized) shape, contiguous, to bound the compile count."""
    if not shapes:
        raise ValueError("the profile has no movement_shapes")
    combos = [(g, d, s, lay) for g in PURE for d in MOVEMENT_DTYPES for s in shapes for lay in LAYOUTS]
    combos += [(g, d, shapes[-1], "contiguous") for g in COUNTEREXAMPLES for d in MOVEMENT_DTYPES]
    return combos


def _as_tuple(out: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


_INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}


def _mismatch_nature(eager_out: tuple[torch.Tensor, ...], fused_out: tuple[torch.Tensor, ...]) -> dict:
    """Counts of mismatching elements, how many are NaN in both paths (encodings differ), and up
    to three distinct (eager, fused) NaN bit patterns as hex."""
    total = nan_pairs = 0
    patterns: list[str] = []
    for e, f in zip(eager_out, fused_out):
        mask = bit_mismatch(e, f).mask
        total += int(mask.sum())
        both_nan = mask & torch.isnan(e) & torch.isnan(f)
        nan_pairs += int(both_nan.sum())
        view = _INT_VIEW.get(e.dtype)
        if view is not None and int(both_nan.sum()):
            bits = (1 << (8 * e.element_size())) - 1
            for a, b in zip(e.view(view)[both_nan].tolist(), f.view(view)[both_nan].tolist()):
                pair = f"eager {a & bits:#x} vs fused {b & bits:#x}"
                if pair not in patterns and len(patterns) < 3:
                    patterns.append(pair)
    return {"mismatched": total, "nan_encoding_only": nan_pairs, "nan_patterns": patterns}


def _notes(graph: MovementGraph, dtype: str, equal: bool, ulp_max: int, nature: dict, total: int) -> str:
    if equal:
        observed = "bit-exact"
    else:
        observed = f"{nature['mismatched']} of {total} elements differ, max {ulp_max} ULP"
    if graph.has_implicit_computation:
        return f"{observed}; hidden arithmetic: {graph.explanation}"
    if equal:
        return f"{observed}; {graph.explanation}"
    if nature["mismatched"] == nature["nan_encoding_only"]:
        detail = f"every mismatch is a NaN in both paths with another bit pattern ({'; '.join(nature['nan_patterns'])})"
        if "neg" in graph.title and dtype != "float32":
            detail += (
                "; likely cause: negation runs in fp32 and the result is converted back, and the eager "
                "scalar path (c10 round_to_nearest_even, canonical 0x7fc0) and the fused kernel's "
                "conversion encode NaN differently; the value (NaN) is the same"
            )
        return f"{observed}; {detail}"
    return f"{observed}; unexpected for pure data movement: values changed"


@dg.asset(
    group_name=GROUP,
    deps=["toolkit_selfcheck"],
    pool="compute_device",
    description=(
        "Feeds main document §2. Eager vs fused bit-equality of pure data-movement subgraphs "
        "(transpose/concat, slice/broadcast/concat, split/transpose/concat, RoPE rotate-half, a "
        "torch.full consumed by two concats) over dtype x shape x layout, plus counterexamples "
        "that hide arithmetic (promotion then downcast, scalar scale)."
    ),
    kinds={"pytorch", "polars"},
)
def data_movement_check_table(context: dg.AssetExecutionContext, settings: ExperimentSettings) -> pl.DataFrame:
    profile = settings.get_profile()
    device = settings.torch_device()
    backend, options = settings.backend, settings.options()
    combos = plan(profile.movement_shapes)
    rows = []
    start = time.perf_counter()
    # One compiled function per combination (dynamic=False): each subgraph's code object collects
    # one dynamo cache entry per dtype/shape/layout, more than the default recompile limit of 8.
    with torch._dynamo.config.patch(recompile_limit=len(combos) + 8, accumulated_recompile_limit=4 * len(combos) + 256):
        for name, dtype_name, shape, layout in combos:
            graph = CATALOGUE[name]
            dtype = DTYPES[dtype_name]
            specials = not graph.has_implicit_computation
            x = make_input(shape, dtype, layout, settings.derived_seed("movement", dtype_name, shape, layout, specials, "x"),
                           specials=specials, device=device)
            y = make_input(shape, graph.y_dtype(dtype), layout,
                           settings.derived_seed("movement", dtype_name, shape, layout, specials, "y"),
                           specials=specials, device=device)
            eager_out = _as_tuple(graph.fn(x, y))
            fn = fused(graph.fn, backend, options, dynamic=False)
            fused_out = _as_tuple(fn(x, y))
            ev = fn.evidence
            equal = all(bit_equal(e, f) for e, f in zip(eager_out, fused_out))
            ulp_max = max(int(ulp_diff(e, f).max()) for e, f in zip(eager_out, fused_out))
            nature = _mismatch_nature(eager_out, fused_out)
            total = sum(e.numel() for e in eager_out)
            rows.append(
                {
                    "subgraph": name,
                    "dtype": dtype_name,
                    "shape": "x".join(map(str, shape)),
                    "layout": layout,
                    "has_implicit_computation": graph.has_implicit_computation,
                    "bit_equal": equal,
                    "ulp_max": ulp_max,
                    "mismatched_elements": nature["mismatched"],
                    "nan_encoding_mismatches": nature["nan_encoding_only"],
                    "kernel_count": ev.kernel_count,
                    "graph_breaks": ev.graph_breaks,
                    "recompiles": ev.recompiles,
                    "compile_seconds": round(ev.compile_seconds, 3),
                    "code_sha256": ev.code_sha256,
                    "notes": _notes(graph, dtype_name, equal, ulp_max, nature, total),
                }
            )
    wall = time.perf_counter() - start
    table = pl.DataFrame(rows)
    pure = table.filter(~pl.col("has_implicit_computation"))
    implicit = table.filter(pl.col("has_implicit_computation"))
    context.add_output_metadata(
        {
            "compiles": table.height,
            "wall_seconds": round(wall, 2),
            "compile_seconds_total": round(float(table["compile_seconds"].sum()), 2),
            "pure_rows": pure.height,
            "pure_rows_bit_equal": int(pure["bit_equal"].sum()),
            "pure_rows_value_equal": int((pure["ulp_max"] == 0).sum()),
            "implicit_rows": implicit.height,
            "implicit_rows_bit_equal": int(implicit["bit_equal"].sum()),
            "counterexamples": dg.MetadataValue.md(_counterexample_list(table)),
        }
    )
    return table


def _counterexample_list(table: pl.DataFrame) -> str:
    """Markdown list of every row that is not bit-exact or hides arithmetic."""
    rows = table.filter(pl.col("has_implicit_computation") | ~pl.col("bit_equal"))
    lines = ["| subgraph | dtype | shape | layout | implicit | bit_equal | ulp_max | notes |", "|---|---|---|---|---|---|---|---|"]
    for r in rows.iter_rows(named=True):
        lines.append(
            f"| {r['subgraph']} | {r['dtype']} | {r['shape']} | {r['layout']} | {r['has_implicit_computation']} "
            f"| {r['bit_equal']} | {r['ulp_max']} | {r['notes']} |"
        )
    return "\n".join(lines)


def _row_names(frame: pl.DataFrame) -> str:
    return ", ".join(f"{r['subgraph']}/{r['dtype']}/{r['shape']}/{r['layout']}" for r in frame.iter_rows(named=True)) or "none"


def _row_notes(frame: pl.DataFrame) -> str:
    return "\n".join(f"- {r['subgraph']} {r['dtype']} {r['shape']} {r['layout']}: {r['notes']}" for r in frame.iter_rows(named=True))


RULE = Rule(
    claim="§2: operators that only move data (transpose, reshape, slice, concat, split, broadcast) give bit-identical "
    "results fused and eager",
    metric="per pure-movement row (subgraph x dtype x shape x layout): elements whose value differs between eager and "
    "fused, i.e. bit mismatches other than a NaN in both paths",
    decision="contradicted when any pure row has one element whose value differs; supported when every pure row "
    "has none; inconclusive when the table has no pure row. A NaN in both paths with another bit pattern keeps the "
    "value and is reported as a finding (pure_movement_nan_encodings), not judged here",
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
    description="Claim (§2): every pure data-movement row keeps every value bit for bit (a NaN re-encoded with the "
    "value still NaN is a finding, not a contradiction).",
)
def pure_movement_rows_bit_exact(data_movement_check_table: pl.DataFrame) -> dg.AssetCheckResult:
    pure = data_movement_check_table.filter(~pl.col("has_implicit_computation"))
    failed = pure.filter(~pl.col("bit_equal"))
    value_failed = failed.filter(pl.col("mismatched_elements") != pl.col("nan_encoding_mismatches"))
    if pure.height == 0:
        verdict, reason = INCONCLUSIVE, "the table has no pure data-movement row"
    elif value_failed.height:
        verdict, reason = CONTRADICTED, f"values changed in {value_failed.height} of {pure.height} pure rows: {_row_names(value_failed)}"
    else:
        verdict = SUPPORTED
        reason = f"every value kept in {pure.height} pure rows" + (
            f" ({failed.height} with NaN re-encodings only, see pure_movement_nan_encodings)" if failed.height else "")
    return claim_result(
        verdict,
        RULE,
        reason,
        {
            "pure_rows": pure.height,
            "not_bit_exact": failed.height,
            "value_differences": value_failed.height,
            "changed_values": dg.MetadataValue.md(_row_notes(value_failed) or "none: no pure row changed a value"),
        },
    )


@finding_check(
    asset=data_movement_check_table,
    description="Finding: pure data-movement rows that are not bit-exact only because a NaN has another bit pattern in "
    "the two paths (the value, NaN, is the same).",
)
def pure_movement_nan_encodings(data_movement_check_table: pl.DataFrame) -> dg.AssetCheckResult:
    pure = data_movement_check_table.filter(~pl.col("has_implicit_computation"))
    nan_only = pure.filter(~pl.col("bit_equal") & (pl.col("mismatched_elements") == pl.col("nan_encoding_mismatches")))
    return finding_result(
        [f"{r['subgraph']}/{r['dtype']}/{r['shape']}/{r['layout']}: {r['notes']}" for r in nan_only.iter_rows(named=True)],
        {
            "rows": nan_only.height,
            "nan_elements": int(nan_only["nan_encoding_mismatches"].sum()) if nan_only.height else 0,
            "finding": dg.MetadataValue.md(_row_notes(nan_only) or "none: no NaN re-encoded"),
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
        [f"{r['subgraph']}/{r['dtype']}/{r['shape']}/{r['layout']}: {r['notes']}" for r in differ.iter_rows(named=True)],
        {
            "implicit_rows": implicit.height,
            "not_bit_exact": differ.height,
            "max_ulp": int(differ["ulp_max"].max()) if differ.height else 0,
            "counterexamples": dg.MetadataValue.md(_row_notes(implicit) or "none ran"),
        },
    )


@validity_check(
    asset=data_movement_check_table,
    description="Run validity: every planned (subgraph, dtype, shape, layout) ran and fused: kernels generated, no "
    "graph break, no recompile.",
)
def every_movement_combination_fused(data_movement_check_table: pl.DataFrame, settings: ExperimentSettings) -> dg.AssetCheckResult:
    table = data_movement_check_table
    expected = len(plan(settings.get_profile().movement_shapes))
    not_fused = table.filter((pl.col("kernel_count") < 1) | (pl.col("graph_breaks") > 0) | (pl.col("recompiles") > 0))
    problems = []
    if table.height != expected:
        problems.append(f"{table.height} rows, planned {expected}")
    if not_fused.height:
        problems.append(f"not fused (no kernel, graph break or recompile): {_row_names(not_fused)}")
    return validity_result(
        problems,
        {
            "rows": table.height,
            "expected_rows": expected,
            "not_fused": _row_names(not_fused),
            "min_kernel_count": int(table["kernel_count"].min()) if table.height else 0,
        },
    )
