import shutil

import dagster as dg
import pytest

from pipeline.definitions import build_resources, report_site
from pipeline.experiments import EXPERIMENTS, experiment
from pipeline.resources import ExperimentSettings


def _report_from(tmp, experiments, strict: bool) -> dict:
    """Materialize ``experiments`` at smoke size on the cpu, then the report; ``strict``: every step
    must succeed, else only the report has to build."""
    resources = build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=str(tmp / "data"))
    assets = [a for exp in experiments for a in exp.assets()]
    checks = [c for exp in experiments for c in exp.checks()]
    result = dg.materialize(
        [*assets, *checks, report_site],
        resources=resources,
        run_config={
            "ops": {"report_site": {"config": {"docs_dir": str(tmp / "docs"), "build_dir": str(tmp / "build")}}}
        },
        raise_on_error=strict,
    )
    assert result.success if strict else result.output_for_node("report_site") is not None
    return {"root": tmp, "build": tmp / "build", "docs": tmp / "docs", "output": result.output_for_node("report_site")}


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The report built from a smoke run of S, C1 and C3 (the other experiments stay not yet run)."""
    return _report_from(tmp_path_factory.mktemp("report"), [experiment(e) for e in ("S", "C1", "C3")], strict=True)


@pytest.fixture(scope="session")
def chromium_path():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("Debian's chromium is not installed (make test installs it where apt-get is usable)")
    return path


@pytest.fixture(scope="session")
def full_site(tmp_path_factory):
    """The report built from a smoke run of every experiment (all but the planted-bug suite, whose
    page then shows as not yet run): the pages a reader opens, for the browser layout test."""
    ran = [exp for exp in EXPERIMENTS if exp.id != "Regression"]
    return _report_from(tmp_path_factory.mktemp("full-report"), ran, strict=False)
