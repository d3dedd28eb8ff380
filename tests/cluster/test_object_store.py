"""Stored values on an object store: ``FUSION_DATA_DIR=s3://bucket/prefix`` against a local S3 server
(moto, on a free 127.0.0.1 port). A smoke selection materializes into the bucket and reads back equal
to a local materialization; a write that fails leaves nothing at its final key (the previous value
stays) and no temporary key behind."""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pytest
import torch
from _cluster_jobs import in_process_job, same_value

from pipeline import set_storage, storage

pytestmark = pytest.mark.cluster

#: Experiment S for one workload: a set-stacked pool, its reference (read lazily from the pool) and a table.
S3_SELECTION = [dg.AssetKey(a) for a in ("input_pool_softmax", "fp64_reference_softmax", "toolkit_selfcheck")]


@pytest.fixture
def bucket(s3_endpoint: str, monkeypatch) -> str:
    """A fresh bucket on the local S3 server; the AWS variables point s3fs (and boto3) at it."""
    import boto3
    import s3fs

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": s3_endpoint,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    s3fs.S3FileSystem.clear_instance_cache()
    name = f"fusion-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    yield name
    s3fs.S3FileSystem.clear_instance_cache()


def keys_under(bucket: str, prefix: str = "") -> set[str]:
    fs, _ = storage.remote_fs(f"s3://{bucket}")
    fs.invalidate_cache()
    return {k.removeprefix(f"{bucket}/") for k in fs.find(f"{bucket}/{prefix}".rstrip("/"))}


def test_smoke_values_on_s3_read_back_equal_to_local_ones(bucket: str, tmp_path: Path, monkeypatch):
    root = f"s3://{bucket}/nightly"
    monkeypatch.setenv("FUSION_DATA_DIR", root)
    with dg.instance_for_test() as instance:
        remote = in_process_job(root, S3_SELECTION).execute_in_process(instance=instance)  # type: ignore[arg-type]
        local = in_process_job(tmp_path, S3_SELECTION).execute_in_process(instance=instance)
    assert remote.success and local.success
    stored = {
        "nightly/smoke/input_pool_softmax.safetensors",
        "nightly/smoke/fp64_reference_softmax.safetensors",
        "nightly/smoke/toolkit_selfcheck.parquet",
    }
    assert keys_under(bucket) == stored  # no temporary key left behind
    for event in remote.get_asset_materialization_events():
        meta = event.materialization.metadata
        url = str(meta["path"].value)
        assert url.startswith(f"{root}/smoke/") and storage.stored_exists(url)
        assert meta["bytes"].value == storage.stored_size(url) > 0
    # fp64_reference_softmax read its pool from the bucket (a set file, read a chunk at a time) and
    # its check read the references back: both ran against the stored values.
    checks = {e.asset_check_key.name: e.passed for e in remote.get_asset_check_evaluations() if e.asset_check_key}
    assert checks == {"references_are_float64_and_finite": True, "toolkit_selfcheck_all_cells_pass": True}
    for key in S3_SELECTION:
        name = key.to_user_string()
        value = storage.read_value(f"{root}/smoke/{name}")
        assert same_value(value, storage.read_value(tmp_path / "smoke" / name)), name
    pool = storage.read_value(f"{root}/smoke/input_pool_softmax")
    assert isinstance(pool, set_storage.SetTensors) and pool.n_sets > 0


def _failing_stream(after_sets: int) -> set_storage.SetStream:
    def produce(start: int, stop: int) -> dict[str, torch.Tensor]:
        if start >= after_sets:
            raise RuntimeError("interrupted mid-write")
        return {"x": torch.full((stop - start, 4), float(start))}

    return set_storage.SetStream({"x": ((4,), torch.float32)}, n_sets=4, produce=produce, chunk_sets=1)


def test_an_interrupted_write_leaves_nothing_at_the_final_key(bucket: str, monkeypatch):
    stem = f"s3://{bucket}/data/smoke/pool"
    # A first write of a new value that fails half-way: no object at all.
    with pytest.raises(RuntimeError, match="interrupted mid-write"):
        storage.write_value(_failing_stream(after_sets=2), stem)
    assert keys_under(bucket) == set()
    with pytest.raises(FileNotFoundError, match="materialize it first"):
        storage.read_value(stem)

    # A value in place, then a failing rewrite: the previous value stays, whole.
    previous = {"x": torch.arange(8, dtype=torch.float32)}
    assert storage.write_value(previous, stem) == f"{stem}.safetensors"
    with pytest.raises(RuntimeError, match="interrupted mid-write"):
        storage.write_value(_failing_stream(after_sets=3), stem)
    assert keys_under(bucket) == {"data/smoke/pool.safetensors"}
    assert torch.equal(storage.read_value(stem)["x"], previous["x"])

    # The upload done but the move into place failing: the temporary key is removed, the final key untouched.
    fs, _ = storage.remote_fs(stem)

    def broken_move(self, path1, path2, **kwargs):
        raise ConnectionError("connection lost before the copy")

    monkeypatch.setattr(type(fs), "mv", broken_move)
    with pytest.raises(ConnectionError):
        storage.write_value({"x": torch.zeros(3)}, stem)
    assert keys_under(bucket) == {"data/smoke/pool.safetensors"}
    assert torch.equal(storage.read_value(stem)["x"], previous["x"])


def test_another_type_replaces_the_stored_form_on_s3(bucket: str):
    stem = f"s3://{bucket}/d/smoke/thing"
    storage.write_value({"x": torch.ones(2)}, stem)
    storage.write_value({"rows": [1, 2, 3]}, stem)
    assert keys_under(bucket) == {"d/smoke/thing.json"}
    assert storage.read_value(stem) == {"rows": [1, 2, 3]}
