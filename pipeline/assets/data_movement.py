"""Task D: pure data-movement subgraphs are bit-exact between eager and fused (main document §2).

Every catalogue subgraph (``pipeline.movement``) runs eager and fused for each dtype, profile
shape and memory layout; ``precisionkit.bit_equal`` decides. Counterexamples that hide arithmetic
(type promotion then downcast, a Python-scalar scale) run on one shape per dtype and are
reported with their cause, not failed.
"""


import time

import dagster as dg
import polars as pl
import torch

from precisionkit import bit_equal, bit_mismatch, fused, ulp_diff

from ..movement import CATALOGUE, COUNTEREXAMPLES, LAYOUTS, PURE, MovementGraph, make_input
from ..resources import ExperimentSettings
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


@dg.asset_check(
    asset=data_movement_check_table,
    description=(
        "Every pure data-movement row is bit-exact. A failure where every mismatch is a NaN in both "
        "paths with another encoding is a WARN finding; any value difference is an ERROR."
    ),
)
def pure_movement_rows_bit_exact(data_movement_check_table: pl.DataFrame) -> dg.AssetCheckResult:
    pure = data_movement_check_table.filter(~pl.col("has_implicit_computation"))
    failed = pure.filter(~pl.col("bit_equal"))
    value_failed = failed.filter(pl.col("mismatched_elements") != pl.col("nan_encoding_mismatches"))
    severity = dg.AssetCheckSeverity.ERROR if value_failed.height else dg.AssetCheckSeverity.WARN
    return dg.AssetCheckResult(
        passed=failed.height == 0,
        severity=severity,
        metadata={
            "pure_rows": pure.height,
            "not_bit_exact": failed.height,
            "value_differences": value_failed.height,
            "finding": dg.MetadataValue.md(
                "\n".join(f"- {r['subgraph']} {r['dtype']} {r['shape']} {r['layout']}: {r['notes']}" for r in failed.iter_rows(named=True))
                or "none: every pure data-movement row is bit-exact"
            ),
        },
    )


@dg.asset_check(
    asset=data_movement_check_table,
    description="Every planned (subgraph, dtype, shape, layout) ran and fused: kernels generated, no graph break, no recompile.",
)
def every_movement_combination_fused(data_movement_check_table: pl.DataFrame, settings: ExperimentSettings) -> dg.AssetCheckResult:
    table = data_movement_check_table
    expected = len(plan(settings.get_profile().movement_shapes))
    not_fused = table.filter((pl.col("kernel_count") < 1) | (pl.col("graph_breaks") > 0) | (pl.col("recompiles") > 0))
    return dg.AssetCheckResult(
        passed=table.height == expected and not_fused.height == 0,
        metadata={
            "rows": table.height,
            "expected_rows": expected,
            "not_fused": ", ".join(f"{r['subgraph']}/{r['dtype']}/{r['shape']}/{r['layout']}" for r in not_fused.iter_rows(named=True)) or "none",
            "min_kernel_count": int(table["kernel_count"].min()) if table.height else 0,
        },
    )
