"""The jobs the cluster tests run: the code location's Celery job (reconstructable, as workers load
it) and the same selection in process, and how their stored values are compared."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl
import torch

from pipeline import set_storage
from pipeline.cluster import CELERY_JOB
from pipeline.definitions import all_checks, build_resources, defs, experiment_assets
from pipeline.resources import REPO_ROOT, ExperimentSettings

#: Columns that hold wall-clock measurements, which no two runs share; every other column must match.
TIMING_COLUMNS = {"compile_seconds", "ms_per_run"}


def celery_job():
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    repo = ReconstructableRepository.for_module("pipeline.definitions", "defs", working_directory=str(REPO_ROOT))
    return repo.get_reconstructable_job(CELERY_JOB)


def heavy_steps(selection: list[dg.AssetKey]) -> set[str]:
    """Step keys of the selection's assets in pool compute_device."""
    graph = defs.resolve_asset_graph()
    return {graph.get(k).assets_def.op.name for k in selection if graph.get(k).assets_def.op.pool == "compute_device"}


def step_events(instance, run_id: str, kind: dg.DagsterEventType) -> list:
    return [r for r in instance.all_logs(run_id, of_type=kind) if r.dagster_event is not None]


def worker_of_steps(instance, run_id: str) -> dict[str, str]:
    """Step key -> the Celery worker (node name) that ran it, from the workers' engine events."""
    out = {}
    for record in step_events(instance, run_id, dg.DagsterEventType.ENGINE_EVENT):
        meta = record.dagster_event.engine_event_data.metadata or {}
        if "Celery worker" in meta:
            out[record.step_key] = str(getattr(meta["Celery worker"], "value", meta["Celery worker"]))
    return out


def in_process_job(data_root: Path, selection: list[dg.AssetKey]) -> dg.JobDefinition:
    """The code location's assets and checks of ``selection`` as an in-process job of the smoke
    profile on the CPU, storing under ``data_root``."""
    local = dg.Definitions(
        assets=experiment_assets,
        asset_checks=all_checks,
        resources=build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=str(data_root)),
    )
    graph = local.resolve_asset_graph()
    checks = {c for c in graph.asset_check_keys if c.asset_key in selection}
    job = local.resolve_implicit_global_asset_job_def()
    return job.get_subset(asset_selection=set(selection), asset_check_selection=checks)


def value_differences(a, b) -> list[str]:
    """How two stored values differ (empty: equal): tensors bit for bit, tables column by column
    (wall-clock columns left out), JSON exactly."""
    if isinstance(a, pl.DataFrame):
        if not isinstance(b, pl.DataFrame) or a.columns != b.columns or a.height != b.height:
            return [f"table shapes differ: {a.columns} x {a.height} vs {getattr(b, 'columns', None)}"]
        return [
            f"column {c}: {a[c].to_list()} vs {b[c].to_list()}"
            for c in a.columns
            if c not in TIMING_COLUMNS and not a.select(c).equals(b.select(c))
        ]
    if isinstance(a, (dict, set_storage.SetTensors)) and a and all(hasattr(v, "dtype") for v in a.values()):
        if set(a) != set(b):
            return [f"keys differ: {sorted(a)} vs {sorted(b)}"]
        load = lambda v: v.load() if isinstance(v, set_storage.SetTensor) else v  # noqa: E731
        return [f"tensor {k} differs" for k in a if not torch.equal(load(a[k]), load(b[k]))]
    return [] if a == b else [f"{a!r} vs {b!r}"]


def same_value(a, b) -> bool:
    return not value_differences(a, b)
