"""Results from a GPU node: the committed H200 bundle imports with its notes, the devices page and the
experiment pages show it beside this checkout's results, and a node without the site packages runs
the report's experiments and says in one line that the site is skipped."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from pipeline.bundle import NOTES, BundleError, import_bundle, read_manifest, read_notes
from pipeline.definitions import defs
from pipeline.experiments import experiment
from pipeline.pagekit.render import Report
from pipeline.reporting.asset import device_reports
from pipeline.reporting.pages import devices_page, experiment_page
from pipeline.reporting.site import missing_site_tools, site_skipped
from pipeline.source import commit_known

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "results" / "bundles" / "2026-11-27-h200-seed"


def test_the_committed_h200_bundle_and_its_notes_read_cleanly():
    manifest = read_manifest(H200)
    assert manifest["provenance"]["device_label"] == "NVIDIA H200" and manifest["profile"] == "seed"
    notes = read_notes(H200)
    assert set(notes["did_not_finish"]) >= {"A", "B", "D", "E", "M", "Diagnostics"}
    assert notes["provenance_corrections"]["git_commit"]["actual"] == "a6e6ca4"
    assert notes["provenance_corrections"]["git_commit"]["recorded"] == manifest["provenance"]["git_commit"]
    # Kept small: tables and records only, the tensor files were left out at export.
    assert sum(p.stat().st_size for p in H200.rglob("*") if p.is_file()) < 2 << 20
    assert not manifest["include_tensors"] or all(not f.endswith(".safetensors") for f in manifest["files"])


def test_import_shows_the_h200_beside_this_checkout_with_its_notes(tmp_path):
    graph = defs.resolve_asset_graph()
    data = tmp_path / "data"
    with dg.DagsterInstance.ephemeral() as instance:
        done = import_bundle(instance, H200, data, graph)
        assert (done.device, done.profile) == ("NVIDIA H200", "seed")
        assert (done.folder / NOTES).is_file()
        recorded = read_manifest(H200)["provenance"]["git_commit"]
        if commit_known(recorded) is False:  # a git checkout of this project: the foreign commit is named
            assert sum(recorded[:12] in w for w in done.warnings) == 1
        # Checks renamed since the bundle's source (if any) are left out by name, never silently.
        assert all(w.startswith("left out") or recorded[:12] in w for w in done.warnings)

        here = Report(instance, graph, data / "default", tmp_path / "docs", "default", "", "cpu", device_label="cpu")
        here.other_devices = device_reports(instance, graph, data, tmp_path / "docs", "default", "")
        (h200,) = here.other_devices
        assert h200.profile == "seed" and h200.page_suffix == "--nvidia-h200--seed"
        assert h200.failed[experiment("A").group].startswith("stopped at its 106 s cap")

        page = devices_page([here, h200])
        assert "NVIDIA H200 (seed)" in page
        assert "a6e6ca4 (recorded 9ca536bd747e: wrong)" in page
        assert "Recorded git_commit is wrong" in page
        assert page.count("did not finish") >= 6
        c1 = experiment("C1")
        beside = experiment_page(here, c1)
        assert "## On other devices" in beside and f"{c1.slug}--nvidia-h200--seed.md" in beside
        own = experiment_page(h200, c1)
        assert "c1_route_alone_changes_bits" in own


def test_a_malformed_notes_file_is_refused_before_anything_is_written(tmp_path):
    copy = shutil.copytree(H200, tmp_path / "bundle")
    (copy / NOTES).write_text(json.dumps({"did_not_finish": {"A": 3}}))
    with dg.DagsterInstance.ephemeral() as instance, pytest.raises(BundleError, match="did_not_finish"):
        import_bundle(instance, copy, tmp_path / "data", defs.resolve_asset_graph())
    assert not (tmp_path / "data").exists()


def test_a_missing_site_module_is_named_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "vl_convert", None)  # as if vl-convert-python were not installed
    assert "vl-convert-python" in missing_site_tools()
    line = site_skipped("seed")
    assert line is not None and "\n" not in line
    assert "export-bundle --profile seed" in line and "import-bundle" in line


_CLI_WITHOUT_SITE = """
import sys
sys.modules["vl_convert"] = None  # the site package is missing on this node
from pipeline import cli
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_report_without_site_packages_runs_the_rest_and_says_so_once(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / ".dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {
        **{k: v for k, v in __import__("os").environ.items() if k not in ("DAGSTER_HOME", "FUSION_DATA_DIR")},
        "DAGSTER_HOME": str(home),
        "FUSION_DATA_DIR": str(tmp_path / "data"),
        "PYTHONPATH": str(REPO),
    }
    args = ["report", "--profile", "smoke", "--device", "cpu", "--only", "S"]
    proc = subprocess.run(
        [sys.executable, "-c", _CLI_WITHOUT_SITE, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    skipped = [line for line in out.splitlines() if "report site skipped" in line]
    assert len(skipped) == 1 and "vl-convert-python" in skipped[0]
    assert "Traceback" not in out and "report_site" not in out
    assert (tmp_path / "data" / "smoke").is_dir()  # the experiments ran and stored their values


H200_GPU = REPO / "results" / "bundles" / "2026-11-27-h200-gpu"


def test_the_gpu_profile_bundle_shows_its_verdicts_with_their_notes(tmp_path):
    manifest = read_manifest(H200_GPU)
    assert manifest["profile"] == "gpu" and manifest["provenance"]["device_label"] == "NVIDIA H200"
    # Exported from a source copy with a SOURCE_COMMIT stamp: the recorded commit is the project's. Three
    # sessions merged (merge-bundles, the first two merged before): M ran ed50613, B and E 3cee6cb, and
    # A, C1-C3, D and the bug finders 89e2ab8 (the newest, the manifest's).
    assert manifest["provenance"]["commit_origin"] == "SOURCE_COMMIT file"
    assert manifest["provenance"]["git_commit"].startswith("89e2ab8")
    sessions = {m["git_commit"][:7]: set(m["assets"]) for m in manifest["merged_from"]}
    assert sessions["ed50613"] == {"model_divergence", "model_outputs", "model_verdicts"}
    assert {"accumulated_error_summary", "training_deviation"} <= sessions["3cee6cb"]
    assert {"determinism_summary", "data_movement_check_table", "difftest_outcomes"} <= sessions["89e2ab8"]
    notes = read_notes(H200_GPU)
    assert set(notes["verdict_notes"]) == {"A", "B", "D"} and "B" not in notes["did_not_finish"]
    assert "E" not in notes["did_not_finish"] and "reproducers" in notes["did_not_finish"]["Diagnostics"]
    graph = defs.resolve_asset_graph()
    data = tmp_path / "data"
    with dg.DagsterInstance.ephemeral() as instance:
        import_bundle(instance, H200_GPU, data, graph)
        here = Report(instance, graph, data / "default", tmp_path / "docs", "default", "", "cpu", device_label="cpu")
        here.other_devices = device_reports(instance, graph, data, tmp_path / "docs", "default", "")
        (h200,) = here.other_devices
        assert h200.page_suffix == "--nvidia-h200--gpu"
        a, m = experiment("A"), experiment("M")
        assert h200.verdict(a.group) == "supported"  # the rerun of 2026-11-29; its note says why it changed
        own = experiment_page(h200, a)
        assert "Read this verdict with a note" in own and "false alarm" in own
        assert "Note on NVIDIA H200 (gpu):" in experiment_page(here, a)
        assert "Read this verdict with a note" not in experiment_page(h200, m)
        page = devices_page([here, h200])
        assert "to read with a note" in page and "**D**: A real difference" in page
        row = next(line for line in page.splitlines() if line.startswith("| commit |"))
        assert "89e2ab8108a4 (" in row and "3cee6cb5c7c0 (" in row and "ed50613bcfc3 (" in row
        assert h200.verdict(experiment("D").group) == "contradicted"
        assert h200.verdict(experiment("B").group) == h200.verdict(experiment("E").group) == "supported"


def test_every_committed_bundle_and_its_notes_read_cleanly():
    bundles = sorted(p for p in (REPO / "results" / "bundles").iterdir() if (p / "bundle.json").is_file())
    assert {b.name for b in bundles} >= {"2026-11-27-h200-seed", "2026-11-27-h200-gpu", "2026-11-27-h200-smoke"}
    for bundle in bundles:
        assert read_manifest(bundle)["provenance"]["device_label"], bundle
        assert read_notes(bundle).get("title"), bundle
        # tables and records only (the largest: B's per-set errors at gpu size, 4.8 MB)
        assert sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file()) < 8 << 20, bundle
