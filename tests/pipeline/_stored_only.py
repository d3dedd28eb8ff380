"""Render an experiment's page as the report does, from a Dagster instance and a data folder, and
render it again with its judging functions patched to raise: a page that only formats stored
judgments reads the same both times."""

import sys
import types
from pathlib import Path

import dagster as dg
import pytest

from pipeline.experiment import Experiment
from pipeline.pagekit.render import Report
from pipeline.reporting.pages import experiment_page


def _raiser(name: str):
    def judged_while_rendering(*args, **kwargs):
        raise AssertionError(f"{name} was called while the page rendered: a page formats stored judgments only")

    return judged_while_rendering


def patch_to_raise(monkeypatch: pytest.MonkeyPatch, modules: list[types.ModuleType]) -> list[str]:
    """Every function defined in ``modules`` replaced by one that raises, wherever a loaded module
    binds it (``from .judge import judge_training`` included). Returns their names."""
    targets = {
        id(obj): f"{m.__name__}.{name}"
        for m in modules
        for name, obj in vars(m).items()
        if isinstance(obj, types.FunctionType) and obj.__module__ == m.__name__
    }
    for module in list(sys.modules.values()):
        for name, obj in list(vars(module).items()) if isinstance(module, types.ModuleType) else ():
            if id(obj) in targets and isinstance(obj, types.FunctionType):
                monkeypatch.setattr(module, name, _raiser(targets[id(obj)]))
    return sorted(targets.values())


def render_page(
    instance: dg.DagsterInstance, defs: dg.Definitions, data_dir: Path, docs_dir: Path, exp: Experiment
) -> str:
    """``exp``'s page of the smoke profile as the site builds it (charts and downloads under ``docs_dir``)."""
    report = Report(instance, defs.resolve_asset_graph(), data_dir, docs_dir, "smoke", "", "cpu")
    return experiment_page(report, exp)


def page_without_judges(
    monkeypatch: pytest.MonkeyPatch,
    instance: dg.DagsterInstance,
    defs: dg.Definitions,
    data_dir: Path,
    docs_dir: Path,
    exp: Experiment,
    judges: list[types.ModuleType],
) -> tuple[str, str, list[str]]:
    """The page rendered as usual, then with every function of ``judges`` patched to raise, and
    the names patched."""
    before = render_page(instance, defs, data_dir, docs_dir, exp)
    with monkeypatch.context() as mp:
        patched = patch_to_raise(mp, judges)
        after = render_page(instance, defs, data_dir, docs_dir, exp)
    return before, after, patched
