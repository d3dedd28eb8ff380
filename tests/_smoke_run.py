"""Smoke runs of experiments and the report built from them, shared by the site's tests and the
experiments' smoke tests (tests/conftest.py holds the session-wide run of every experiment)."""

from pathlib import Path
from typing import Any

import dagster as dg

from pipeline.definitions import build_resources, report_site
from pipeline.resources import ExperimentSettings


def report_from(tmp: Path, experiments, strict: bool) -> dict[str, Any]:
    """Materialize ``experiments`` at smoke size on the cpu, then the report, in an instance of their
    own; ``strict``: every step must succeed, else only the report has to build. Returns the folders,
    the instance, the resources and the run's result."""
    resources = build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=str(tmp / "data"))
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


def failed_steps(run: dict[str, Any]) -> list[str]:
    """The step keys that failed in a shared run's result."""
    return [e.step_key for e in run["result"].all_events if e.is_step_failure and e.step_key]
