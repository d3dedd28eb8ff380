"""Test tiers: ``make test-fast`` runs the unit tests only, leaving out every test that
materializes assets, runs the pipeline command or a browser (``-m "not materializes and not slow
and not browser"``). A test is marked ``materializes`` when its body or one of its fixtures calls
Dagster's materialization entry points, so new tests fall into the right tier by themselves."""

from __future__ import annotations

import functools
import inspect

import pytest
from _xdist_order import costliest_groups_first, xdist_group_of

_RUNS_ASSETS = (
    "materialize(",
    "report_from(",
    "smoke_everything",
    "execute_in_process(",
    "execute_job(",
    "pipeline.cli",
    'cli.main(["report"',
)


@functools.cache
def _runs_assets(fn) -> bool:
    """Whether ``fn``'s source calls one of :data:`_RUNS_ASSETS` (once per function: a fixture is asked about
    for every test that uses it)."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    return any(marker in source for marker in _RUNS_ASSETS)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks each item's tier and xdist group. Runs before pytest-xdist's own hook of the same name, which
    reads the group markers into the node ids it schedules by: run after it, the groups were never seen,
    and each worker made the session's smoke run for itself."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        defs = []
        names: list[str] = []
        if fixtures is not None:
            names = list(fixtures.names_closure)
            for name in names:
                defs += [d.func for d in fixtures.name2fixturedefs.get(name, ())]
        if _runs_assets(getattr(item, "function", None)) or any(_runs_assets(f) for f in defs):
            item.add_marker(pytest.mark.materializes)
        item.add_marker(pytest.mark.xdist_group(xdist_group_of(item.nodeid, names)))
    items[:] = costliest_groups_first(items)


@pytest.fixture(scope="session")
def smoke_everything(tmp_path_factory):
    """One smoke run of every experiment but the planted-bug suite (whose page then shows as not yet
    run) on the cpu, and the report built from it: the site's tests read its pages, and experiments' smoke
    tests read their part of it (``_smoke_run.RunPart``) instead of materializing their own. Steps may fail
    here; a test that reads an experiment asserts its own steps succeeded (``RunPart`` does)."""
    from _smoke_run import smoke_report

    return smoke_report(tmp_path_factory.mktemp("full-report"))
