import shutil

import dagster as dg
import pytest

from pipeline.assets import instruction_selection, rsqrt_iterations, toolkit
from pipeline.definitions import build_resources, report_site
from pipeline.resources import ExperimentSettings


def _checks(module) -> list:
    return [v for v in vars(module).values() if isinstance(v, dg.AssetChecksDefinition)] + [
        c for v in vars(module).values() if isinstance(v, list) for c in v if isinstance(c, dg.AssetChecksDefinition)
    ]


@pytest.fixture(scope="session")
def built_site(tmp_path_factory):
    """The report built from a smoke run of S, C1 and C3 (the other experiments stay not yet run)."""
    tmp = tmp_path_factory.mktemp("report")
    resources = build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=str(tmp / "data"))
    modules = (toolkit, instruction_selection, rsqrt_iterations)
    assets = [a for m in modules for v in vars(m).values() for a in (v if isinstance(v, list) else [v]) if isinstance(a, dg.AssetsDefinition) and not isinstance(a, dg.AssetChecksDefinition)]
    checks = list({id(c): c for m in modules for c in _checks(m)}.values())
    result = dg.materialize(
        [*assets, *checks, report_site],
        resources=resources,
        run_config={"ops": {"report_site": {"config": {"docs_dir": str(tmp / "docs"), "build_dir": str(tmp / "build")}}}},
    )
    assert result.success
    return {"root": tmp, "build": tmp / "build", "docs": tmp / "docs", "output": result.output_for_node("report_site")}


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
    from pipeline.definitions import all_checks, experiment_assets

    tmp = tmp_path_factory.mktemp("full-report")
    resources = build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=str(tmp / "data"))
    assets = [a for a in experiment_assets if all(a.group_names_by_key[k] != "regression" for k in a.keys)]
    keys = {k for a in assets for k in a.keys}
    checks = [c for c in all_checks if all(k.asset_key in keys for k in c.check_keys)]
    result = dg.materialize(
        [*assets, *checks, report_site],
        resources=resources,
        run_config={"ops": {"report_site": {"config": {"docs_dir": str(tmp / "docs"), "build_dir": str(tmp / "build")}}}},
        raise_on_error=False,
    )
    assert result.output_for_node("report_site") is not None
    return {"root": tmp, "build": tmp / "build", "docs": tmp / "docs", "output": result.output_for_node("report_site")}
