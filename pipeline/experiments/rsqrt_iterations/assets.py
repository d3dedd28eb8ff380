"""Task C3 (main document §1.2 (4)): rsqrt (and div) by iteration count.

The plan asks for the framework's own iteration-count switch (path B: "adjust iteration count in
the same framework"). Inductor exposes none: the run searches its configuration for options that
name rsqrt, Newton steps, iterations, reciprocals or approximate math and records what it finds
(``c3_framework_knobs``). So this experiment takes the plan's **fallback**: the framework's
implementation (path A: ``torch.rsqrt`` eager and fused) against a same-semantics implementation
whose iteration count we control (path B). Where Inductor exposes an approximate-math switch
(CPU: ``cpp.enable_floating_point_contract_flag``; ``cpp.enable_unsafe_math_opt_flag`` is found but
not run, see :data:`.rules.NOT_RUN_KNOBS`; CUDA:
``use_fast_math``, ``eager_numerics.division_rounding``), path A also runs under it, and the table
says whether the generated code and the result changed.

Path B is the classic bit-trick estimate (integer ``0x5f3759df - (bits >> 1)`` on the fp32
pattern) refined by N Newton steps ``y <- y * (1.5 - 0.5 * x * y * y)``, N = 0..3, computed in fp32
and rounded once to fp16; the ``fp16`` variant runs the same steps in fp16 arithmetic (every op
rounds to fp16). The plan's optional second example, div(x, y), has the same table
(``c3_div_table``): true division (path A) against x * reciprocal(y), the reciprocal from the
bit-trick estimate ``0x7ef311c3 - bits`` refined by N Newton steps ``r <- r * (2 - y * r)``.

The rsqrt input, which is also div's x, is fp16 U(0.01, 100) with special values mixed in at seeded
positions (+-0, +-inf, NaN, +-subnormals, negative normals, normals over the whole fp16 range;
:func:`.compute.special_inputs`); div's y gets its own seeded draw of them at its own positions. The
claims judge the framework's own ops (path A, eager and fused) against fp64 on every element (``c3_framework_rounding``): numeric results correctly rounded up to a
tie-flip margin and never more than one fp16 ULP off, special values exact. The Newton-iteration
tables cover the U(0.01, 100) body and are findings: path B is the harness's code, not the framework's.

Modules: :mod:`.compute` (the paths and their tables), :mod:`.rules` (the method and the statements
the report shares), this module (the asset and its metadata), :mod:`.checks` (the claims).
"""

from typing import Any

import dagster as dg
import polars as pl
import torch

from precisionkit import fp64_reference

from ...experiment import runs_where_applicable
from ...resources import ExperimentSettings
from ...tables import markdown_table
from .compute import (
    HIGH,
    INPUT_CLASSES,
    LOW,
    framework_knobs,
    framework_paths,
    newton_rsqrt_paths,
    pair_classes,
    path_table,
    reciprocal_div_paths,
    rounding_per_path,
    rounding_table,
    rsqrt_input,
    with_evidence,
    with_special_values,
)
from .rules import METHOD, floor_statement, knob_statement
from .spec import GROUP, ID


def _rsqrt(x: torch.Tensor) -> torch.Tensor:
    return torch.rsqrt(x)


def _div(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x / y


OUTS = {
    "c3_path_outputs": dg.AssetOut(
        description="C3 (§1.2 (4)): the fp16 inputs, fp64 references and every path's fp16 output (rsqrt, and div under 'div/').",
        kinds={"pytorch", "safetensors"},
        is_required=False,
    ),
    "c3_iteration_table": dg.AssetOut(
        description="C3 (§1.2 (4)), rsqrt: per path/iteration count: ULP and relative error vs fp64, before and after rounding to fp16. Path B is the plan's fallback (same-semantics implementation with a controlled iteration count); A_fused[...] rows run the framework under its approximate-math switches.",
        kinds={"polars"},
        is_required=False,
    ),
    "c3_div_table": dg.AssetOut(
        description="C3 (§1.2 (4)), the plan's optional div(x, y) in the same table form: true division (path A, eager, fused and under the approximate-math switches) vs x * reciprocal(y), the reciprocal by bit-trick estimate + N Newton steps (path B) or torch.reciprocal.",
        kinds={"polars"},
        is_required=False,
    ),
    "c3_framework_knobs": dg.AssetOut(
        description="C3 (§1.2 (4)): the search for an iteration-count or approximate-math switch: every Inductor option whose name matches the pattern, with its value.",
        kinds={"polars"},
        is_required=False,
    ),
    "c3_framework_rounding": dg.AssetOut(
        description="C3 (§1.2 (4)): per op (rsqrt, div), framework path (A_eager, A_fused, A_fused[switch]) and input "
        "class (U(0.01, 100) body, wide-range normals, +-subnormals, +-0, +-inf, negatives, NaN): elements, special "
        "results (exact NaN/+-inf/+-0), class mismatches, numeric results not correctly rounded and beyond one fp16 ULP "
        "against fp64 rounded to fp16. The framework claims are judged on these counts.",
        kinds={"polars"},
        is_required=False,
    ),
    "c3_ulp_histogram": dg.AssetOut(
        description="C3 (§1.2 (4)): integer-ULP histograms of every path vs the correctly rounded fp64 reference, and of A vs each B (div rows prefixed 'div').",
        kinds={"polars"},
        is_required=False,
    ),
}


_ITERATION_COLUMNS = ("path", "ulp_max", "ulp_mean", "rel_max", "pre_round_rel_max")


def iteration_metadata(
    table: pl.DataFrame, fused_evidence: dict[str, Any], first_call: float, knobs: pl.DataFrame
) -> dict[str, Any]:
    """Metadata of ``c3_iteration_table``: per path its max ULP (and pre-rounding relative error),
    the fused path's evidence, the table and the notes."""
    rows = table.to_dicts()
    columns = (*_ITERATION_COLUMNS, "pre_round_ulp16_max", "correctly_rounded_fraction", "vs_A_eager_equal_fraction")
    return {
        **{f"{r['path']}.ulp_max": r["ulp_max"] for r in rows},
        **{
            f"{r['path']}.pre_round_rel_max": r["pre_round_rel_max"] for r in rows if r["pre_round_rel_max"] is not None
        },
        "method": METHOD,
        "fused_first_call_seconds": round(first_call, 3),
        **{f"fused.{k}": v for k, v in fused_evidence.items() if isinstance(v, (int, float, str))},
        "table": dg.MetadataValue.md(markdown_table(table.select(*columns))),
        "notes": dg.MetadataValue.md(floor_statement(table, "rsqrt") + " " + knob_statement(knobs, table)),
    }


def div_metadata(div_table: pl.DataFrame, seed_y: int, knobs: pl.DataFrame) -> dict[str, Any]:
    """Metadata of ``c3_div_table``: per path its max ULP, the seed of y, the table and the notes."""
    columns = (*_ITERATION_COLUMNS, "correctly_rounded_fraction", "vs_A_eager_equal_fraction")
    return {
        **{f"{r['path']}.ulp_max": r["ulp_max"] for r in div_table.iter_rows(named=True)},
        "method": METHOD,
        "seed_y": seed_y,
        "table": dg.MetadataValue.md(markdown_table(div_table.select(*columns))),
        "notes": dg.MetadataValue.md(floor_statement(div_table, "div") + " " + knob_statement(knobs, div_table)),
    }


def rounding_metadata(rounding: pl.DataFrame) -> dict[str, Any]:
    """Metadata of ``c3_framework_rounding``: per op and path the share not correctly rounded, and the table."""
    per = rounding_per_path(rounding)
    return {
        **{
            f"{r['op']}.{r['path']}.not_correctly_rounded_share": r["not_correctly_rounded_share"]
            for r in per.iter_rows(named=True)
        },
        "class_mismatches": int(per["class_mismatches"].sum()),
        "table": dg.MetadataValue.md(markdown_table(per.drop("not_correctly_rounded_share"))),
    }


@dg.multi_asset(outs=OUTS, group_name=GROUP, pool="compute_device")
@runs_where_applicable(ID)
def c3_rsqrt_iterations(context: dg.AssetExecutionContext, settings: ExperimentSettings):
    """Runs torch.rsqrt and x / y (eager, fused, under the approximate-math switches) and the
    bit-trick + N Newton steps implementations on seeded fp16 inputs."""
    sizes = settings.sizes(ID)
    device = settings.torch_device()
    seed = settings.derived_seed("c3", "input")
    x, x_class = with_special_values(rsqrt_input(tuple(sizes.shape), seed), settings.derived_seed("c3", "specials"))
    ref = fp64_reference(torch.rsqrt, x)
    xd = x.to(device)
    paths, evidence, first_call = framework_paths(_rsqrt, (xd,), settings, device)
    # The iteration table covers the U(0.01, 100) body; every element (special values too) is in the rounding table.
    table, hist, outs = path_table(paths + newton_rsqrt_paths(xd), ref, regular=x_class == 0)
    table = with_evidence(table, evidence)
    rounding = [rounding_table("rsqrt", paths, ref, x_class, dict(enumerate(INPUT_CLASSES)))]
    outputs: dict[str, torch.Tensor] = {"input": x, "input_class": x_class, "fp64_reference": ref, **outs}

    # div(x, y): x as the rsqrt input, y an independent draw with its own special values.
    seed_y = settings.derived_seed("c3", "div_y")
    y, y_class = with_special_values(
        rsqrt_input(tuple(sizes.shape), seed_y), settings.derived_seed("c3", "div_y_specials")
    )
    yd = y.to(device)
    div_ref = x.double() / y.double()  # fp64: exact inputs, one rounding to fp64
    div_paths, div_evidence, _ = framework_paths(_div, (xd, yd), settings, device)
    div_table, div_hist, div_outs = path_table(
        div_paths + reciprocal_div_paths(xd, yd), div_ref, label="div ", regular=(x_class == 0) & (y_class == 0)
    )
    div_table = with_evidence(div_table, div_evidence)
    rounding.append(rounding_table("div", div_paths, div_ref, *pair_classes(x_class, y_class)))
    rounding_df = pl.concat(rounding)
    outputs.update(
        {
            "div/y": y,
            "div/y_class": y_class,
            "div/fp64_reference": div_ref,
            **{f"div/{k}": v for k, v in div_outs.items()},
        }
    )
    knobs = framework_knobs()

    yield dg.Output(
        outputs,
        output_name="c3_path_outputs",
        metadata={
            "shape": str(list(x.shape)),
            "seed": seed,
            "seed_div_y": seed_y,
            "range": f"U({LOW}, {HIGH}) with {int((x_class != 0).sum())} special values mixed in",
            "input_classes": ", ".join(INPUT_CLASSES),
        },
    )
    yield dg.Output(
        table,
        output_name="c3_iteration_table",
        metadata=iteration_metadata(table, evidence["A_fused"], first_call, knobs),
    )
    yield dg.Output(div_table, output_name="c3_div_table", metadata=div_metadata(div_table, seed_y, knobs))
    yield dg.Output(
        knobs,
        output_name="c3_framework_knobs",
        metadata={
            "options_found": knobs.height,
            "iteration_count_options": int(knobs["names_an_iteration_count"].sum()),
            "statement": dg.MetadataValue.md(knob_statement(knobs, table)),
            "table": dg.MetadataValue.md(markdown_table(knobs)),
        },
    )
    yield dg.Output(rounding_df, output_name="c3_framework_rounding", metadata=rounding_metadata(rounding_df))
    yield dg.Output(pl.DataFrame(hist + div_hist), output_name="c3_ulp_histogram")
