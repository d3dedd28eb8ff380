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

The data folder may be an fsspec URL instead (``FUSION_DATA_DIR=s3://bucket/prefix``, with the
protocol's package installed: ``s3fs`` for S3, in the ``cluster`` extra). A value is then written to a
local temporary file, uploaded to a temporary key next to its final one and moved into place (on S3 a
server-side copy, which makes the object appear whole), so a reader never sees part of a value and a
write that fails leaves nothing at the final key (the previous value stays). Only the values the IO
manager stores live there: steps that write files of their own under the data folder (baselines,
reproducers, checkpoints, the report) need a local or mounted folder and refuse a URL, saying so.
"""

import atexit
import contextlib
import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import torch
from pydantic import Field, field_validator
from safetensors import safe_open
from safetensors.torch import load, load_file, save_file

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
    #: One key's sets ``start..stop-1`` alone, where that is cheaper than :attr:`produce` (a reader of
    #: regenerated sets asks for one key at a time); None: :attr:`produce` and pick the key.
    produce_key: Callable[[str, int, int], torch.Tensor] | None = None

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


# --- sets regenerated where they are read, instead of stored --------------------------------

#: Marks a JSON file that stands for sets that were not stored: the recipe that produces them again.
RECIPE_KEY = "__set_recipe__"
_RECIPES: dict[str, Callable[[Mapping[str, Any]], SetStream]] = {}


def register_recipe(kind: str, build: Callable[[Mapping[str, Any]], SetStream]) -> None:
    """Let stored recipes of ``kind`` be read back: ``build(params)`` returns the stream they describe."""
    _RECIPES[kind] = build


@dataclass(frozen=True)
class SetRecipe:
    """Sets that are cheaper to produce again than to store and read (pools drawn from per-set seeds on
    a GPU, and their fp64 references): stored as a small JSON recipe, read back as
    :class:`RegeneratedSets`, which produce only the sets a reader asks for, on the device they were
    made for. ``params`` must be JSON; ``stream`` is the stream the recipe rebuilds (its entries and set
    count are recorded, and a reader's rebuilt stream must match them)."""

    kind: str
    params: Mapping[str, Any]
    stream: SetStream

    def as_json(self) -> dict[str, Any]:
        entries = {k: [list(map(int, shape)), str(dtype)] for k, (shape, dtype) in sorted(self.stream.entries.items())}
        return {
            RECIPE_KEY: {
                "kind": self.kind,
                "params": dict(self.params),
                "n_sets": self.stream.n_sets,
                "entries": entries,
            }
        }


def save_recipe(recipe: SetRecipe, target: Path) -> None:
    save_json(recipe.as_json(), target)


class RegeneratedSet(SetTensor):
    """One key of :class:`RegeneratedSets`: indexed like a :class:`SetTensor`, produced instead of read."""

    def __init__(self, owner: "RegeneratedSets", key: str, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        super().__init__(Path(f"<regenerated {owner.kind}>"), key, shape, dtype)
        self._owner = owner

    def _read(self, start: int, stop: int) -> torch.Tensor:
        return self._owner.read(self.key, start, stop)


class RegeneratedSets(Mapping[str, SetTensor]):
    """A stored :class:`SetRecipe` read back: a read-only mapping like :class:`SetTensors`, whose sets
    are produced when indexed (a stream's ``produce_key`` shares one draw among a batch's arguments,
    read one key at a time). Keys, shapes and dtypes come from the record; the stream is rebuilt at
    the first read, so a recipe made for a device this machine lacks (a GPU run's, imported) can be
    listed, and refuses only to produce sets."""

    def __init__(self, record: Mapping[str, Any]) -> None:
        self.kind = str(record["kind"])
        if self.kind not in _RECIPES:
            raise KeyError(
                f"a stored recipe of kind {self.kind!r} cannot be read here: known kinds are "
                f"{', '.join(sorted(_RECIPES)) or 'none (import the code location first)'}"
            )
        self.record = record
        self.n_sets = int(record["n_sets"])
        self.metadata = {"layout": SET_LAYOUT, "n_sets": str(self.n_sets), "regenerated": self.kind}
        self._tensors = {
            k: RegeneratedSet(self, k, (self.n_sets, *map(int, shape)), getattr(torch, dtype.removeprefix("torch.")))
            for k, (shape, dtype) in record["entries"].items()
        }
        self._stream: SetStream | None = None

    @property
    def stream(self) -> SetStream:
        """The stream the recipe describes, rebuilt once and checked against what the recipe recorded."""
        if self._stream is None:
            stream = _RECIPES[self.kind](self.record["params"])
            rebuilt = {k: [list(map(int, shape)), str(dtype)] for k, (shape, dtype) in stream.entries.items()}
            if rebuilt != dict(self.record["entries"]) or stream.n_sets != self.n_sets:
                raise ValueError(
                    f"a stored {self.kind!r} recipe no longer rebuilds what it recorded (entries or set count "
                    "differ): the code changed since it was materialized; rematerialize it"
                )
            self._stream = stream
        return self._stream

    def read(self, key: str, start: int, stop: int) -> torch.Tensor:
        stream = self.stream
        if stream.produce_key is not None:  # the recipes' streams: one key's sets, their draws shared
            return stream.produce_key(key, start, stop)
        return stream.produce(start, stop)[key]

    def __getitem__(self, key: str) -> SetTensor:
        try:
            return self._tensors[key]
        except KeyError:
            raise KeyError(f"{key!r} is not in this {self.kind}; it has: {', '.join(sorted(self._tensors))}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


def _json_value(data: Any) -> Any:
    """A stored JSON value as read back: a recipe becomes the sets it regenerates."""
    return RegeneratedSets(data[RECIPE_KEY]) if isinstance(data, dict) and RECIPE_KEY in data else data


def is_set_file(path: Path) -> bool:
    with safe_open(str(path), framework="pt") as f:
        return (f.metadata() or {}).get("layout") == SET_LAYOUT


def save_table(df: pl.DataFrame, target: Path) -> None:
    with atomic_path(target) as tmp:
        df.write_parquet(tmp)


def save_json(value: Any, target: Path) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(json.dumps(value, indent=2, sort_keys=True, default=str))


def _writer(value: Any) -> tuple[str, Callable[[Any, Path], None]]:
    """The extension ``value`` is stored with and the function that writes it to a local path."""
    if isinstance(value, pl.DataFrame):
        return ".parquet", save_table
    if isinstance(value, SetStream):
        return ".safetensors", save_set_stream
    if isinstance(value, SetRecipe):
        return ".json", save_recipe
    if isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values()):
        return ".safetensors", save_tensors
    if isinstance(value, (dict, list)):
        return ".json", save_json
    raise TypeError(
        f"cannot store a {type(value).__name__}; assets return polars DataFrames, dicts of "
        "tensors, or JSON-compatible dicts/lists"
    )


#: A stored value's place without its extension: a local path, or an fsspec URL (see :func:`is_url`).
Stem = Path | str


def write_value(value: Any, stem: Stem) -> Path | str:
    """Store ``value`` at ``stem`` + the extension for its type; returns the path (or URL) written."""
    ext, write = _writer(value)
    if isinstance(stem, str) and is_url(stem):
        return _write_remote(value, stem, ext, write)
    stem = Path(stem)
    path = stem.with_suffix(ext)
    write(value, path)
    for other_ext in _EXTENSIONS:  # one stored form per asset: drop a stale one of another type
        other = stem.with_suffix(other_ext)
        if other != path:
            other.unlink(missing_ok=True)
    return path


def read_value(stem: Stem) -> Any:
    if isinstance(stem, str) and is_url(stem):
        return _read_remote(stem)
    stem = Path(stem)
    for ext in _EXTENSIONS:
        path = stem.with_suffix(ext)
        if path.exists():
            if ext == ".parquet":
                return pl.read_parquet(path)
            if ext == ".safetensors":
                return SetTensors(path) if is_set_file(path) else load_tensors(path)
            return _json_value(json.loads(path.read_text()))
    raise FileNotFoundError(f"no stored value at {stem}.{{safetensors,parquet,json}}: materialize it first")


def stored_size(path: str | Path) -> int:
    """Bytes of a stored value, local or at a URL."""
    if isinstance(path, str) and is_url(path):
        fs, key = remote_fs(path)
        return int(fs.size(key))
    return Path(path).stat().st_size


def stored_exists(path: str | Path) -> bool:
    """Whether a stored value's file (a local path or a URL, as materialization metadata records it) exists."""
    if isinstance(path, str) and is_url(path):
        fs, key = remote_fs(path)
        fs.invalidate_cache(key)
        return bool(fs.exists(key))
    return Path(path).exists()


# --- values on an object store (an fsspec URL as data folder) ---------------------------------

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def is_url(root: str | os.PathLike[str]) -> bool:
    """Whether ``root`` is an fsspec URL such as ``s3://bucket/prefix`` (``file://`` counts as a URL too)."""
    return isinstance(root, str) and bool(_URL.match(root))


class DataFolderError(ValueError):
    """The data folder cannot be used as asked (the message says why and what to do)."""


def _protocol_problem(url: str) -> str | None:
    """Why fsspec cannot open ``url`` here (unknown protocol, or its package missing), or None."""
    import fsspec

    protocol = url.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        return (
            f"data folder {url!r}: the {protocol!r} protocol needs a package that is not installed ({exc}); "
            "for S3: pip install s3fs, or the project's cluster extra: pip install -e '.[cluster]'"
        )
    except ValueError as exc:
        return f"data folder {url!r}: {exc}"
    return None


def remote_fs(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and the path within it (``DataFolderError`` when it cannot be opened)."""
    import fsspec

    problem = _protocol_problem(url)
    if problem:
        raise DataFolderError(problem)
    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def _write_remote(value: Any, url_stem: str, ext: str, write: Callable[[Any, Path], None]) -> str:
    """Write locally, upload to a temporary key beside the final one, move it into place; a failure
    at any point removes the temporary key and leaves the final key as it was."""
    fs, stem = remote_fs(url_stem)
    target = stem + ext
    parent, _, name = target.rpartition("/")
    temp_key = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"
    with tempfile.TemporaryDirectory(prefix="fusion-upload-") as folder:
        local = Path(folder) / name
        write(value, local)
        try:
            fs.put_file(str(local), temp_key)
            fs.mv(temp_key, target)
        except BaseException:
            with contextlib.suppress(Exception):  # already failing: the first error is the one to report
                fs.rm_file(temp_key)
            raise
    for other_ext in _EXTENSIONS:  # one stored form per asset, as on a local folder
        other = stem + other_ext
        if other != target and fs.exists(other):
            fs.rm_file(other)
    return url_stem + ext


_download_dir: str | None = None


def _downloads() -> Path:
    """This process's folder for set files read from an object store (removed when the process exits)."""
    global _download_dir
    if _download_dir is None:
        _download_dir = tempfile.mkdtemp(prefix="fusion-remote-values-")
        atexit.register(shutil.rmtree, _download_dir, True)
    return Path(_download_dir)


def _read_remote(url_stem: str) -> Any:
    fs, stem = remote_fs(url_stem)
    fs.invalidate_cache(stem.rpartition("/")[0])  # another process (a worker) may have written it
    for ext in _EXTENSIONS:
        key = stem + ext
        if not fs.exists(key):
            continue
        if ext == ".parquet":
            return pl.read_parquet(fs.cat_file(key))
        if ext == ".json":
            return _json_value(json.loads(fs.cat_file(key)))
        (header_len,) = struct.unpack("<Q", fs.cat_file(key, start=0, end=8))
        header = json.loads(fs.cat_file(key, start=8, end=8 + header_len))
        if (header.get("__metadata__") or {}).get("layout") != SET_LAYOUT:
            return load(fs.cat_file(key))
        # Set files are read a few sets at a time from a local file: download it once, kept while
        # the value is in use.
        local = _downloads() / f"{uuid.uuid4().hex}-{key.rpartition('/')[2]}"
        fs.get_file(key, str(local))
        value = SetTensors(local)
        weakref.finalize(value, local.unlink, True)
        return value
    raise FileNotFoundError(f"no stored value at {url_stem}.{{safetensors,parquet,json}}: materialize it first")


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
        default_factory=default_data_root,
        description=f"data folder (default from {DATA_DIR_ENV}, else ./data); a local path or an fsspec URL "
        "such as s3://bucket/prefix for the stored values",
    )

    @field_validator("root")
    @classmethod
    def _root_is_usable(cls, value: str) -> str:
        if is_url(value) and (why := _protocol_problem(value)) is not None:
            raise ValueError(why)
        return value

    @property
    def is_remote(self) -> bool:
        """Whether the data folder is an fsspec URL (an object store), not a local path."""
        return is_url(self.root)

    def value_stem(self, profile: str, key_path: Sequence[str]) -> Stem:
        """Where the IO manager stores an asset of ``profile``: a local path, or a URL under a remote root."""
        if self.is_remote:
            return "/".join([self.root.rstrip("/"), profile, *key_path])
        return Path(self.root) / profile / Path(*key_path)

    def profile_dir(self, profile: str) -> Path:
        """``<root>/<profile>``: where the stored values of that profile live, for the steps that read
        or write files there themselves; those need a local (or mounted) folder."""
        if self.is_remote:
            raise DataFolderError(
                f"the data folder is the URL {self.root!r}: stored asset values go there, but this step reads or "
                "writes files of its own under the data folder (baselines, reproducers, checkpoints, the report), "
                f"which needs a local or mounted folder; set {DATA_DIR_ENV} to a path (a shared volume on a cluster)"
            )
        return Path(self.root) / profile


class PrecisionIOManager(dg.ConfigurableIOManager):
    """Stores each asset under ``<data folder>/<profile>/`` and attaches provenance metadata: the one
    place that records a stored value's provenance."""

    data: dg.ResourceDependency[DataFolder]
    settings: dg.ResourceDependency[ExperimentSettings]

    def _stem(self, key: dg.AssetKey) -> Stem:
        return self.data.value_stem(self.settings.profile, key.path)

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if obj is None:
            return
        path = write_value(obj, self._stem(context.asset_key))
        meta: dict[str, Any] = {"path": dg.MetadataValue.path(str(path)), "bytes": stored_size(path)}
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
