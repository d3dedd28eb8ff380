"""Lossless, atomic storage of asset values.

* ``dict[str, torch.Tensor]`` -> safetensors (every dtype, bfloat16 included, bit for bit);
* ``polars.DataFrame`` -> parquet;
* ``dict`` of JSON values -> JSON;
* :class:`SetStream` (sets produced a chunk at a time) -> one safetensors file written chunk by
  chunk, read back as :class:`SetTensors`, which loads only the sets asked for. Input pools and
  fp64 references use it, so no step holds every set of a pool in memory.

Every write goes to a temporary file in the target folder and is renamed into place, so a run
killed mid-write leaves the previous file intact. Files live under
``<data folder>/<profile>/<asset key path>.<ext>``, so profiles never overwrite each other.
"""

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import torch
from pydantic import Field
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from .resources import ExperimentSettings

_EXTENSIONS = (".safetensors", ".parquet", ".json")


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


# --- set-stacked tensors, written and read a chunk of sets at a time -------------------------

#: safetensors' dtype codes for the dtypes stored here.
_ST_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
#: Marks a safetensors file whose every tensor is stacked on a leading set axis.
SET_LAYOUT = "sets"


@dataclass(frozen=True)
class SetStream:
    """``n_sets`` input sets (or results per set) to store without holding them all.

    ``entries`` maps each key to the shape of one set's tensor and its dtype; ``produce(start,
    stop)`` returns every key's tensor for sets ``start..stop-1`` (leading axis ``stop - start``).
    The writer asks for ``chunk_sets`` sets at a time, so peak memory is one chunk's worth.
    """

    entries: Mapping[str, tuple[tuple[int, ...], torch.dtype]]
    n_sets: int
    produce: Callable[[int, int], Mapping[str, torch.Tensor]]
    chunk_sets: int = 1

    def __post_init__(self) -> None:
        if self.n_sets < 1 or self.chunk_sets < 1:
            raise ValueError(
                f"a set stream needs n_sets >= 1 and chunk_sets >= 1, got {self.n_sets}, {self.chunk_sets}"
            )
        bad = {k: str(d) for k, (_, d) in self.entries.items() if d not in _ST_DTYPES}
        if bad:
            raise TypeError(f"cannot store dtypes {bad} in a set stream; supported: {sorted(map(str, _ST_DTYPES))}")

    def set_bytes(self) -> int:
        """Bytes of one set over every key (as stored)."""
        return sum(_numel(shape) * _itemsize(dtype) for shape, dtype in self.entries.values())


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def save_set_stream(stream: SetStream, target: Path) -> None:
    """Write ``stream`` as one standard safetensors file, a chunk of sets at a time.

    The header is known up front (every shape and dtype), so each chunk's bytes go straight to
    their offsets; the file is complete only when renamed into place."""
    header: dict[str, Any] = {"__metadata__": {"layout": SET_LAYOUT, "n_sets": str(stream.n_sets)}}
    offsets: dict[str, tuple[int, int]] = {}
    position = 0
    for key in sorted(stream.entries):
        shape, dtype = stream.entries[key]
        per_set = _numel(shape) * _itemsize(dtype)
        offsets[key] = (position, per_set)
        end = position + per_set * stream.n_sets
        header[key] = {
            "dtype": _ST_DTYPES[dtype],
            "shape": [stream.n_sets, *map(int, shape)],
            "data_offsets": [position, end],
        }
        position = end
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned
    data_start = 8 + len(raw)
    with atomic_path(target) as tmp, open(tmp, "r+b") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(data_start + position)
        for start in range(0, stream.n_sets, stream.chunk_sets):
            stop = min(stream.n_sets, start + stream.chunk_sets)
            chunk = stream.produce(start, stop)
            if set(chunk) != set(stream.entries):
                raise ValueError(
                    f"set stream chunk {start}:{stop} has keys {sorted(chunk)}, expected {sorted(stream.entries)}"
                )
            for key in sorted(stream.entries):
                shape, dtype = stream.entries[key]
                value = chunk[key]
                if tuple(value.shape) != (stop - start, *shape) or value.dtype != dtype:
                    raise ValueError(
                        f"set stream chunk {start}:{stop}, key {key!r}: got {list(value.shape)} {value.dtype}, "
                        f"expected {[stop - start, *shape]} {dtype}"
                    )
                base, per_set = offsets[key]
                fh.seek(data_start + base + start * per_set)
                fh.write(value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
            del chunk


class SetTensor:
    """One key of a set-stacked safetensors file; indexing reads only the sets asked for.

    ``t[i]`` is set ``i``, ``t[a:b]`` sets ``a..b-1`` and ``t[[i, j]]`` (or an index tensor) the
    listed sets, each as an ordinary tensor; ``load()`` reads them all."""

    def __init__(self, path: Path, key: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.path, self.key, self.shape, self.dtype = path, key, torch.Size(shape), dtype

    def __len__(self) -> int:
        return self.shape[0]

    def numel(self) -> int:
        return _numel(tuple(self.shape))

    def _read(self, start: int, stop: int) -> torch.Tensor:
        with safe_open(str(self.path), framework="pt") as f:
            return f.get_slice(self.key)[start:stop]

    def __getitem__(self, index: Any) -> torch.Tensor:
        n = self.shape[0]
        if isinstance(index, torch.Tensor):
            index = index.tolist()
        if isinstance(index, int):
            i = index + n if index < 0 else index
            if not 0 <= i < n:
                raise IndexError(f"set {index} out of range for {self.key!r} with {n} sets")
            return self._read(i, i + 1)[0]
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            out = self._read(start, max(start, stop))
            return out[::step] if step != 1 else out
        if isinstance(index, (list, tuple)):
            return torch.stack([self[int(i)] for i in index]) if index else self._read(0, 0)
        raise TypeError(f"cannot index the sets of {self.key!r} with {type(index).__name__}")

    def load(self) -> torch.Tensor:
        return self._read(0, self.shape[0])

    def chunks(self, sets: int) -> Iterator[tuple[int, torch.Tensor]]:
        """``(start, sets start..start+sets-1)`` over every set."""
        for start in range(0, self.shape[0], sets):
            yield start, self._read(start, min(self.shape[0], start + sets))

    def __repr__(self) -> str:
        return f"SetTensor({self.key!r}, shape={list(self.shape)}, dtype={self.dtype}, path={str(self.path)!r})"


class SetTensors(Mapping[str, SetTensor]):
    """A set-stacked safetensors file as a read-only mapping of :class:`SetTensor`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        with safe_open(str(self.path), framework="pt") as f:
            keys = list(f.keys())
            self.metadata = dict(f.metadata() or {})
            specs = {}
            for k in keys:
                sl = f.get_slice(k)
                specs[k] = (tuple(sl.get_shape()), _dtype_of(sl.get_dtype()))
        self._tensors = {k: SetTensor(self.path, k, shape, dtype) for k, (shape, dtype) in specs.items()}

    @property
    def n_sets(self) -> int:
        return int(self.metadata.get("n_sets", 0))

    def __getitem__(self, key: str) -> SetTensor:
        try:
            return self._tensors[key]
        except KeyError:
            raise KeyError(
                f"{key!r} is not stored in {self.path}; stored: {', '.join(sorted(self._tensors))}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


def _dtype_of(code: str) -> torch.dtype:
    for dtype, c in _ST_DTYPES.items():
        if c == code:
            return dtype
    raise TypeError(f"stored dtype {code!r} is not one a set stream writes")


def is_set_file(path: Path) -> bool:
    with safe_open(str(path), framework="pt") as f:
        return (f.metadata() or {}).get("layout") == SET_LAYOUT


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
    elif isinstance(value, SetStream):
        path = stem.with_suffix(".safetensors")
        save_set_stream(value, path)
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
                return SetTensors(path) if is_set_file(path) else load_tensors(path)
            return json.loads(path.read_text())
    raise FileNotFoundError(f"no stored value at {stem}.{{safetensors,parquet,json}}: materialize it first")


#: Environment variable naming the data folder (``./data`` when unset).
DATA_DIR_ENV = "FUSION_DATA_DIR"


def default_data_root() -> str:
    """The data folder when none is given: ``$FUSION_DATA_DIR``, else ``data`` (relative to the working directory)."""
    return os.environ.get(DATA_DIR_ENV, "data")


class DataFolder(dg.ConfigurableResource):
    """The data folder of a run: stored asset values under ``<root>/<profile>/``, with the baselines,
    reproducers and checkpoints next to them. Assets that write files of their own (not through the
    IO manager) take their folder from here."""

    root: str = Field(
        default_factory=default_data_root, description=f"data folder (default from {DATA_DIR_ENV}, else ./data)"
    )

    def profile_dir(self, profile: str) -> Path:
        """``<root>/<profile>``: where the stored values of that profile live."""
        return Path(self.root) / profile


class PrecisionIOManager(dg.ConfigurableIOManager):
    """Stores each asset under ``<data folder>/<profile>/`` and attaches provenance metadata: the one
    place that records a stored value's provenance."""

    data: dg.ResourceDependency[DataFolder]
    settings: dg.ResourceDependency[ExperimentSettings]

    def _stem(self, key: dg.AssetKey) -> Path:
        return self.data.profile_dir(self.settings.profile) / Path(*key.path)

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
        from .verdicts import NOT_STORED, READS_OTHER_ASSETS_TAG

        try:
            return read_value(self._stem(context.asset_key))
        except FileNotFoundError:
            # A check reading another asset that this run does not produce and nothing stored:
            # the check is skipped (not yet run) instead of failing the selection.
            op_def = getattr(context, "op_def", None)
            reads = (op_def.tags or {}).get(READS_OTHER_ASSETS_TAG, "") if op_def is not None else ""
            if context.name in reads.split(","):
                return NOT_STORED
            raise
