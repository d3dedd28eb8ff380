"""Test tiers: ``make test-fast`` runs the unit tests only, leaving out every test that
materializes assets, runs the pipeline command or a browser (``-m "not materializes and not slow
and not browser"``). A test is marked ``materializes`` when its body or one of its fixtures calls
Dagster's materialization entry points, so new tests fall into the right tier by themselves."""

from __future__ import annotations

import inspect

import pytest

_RUNS_ASSETS = (
    "materialize(",
    "report_from(",
    "smoke_everything",
    "execute_in_process(",
    "execute_job(",
    "pipeline.cli",
    'cli.main(["report"',
)


def _runs_assets(fn) -> bool:
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    return any(marker in source for marker in _RUNS_ASSETS)


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        defs = []
        if fixtures is not None:
            for name in fixtures.names_closure:
                defs += [d.func for d in fixtures.name2fixturedefs.get(name, ())]
        if _runs_assets(getattr(item, "function", None)) or any(_runs_assets(f) for f in defs):
            item.add_marker(pytest.mark.materializes)


@pytest.fixture(scope="session")
def smoke_everything(tmp_path_factory):
    """One smoke run of every experiment but the planted-bug suite (whose page then shows as not yet
    run), and the report built from it: the site's tests read its pages, and experiments' smoke tests
    that only read what a run stored (E's) read it instead of materializing their own. Steps may fail
    here; a test that reads an experiment asserts its own steps succeeded (``_smoke_run.failed_steps``)."""
    from _smoke_run import report_from

    from pipeline.experiments import EXPERIMENTS

    ran = [exp for exp in EXPERIMENTS if exp.id != "Regression"]
    return report_from(tmp_path_factory.mktemp("full-report"), ran, strict=False)
