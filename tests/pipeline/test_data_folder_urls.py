"""A data folder given as an fsspec URL: values stored through it, read back, written atomically, and
clear errors for what a URL cannot do. Uses fsspec's in-memory filesystem (no server); the same
against a real S3 server is in tests/cluster/test_object_store.py (make test-cluster)."""

import importlib.util
import uuid
from pathlib import Path

import dagster as dg
import polars as pl
import pydantic
import pytest
import torch

from pipeline import set_storage, storage
from pipeline.definitions import build_resources
from pipeline.resources import ExperimentSettings
from pipeline.storage import DataFolder, DataFolderError


@pytest.fixture
def memory_root():
    import fsspec

    root = f"memory://fusion-{uuid.uuid4().hex[:8]}"
    yield root
    fs = fsspec.filesystem("memory")
    fs.rm(root.removeprefix("memory://"), recursive=True) if fs.exists(root.removeprefix("memory://")) else None


def _keys(root: str) -> set[str]:
    fs, path = storage.remote_fs(root)
    return {k.removeprefix("/").removeprefix(path.lstrip("/")).lstrip("/") for k in fs.find(path)}


def test_urls_and_paths_are_told_apart():
    assert storage.is_url("s3://bucket/prefix") and storage.is_url("memory://x") and storage.is_url("gcs://b")
    assert not storage.is_url("data") and not storage.is_url("/srv/fusion") and not storage.is_url("C:/data")


def test_a_url_root_stores_values_under_its_profile(memory_root):
    resources = build_resources(ExperimentSettings(profile="smoke", device="cpu"), base_dir=memory_root)
    io = resources["io_manager"]
    assert resources["data"].is_remote
    assert io._stem(dg.AssetKey(["c1_path_outputs"])) == f"{memory_root}/smoke/c1_path_outputs"
    # A local root keeps its Path stems, as before.
    assert DataFolder(root="data").value_stem("smoke", ["a", "b"]) == Path("data/smoke/a/b")


def test_values_round_trip_through_a_url_root(memory_root):
    table = pl.DataFrame({"x": [1, 2, 3]})
    tensors = {"a": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)}
    stream = set_storage.SetStream(
        {"x": ((2,), torch.float64)},
        n_sets=3,
        produce=lambda a, b: {"x": torch.arange(a, b, dtype=torch.float64)[:, None].repeat(1, 2)},
    )
    assert storage.write_value(table, f"{memory_root}/t") == f"{memory_root}/t.parquet"
    storage.write_value(tensors, f"{memory_root}/w")
    storage.write_value({"k": [1, "two"]}, f"{memory_root}/j")
    storage.write_value(stream, f"{memory_root}/s")
    assert storage.read_value(f"{memory_root}/t").equals(table)
    assert torch.equal(storage.read_value(f"{memory_root}/w")["a"], tensors["a"])
    assert storage.read_value(f"{memory_root}/j") == {"k": [1, "two"]}
    sets = storage.read_value(f"{memory_root}/s")
    assert isinstance(sets, set_storage.SetTensors) and sets.n_sets == 3
    assert torch.equal(sets["x"][2], torch.tensor([2.0, 2.0], dtype=torch.float64))
    assert _keys(memory_root) == {"t.parquet", "w.safetensors", "j.json", "s.safetensors"}
    assert storage.stored_exists(f"{memory_root}/t.parquet") and not storage.stored_exists(f"{memory_root}/t.json")
    assert storage.stored_size(f"{memory_root}/j.json") == len(b'{\n  "k": [\n    1,\n    "two"\n  ]\n}')


def test_a_failed_write_leaves_the_previous_value_and_no_temporary_key(memory_root):
    stem = f"{memory_root}/v"
    storage.write_value({"n": 1}, stem)

    def broken(start, stop):
        raise RuntimeError("stopped half-way")

    failing = set_storage.SetStream({"x": ((1,), torch.float32)}, n_sets=2, produce=broken)
    with pytest.raises(RuntimeError, match="half-way"):
        storage.write_value(failing, stem)
    assert storage.read_value(stem) == {"n": 1}
    assert _keys(memory_root) == {"v.json"}


def test_steps_that_write_files_of_their_own_refuse_a_url_root(memory_root):
    with pytest.raises(DataFolderError, match="needs a local or mounted folder"):
        DataFolder(root=memory_root).profile_dir("smoke")


def test_a_url_whose_protocol_is_not_installed_names_the_package():
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    with pytest.raises(pydantic.ValidationError, match="gcsfs"):
        DataFolder(root="gcs://bucket/prefix")
    with pytest.raises(DataFolderError, match="gcsfs"):
        storage.read_value("gcs://bucket/prefix/smoke/x")
    with pytest.raises(pydantic.ValidationError, match="nosuchproto"):
        DataFolder(root="nosuchproto://bucket")


def test_commands_that_work_on_files_refuse_a_url_data_folder(capsys, monkeypatch):
    from pipeline import cli

    assert cli.main(["promote-baseline", "--profile", "smoke", "--data-dir", "s3://bucket/fusion"]) == 2
    assert "needs a local or mounted folder" in capsys.readouterr().err
    monkeypatch.setenv("FUSION_DATA_DIR", "s3://bucket/fusion")
    assert cli.main(["export-bundle", "--profile", "smoke", "--out", "unused"]) == 2
    assert "'s3://bucket/fusion' is a URL" in capsys.readouterr().err
