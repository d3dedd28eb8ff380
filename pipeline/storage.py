"""Lossless, atomic storage of asset values.

* ``dict[str, torch.Tensor]`` -> safetensors (every dtype, bfloat16 included, bit for bit);
* ``polars.DataFrame`` -> parquet;
* ``dict`` of JSON values -> JSON.

Every write goes to a temporary file in the target folder and is renamed into place, so a run
killed mid-write leaves the previous file intact. Files live under
``<base_dir>/<profile>/<asset key path>.<ext>``, so profiles never overwrite each other.
"""


import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import dagster as dg
import polars as pl
import torch
from pydantic import Field
from safetensors.torch import load_file, save_file

from .resources import ExperimentSettings

_EXTENSIONS = (".safetensors", ".parquet", ".json")


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; on success rename it over ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp creates 0600; stored results are for sharing
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def save_tensors(tensors: dict[str, torch.Tensor], target: Path) -> None:
    bad = [k for k, v in tensors.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise TypeError(f"cannot store non-tensor values for keys {bad} as safetensors")
    prepared, storages = {}, set()
    for key, value in tensors.items():
        value = value.detach().cpu().contiguous()
        ptr = value.untyped_storage().data_ptr()
        # safetensors refuses tensors that share memory (views of one buffer): copy repeats.
        prepared[key] = value.clone() if ptr in storages else value
        storages.add(ptr)
    with atomic_path(target) as tmp:
        save_file(prepared, str(tmp))


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def save_table(df: pl.DataFrame, target: Path) -> None:
    with atomic_path(target) as tmp:
        df.write_parquet(tmp)


def save_json(value: Any, target: Path) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(value, indent=2, sort_keys=True, default=str))


def write_value(value: Any, stem: Path) -> Path:
    """Store ``value`` at ``stem`` + the extension for its type; returns the path written."""
    if isinstance(value, pl.DataFrame):
        path = stem.with_suffix(".parquet")
        save_table(value, path)
    elif isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
        path = stem.with_suffix(".safetensors")
        save_tensors(value, path)
    elif isinstance(value, (dict, list)):
        path = stem.with_suffix(".json")
        save_json(value, path)
    else:
        raise TypeError(
            f"cannot store a {type(value).__name__}; assets return polars DataFrames, dicts of "
            "tensors, or JSON-compatible dicts/lists"
        )
    for ext in _EXTENSIONS:  # one stored form per asset: drop a stale one of another type
        other = stem.with_suffix(ext)
        if other != path:
            other.unlink(missing_ok=True)
    return path


def read_value(stem: Path) -> Any:
    for ext in _EXTENSIONS:
        path = stem.with_suffix(ext)
        if path.exists():
            if ext == ".parquet":
                return pl.read_parquet(path)
            if ext == ".safetensors":
                return load_tensors(path)
            return json.loads(path.read_text())
    raise FileNotFoundError(f"no stored value at {stem}.{{safetensors,parquet,json}}: materialize it first")


class PrecisionIOManager(dg.ConfigurableIOManager):
    """Stores each asset under ``base_dir/<profile>/`` and attaches provenance metadata."""

    base_dir: str = Field(default="data", description="root folder of stored asset values")
    settings: dg.ResourceDependency[ExperimentSettings]

    def _stem(self, key: dg.AssetKey) -> Path:
        return Path(self.base_dir) / self.settings.profile / Path(*key.path)

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if obj is None:
            return
        path = write_value(obj, self._stem(context.asset_key))
        meta: dict[str, Any] = {"path": dg.MetadataValue.path(str(path)), "bytes": path.stat().st_size}
        meta.update({f"provenance.{k}": v for k, v in self.settings.provenance().items()})
        if isinstance(obj, pl.DataFrame):
            meta["rows"] = obj.height
            meta["columns"] = ", ".join(obj.columns)
        context.add_output_metadata(meta)

    def load_input(self, context: dg.InputContext) -> Any:
        return read_value(self._stem(context.asset_key))
