"""The data folder is one typed resource; the IO manager stores under it and records provenance."""

from pathlib import Path

import dagster as dg

from pipeline.definitions import build_resources
from pipeline.resources import ExperimentSettings
from pipeline.storage import DATA_DIR_ENV, DataFolder, PrecisionIOManager, default_data_root

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"


def test_default_root_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    assert default_data_root() == "data"
    assert DataFolder().root == "data"
    monkeypatch.setenv(DATA_DIR_ENV, "/srv/fusion")
    assert DataFolder().root == "/srv/fusion"
    assert DataFolder().profile_dir("smoke") == Path("/srv/fusion/smoke")
    assert DataFolder(root="elsewhere").profile_dir("seed") == Path("elsewhere/seed")


def test_build_resources_shares_one_folder_between_assets_and_io_manager(tmp_path):
    resources = build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=str(tmp_path))
    assert set(resources) == {"settings", "data", "io_manager"}
    assert resources["data"].root == str(tmp_path)
    assert resources["io_manager"].data is resources["data"]
    assert resources["io_manager"]._stem(dg.AssetKey(["c1_path_outputs"])) == tmp_path / "smoke" / "c1_path_outputs"


def test_no_module_reads_the_data_folder_around_the_resource():
    patterns = (
        f'environ.get("{DATA_DIR_ENV}"',
        f'environ["{DATA_DIR_ENV}"]',
        "io_manager.base_dir",
        "getattr(context.resources.io_manager",
    )
    readers = sorted(
        p.relative_to(PIPELINE).as_posix()
        for p in PIPELINE.rglob("*.py")
        if any(pattern in p.read_text() for pattern in patterns)
    )
    assert readers == []


def test_io_manager_takes_its_folder_as_a_resource_not_a_string():
    fields = PrecisionIOManager.model_fields
    assert "base_dir" not in fields and {"data", "settings"} <= set(fields)
