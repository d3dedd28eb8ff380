"""Experiment M (beyond the test plan): does fusion change the numerics of real models, and is it
worse than eager?

For every architecture of the profile (:mod:`.zoo`, built from ``transformers`` configs with seeded
random weights) and every workload the user names (``FUSION_WORKLOADS``, :mod:`.workloads`), in
every dtype: eager, fused (the run's backend) and an fp64 re-execution of the same module on the
same seeded batches. :mod:`.judge` turns the outputs into M's verdict per model x dtype (B's paired
rule, :mod:`.rules`) with ``torch._dynamo.utils.same``'s answer beside it; where fused is worse or
``same()`` fails, :func:`precisionkit.locate_divergence` names the first submodule whose error departs.

A model that cannot compile, or compiles to no graph, is an invalid run with its reason: never a
silent eager fallback.
"""

from typing import Any

import dagster as dg
import polars as pl
from pydantic import Field
from torch import nn

from precisionkit import locate_divergence

from ...compile_pool import pool_size, run_tasks
from ...progress import Progress
from ...resources import ExperimentSettings
from ...tables import markdown_table
from .compute import DTYPES, ModelRun, batch_inputs, model_seeds, run_architecture, working_module
from .judge import needs_locating, output_table, verdict_table
from .spec import GROUP, ID
from .user_workloads import WorkloadError, load_workloads, workload_dtypes
from .zoo import zoo_workloads

OUTS = {
    "model_outputs": dg.AssetOut(
        description="M: per model x dtype x input batch x output, eager's and fused's error against the fp64 "
        "re-execution (scale-aware ULP per unit: max and P99; RMSE), non-finite counts, and element by element "
        "against fp64: integer/bool mismatches, float-class (NaN, +-inf, +-0) differences and the first one.",
        kinds={"polars"},
    ),
    "model_verdicts": dg.AssetOut(
        description="M: per model x dtype, the paired verdict (B's rule on the model's output units, Holm over the "
        "table), torch._dynamo.utils.same's answer beside it and why they disagree, the fusion evidence (graphs, "
        "graph breaks, kernels) and the first divergent module where the locator ran.",
        kinds={"polars"},
    ),
    "model_divergence": dg.AssetOut(
        description="M: the divergence locator's per-module table for every model x dtype where fused is worse "
        "(contradicted) or same() failed: error of each submodule call, eager and fused, against fp64.",
        kinds={"polars"},
    ),
}

#: The locator's columns kept in ``model_divergence`` (its full table has more).
DIVERGENCE_COLUMNS = (
    "layer",
    "module_type",
    "eager_local_err",
    "fused_local_err",
    "excess",
    "noise",
    "divergent",
    "ulp_eager_vs_fused_max",
)


class ModelsConfig(dg.Config):
    architectures: list[str] = Field(
        default_factory=list,
        description="architectures of M's zoo to run (gpt2, bert, llama, t5, resnet50, vit, convnext); empty: the "
        "profile's; ['none']: only the user's workloads",
    )
    dtypes: list[str] = Field(default_factory=list, description="float32 / bfloat16 / float16; empty: the profile's")


def workloads_for(settings: ExperimentSettings, architectures: list[str] | None = None) -> list[Any]:
    """The profile's architectures (or ``architectures``) and the user's workloads (checked: a bad
    spec raises its one line)."""
    sizes = settings.sizes(ID)
    names = tuple(a for a in (architectures or sizes.architectures) if a != "none")
    zoo = zoo_workloads(names, sizes.scale, sizes.seq_len, sizes.image_size)
    user = load_workloads(settings.workloads, settings.torch_device())
    clash = {w.name for w in user} & {w.name for w in zoo}
    if clash:
        raise WorkloadError(f"workload names {sorted(clash)} are taken by M's own architectures; rename them")
    return [*zoo, *user]


def _locate(module: Any, inputs: tuple[Any, ...], settings: ExperimentSettings) -> tuple[str | None, pl.DataFrame]:
    result = locate_divergence(module, inputs, backend=settings.backend, options=settings.options(), modules="leaves")
    table = pl.DataFrame(result.columns(), infer_schema_length=None)
    keep = [c for c in DIVERGENCE_COLUMNS if c in table.columns]
    return result.first_divergent_layer, table.select(keep) if keep else table


def run_workloads(
    plan: list[tuple[Any, tuple[str, ...]]], sizes: Any, settings: ExperimentSettings, progress: Progress
) -> list[ModelRun]:
    """Every (workload, dtypes) of ``plan``, in plan order: one task per workload, its module built once
    and cast per dtype (:func:`run_architecture`). M's own architectures go to the compile pool
    (:mod:`pipeline.compile_pool`, sized to the machine); the user's workloads run in this process,
    which imported them."""
    device = settings.torch_device()

    def task(w: Any, d: tuple[str, ...]) -> tuple[Any, ...]:
        seeds = model_seeds(w.name, sizes.batches, settings.derived_seed)
        return (w, d, str(device), sizes.batches, sizes.batch_size, settings.backend, settings.options(), seeds)

    def advance(_: int, runs: list[ModelRun]) -> None:
        for run in runs:
            progress.advance(note=f"{run.model} {run.dtype}: {run.error or f'{run.seconds:.1f} s'}")

    zoo = [task(w, d) for w, d in plan if getattr(w, "source", "user") != "user"]
    user = [task(w, d) for w, d in plan if getattr(w, "source", "user") == "user"]
    done = run_tasks(run_architecture, zoo, device, pool_size(device, len(zoo)), advance)
    done += run_tasks(run_architecture, user, device, 1, advance)
    by_name = {runs[0].model: runs for runs in done if runs}
    return [run for w, _ in plan for run in by_name.get(w.name, [])]


@dg.multi_asset(outs=OUTS, group_name=GROUP, pool="compute_device")
def model_runs(context: dg.AssetExecutionContext, config: ModelsConfig, settings: ExperimentSettings):
    """Runs every model of the profile and every registered workload, eager, fused and fp64."""
    sizes = settings.sizes(ID)
    device = settings.torch_device()
    bad = [d for d in config.dtypes if d not in DTYPES]
    if bad:
        raise dg.Failure(description=f"unknown dtypes {bad}; expected {', '.join(DTYPES)}")
    try:
        workloads = workloads_for(settings, config.architectures)
    except (WorkloadError, ValueError) as exc:
        raise dg.Failure(description=str(exc)) from None
    plan = [(w, workload_dtypes(w, tuple(config.dtypes) or sizes.dtypes_for(w.name))) for w in workloads]
    runs = run_workloads(
        plan, sizes, settings, Progress(context.log.info, "models x dtypes", sum(len(d) for _, d in plan))
    )
    verdicts = verdict_table(runs, seed=settings.derived_seed("M", "bootstrap"))
    by_name = {w.name: w for w in workloads}
    located: dict[tuple[str, str], str | None] = {}
    tables = []
    for row in verdicts.iter_rows(named=True):
        if not needs_locating(row):
            continue
        context.log.info(f"locating the divergence of {row['model']} {row['dtype']}")
        w = by_name[row["model"]]
        # Built again from the same seed rather than kept: a model at real size is large.
        module = working_module(w, row["dtype"], device, settings.derived_seed)
        if not isinstance(module, nn.Module):
            context.log.info(f"{row['model']} is a plain callable: no submodules to locate a divergence in")
            continue
        first = batch_inputs(w, 0, row["dtype"], device, sizes.batch_size, settings.derived_seed)
        name, table = _locate(module, first, settings)
        located[(row["model"], row["dtype"])] = name
        tables.append(table.with_columns(pl.lit(row["model"]).alias("model"), pl.lit(row["dtype"]).alias("dtype")))
    verdicts = verdicts.with_columns(
        pl.struct("model", "dtype")
        .map_elements(lambda s: located.get((s["model"], s["dtype"])), return_dtype=pl.String)
        .alias("first_divergent_module"),
        pl.struct("model", "dtype")
        .map_elements(lambda s: (s["model"], s["dtype"]) in located, return_dtype=pl.Boolean)
        .alias("located"),
    )
    divergence = (
        pl.concat(tables, how="diagonal_relaxed").select("model", "dtype", pl.exclude("model", "dtype"))
        if tables
        else pl.DataFrame(schema={"model": pl.String, "dtype": pl.String, "layer": pl.String})
    )
    outputs = output_table(runs)
    # Which user workloads these values hold, recorded as provenance of M alone: a resumed report
    # re-runs M (and nothing else) when FUSION_WORKLOADS names others.
    mine = {"provenance.workloads": settings.workloads}
    yield dg.Output(outputs, output_name="model_outputs", metadata={"rows": outputs.height, **mine})
    shown = verdicts.select(
        "model", "dtype", "eager_p99", "fused_p99", "verdict", "same_verdict", "first_divergent_module", "error"
    )
    yield dg.Output(
        verdicts,
        output_name="model_verdicts",
        metadata={
            **mine,
            "models": verdicts["model"].n_unique(),
            "dtypes": ", ".join(sorted(set(verdicts["dtype"]))),
            "workloads_from_user": sum(getattr(w, "source", "user") == "user" for w in workloads),
            **{f"verdict.{v}": int((verdicts["verdict"] == v).sum()) for v in sorted(set(verdicts["verdict"]))},
            "table": dg.MetadataValue.md(markdown_table(shown)),
        },
    )
    yield dg.Output(divergence, output_name="model_divergence", metadata={"located": len(located), **mine})


__all__ = ["DTYPES", "model_runs"]
