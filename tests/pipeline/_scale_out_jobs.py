"""Module-level job factory for the multiprocess test: child processes re-import this file and
call :func:`s_assets_job` to rebuild the job (``reconstructable`` needs a module-scope function)."""

import os

import dagster as dg

from pipeline.definitions import build_resources
from pipeline.experiments.toolkit import assets as toolkit
from pipeline.resources import ExperimentSettings

#: A slice of S (each step is a fresh process importing torch, a few seconds each on 2 cores).
WORKLOAD = "softmax"


def s_assets_job() -> dg.JobDefinition:
    """Smoke-profile S assets (one workload's pool and reference, the self-check) as a job on
    Dagster's default (multi-or-in-process) executor, storing under ``FUSION_DATA_DIR``."""
    settings = ExperimentSettings(profile="smoke", device="cpu")
    pick = lambda defs_list: [d for d in defs_list if any(WORKLOAD in k.to_user_string() for k in d.keys)]  # noqa: E731
    checks = [
        c for c in toolkit.reference_checks if any(WORKLOAD in k.asset_key.to_user_string() for k in c.check_keys)
    ]
    defs = dg.Definitions(
        assets=[*pick(toolkit.input_pools), *pick(toolkit.fp64_references), toolkit.toolkit_selfcheck],
        asset_checks=[*checks, toolkit.toolkit_selfcheck_all_cells_pass],
        jobs=[dg.define_asset_job("s_assets_multiprocess", selection=dg.AssetSelection.all())],
        resources=build_resources(settings, base_dir=os.environ["FUSION_DATA_DIR"]),
    )
    return defs.resolve_job_def("s_assets_multiprocess")
