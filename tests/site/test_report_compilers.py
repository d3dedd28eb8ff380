"""The built site with two compilers' results: Inductor's smoke run of C3, and OpenVINO's records that C3
does not apply to it (what ``report --backends inductor,openvino`` stores for C3), side by side."""

from pathlib import Path

import dagster as dg

from pipeline.compilers import not_applicable_experiments, record_not_applicable
from pipeline.definitions import build_resources, report_site
from pipeline.experiments import experiment
from pipeline.pagekit.render import LABEL_MARK
from pipeline.resources import ExperimentSettings


def test_a_built_site_shows_two_compilers_side_by_side(tmp_path: Path):
    c3 = experiment("C3")
    resources = build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=str(tmp_path / "data"))
    instance = dg.DagsterInstance.ephemeral()
    reasons = not_applicable_experiments("openvino", [c3])
    assert reasons["C3"].startswith("not applicable to OpenVINO: ")
    record_not_applicable(instance, [c3], reasons, {"backend": "openvino", "profile": "smoke"})
    docs, build = tmp_path / "docs", tmp_path / "build"
    result = dg.materialize(
        [*c3.assets(), *c3.checks(), report_site],
        resources=resources,
        instance=instance,
        run_config={"ops": {"report_site": {"config": {"docs_dir": str(docs), "build_dir": str(build)}}}},
    )
    assert result.success
    device = ExperimentSettings(profile="smoke", device="cpu").device_key()  # the columns name the device label
    index = (docs / "index.md").read_text()
    assert f"| claim | main document | evidence | Inductor · {device} | OpenVINO · {device} |" in index
    assert "2 compilers have results here" in index
    assert "OpenVINO's fusion has no verdict yet on when it changes bits" in index and "Inductor's fusion" in index
    row = next(line for line in index.splitlines() if line.startswith("| ") and f"[C3: {c3.title}]" in line)
    assert row.endswith(f" | {reasons['C3']} |")
    page = (docs / "results" / f"{c3.slug}.md").read_text()
    assert "## Compilers side by side" in page and f"| OpenVINO · {device} | {LABEL_MARK['not applicable']} |" in page
    devices = (docs / "results" / "devices.md").read_text()
    assert f"| experiment | Inductor · {device} | OpenVINO · {device} |" in devices
    assert (build / "index.html").exists()
