"""Task S: seeded input pools on disk, their fp64 references, and the toolkit self-check.

Every later experiment (A, B, D, E) reads its inputs from these assets, so S sits upstream of
them in the asset graph.

Pools and references stream: set ``i`` of a pool is drawn from its own seed
(:meth:`ExperimentSettings.pool_set_seed`), and both are written a chunk of sets at a time (:class:`SetStream`)
and read back lazily, so memory holds one chunk whatever the set count (the seed profile's
pools are tens of GB in fp64). Both are computed on the run's device (a generator of that device
draws the pools; the references run there a chunk at a time); only writing them moves a chunk to the host.

fp64 references exist for B's chains, the only reader of references; A judges its FFN by
run-to-run bits, so the FFN has a pool and no reference.
"""

import math
from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg
import polars as pl
import torch

from precisionkit import fp64_reference
from precisionkit.selfcheck import self_check

from ...experiment import flat_sizes
from ...resources import ExperimentSettings
from ...set_storage import RECIPE_KEY, RegeneratedSets, SetRecipe, SetStream, SetTensor, register_recipe
from ...storage import NO_FUSED_PATH
from ...verdicts import validity_check, validity_result
from ...workloads import CHAINS, DTYPES, WORKLOADS, Workload
from .spec import GROUP, ID

#: dtypes stored per workload: the FFN feeds A (fp16 headline, bf16/fp32 extra rows); chains feed B.
POOL_DTYPES = {name: ("float16", "bfloat16") for name in CHAINS} | {"ffn": ("float16", "bfloat16", "float32")}


def pool_sets(workload: Workload, settings: ExperimentSettings) -> int:
    """Input sets per distribution: one fixed set for the FFN (task A), the profile's count for chains."""
    return 1 if workload.name == "ffn" else settings.sizes(ID).chain_sets


def pool_key(distribution: str, dtype: str, arg: str | None = None) -> str:
    return f"{distribution}/{dtype}" + (f"/{arg}" if arg else "")


#: fp64 bytes drawn per chunk of sets (at least one set): bounds a pool's working memory.
CHUNK_BYTES = 64 << 20


def draw_sets(
    workload: Workload,
    settings: ExperimentSettings,
    distribution: str,
    start: int,
    stop: int,
    dtype: str | None = None,
) -> dict[str, torch.Tensor]:
    """Input sets ``start..stop-1`` in float64, each from its own seed by a generator of the run's
    device and on it, stacked on a leading axis (``dtype``: the dtype a distribution set in its
    spacing's units is drawn for)."""
    sizes, device = settings.sizes(ID), settings.torch_device()
    drawn = [
        workload.sample(
            sizes, distribution, 1, settings.pool_set_seed(workload.name, distribution, i), dtype, device=device
        )
        for i in range(start, stop)
    ]
    return {a: torch.cat([d[a] for d in drawn]) for a in workload.arg_names}


def chunk_sets(set_bytes: int) -> int:
    """Sets per chunk so that one chunk's float64 values stay within :data:`CHUNK_BYTES`."""
    return max(1, CHUNK_BYTES // max(1, set_bytes))


def pool_stream(workload: Workload, settings: ExperimentSettings) -> SetStream:
    """The input pool of ``workload`` as a stream of sets: distribution x dtype x argument, each
    chunk drawn and rounded to its dtypes on the run's device."""
    shapes = workload.shapes(settings.sizes(ID))
    dtypes = POOL_DTYPES[workload.name]
    entries = {
        pool_key(d, t, a): (shapes[a], DTYPES[t])
        for d in workload.distributions
        for t in dtypes
        for a in workload.arg_names
    }

    def produce(start: int, stop: int) -> dict[str, torch.Tensor]:
        out = {}
        for d in workload.distributions:
            drawn = None if workload.in_dtype_units(d) else draw_sets(workload, settings, d, start, stop)
            for t in dtypes:
                values = drawn if drawn is not None else draw_sets(workload, settings, d, start, stop, t)
                out.update({pool_key(d, t, a): v.to(DTYPES[t]) for a, v in values.items()})
        return out

    last: dict[tuple[str, str | None, int, int], dict[str, torch.Tensor]] = {}

    def produce_key(key: str, start: int, stop: int) -> torch.Tensor:
        # One distribution's draw serves every argument (and, outside dtype units, every dtype): keep the
        # last one, since a reader asks for a batch's arguments one key after another.
        d, t, a = key.split("/")
        draw = (d, t if workload.in_dtype_units(d) else None, start, stop)
        if draw not in last:
            last.clear()
            last[draw] = draw_sets(workload, settings, d, start, stop, t if draw[1] else None)
        return last[draw][a].to(DTYPES[t])

    fp64_set_bytes = 8 * len(workload.distributions) * sum(math.prod(s) for s in shapes.values())
    return SetStream(entries, pool_sets(workload, settings), produce, chunk_sets(fp64_set_bytes), produce_key)


def reference_stream(workload: Workload, pool: Mapping[str, Any], device: torch.device | str = "cpu") -> SetStream:
    """fp64 references of every set of ``pool``, one per distribution x dtype, computed on ``device`` a
    chunk at a time: a chunk's inputs go to the device in one copy per argument, and each set is
    re-executed there by :func:`fp64_reference` on its own, so a reference is that of its set alone
    (one ``torch.func.vmap`` call per chunk was measured to change layer norm's fp64 bits on the CPU,
    at the smoke and default sizes, against the per-set call; the other chains kept theirs)."""
    first_arg = workload.arg_names[0]
    groups = sorted(k.rsplit("/", 1)[0] for k in pool if k.endswith(f"/{first_arg}"))
    if not groups:
        raise ValueError(f"the input pool of {workload.name!r} has no {first_arg!r} entries: rematerialize it")
    n_sets = pool[f"{groups[0]}/{first_arg}"].shape[0]
    meta = tuple(
        torch.empty(tuple(pool[f"{groups[0]}/{a}"].shape[1:]), dtype=torch.float64, device="meta")
        for a in workload.arg_names
    )
    out_shape = tuple(workload.fn(*meta).shape)
    entries = {g: (out_shape, torch.float64) for g in groups}

    def produce_key(g: str, start: int, stop: int) -> torch.Tensor:
        chunk = [pool[f"{g}/{a}"][start:stop].to(device) for a in workload.arg_names]
        return torch.stack(
            [fp64_reference(workload.fn, args, device) for args in zip(*(c.unbind() for c in chunk), strict=True)]
        )

    def produce(start: int, stop: int) -> dict[str, torch.Tensor]:
        return {g: produce_key(g, start, stop) for g in groups}

    set_bytes = sum(8 * math.prod(pool[f"{g}/{a}"].shape[1:]) for g in groups for a in workload.arg_names)
    return SetStream(
        entries, n_sets, produce, chunk_sets(set_bytes + 8 * len(groups) * math.prod(out_shape)), produce_key
    )


def _recipe_settings(params: Mapping[str, Any]) -> ExperimentSettings:
    return ExperimentSettings(profile=params["profile"], seed=int(params["seed"]), device=params["device"])


def _pool_recipe(params: Mapping[str, Any]) -> SetStream:
    return pool_stream(WORKLOADS[params["workload"]], _recipe_settings(params))


def _reference_recipe(params: Mapping[str, Any]) -> SetStream:
    settings, workload = _recipe_settings(params), WORKLOADS[params["workload"]]
    pool = RegeneratedSets(SetRecipe("input_pool", params, pool_stream(workload, settings)).as_json()[RECIPE_KEY])
    return reference_stream(workload, pool, settings.torch_device())


register_recipe("input_pool", _pool_recipe)
register_recipe("fp64_reference", _reference_recipe)


def as_recipe(kind: str, workload: Workload, settings: ExperimentSettings, stream: SetStream) -> SetRecipe:
    """``stream`` (``workload``'s pool, ``kind`` "input_pool", or its references, "fp64_reference") as a
    recipe to store in place of its sets: what a reader needs to produce the same bits again on the same
    device type (the pool's per-set seeds follow from the profile and the base seed)."""
    params = {"workload": workload.name, "profile": settings.profile, "seed": settings.seed, "device": settings.device}
    return SetRecipe(kind, params, stream)


def set_chunks(value: torch.Tensor | SetTensor, sets: int = 64) -> Iterator[torch.Tensor]:
    """A stored tensor's sets, ``sets`` at a time, without loading a lazily stored one whole."""
    if isinstance(value, SetTensor):
        for _, chunk in value.chunks(sets):
            yield chunk
    else:
        yield from value.split(sets)


def _input_pool_asset(workload: Workload) -> dg.AssetsDefinition:
    @dg.asset(
        name=f"input_pool_{workload.name}",
        group_name=GROUP,
        pool="compute_device",
        description=f"Seeded input sets for {workload.title}: every distribution x dtype, stacked on a leading set axis.",
        kinds={"pytorch", "safetensors"},
        tags=NO_FUSED_PATH,  # drawn from the seeds alone: stored once, read by every compiler's run
    )
    def input_pool(
        context: dg.AssetExecutionContext, settings: ExperimentSettings
    ) -> Any:  # a SetStream, or a SetRecipe in its place
        sizes, device = settings.sizes(ID), settings.torch_device()
        stream = pool_stream(workload, settings)
        context.add_output_metadata(
            {
                "sets_per_distribution": stream.n_sets,
                "sets_per_chunk": stream.chunk_sets,
                "bytes_per_set": stream.set_bytes(),
                "set_seeds": f"derived_seed('pool', {workload.name!r}, <distribution>, <set index>)",
                "generator": f"torch.Generator({device.type}) per set, seed = "
                f"settings.pool_set_seed({workload.name!r}, <distribution>, <set index>)",
                "draw_device": str(device),
                "distributions": ", ".join(workload.distributions),
                "dtypes": ", ".join(POOL_DTYPES[workload.name]),
                "arg_shapes": str({k: list(v) for k, v in workload.shapes(sizes).items()}),
                **flat_sizes(sizes, "profile."),
                "stored": _stored_note(settings),
            }
        )
        return stream if settings.stores_sets() else as_recipe("input_pool", workload, settings, stream)

    return input_pool


def _reference_asset(workload: Workload) -> dg.AssetsDefinition:
    @dg.asset(
        name=f"fp64_reference_{workload.name}",
        group_name=GROUP,
        pool="compute_device",
        ins={"pool": dg.AssetIn(f"input_pool_{workload.name}")},
        description=f"fp64 re-execution of {workload.title} on every input set, on the run's device "
        "(the judge for eager and fused).",
        kinds={"pytorch", "safetensors"},
        tags=NO_FUSED_PATH,  # eager fp64 on the pools: stored once, read by every compiler's run
    )
    def reference(
        context: dg.AssetExecutionContext, settings: ExperimentSettings, pool: Any
    ) -> Any:  # a SetStream or SetRecipe
        device = settings.torch_device()
        stream = reference_stream(workload, pool, device)
        context.add_output_metadata(
            {
                "entries": len(stream.entries),
                "sets": stream.n_sets,
                "sets_per_chunk": stream.chunk_sets,
                "reference_device": str(device),
                "stored": _stored_note(settings),
            }
        )
        return stream if settings.stores_sets() else as_recipe("fp64_reference", workload, settings, stream)

    return reference


def _stored_note(settings: ExperimentSettings) -> str:
    if settings.stores_sets():
        return "every set, in a safetensors file"
    return (
        f"a recipe only (profile {settings.profile!r}, keep_sets unset or false): readers draw and compute the sets "
        f"again on {settings.torch_device()} from the same seeds; set keep_sets (FUSION_KEEP_SETS=1) to store them"
    )


input_pools = [_input_pool_asset(w) for w in WORKLOADS.values()]
fp64_references = [_reference_asset(WORKLOADS[c]) for c in CHAINS]


def _reference_check(workload: Workload) -> dg.AssetChecksDefinition:
    key = dg.AssetKey(f"fp64_reference_{workload.name}")

    @validity_check(
        asset=key,
        name="references_are_float64_and_finite",
        description="Run validity: every reference is float64 and finite, one per distribution x dtype of the pool "
        "(a judge that is not float64 or not finite makes every error measured against it meaningless).",
    )
    def check(refs: Any) -> dg.AssetCheckResult:  # a SetTensors (lazy) or a dict of tensors
        wrong_dtype = sorted(k for k, v in refs.items() if v.dtype != torch.float64)
        nonfinite = {k: sum(int((~torch.isfinite(c)).sum()) for c in set_chunks(v)) for k, v in refs.items()}
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


reference_checks = [_reference_check(WORKLOADS[c]) for c in CHAINS]


@dg.asset(
    group_name=GROUP,
    description="dtype x IEEE value class coverage of precisionkit, each cell checked at materialization against bit-level expectations.",
    kinds={"polars"},
    tags=NO_FUSED_PATH,  # precisionkit's own arithmetic, no fused path
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
        {
            "cells": toolkit_selfcheck.height,
            "failed": ", ".join(f"{r['dtype']}/{r['value_class']}: {r['detail']}" for r in failed.iter_rows(named=True))
            or "none",
        },
    )
