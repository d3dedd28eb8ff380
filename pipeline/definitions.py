"""The code location: assembles assets, checks, resources, the all-assets job and its schedule."""

import dagster as dg

from .cluster import celery_jobs
from .experiments import EXPERIMENTS
from .instruments.regression.drift import promote_baseline_job
from .progress import progress_logger
from .reporting.asset import build_report_asset
from .resources import ExperimentSettings
from .storage import DataFolder, PrecisionIOManager

#: Each experiment's own assets and checks, as the registry lists them.
experiment_definitions = [exp.definitions() for exp in EXPERIMENTS]
experiment_assets = [a for exp in EXPERIMENTS for a in exp.assets()]
all_checks = [c for exp in EXPERIMENTS for c in exp.checks()]
#: The report renders last: it depends on every experiment asset.
report_site = build_report_asset(experiment_assets, all_checks)

#: Materializes every asset (and runs every check): the full report.
all_assets_job = dg.define_asset_job(
    "all_assets_job",
    selection=dg.AssetSelection.all(),
    description="Materialize every experiment asset and the report; run every asset check.",
)

#: Nightly regression baseline; off until switched on in the UI (Automation tab).
nightly_schedule = dg.ScheduleDefinition(
    name="nightly_regression",
    job=all_assets_job,
    cron_schedule="0 3 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Re-run every experiment nightly so a compiler or framework upgrade that moves numerics shows up the next morning.",
)


def build_resources(settings: ExperimentSettings | None = None, base_dir: str | None = None) -> dict:
    """Resources for the code location; ``settings`` defaults to launch-time configuration, and
    the IO manager shares that same resource so stored files follow the run's profile."""
    shared = settings if settings is not None else ExperimentSettings.configure_at_launch()
    data = DataFolder(root=base_dir) if base_dir else DataFolder()
    return {
        "settings": shared,
        "data": data,
        "io_manager": PrecisionIOManager(data=data, settings=shared),
    }


defs = dg.Definitions.merge(
    *experiment_definitions,
    dg.Definitions(
        assets=[report_site],
        # all_assets_celery joins where dagster-celery is installed (the cluster extra).
        jobs=[all_assets_job, promote_baseline_job, *celery_jobs()],
        schedules=[nightly_schedule],
        resources=build_resources(),
        # Runs with no logger configuration get Dagster's default console logger; the CLI picks
        # "progress" (compact lines) or, with --verbose, "console" at DEBUG.
        loggers={"console": dg.colored_console_logger, "progress": progress_logger},
    ),
)
