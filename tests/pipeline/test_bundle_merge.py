"""Bundles of one device and profile merged into one (``merge-bundles``): a device's results made in pieces.

Both bundles come from real smoke materializations of S under one device label, exported by the
export function; only ``created_at`` (which one is newer) and, for the refusals, the label or the
profile are edited."""

import json
import shutil

import dagster as dg
import pytest

from pipeline.bundle import BundleError, export_bundle, read_manifest
from pipeline.bundle_merge import merge_bundles
from pipeline.cli import main as cli_main
from pipeline.definitions import build_resources, defs
from pipeline.experiments import experiment
from pipeline.resources import ExperimentSettings

LABEL = "gpu-node-3"
S_ASSETS = experiment("S").assets()
S_CHECKS = experiment("S").checks()


def _export(root, assets, checks, created_at, label=LABEL):
    settings = ExperimentSettings(profile="smoke", device="cpu", device_label=label)
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize(
            [*assets, *checks], resources=build_resources(settings, base_dir=str(root / "data")), instance=instance
        )
        assert result.success
        done = export_bundle(
            instance, defs.resolve_asset_graph(), root / "data", "smoke", root / "bundle", max_tensor_bytes=4096
        )
    manifest = json.loads((done.folder / "bundle.json").read_text())
    manifest["created_at"] = created_at
    (done.folder / "bundle.json").write_text(json.dumps(manifest))
    return done.folder


@pytest.fixture(scope="module")
def two_bundles(tmp_path_factory):
    whole = _export(tmp_path_factory.mktemp("first"), S_ASSETS, S_CHECKS, "2026-11-27T16:00:00+00:00")
    selfcheck = [a for a in S_ASSETS if a.key.to_user_string() == "toolkit_selfcheck"]
    its_check = [c for c in S_CHECKS if {k.asset_key.to_user_string() for k in c.check_keys} == {"toolkit_selfcheck"}]
    later = _export(tmp_path_factory.mktemp("second"), selfcheck, its_check, "2026-11-27T19:00:00+00:00")
    elsewhere = _export(
        tmp_path_factory.mktemp("third"), selfcheck, its_check, "2026-11-27T19:30:00+00:00", "other-node"
    )
    return whole, later, elsewhere


def test_each_asset_comes_from_the_newest_bundle_holding_it_with_its_checks(two_bundles, tmp_path):
    whole, later, _ = two_bundles
    done = merge_bundles([later, whole], tmp_path / "merged")  # the order given does not matter
    merged, first, second = (read_manifest(b) for b in (done.folder, whole, later))
    assert [r["asset"] for r in merged["assets"]] == sorted(r["asset"] for r in first["assets"])
    by_asset = {r["asset"]: r for r in merged["assets"]}
    assert by_asset["toolkit_selfcheck"]["run_id"] == second["assets"][0]["run_id"] != first["assets"][0]["run_id"]
    pool = next(r for r in first["assets"] if r["asset"] == "input_pool_layernorm")
    assert by_asset["input_pool_layernorm"]["run_id"] == pool["run_id"]
    selfchecks = [c for c in merged["checks"] if c["asset"] == "toolkit_selfcheck"]
    assert selfchecks == second["checks"] and len(selfchecks) == 1
    assert len(merged["checks"]) == len(first["checks"]) == done.checks
    assert merged["created_at"] == second["created_at"] and merged["left_out"] == first["left_out"]
    assert [(m["folder"], len(m["assets"])) for m in merged["merged_from"]] == [
        ("bundle", len(first["assets"]) - 1),
        ("bundle", 1),
    ]
    for rel, info in merged["files"].items():  # read_manifest checked each file's sha256 too
        assert (done.folder / rel).stat().st_size == info["bytes"]


def test_bundles_of_different_devices_or_torch_are_refused_and_nothing_is_written(two_bundles, tmp_path):
    whole, later, elsewhere = two_bundles
    with pytest.raises(BundleError, match=r"cannot merge bundles of different devices .*gpu-node-3.*other-node"):
        merge_bundles([whole, elsewhere], tmp_path / "merged")
    other = shutil.copytree(later, tmp_path / "other")
    manifest = json.loads((other / "bundle.json").read_text())
    manifest["versions"]["torch"] = manifest["provenance"]["torch_version"] = "2.99.0"
    (other / "bundle.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="cannot merge bundles of different torch versions"):
        merge_bundles([whole, other], tmp_path / "merged")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]


def test_one_bundle_or_an_existing_folder_is_refused_and_the_cli_says_so(two_bundles, tmp_path, capsys):
    whole, later, _ = two_bundles
    with pytest.raises(BundleError, match="two bundles or more"):
        merge_bundles([whole], tmp_path / "merged")
    (tmp_path / "taken").mkdir()
    assert cli_main(["merge-bundles", "--out", str(tmp_path / "taken"), str(whole), str(later)]) == 2
    assert "already exists: choose a new folder" in capsys.readouterr().err
    assert cli_main(["merge-bundles", "--out", str(tmp_path / "ok"), str(whole), str(later)]) == 0
    assert "check evaluations" in capsys.readouterr().out and read_manifest(tmp_path / "ok")["profile"] == "smoke"


def test_the_devices_page_names_each_source_commit_of_a_merged_bundle(two_bundles, tmp_path):
    from pipeline.bundle import import_bundle
    from pipeline.pagekit.render import Report
    from pipeline.reporting.asset import device_reports
    from pipeline.reporting.pages import devices_page

    whole, later, _ = two_bundles
    edited = shutil.copytree(later, tmp_path / "later")  # as if the second session ran other source
    manifest = json.loads((edited / "bundle.json").read_text())
    for record in manifest["assets"]:
        record["metadata"]["provenance.git_commit"]["value"] = "f" * 40
    manifest["provenance"]["git_commit"] = "f" * 40
    (edited / "bundle.json").write_text(json.dumps(manifest))
    done = merge_bundles([whole, edited], tmp_path / "merged")
    first = read_manifest(whole)["provenance"]["git_commit"]
    graph = defs.resolve_asset_graph()
    with dg.DagsterInstance.ephemeral() as instance:
        import_bundle(instance, done.folder, tmp_path / "data", graph)
        report = Report(instance, graph, tmp_path / "data" / "smoke", tmp_path / "docs", "smoke", "", "cpu")
        others = device_reports(instance, graph, tmp_path / "data", tmp_path / "docs", "smoke", "")
        page = devices_page([report, *others])
    row = next(line for line in page.splitlines() if line.startswith("| commit |"))
    assert row.endswith(f"| ffffffffffff (S), {first[:12]} (S) |")


def test_a_merged_bundle_merged_again_keeps_each_asset_under_the_session_that_made_it(two_bundles, tmp_path):
    whole, later, _ = two_bundles
    edited = shutil.copytree(later, tmp_path / "later")  # the second session ran other source
    manifest = json.loads((edited / "bundle.json").read_text())
    manifest["provenance"]["git_commit"] = "f" * 40
    (edited / "bundle.json").write_text(json.dumps(manifest))
    first_merge = merge_bundles([whole, edited], tmp_path / "first-merge").folder
    newest = shutil.copytree(later, tmp_path / "newest")  # a third session, of S's self-check again
    manifest = json.loads((newest / "bundle.json").read_text())
    manifest["provenance"]["git_commit"], manifest["created_at"] = "e" * 40, "2026-11-29T21:00:00+00:00"
    (newest / "bundle.json").write_text(json.dumps(manifest))
    merged = read_manifest(merge_bundles([first_merge, newest], tmp_path / "again").folder)
    first = read_manifest(whole)
    sessions = [(m["git_commit"], m["created_at"], len(m["assets"])) for m in merged["merged_from"]]
    # The first session's assets keep its commit and time, not the first merge's newest; the second
    # session's only asset was made again by the third, so the second session no longer appears.
    assert sessions == [
        (first["provenance"]["git_commit"], first["created_at"], len(first["assets"]) - 1),
        ("e" * 40, "2026-11-29T21:00:00+00:00", 1),
    ]
    assert merged["merged_from"][1]["assets"] == ["toolkit_selfcheck"]
