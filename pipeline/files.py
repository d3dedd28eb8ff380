"""Files written whole or not at all: a temporary file renamed into place (:func:`atomic_path`), the
tensors-to-safetensors pair and a file's sha256. Every stored value goes through :func:`atomic_path`,
so a run killed mid-write leaves the previous file intact (see :mod:`pipeline.storage`)."""

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read a megabyte at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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


def save_json(value: Any, target: Path) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(value, indent=2, sort_keys=True, default=str))
