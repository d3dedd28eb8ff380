"""Lossless, atomic storage of asset values.

* ``dict[str, torch.Tensor]`` -> safetensors (every dtype, bfloat16 included, bit for bit);
* ``polars.DataFrame`` -> parquet;
* ``dict`` of JSON values -> JSON;
* :class:`~pipeline.set_storage.SetStream` (sets produced a chunk at a time) -> one safetensors file
  written chunk by chunk, read back as :class:`~pipeline.set_storage.SetTensors`, which loads only the
  sets asked for; a :class:`~pipeline.set_storage.SetRecipe` -> JSON, read back as the sets it
  regenerates (:mod:`pipeline.set_storage`).

Every write goes to a temporary file in the target folder and is renamed into place
(:func:`pipeline.files.atomic_path`), so a run
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
import functools
import json
import os
import re
import shutil
import struct
import tempfile
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import torch
from pydantic import Field, field_validator
from safetensors.torch import load

from .files import atomic_path, load_tensors, save_json, save_tensors
from .resources import ExperimentSettings
from .set_storage import (
    SET_LAYOUT,
    SetRecipe,
    SetStream,
    SetTensors,
    _json_value,
    is_set_file,
    save_recipe,
    save_set_stream,
)

_EXTENSIONS = (".safetensors", ".parquet", ".json")


def save_table(df: pl.DataFrame, target: Path) -> None:
    with atomic_path(target) as tmp:
        df.write_parquet(tmp)


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

    def value_stem(self, profile: str, key_path: Sequence[str], backend: str | None = None) -> Stem:
        """Where the IO manager stores an asset of ``profile``: a local path, or a URL under a remote root.
        ``backend``: the compiler whose fused path computed the value (:func:`compiler_folder`); None for
        a value that does not depend on the fused path, stored once for every compiler."""
        parts = [profile, *compiler_folder(backend), *key_path]
        if self.is_remote:
            return "/".join([self.root.rstrip("/"), *parts])
        return Path(self.root).joinpath(*parts)

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


#: Asset tag that declares whether a stored value depends on the fused path (the compiler a run names):
#: ``"no"`` for one that does not (S's input pools and fp64 references), stored once under
#: ``<profile>/`` and reused by every compiler's run; absent (or any other value): it does, and is
#: stored per compiler (:func:`compiler_folder`).
FUSED_PATH_TAG = "fusion/fused_path"
#: The tag that says an asset does not depend on the fused path; spread it into ``@dg.asset(tags=...)``.
NO_FUSED_PATH = {FUSED_PATH_TAG: "no"}
#: The backend whose values keep the folder they had before values were stored per compiler.
HOME_BACKEND = "inductor"
#: The folder, under ``<profile>/``, of the values computed by another compiler than :data:`HOME_BACKEND`.
COMPILERS_FOLDER = "compilers"


def compiler_folder(backend: str | None) -> tuple[str, ...]:
    """The folders between ``<profile>/`` and an asset's key for values computed with ``backend``:
    none for Inductor (its values keep today's paths, so results stored before per-compiler storage stay
    readable) and for values that depend on no fused path (``None``); ``compilers/<backend>`` for any
    other backend (``openvino``, ``iree``, a user's adapter, a planted-bug backend).

    >>> compiler_folder("inductor"), compiler_folder(None), compiler_folder("openvino")
    ((), (), ('compilers', 'openvino'))
    """
    if backend is None or backend == HOME_BACKEND:
        return ()
    if not backend or "/" in backend or backend.startswith("."):
        raise ValueError(f"backend {backend!r} cannot name a folder")
    return (COMPILERS_FOLDER, backend)


def uses_fused_path(tags: Mapping[str, str] | None) -> bool:
    """Whether an asset with these tags depends on the fused path (:data:`FUSED_PATH_TAG`)."""
    return (tags or {}).get(FUSED_PATH_TAG) != "no"


#: Where the asset keys that declare :data:`NO_FUSED_PATH` come from when a context carries no spec:
#: the registry of experiments hands in a function at its import (storage sits below the experiments
#: and does not import them).
_shared_keys_source: Callable[[], Iterable[dg.AssetKey]] | None = None


def provide_shared_keys(source: Callable[[], Iterable[dg.AssetKey]]) -> None:
    """Name the function that lists the registered assets stored once for every compiler (called by
    the registry of experiments; read lazily, since listing loads every asset module)."""
    global _shared_keys_source
    _shared_keys_source = source
    _independent_keys.cache_clear()


@functools.cache
def _independent_keys() -> frozenset[dg.AssetKey]:
    """The registered assets that declare :data:`NO_FUSED_PATH` (read where a context has no spec)."""
    return frozenset(_shared_keys_source() if _shared_keys_source is not None else ())


def key_uses_fused_path(key: dg.AssetKey, spec: Any = None) -> bool:
    """Whether the asset ``key`` depends on the fused path: from its spec's tags where given, else
    from the registered experiments' assets."""
    tags = getattr(spec, "tags", None)
    if tags is not None and getattr(spec, "key", key) == key:
        return uses_fused_path(tags)
    return key not in _independent_keys()


def _spec_of(context: Any) -> Any:
    try:
        return context.asset_spec
    except (dg.DagsterError, AttributeError, KeyError):  # not an asset output, or no definition at hand
        return None


class PrecisionIOManager(dg.ConfigurableIOManager):
    """Stores each asset under ``<data folder>/<profile>/`` (per compiler: :func:`compiler_folder`) and
    attaches provenance metadata: the one place that records a stored value's provenance."""

    data: dg.ResourceDependency[DataFolder]
    settings: dg.ResourceDependency[ExperimentSettings]

    def _stem(self, key: dg.AssetKey, spec: Any = None) -> Stem:
        backend = self.settings.backend if key_uses_fused_path(key, spec) else None
        return self.data.value_stem(self.settings.profile, key.path, backend)

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if obj is None:
            return
        path = write_value(obj, self._stem(context.asset_key, _spec_of(context)))
        meta: dict[str, Any] = {"path": dg.MetadataValue.path(str(path)), "bytes": stored_size(path)}
        meta.update({f"provenance.{k}": v for k, v in self.settings.provenance().items()})
        if isinstance(obj, pl.DataFrame):
            meta["rows"] = obj.height
            meta["columns"] = ", ".join(obj.columns)
        context.add_output_metadata(meta)

    def load_input(self, context: dg.InputContext) -> Any:
        from .verdicts import NOT_STORED, READS_OTHER_ASSETS_TAG

        try:
            upstream = getattr(context, "upstream_output", None)
            return read_value(self._stem(context.asset_key, _spec_of(upstream) if upstream is not None else None))
        except FileNotFoundError:
            # A check reading another asset that this run does not produce and nothing stored:
            # the check is skipped (not yet run) instead of failing the selection.
            op_def = getattr(context, "op_def", None)
            reads = (op_def.tags or {}).get(READS_OTHER_ASSETS_TAG, "") if op_def is not None else ""
            if context.name in reads.split(","):
                return NOT_STORED
            raise
