"""Results bundles: export from one instance, import into a fresh one, the report shows both devices.

The "remote" run is a real smoke materialization of S made under another device label (as a run
on a GPU node names itself with ``device_label``), in its own Dagster instance and data folder;
the bundle is written by the export function, never edited by hand except to test refusals."""

import json
import shutil

import dagster as dg
import pytest

from pipeline import bundle as bundle_mod
from pipeline.bundle import BundleError, export_bundle, import_bundle, read_manifest
from pipeline.definitions import build_resources, defs
from pipeline.experiments import experiment
from pipeline.pagekit.render import Report
from pipeline.reporting.asset import device_reports
from pipeline.reporting.pages import all_pages
from pipeline.resources import ExperimentSettings

S_ASSETS = experiment("S").assets()
S_CHECKS = experiment("S").checks()
REMOTE = "remote-node-7"


def _materialize_s(instance, data_dir, label=""):
    settings = ExperimentSettings(profile="smoke", device="cpu", device_label=label)
    result = dg.materialize(
        [*S_ASSETS, *S_CHECKS], resources=build_resources(settings, base_dir=str(data_dir)), instance=instance
    )
    assert result.success
    return settings


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote")
    with dg.DagsterInstance.ephemeral() as instance:
        _materialize_s(instance, root / "data", REMOTE)
        done = export_bundle(
            instance, defs.resolve_asset_graph(), root / "data", "smoke", root / "bundle", max_tensor_bytes=4096
        )
    return done


@pytest.fixture
def bundle(exported, tmp_path):
    """A fresh copy of the exported bundle (tests may damage it)."""
    return shutil.copytree(exported.folder, tmp_path / "bundle")


def test_export_writes_manifest_files_and_provenance(exported):
    manifest = read_manifest(exported.folder)
    prov = manifest["provenance"]
    assert prov["device_label"] == REMOTE and prov["device"] == "cpu" and prov["profile"] == "smoke"
    assert manifest["versions"]["torch"] == prov["torch_version"] and manifest["schema_version"] == 1
    names = {r["asset"] for r in manifest["assets"]}
    assert names == {k.to_user_string() for a in S_ASSETS for k in a.keys}
    # One evaluation per S check, with its metadata (the outcome kind travels with it).
    assert len(manifest["checks"]) == len(S_CHECKS) == exported.checks
    assert all(c["metadata"]["outcome"]["value"] == "validity" and c["passed"] for c in manifest["checks"])
    # Tables always travel; tensor files over the cap are listed as left out, not copied.
    assert "data/toolkit_selfcheck.parquet" in manifest["files"]
    assert "input_pool_matmul_add_layernorm" in manifest["left_out"]
    assert not (exported.folder / "data" / "input_pool_matmul_add_layernorm.safetensors").exists()
    for rel, info in manifest["files"].items():
        assert (exported.folder / rel).stat().st_size == info["bytes"]


def test_round_trip_into_a_fresh_instance_and_report_shows_both_devices(bundle, tmp_path):
    home_data = tmp_path / "home_data"
    with dg.DagsterInstance.ephemeral() as instance:
        local = _materialize_s(instance, home_data)
        (home_data / "smoke" / "keep.txt").write_text("stored before the import")
        done = import_bundle(instance, bundle, home_data, defs.resolve_asset_graph())
        assert done.device == REMOTE and done.folder == home_data / "devices" / "remote-node-7" / "smoke"
        # Local files are untouched; the bundle's sit in their own folder, byte for byte.
        assert (home_data / "smoke" / "keep.txt").read_text() == "stored before the import"
        assert (home_data / "smoke" / "toolkit_selfcheck.parquet").exists()
        assert (done.folder / "toolkit_selfcheck.parquet").read_bytes() == (
            bundle / "data" / "toolkit_selfcheck.parquet"
        ).read_bytes()
        # The imported materialization carries the remote provenance and points at the copied file.
        event = instance.get_latest_materialization_event(dg.AssetKey("toolkit_selfcheck"))
        meta = event.asset_materialization.metadata
        assert meta["provenance.device_label"].value == REMOTE
        assert meta["path"].value == str((done.folder / "toolkit_selfcheck.parquet").resolve())
        assert meta["bundle.imported_from"].value == str(bundle.resolve())

        graph = defs.resolve_asset_graph()
        report = Report(
            instance, graph, home_data / "smoke", tmp_path / "docs", "smoke", "", "cpu", device_label=local.device_key()
        )
        report.other_devices = device_reports(instance, graph, home_data, tmp_path / "docs", "smoke", "")
        assert [r.device_label for r in report.other_devices] == [REMOTE]
        pages = all_pages(report)
    devices = pages["results/devices.md"]
    assert f"**{local.device_key()}**" in devices and f"**{REMOTE}**" in devices
    assert "toolkit--remote-node-7.md" in devices and str(bundle.resolve()) in devices
    # Both devices' S pages exist, each naming its device, each with its own passed checks.
    for page, label, origin in (
        ("results/toolkit.md", local.device_key(), "run in this checkout"),
        ("results/toolkit--remote-node-7.md", REMOTE, "imported from a results bundle"),
    ):
        text = pages[page]
        assert f"Device: **{label}**" in text and origin in text
        assert "not yet run" not in text.split("## Asset checks")[1].split("## Materializations")[0]
    # The local page's materializations are the local run's, not the import's; the import is only
    # linked from its "On other devices" table.
    local_page, _, elsewhere = pages["results/toolkit.md"].partition("## On other devices")
    before_details, _, details = elsewhere.partition("## Details")
    assert REMOTE not in local_page + details
    assert "[remote-node-7](toolkit--remote-node-7.md)" in before_details
    assert "devices side by side" in pages["index.md"]


def _files_and_events(instance, data):
    mats = sum(
        len(instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=k), limit=100).records)
        for a in S_ASSETS
        for k in a.keys
    )
    return sorted(p.relative_to(data).as_posix() for p in data.rglob("*")) if data.exists() else [], mats


@pytest.mark.parametrize(
    "damage, message",
    [
        ("tamper", "does not match its recorded sha256"),
        ("missing_file", "bundle is partial"),
        ("schema", "schema version 99 is not supported"),
        ("no_provenance", "provenance lacks device_name"),
        ("relabel", "not the bundle's 'smoke' on 'gpu-that-never-ran'"),
        ("no_manifest", "bundle.json is missing"),
    ],
)
def test_bad_bundle_is_refused_and_nothing_is_written(bundle, tmp_path, damage, message):
    manifest_path = bundle / "bundle.json"
    manifest = json.loads(manifest_path.read_text())
    if damage == "tamper":
        target = bundle / "data" / "toolkit_selfcheck.parquet"
        raw = bytearray(target.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        target.write_bytes(bytes(raw))
    elif damage == "missing_file":
        (bundle / "data" / "toolkit_selfcheck.parquet").unlink()
    elif damage == "schema":
        manifest["schema_version"] = 99
    elif damage == "no_provenance":
        del manifest["provenance"]["device_name"]
    elif damage == "relabel":  # the provenance renamed, the records left as measured: inconsistent
        manifest["provenance"]["device_label"] = "gpu-that-never-ran"
    elif damage == "no_manifest":
        manifest_path.unlink()
    if manifest_path.exists():
        manifest_path.write_text(json.dumps(manifest))
    data = tmp_path / "data"
    with dg.DagsterInstance.ephemeral() as instance:
        before = _files_and_events(instance, data)
        with pytest.raises(BundleError, match=message):
            import_bundle(instance, bundle, data, defs.resolve_asset_graph())
        assert _files_and_events(instance, data) == before == ([], 0)


def test_second_import_of_a_device_is_refused_unless_replaced(bundle, tmp_path):
    data = tmp_path / "data"
    with dg.DagsterInstance.ephemeral() as instance:
        first = import_bundle(instance, bundle, data)
        with pytest.raises(BundleError, match="were imported before"):
            import_bundle(instance, bundle, data)
        again = import_bundle(instance, bundle, data, replace=True)
    assert again.folder == first.folder and (again.folder / "toolkit_selfcheck.parquet").exists()
    kept = [p.name for p in again.folder.parent.iterdir() if p.name.startswith("smoke.replaced-")]
    assert len(kept) == 1 and (again.folder.parent / kept[0] / "toolkit_selfcheck.parquet").exists()


def test_cli_import_reports_a_bad_bundle_with_exit_code_2(tmp_path, monkeypatch, capsys):
    from pipeline import cli

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert cli.main(["import-bundle", str(tmp_path / "nowhere"), "--data-dir", str(tmp_path / "data")]) == 2
    assert "bundle.json is missing" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


def test_device_slug_refuses_an_empty_label():
    assert bundle_mod.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    with pytest.raises(BundleError, match="no letters or digits"):
        bundle_mod.device_slug("  ::  ")


# --- the plain steps of export and import ---------------------------------------------------------


def test_tensor_files_over_the_cap_or_without_tensors_stay_out(tmp_path):
    tensors = tmp_path / "pool.safetensors"
    tensors.write_bytes(b"x" * 100)
    table = tmp_path / "table.parquet"
    table.write_bytes(b"x" * 100)
    assert bundle_mod._left_out_reason(tensors, True, 100) is None
    assert bundle_mod._left_out_reason(tensors, True, 99) == "100 bytes of tensors (cap 99)"
    assert bundle_mod._left_out_reason(tensors, False, 1000) == "100 bytes of tensors (cap 0)"
    assert bundle_mod._left_out_reason(table, False, 0) is None


def test_a_bundle_holds_one_device():
    key = dg.AssetKey("c1_table")
    first = {"provenance.device_label": "gpu-a", "provenance.profile": "smoke", "path": "/x"}
    provenance = bundle_mod._same_device(None, key, first, "smoke")
    assert provenance == {"device_label": "gpu-a", "profile": "smoke"}
    assert bundle_mod._same_device(provenance, key, first, "smoke") is provenance
    with pytest.raises(BundleError, match=r"c1_table was last materialized on 'gpu-b', other assets .* on 'gpu-a'"):
        bundle_mod._same_device(provenance, key, {"provenance.device_label": "gpu-b"}, "smoke")


def test_import_names_assets_and_checks_the_code_location_lacks():
    manifest = {
        "assets": [{"asset": "toolkit_selfcheck"}, {"asset": "gone_table"}],
        "checks": [
            {"asset": "toolkit_selfcheck", "name": "no_such_check"},
            {"asset": "gone_table", "name": "gone_check"},
        ],
    }
    graph = defs.resolve_asset_graph()
    assert bundle_mod.undefined_in(manifest, graph) == [
        "gone_table",
        "gone_table:gone_check",
        "toolkit_selfcheck:no_such_check",
    ]


def test_json_metadata_entry_must_hold_an_object_or_a_list():
    assert bundle_mod._restore({"type": "json", "value": [1, 2]}).value == [1, 2]
    with pytest.raises(BundleError, match="json metadata entry holds str, not an object or a list"):
        bundle_mod._restore({"type": "json", "value": "[1, 2]"})


def test_an_import_never_stands_in_for_local_results_unless_asked(bundle, tmp_path):
    """After an import (newer than the local run), what resumes a run, the CLI's outcome table and
    the baseline's provenance still read only what was made here; provenance from imports only on
    request."""
    from pipeline import cli
    from pipeline.instruments.regression.drift import recorded_provenance

    home_data = tmp_path / "home_data"
    key = dg.AssetKey("toolkit_selfcheck")
    with dg.DagsterInstance.ephemeral() as instance:
        _materialize_s(instance, home_data)
        local = instance.get_latest_materialization_event(key)
        done = import_bundle(instance, bundle, home_data, defs.resolve_asset_graph())
        assert instance.get_latest_materialization_event(key).timestamp > local.timestamp  # the import is newer
        # Resume: the local materialization counts, and once its file is gone nothing stands in for it.
        assert cli._stored_for_profile(instance, key, "smoke", {"device": "cpu"}) == local.timestamp
        stored = home_data / "smoke" / "toolkit_selfcheck.parquet"
        moved = stored.rename(tmp_path / "aside.parquet")
        assert cli._stored_for_profile(instance, key, "smoke", {"device": "cpu"}) is None
        moved.rename(stored)
        # The outcome table reads the local evaluations, not the bundle's.
        evaluations = cli._latest_evaluations(defs, instance)
        assert len(evaluations) == len(S_CHECKS)
        assert all("bundle.imported_from" not in e.metadata for e in evaluations)
        # Provenance for a baseline: the imported copy's event is another machine's.
        imported_file = done.folder / "toolkit_selfcheck.parquet"
        assert recorded_provenance(instance, "toolkit_selfcheck", imported_file) is None
        prov, origin = recorded_provenance(instance, "toolkit_selfcheck", imported_file, include_imported=True)
        assert prov["device_label"] == REMOTE and "toolkit_selfcheck" in origin
        prov, _ = recorded_provenance(instance, "toolkit_selfcheck", stored)
        assert prov["device_label"] != REMOTE


def test_evaluations_of_checks_no_longer_defined_are_left_out_by_name(bundle, tmp_path, monkeypatch, capsys):
    """A check renamed since the bundle's source: the import keeps the assets and the other evaluations,
    leaves that one out and names it, in the result and on the CLI's stderr; an unknown asset is refused."""
    from pipeline import cli

    manifest_path = bundle / "bundle.json"
    manifest = json.loads(manifest_path.read_text())
    total = len(manifest["checks"])
    renamed = manifest["checks"][0]
    renamed["name"] = "check_renamed_since"
    gone = f"{renamed['asset']}:check_renamed_since"
    manifest_path.write_text(json.dumps(manifest))
    with dg.DagsterInstance.ephemeral() as instance:
        done = import_bundle(instance, bundle, tmp_path / "data", defs.resolve_asset_graph())
        assert done.checks == total - 1 and done.assets == len(manifest["assets"])
        assert [w for w in done.warnings if gone in w] == [
            f"left out 1 check evaluation(s) this code location does not define: {gone}"
        ]
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert cli.main(["import-bundle", str(bundle), "--data-dir", str(tmp_path / "cli_data")]) == 0
    err = capsys.readouterr().err
    assert f"import-bundle: warning: left out 1 check evaluation(s) this code location does not define: {gone}" in err
    # an asset it does not define is refused, nothing written
    judged = {c["asset"] for c in manifest["checks"]}
    next(r for r in manifest["assets"] if r["asset"] not in judged)["asset"] = "gone_table"
    manifest_path.write_text(json.dumps(manifest))
    with dg.DagsterInstance.ephemeral() as instance, pytest.raises(BundleError, match=r"assets .* \['gone_table'\]"):
        import_bundle(instance, bundle, tmp_path / "data2", defs.resolve_asset_graph())
    assert not (tmp_path / "data2").exists()
