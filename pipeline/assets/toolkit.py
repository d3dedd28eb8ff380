"""Task S: seeded input pools on disk, their fp64 references, and the toolkit self-check.

Every later experiment (A, B, D, E) reads its inputs from these assets, so S sits upstream of
them in the asset graph.
"""


import time

import dagster as dg
import polars as pl
import torch

from precisionkit import fp64_reference
from precisionkit.selfcheck import self_check

from ..resources import ExperimentSettings
from ..verdicts import validity_check, validity_result
from ..workloads import CHAINS, DTYPES, WORKLOADS, Workload, set_args

GROUP = "S_toolkit"
#: dtypes stored per workload: the FFN feeds A (fp16 headline, bf16/fp32 extra rows); chains feed B.
POOL_DTYPES = {name: ("float16", "bfloat16") for name in CHAINS} | {"ffn": ("float16", "bfloat16", "float32")}


def pool_sets(workload: Workload, settings: ExperimentSettings) -> int:
    """Input sets per distribution: one fixed set for the FFN (task A), the profile's count for chains."""
    return 1 if workload.name == "ffn" else settings.get_profile().chain_sets


def pool_key(distribution: str, dtype: str, arg: str | None = None) -> str:
    return f"{distribution}/{dtype}" + (f"/{arg}" if arg else "")


def _input_pool_asset(workload: Workload) -> dg.AssetsDefinition:
    @dg.asset(
        name=f"input_pool_{workload.name}",
        group_name=GROUP,
        pool="compute_device",
        description=f"Seeded input sets for {workload.title}: every distribution x dtype, stacked on a leading set axis.",
        kinds={"pytorch", "safetensors"},
    )
    def input_pool(context: dg.AssetExecutionContext, settings: ExperimentSettings) -> dict[str, torch.Tensor]:
        profile = settings.get_profile()
        n_sets = pool_sets(workload, settings)
        pool: dict[str, torch.Tensor] = {}
        for distribution in workload.distributions:
            drawn = workload.sample(profile, distribution, n_sets, settings.derived_seed("pool", workload.name, distribution))
            for dtype in POOL_DTYPES[workload.name]:
                for arg, values in drawn.items():
                    pool[pool_key(distribution, dtype, arg)] = values.to(DTYPES[dtype])
        context.add_output_metadata(
            {
                "sets_per_distribution": n_sets,
                "distributions": ", ".join(workload.distributions),
                "dtypes": ", ".join(POOL_DTYPES[workload.name]),
                "arg_shapes": str({k: list(v) for k, v in workload.shapes(profile).items()}),
                **{f"profile.{k}": v for k, v in profile.sizes().items() if isinstance(v, (int, str))},
            }
        )
        return pool

    return input_pool


def _reference_asset(workload: Workload) -> dg.AssetsDefinition:
    @dg.asset(
        name=f"fp64_reference_{workload.name}",
        group_name=GROUP,
        pool="compute_device",
        ins={"pool": dg.AssetIn(f"input_pool_{workload.name}")},
        description=f"fp64 CPU re-execution of {workload.title} on every input set (the judge for eager and fused).",
        kinds={"pytorch", "safetensors"},
    )
    def reference(context: dg.AssetExecutionContext, pool: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        start = time.perf_counter()
        out: dict[str, torch.Tensor] = {}
        first_arg = workload.arg_names[0]
        for key in sorted(k for k in pool if k.endswith(f"/{first_arg}")):
            distribution, dtype, _ = key.split("/")
            subset = {arg: pool[pool_key(distribution, dtype, arg)] for arg in workload.arg_names}
            n_sets = subset[first_arg].shape[0]
            out[pool_key(distribution, dtype)] = torch.stack(
                [fp64_reference(workload.fn, set_args(subset, workload, i)) for i in range(n_sets)]
            )
        context.add_output_metadata({"seconds": round(time.perf_counter() - start, 3), "entries": len(out)})
        return out

    return reference


input_pools = [_input_pool_asset(w) for w in WORKLOADS.values()]
fp64_references = [_reference_asset(w) for w in WORKLOADS.values()]


def _reference_check(workload: Workload) -> dg.AssetChecksDefinition:
    key = dg.AssetKey(f"fp64_reference_{workload.name}")

    @validity_check(
        asset=key,
        name="references_are_float64_and_finite",
        description="Run validity: every reference is float64 and finite, one per distribution x dtype of the pool "
        "(a judge that is not float64 or not finite makes every error measured against it meaningless).",
    )
    def check(refs: dict[str, torch.Tensor]) -> dg.AssetCheckResult:
        wrong_dtype = sorted(k for k, v in refs.items() if v.dtype != torch.float64)
        nonfinite = {k: int((~torch.isfinite(v)).sum()) for k, v in refs.items()}
        nonfinite = {k: n for k, n in nonfinite.items() if n}
        expected = len(workload.distributions) * len(POOL_DTYPES[workload.name])
        problems = []
        if wrong_dtype:
            problems.append(f"not float64: {', '.join(wrong_dtype)}")
        if nonfinite:
            problems.append(f"non-finite references: {nonfinite}")
        if len(refs) != expected:
            problems.append(f"{len(refs)} references, expected {expected}")
        return validity_result(
            problems,
            {
                "entries": len(refs),
                "expected_entries": expected,
                "not_float64": ", ".join(wrong_dtype) or "none",
                "non_finite_counts": str(nonfinite or "none"),
            },
        )

    return check


reference_checks = [_reference_check(w) for w in WORKLOADS.values()]


@dg.asset(
    group_name=GROUP,
    description="dtype x IEEE value class coverage of precisionkit, each cell checked at materialization against bit-level expectations.",
    kinds={"polars"},
)
def toolkit_selfcheck(context: dg.AssetExecutionContext) -> pl.DataFrame:
    table = pl.DataFrame(self_check())
    failed = table.filter(~pl.col("passed"))
    context.add_output_metadata(
        {
            "cells": table.height,
            "failed_cells": failed.height,
            "coverage": dg.MetadataValue.md(_markdown(table)),
        }
    )
    return table


def _markdown(table: pl.DataFrame) -> str:
    classes = table["value_class"].unique(maintain_order=True).to_list()
    lines = ["| dtype | " + " | ".join(classes) + " |", "|---" * (len(classes) + 1) + "|"]
    for dtype in table["dtype"].unique(maintain_order=True).to_list():
        cells = table.filter(pl.col("dtype") == dtype)
        marks = ["pass" if p else "FAIL" for p in cells["passed"].to_list()]
        lines.append(f"| {dtype} | " + " | ".join(marks) + " |")
    return "\n".join(lines)


@validity_check(
    asset=toolkit_selfcheck,
    description="Run validity: every dtype x value-class cell of the toolkit self-check passes (the measuring tool works).",
    blocking=True,
)
def toolkit_selfcheck_all_cells_pass(toolkit_selfcheck: pl.DataFrame) -> dg.AssetCheckResult:
    failed = toolkit_selfcheck.filter(~pl.col("passed"))
    return validity_result(
        [f"{r['dtype']}/{r['value_class']}: {r['detail']}" for r in failed.iter_rows(named=True)],
        {"cells": toolkit_selfcheck.height,
         "failed": ", ".join(f"{r['dtype']}/{r['value_class']}: {r['detail']}" for r in failed.iter_rows(named=True)) or "none"},
    )
