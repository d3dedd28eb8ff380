"""Task C1's asset (main document §1.2 (2)): tensor x scalar versus tensor x broadcast tensor.

Path A multiplies an fp16 tensor by the Python scalar 0.7; path B first materializes 0.7 as an
fp16 0-dim tensor and broadcasts it (``expand_as``). The two paths differ in two ways at once: the
*route* (a scalar operand vs a broadcast tensor operand, i.e. possibly another instruction) and
the *value* (path A multiplies by 0.7 in its compute dtype, fp32 opmath for fp16; path B by 0.7
rounded to fp16, 0.7001953125). Two controls separate them:

* ``control_route_only``: path B's route with path A's value: a broadcast tensor holding the
  multiplier path A uses, in the compute dtype (fp32 for fp16 inputs), the product rounded back
  to the input dtype;
* ``control_value_only``: path A's route with path B's value: the Python scalar 0.7001953125.

Every path and control (:mod:`.paths`) runs eager and fused. Per route, ``c1_route_records`` keeps
what shows which instruction or kernel ran (:mod:`.mechanism`): the aten ops with their operand
kinds (dispatch trace), the profiler's kernel rows (device kernel names on CUDA) and the fused
kernel's multiply lines and constant. Where the routes lower to the same instruction, the table says
so, under the plan's fallback ("observe instruction changes in one path and disclose honestly"). The
ULP comparisons are in :mod:`.compare`, the decision rule in :mod:`.rules`, the checks in
:mod:`.checks`.
"""

from typing import Any

import dagster as dg
import polars as pl
import torch

from precisionkit import fp64_reference
from precisionkit.evidence import evidence_fields

from ...experiment import runs_where_applicable
from ...resources import ExperimentSettings
from ...tables import markdown_table
from .compare import error_table, ulp_tables
from .mechanism import C1Runs, code_constants, mechanism_evidence, route_records, run_paths
from .paths import SCALAR, compute_dtype, path_a, path_a_multiplier, rounded_scalar, selection_input
from .rules import route_statement
from .spec import GROUP, ID

OUTS = {
    "c1_path_outputs": dg.AssetOut(
        description="C1 (§1.2 (2)): the fp16 input and every path's and control's output, eager and fused.",
        kinds={"pytorch", "safetensors"},
        is_required=False,
    ),
    "c1_ulp_distribution": dg.AssetOut(
        description="C1 (§1.2 (2)): ULP = 0 / = 1 / >= 2 percentages per comparison: A vs B per mode, the route-only and value-only controls against A, eager vs fused, further controls.",
        kinds={"polars"},
        is_required=False,
    ),
    "c1_ulp_histogram": dg.AssetOut(
        description="C1 (§1.2 (2)): ULP-distance histogram per comparison (long format).",
        kinds={"polars"},
        is_required=False,
    ),
    "c1_error_vs_fp64": dg.AssetOut(
        description="C1 (§1.2 (2)): each path's and control's error against the fp64 reference (precisionkit.error_stats).",
        kinds={"polars"},
        is_required=False,
    ),
    "c1_mechanism_evidence": dg.AssetOut(
        description="C1 (§1.2 (2)): why the paths differ: eager op trace, fused kernel lines and constants, control runs.",
        kinds={"polars"},
        is_required=False,
    ),
    "c1_route_records": dg.AssetOut(
        description="C1 (§1.2 (2)): per mode and route (A, B and the two controls): the operand route and value, the aten ops, the kernels the profiler saw, the fused kernel's multiply lines and constant, and whether the instruction differs from path A's.",
        kinds={"polars"},
        is_required=False,
    ),
}


def c1_notes(dtype: torch.dtype, statement: str) -> str:
    """The multipliers of both paths in words, followed by the route statement."""
    fp16_value = rounded_scalar(dtype)
    return (
        f"Path A multiplies by 0.7 in its compute dtype ({str(compute_dtype(dtype)).removeprefix('torch.')}: "
        f"{path_a_multiplier(dtype)!r}); path B by 0.7 stored in {str(dtype).removeprefix('torch.')} ({fp16_value!r}), "
        f"a relative change of {fp16_value / SCALAR - 1:.3e}. " + statement
    )


def distribution_metadata(distribution: pl.DataFrame, notes: str) -> dict[str, Any]:
    """Metadata of ``c1_ulp_distribution``: A vs B shares per mode, the table and the notes."""
    head = {r["comparison"]: r for r in distribution.iter_rows(named=True)}
    shares = {
        f"{mode}_AB_{col}": head[f"{mode} A vs B"][col]
        for mode in ("eager", "fused")
        for col in ("ulp0_pct", "ulp1_pct", "ulp_ge2_pct")
    }
    return shares | {"table": dg.MetadataValue.md(markdown_table(distribution)), "notes": dg.MetadataValue.md(notes)}


def errors_metadata(errors: pl.DataFrame) -> dict[str, Any]:
    """Metadata of ``c1_error_vs_fp64``: max and mean ULP error per path, and the table."""
    rows = list(errors.iter_rows(named=True))
    columns = ("path", "ulp_max", "ulp_mean", "rel_max", "exact_fraction", "error_balance")
    return (
        {f"{r['path']}.ulp_max": r["ulp_max"] for r in rows}
        | {f"{r['path']}.ulp_mean": r["ulp_mean"] for r in rows}
        | {"table": dg.MetadataValue.md(markdown_table(errors.select(*columns)))}
    )


def evidence_metadata(runs: C1Runs, evidence: pl.DataFrame, same_instructions: bool, notes: str) -> dict[str, Any]:
    """Metadata of ``c1_mechanism_evidence``: the constants, the evidence by source, and every fused
    function's fusion evidence and first-call seconds."""
    fusion_meta: dict[str, Any] = {}
    for name, (compiled, seconds) in runs.fusion.items():
        fusion_meta.update(evidence_fields(compiled.evidence, prefix=f"fused_{name}."))
        fusion_meta[f"fused_{name}.first_call_seconds"] = round(seconds, 3)
    return {
        "fused_kernels_identical_but_constants": same_instructions,
        "constants_A": ", ".join(map(repr, code_constants(runs.fusion["A"][0].code))),
        "constants_B": ", ".join(map(repr, code_constants(runs.fusion["B"][0].code))),
        "evidence": dg.MetadataValue.md(_evidence_md(evidence)),
        "notes": dg.MetadataValue.md(notes),
        **fusion_meta,
    }


@dg.multi_asset(outs=OUTS, group_name=GROUP, pool="compute_device")
@runs_where_applicable(ID)
def c1_instruction_selection(context: dg.AssetExecutionContext, settings: ExperimentSettings):
    """Runs paths A and B and the route/value controls eager and fused on one seeded fp16 input."""
    seed = settings.derived_seed("c1", "input")
    x = selection_input(tuple(settings.sizes(ID).shape), seed, settings.torch_device())
    ref = fp64_reference(path_a, x)  # fp64: both paths compute x * 0.7 exactly
    runs = run_paths(x, settings.backend, settings.options())
    evidence, same_instructions = mechanism_evidence(runs)
    records = route_records(runs, x.dtype)
    distribution, histogram = ulp_tables(runs.outputs)
    errors = error_table(runs.outputs, ref)
    statement = route_statement(records, distribution)
    notes = c1_notes(x.dtype, statement)
    inputs_meta: dict[str, Any] = {
        "shape": str(list(x.shape)),
        "seed": seed,
        "scalar": SCALAR,
        "scalar_in_fp16": rounded_scalar(x.dtype),
        "path_a_multiplier": path_a_multiplier(x.dtype),
    }
    yield dg.Output({k: v.contiguous() for k, v in runs.outputs.items()}, "c1_path_outputs", metadata=inputs_meta)
    yield dg.Output(distribution, "c1_ulp_distribution", metadata=distribution_metadata(distribution, notes))
    yield dg.Output(histogram, "c1_ulp_histogram", metadata={"table": dg.MetadataValue.md(markdown_table(histogram))})
    yield dg.Output(errors, "c1_error_vs_fp64", metadata=errors_metadata(errors))
    yield dg.Output(
        evidence, "c1_mechanism_evidence", metadata=evidence_metadata(runs, evidence, same_instructions, notes)
    )
    yield dg.Output(
        records,
        "c1_route_records",
        metadata={
            "statement": dg.MetadataValue.md(statement),
            "table": dg.MetadataValue.md(markdown_table(records.drop("aten_ops"))),
        },
    )


def _evidence_md(df: pl.DataFrame) -> str:
    parts = []
    for (mode, path, source), group in df.group_by(["mode", "path", "source"], maintain_order=True):
        parts.append(f"**{mode} / {path} / {source}**\n```\n" + "\n".join(group["detail"].to_list()) + "\n```")
    return "\n\n".join(parts)
