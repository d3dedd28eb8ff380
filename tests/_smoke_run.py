"""Smoke runs of experiments and the report built from them, shared by the site's tests and the
experiments' smoke tests (tests/conftest.py holds the session-wide run of every experiment)."""

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import dagster as dg

from pipeline.definitions import build_resources, report_site
from pipeline.resources import ExperimentSettings


def report_from(tmp: Path, experiments, strict: bool, device: str = "cpu") -> dict[str, Any]:
    """Materialize ``experiments`` at smoke size on ``device``, then the report, in an instance of their
    own; ``strict``: every step must succeed, else only the report has to build. Returns the folders,
    the instance, the resources and the run's result."""
    resources = build_resources(ExperimentSettings(profile="smoke", device=device), base_dir=str(tmp / "data"))
    instance = dg.DagsterInstance.ephemeral()
    assets = [a for exp in experiments for a in exp.assets()]
    checks = [c for exp in experiments for c in exp.checks()]
    result = dg.materialize(
        [*assets, *checks, report_site],
        resources=resources,
        instance=instance,
        run_config={
            "ops": {"report_site": {"config": {"docs_dir": str(tmp / "docs"), "build_dir": str(tmp / "build")}}}
        },
        raise_on_error=strict,
    )
    assert result.success if strict else result.output_for_node("report_site") is not None
    return {
        "root": tmp,
        "build": tmp / "build",
        "docs": tmp / "docs",
        "data": tmp / "data" / "smoke",
        "output": result.output_for_node("report_site"),
        "instance": instance,
        "resources": resources,
        "result": result,
    }


def smoke_report(tmp: Path, device: str = "cpu") -> dict[str, Any]:
    """:func:`report_from` every experiment but the planted-bug suite (whose page then shows as not yet run)
    on ``device``, steps allowed to fail: a test that reads an experiment asserts its own steps succeeded."""
    from pipeline.experiments import EXPERIMENTS

    return report_from(tmp, [exp for exp in EXPERIMENTS if exp.id != "Regression"], strict=False, device=device)


def failed_steps(run: dict[str, Any]) -> list[str]:
    """The step keys that failed in a shared run's result."""
    return [e.step_key for e in run["result"].all_events if e.is_step_failure and e.step_key]


class RunPart:
    """Some assets and checks of a shared run, read as their own materialization's result would be: its
    ``success``, check evaluations, materializations and outputs are those of these steps alone, and
    ``data`` is the run's data folder. Asserts at once that none of these steps failed in the run."""

    def __init__(self, run: dict[str, Any], definitions: Iterable[Any]):
        definitions = list(definitions)
        self.run, self.data, self.resources = run, run["data"], run["resources"]
        self._result = run["result"]
        self._steps = {d.node_def.name for d in definitions if hasattr(d, "node_def")}
        self._asset_keys = {k for d in definitions for k in getattr(d, "keys", ())}
        self._check_keys = {k for d in definitions for k in getattr(d, "check_keys", ())}
        failed = [s for s in failed_steps(run) if s in self._steps]
        self.success = failed == []
        assert self.success, f"steps failed in the shared smoke run: {failed}"

    def get_asset_check_evaluations(self) -> list:
        return [e for e in self._result.get_asset_check_evaluations() if e.asset_check_key in self._check_keys]

    def get_asset_materialization_events(self) -> list:
        return [e for e in self._result.get_asset_materialization_events() if e.asset_key in self._asset_keys]

    def asset_materializations_for_node(self, node: str) -> list:
        assert node in self._steps, f"{node} is not one of this part's steps"
        return self._result.asset_materializations_for_node(node)

    def output_for_node(self, node: str, output: str = "result") -> Any:
        assert node in self._steps, f"{node} is not one of this part's steps"
        return self._result.output_for_node(node, output)
