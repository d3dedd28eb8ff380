"""Task D: pure data-movement subgraphs are bit-exact between eager and fused (main document §2).

Every catalogue subgraph (``pipeline.experiments.data_movement.movement``) runs eager and fused for each dtype, profile
shape and memory layout; ``precisionkit.bit_equal`` decides. Counterexamples that hide arithmetic
(type promotion then downcast, a Python-scalar scale) run on one shape per dtype and are
reported with their cause, not failed.

A combination the compiler did not fuse (it compiled each operation on its own, as OpenVINO does
transposes and concatenations, or ran the graph in torch after failing it) is still measured, and its row
says why in ``not_fused`` (:func:`pipeline.intents.declined`): the claim judges fused rows only, and a
finding lists the others.

Checks (:mod:`.checks`): the claim (every pure row keeps every bit, NaN payloads included) under
:data:`.checks.RULE`; run validity (every planned combination ran and fused, no graph break, no
recompile); and three findings: the rows the compiler did not fuse,
NaN payloads that differ, each with its cause measured by re-running the graph op by op eagerly and
fused (:func:`pipeline.experiments.data_movement.movement.localize_bit_difference`: which op changed the payload on which
path), and the implicit-computation counterexamples. Reshape rows record whether the reshape was a
view or a copy (``reshape_copied``, measured on the eager path).
"""

import math
import time
from collections.abc import Callable
from typing import Any, TypedDict

import dagster as dg
import polars as pl
import torch

from precisionkit import FusionError, FusionEvidence, bit_equal, bit_mismatch, fused, ulp_diff

from ...compile_pool import pool_size, run_tasks
from ...experiment import selected_parts, selection_provenance
from ...intents import compiler_title, declined
from ...progress import Progress
from ...resources import ExperimentSettings
from ...workloads import DTYPES
from .movement import (
    CATALOGUE,
    COUNTEREXAMPLES,
    LAYOUTS,
    PURE,
    Localization,
    MovementGraph,
    describe_localization,
    localize_bit_difference,
    movement_input,
    reshape_copied,
)
from .spec import GROUP, ID, MovementSizes

MOVEMENT_DTYPES = ("float16", "bfloat16", "float32")
#: Most rows whose NaN-payload difference keeps its op-by-op localization in one run, the first in plan
#: order (each costs a few compiles; rows beyond it read "not localized", as an unlocalized row does).
MAX_LOCALIZATIONS = 40
#: Device bytes one compile-pool task holds at most, per element of its shape (an estimate from what it
#: allocates, not measured): x and y (up to 8 B in fp32), the fp64 draw before its cast (8 B), eager and
#: fused outputs of up to twice the inputs (16 B), and the comparison's int64 ULP distances and their
#: temporaries over both outputs (about 64 B): 96 B, rounded up to 128 for the caching allocator.
TASK_BYTES_PER_ELEMENT = 128


def compile_plan(
    shapes: tuple[tuple[int, ...], ...], subgraphs: tuple[str, ...] | None = None
) -> list[tuple[str, str, tuple[int, ...], str]]:
    """Every (subgraph, dtype, shape, layout) to compile: pure graphs on every shape and layout,
    counterexamples on the last (odd-sized) shape, contiguous, to bound the compile count; only the
    ``subgraphs`` named where given (a run narrowed by ``report --select D:<subgraph>,...``)."""
    if not shapes:
        raise ValueError("the profile has no movement shapes")
    keep = set(subgraphs) if subgraphs is not None else set(CATALOGUE)
    combos = [(g, d, s, lay) for g in PURE if g in keep for d in MOVEMENT_DTYPES for s in shapes for lay in LAYOUTS]
    combos += [(g, d, shapes[-1], "contiguous") for g in COUNTEREXAMPLES if g in keep for d in MOVEMENT_DTYPES]
    return combos


def _as_tuple(out: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


_INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}


class MismatchNature(TypedDict):
    """Elements whose bits differ, how many of them are NaN in both paths, how many are zero in both
    paths with opposite signs, and up to three distinct (eager, fused) NaN bit patterns as hex."""

    mismatched: int
    nan_encoding_only: int
    signed_zero_only: int
    nan_patterns: list[str]


def _mismatch_nature(eager_out: tuple[torch.Tensor, ...], fused_out: tuple[torch.Tensor, ...]) -> MismatchNature:
    """Counts of mismatching elements, how many are NaN in both paths (encodings differ), how many
    are zeros whose sign differs, and up to three distinct (eager, fused) NaN bit patterns as hex."""
    total = nan_pairs = zero_pairs = 0
    patterns: list[str] = []
    for e, f in zip(eager_out, fused_out, strict=False):
        mask = bit_mismatch(e, f).mask
        total += int(mask.sum())
        both_nan = mask & torch.isnan(e) & torch.isnan(f)
        nan_pairs += int(both_nan.sum())
        if e.is_floating_point():
            zero_pairs += int((mask & (e == 0) & (f == 0)).sum())
        view = _INT_VIEW.get(e.dtype)
        if view is not None and int(both_nan.sum()):
            bits = (1 << (8 * e.element_size())) - 1
            for a, b in zip(e.view(view)[both_nan].tolist(), f.view(view)[both_nan].tolist(), strict=False):
                pair = f"eager {a & bits:#x} vs fused {b & bits:#x}"
                if pair not in patterns and len(patterns) < 3:
                    patterns.append(pair)
    return {
        "mismatched": total,
        "nan_encoding_only": nan_pairs,
        "signed_zero_only": zero_pairs,
        "nan_patterns": patterns,
    }


def _notes(
    graph: MovementGraph, dtype: str, equal: bool, ulp_max: int, nature: MismatchNature, total: int, cause: str = ""
) -> str:
    observed = "bit-exact" if equal else f"{nature['mismatched']} of {total} elements differ, max {ulp_max} ULP"
    if graph.has_implicit_computation:
        return f"{observed}; hidden arithmetic: {graph.explanation}"
    if equal:
        return f"{observed}; {graph.explanation}"
    if nature["mismatched"] == nature["nan_encoding_only"]:
        detail = f"every mismatch is a NaN in both paths with another bit pattern ({'; '.join(nature['nan_patterns'])})"
        return f"{observed}; {detail}; measured cause: {cause or 'not localized'}"
    if nature["mismatched"] == nature["signed_zero_only"]:
        detail = "every mismatch is a zero whose sign differs (1/x and copysign see it)"
        return f"{observed}; {detail}; measured cause: {cause or 'not localized'}"
    return f"{observed}; unexpected for pure data movement: values changed"


@dg.asset(
    group_name=GROUP,
    deps=["toolkit_selfcheck"],
    pool="compute_device",
    description=(
        "Feeds main document §2. Eager vs fused bit-equality of pure data-movement subgraphs "
        "(transpose/concat, slice/broadcast/concat, split/transpose/concat, reshape/concat of contiguous and "
        "non-contiguous inputs, RoPE rotate-half, a "
        "torch.full consumed by two concats) over dtype x shape x layout, plus counterexamples "
        "that hide arithmetic (promotion then downcast, scalar scale)."
    ),
    kinds={"pytorch", "polars"},
)
def data_movement_check_table(context: dg.AssetExecutionContext, settings: ExperimentSettings) -> pl.DataFrame:
    combos = compile_plan(settings.sizes(ID).shapes, selected_parts(ID))
    device = settings.torch_device()
    workers = compile_workers(settings.sizes(ID), device)
    start = time.perf_counter()
    table, localized = check_table(
        combos, settings.derived_seed, device, settings.backend, settings.options(), context.log.info, workers
    )
    context.add_output_metadata(
        {
            **table_metadata(table, time.perf_counter() - start, localized),
            "compile_workers": workers,
            **selection_provenance(ID),
        }
    )
    return table


def compile_workers(
    sizes: MovementSizes, device: torch.device, device_bytes: int | None = None, cores: int | None = None
) -> int:
    """The compile pool's processes for D's checks at ``sizes`` on ``device``: a task per input draw, each
    several subgraphs and up to :data:`TASK_BYTES_PER_ELEMENT` per element of the largest shape; a run asks
    about its device, the cost model about a GPU's host (D's cost)."""
    combos = compile_plan(sizes.shapes)
    keys = len({input_key(*c) for c in combos})
    return pool_size(
        device,
        keys,
        cores=cores,
        task_bytes=TASK_BYTES_PER_ELEMENT * max(math.prod(shape) for shape in sizes.shapes),
        device_bytes=device_bytes,
        compile_bound=sizes.compile_bound,
        compiles_per_task=len(combos) / keys,
    )


#: One draw of inputs: (dtype, shape, layout, salted with special values). Every subgraph of a
#: combination with this key reads the same ``x`` and ``y``; counterexamples get unsalted inputs.
InputKey = tuple[str, tuple[int, ...], str, bool]


def input_key(name: str, dtype_name: str, shape: tuple[int, ...], layout: str) -> InputKey:
    """The draw a combination reads: pure graphs get special values salted in, counterexamples not."""
    return (dtype_name, shape, layout, not CATALOGUE[name].has_implicit_computation)


def input_seeds(key: InputKey, derived_seed: Callable[..., int]) -> tuple[int, int]:
    """The seeds of ``x`` and ``y`` for one key, from the run's seed."""
    dtype_name, shape, layout, specials = key
    x, y = (derived_seed("movement", dtype_name, shape, layout, specials, part) for part in ("x", "y"))
    return x, y


def draw_inputs(key: InputKey, seeds: tuple[int, int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` and ``y`` of one key, drawn on ``device``. ``y`` is in the key's dtype when salted (pure
    graphs read it as it is), else in fp64, which each counterexample casts once to the type it reads
    (wider or not), as drawing it in that type would."""
    dtype_name, shape, layout, specials = key
    dtype = DTYPES[dtype_name]
    x = movement_input(shape, dtype, layout, seeds[0], specials=specials, device=device)
    y = movement_input(shape, dtype if specials else torch.float64, layout, seeds[1], specials=specials, device=device)
    return x, y


def graph_inputs(graph: MovementGraph, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs of ``graph`` from its key's draw: ``y`` in the type the graph reads."""
    return x, y.to(graph.y_dtype(x.dtype))


def combination_inputs(
    graph: MovementGraph,
    dtype_name: str,
    shape: tuple[int, ...],
    layout: str,
    derived_seed: Callable[..., int],
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The seeded ``x`` and ``y`` of one combination; pure graphs get special values salted in."""
    key = input_key(graph.name, dtype_name, shape, layout)
    return graph_inputs(graph, *draw_inputs(key, input_seeds(key, derived_seed), device))


#: What one combination measured, before the run decides whether its localization is kept: the row
#: without its notes and cause columns, the mismatch nature, the element count and the localization.
Measured = tuple[dict[str, Any], MismatchNature, int, Localization | None]


#: The columns of a row that compare the fused outputs with eager's (None where the compile failed).
_COMPARED = ("bit_equal", "ulp_max", "mismatched_elements", "nan_encoding_mismatches", "signed_zero_mismatches")


def run_fused(
    graph: MovementGraph, x: torch.Tensor, y: torch.Tensor, backend: str, options: dict[str, Any]
) -> tuple[str, FusionEvidence | None, tuple[torch.Tensor, ...] | None, str | None]:
    """The fused path of ``graph`` on ``x, y``: its compiler (the adapter's name), its evidence, its outputs,
    and why the compiler did not fuse it (None when it did). A graph the compiler compiled without fusing, or ran in torch after failing it,
    is measured all the same (:func:`pipeline.intents.declined`); one whose compile raised has no outputs
    and no evidence, and the reason names the error: the compiler's failure on that graph (a finding the
    check table keeps), where every other combination is still measured."""
    fn = fused(graph.fn, backend, options, dynamic=False)
    compiler = fn.adapter.name
    try:
        outputs = _as_tuple(fn(x, y))
        return compiler, fn.evidence, outputs, None
    except FusionError:
        why = declined(fn)
        if why is None:
            raise  # nothing compiled at all, or the graph broke: the run cannot measure fusion
        return compiler, fn.evidence, _as_tuple(fn(x, y)), why  # what the compiler runs now
    except Exception as exc:  # noqa: BLE001 - the compiler (or torch on what it returned) failed on this graph
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return compiler, None, None, f"compile failed with {compiler_title(backend)}: {type(exc).__name__}: {first}"


def measure_combination(
    name: str,
    dtype_name: str,
    shape: tuple[int, ...],
    layout: str,
    inputs: tuple[torch.Tensor, torch.Tensor],
    backend: str,
    options: dict[str, Any],
    may_localize: bool,
) -> Measured:
    """Subgraph ``name`` eager and fused on ``inputs``, bit for bit. With ``may_localize``, a pure row
    whose only mismatches are NaN payloads or signs of zero is re-run op by op to find the op that
    changed them."""
    graph = CATALOGUE[name]
    x, y = inputs
    eager_out = _as_tuple(graph.fn(x, y))
    compiler, ev, fused_out, not_fused = run_fused(graph, x, y, backend, options)
    total = sum(e.numel() for e in eager_out)
    compared: dict[str, Any] = dict.fromkeys(_COMPARED)  # None where the compile failed: nothing to compare
    nature: MismatchNature = {"mismatched": 0, "nan_encoding_only": 0, "signed_zero_only": 0, "nan_patterns": []}
    loc = None
    if fused_out is not None:
        nature = _mismatch_nature(eager_out, fused_out)
        equal = all(bit_equal(e, f) for e, f in zip(eager_out, fused_out, strict=False))
        compared = {
            "bit_equal": equal,
            "ulp_max": max(int(ulp_diff(e, f).max()) for e, f in zip(eager_out, fused_out, strict=False)),
            "mismatched_elements": nature["mismatched"],
            "nan_encoding_mismatches": nature["nan_encoding_only"],
            "signed_zero_mismatches": nature["signed_zero_only"],
        }
        # A NaN whose bits differ, or a zero whose sign differs: find, op by op, which op changed the
        # bits on which path.
        payload_only = nature["mismatched"] in (nature["nan_encoding_only"], nature["signed_zero_only"])
        if not equal and not graph.has_implicit_computation and payload_only and may_localize:
            loc = localize_bit_difference(graph.fn, (x, y), backend, options)
    row = {
        "subgraph": name,
        "dtype": dtype_name,
        "shape": "x".join(map(str, shape)),
        "layout": layout,
        "has_implicit_computation": graph.has_implicit_computation,
        **compared,
        "compiler": compiler,  # the adapter that compiled the fused path
        "kernel_count": ev.kernel_count if ev else 0,
        "graph_breaks": ev.graph_breaks if ev else None,
        "recompiles": ev.recompiles if ev else None,
        "precisions": ", ".join(ev.precisions) if ev else "",  # what the compiler's units ran in ("": not said)
        "compile_seconds": round(ev.compile_seconds, 3) if ev else None,
        "code_sha256": ev.code_sha256 if ev else None,
        "reshape_copied": reshape_copied(graph, x, y),
        "not_fused": not_fused,  # why the compiler did not fuse this combination; None when it did
    }
    return row, nature, total, loc


def finish_row(measured: Measured, keep_localization: bool = True) -> dict[str, Any]:
    """The check table's row of one measured combination: its cause columns (``None`` when not
    localized, or when the run's cap on localizations dropped it) and its notes."""
    row, nature, total, loc = measured
    if not keep_localization:
        loc = None
    graph = CATALOGUE[row["subgraph"]]
    cause = describe_localization(loc) if loc is not None else ""
    notes = (
        f"not measured: {row['not_fused']}"
        if row["bit_equal"] is None
        else _notes(graph, row["dtype"], row["bit_equal"], row["ulp_max"], nature, total, cause)
    )
    return {
        **row,
        "cause_op": None if loc is None else loc["op"],
        "cause_op_moves_data_only": None if loc is None else loc["op_moves_data_only"],
        "cause_path": None if loc is None else loc["departs_from_bitwise"],
        "notes": notes,
    }


def compare_combination(
    name: str,
    dtype_name: str,
    shape: tuple[int, ...],
    layout: str,
    inputs: tuple[torch.Tensor, torch.Tensor],
    backend: str,
    options: dict[str, Any],
    may_localize: bool,
) -> tuple[dict[str, Any], bool]:
    """One row of the check table (:func:`measure_combination` then :func:`finish_row`) and whether
    it was localized."""
    measured = measure_combination(name, dtype_name, shape, layout, inputs, backend, options, may_localize)
    return finish_row(measured), measured[3] is not None


def measure_key(
    names: list[str],
    key: InputKey,
    seeds: tuple[int, int],
    device: str,
    backend: str,
    options: dict[str, Any],
    plan_size: int,
) -> list[Measured]:
    """Every subgraph in ``names`` on one draw of ``key``'s inputs (a compile-pool task: plain
    arguments in, picklable results out; each payload difference is localized, the run caps them)."""
    x, y = draw_inputs(key, seeds, torch.device(device))
    dtype_name, shape, layout, _ = key
    # One compiled function per combination (dynamic=False): each subgraph's code object collects
    # one dynamo cache entry per dtype/shape/layout, more than the default recompile limit of 8.
    with torch._dynamo.config.patch(recompile_limit=plan_size + 8, accumulated_recompile_limit=4 * plan_size + 256):
        return [
            measure_combination(n, dtype_name, shape, layout, graph_inputs(CATALOGUE[n], x, y), backend, options, True)
            for n in names
        ]


def check_table(
    combos: list[tuple[str, str, tuple[int, ...], str]],
    derived_seed: Callable[..., int],
    device: torch.device,
    backend: str,
    options: dict[str, Any],
    log: Callable[[str], None] | None = None,
    workers: int = 1,
    here: bool = True,
) -> tuple[pl.DataFrame, int]:
    """Every combination's row (see :func:`compare_combination`), in plan order, and how many rows
    were localized op by op (the first :data:`MAX_LOCALIZATIONS` in plan order keep theirs).

    Inputs are drawn once per :data:`InputKey` on ``device``; each key's subgraphs are one task of
    the compile pool (``workers`` processes, ``here`` whether this one is among them: see
    :func:`pipeline.compile_pool.run_tasks`), and the table is the same however many there are."""
    keys: dict[InputKey, list[int]] = {}
    for i, (name, dtype_name, shape, layout) in enumerate(combos):
        keys.setdefault(input_key(name, dtype_name, shape, layout), []).append(i)
    tasks = [
        ([combos[i][0] for i in idx], key, input_seeds(key, derived_seed), str(device), backend, options, len(combos))
        for key, idx in keys.items()
    ]
    progress = Progress(log, "subgraph combinations", len(combos))

    def advance(_: int, out: list[Measured]) -> None:
        for _row in out:  # one line per row at most, rate-limited, the first and last always
            progress.advance()

    results = run_tasks(measure_key, tasks, device, workers, advance, here)
    measured: dict[int, Measured] = {}
    for idx, out in zip(keys.values(), results, strict=True):
        measured.update(zip(idx, out, strict=True))
    rows, localized = [], 0
    for i in range(len(combos)):
        keep = measured[i][3] is not None and localized < MAX_LOCALIZATIONS
        localized += keep
        rows.append(finish_row(measured[i], keep))
    table = pl.DataFrame(
        rows,
        schema_overrides={
            "reshape_copied": pl.Boolean,
            "not_fused": pl.String,
            "bit_equal": pl.Boolean,
            "ulp_max": pl.Int64,
            "mismatched_elements": pl.Int64,
            "nan_encoding_mismatches": pl.Int64,
            "signed_zero_mismatches": pl.Int64,
            "graph_breaks": pl.Int64,
            "recompiles": pl.Int64,
            "compile_seconds": pl.Float64,
            "code_sha256": pl.String,
            "cause_op": pl.String,
            "cause_op_moves_data_only": pl.Boolean,
            "cause_path": pl.String,
        },
    )
    return table, localized


def table_metadata(table: pl.DataFrame, wall: float, localized: int) -> dict[str, Any]:
    """Metadata of the check table: compile count and time, bit-exact counts, reshape copies and the
    counterexample list."""
    pure = table.filter(~pl.col("has_implicit_computation"))
    implicit = table.filter(pl.col("has_implicit_computation"))
    return {
        "compiles": table.height,
        "wall_seconds": round(wall, 2),
        "compile_seconds_total": round(float(table["compile_seconds"].sum()), 2),
        "pure_rows": pure.height,
        "pure_rows_bit_equal": int(pure["bit_equal"].sum()),
        "pure_rows_value_equal": int((pure["ulp_max"] == 0).sum()),
        "implicit_rows": implicit.height,
        "implicit_rows_bit_equal": int(implicit["bit_equal"].sum()),
        "reshape_rows": int(table["reshape_copied"].is_not_null().sum()),
        "reshape_rows_that_copied": int(table["reshape_copied"].fill_null(False).sum()),
        "payload_differences_localized": localized,
        "rows_not_fused": int(table["not_fused"].is_not_null().sum()) if "not_fused" in table.columns else 0,
        "counterexamples": dg.MetadataValue.md(_counterexample_list(table)),
    }


def _counterexample_list(table: pl.DataFrame) -> str:
    """Markdown list of every row that is not bit-exact or hides arithmetic."""
    rows = table.filter(pl.col("has_implicit_computation") | ~pl.col("bit_equal"))
    lines = [
        "| subgraph | dtype | shape | layout | implicit | bit_equal | ulp_max | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows.iter_rows(named=True):
        lines.append(
            f"| {r['subgraph']} | {r['dtype']} | {r['shape']} | {r['layout']} | {r['has_implicit_computation']} "
            f"| {r['bit_equal']} | {r['ulp_max']} | {r['notes']} |"
        )
    return "\n".join(lines)
