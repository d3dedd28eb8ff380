"""Input sets stacked on a leading set axis, written and read a chunk of sets at a time, and sets
regenerated where they are read instead of stored (a recipe).

* :class:`SetStream` (sets produced a chunk at a time) -> one safetensors file written chunk by chunk,
  read back as :class:`SetTensors`, which loads only the sets asked for. Input pools and fp64
  references use it, so no step holds every set of a pool in memory.
* :class:`SetRecipe` -> a JSON file naming the generator and its arguments, read back as
  :class:`RegeneratedSets`, which draws the sets asked for on the reader's device.

:mod:`pipeline.storage` stores and reads them like any other value.
"""

import importlib
import json
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from .files import atomic_path, save_json

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
#: The module that registers each kind: a recipe read in another process imports it there.
_RECIPE_MODULES: dict[str, str] = {}


def register_recipe(kind: str, build: Callable[[Mapping[str, Any]], SetStream]) -> None:
    """Let stored recipes of ``kind`` be read back: ``build(params)`` returns the stream they describe."""
    _RECIPES[kind] = build
    _RECIPE_MODULES[kind] = build.__module__


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

    def __getstate__(self) -> dict[str, Any]:
        """What travels to another process (a lane worker): the record and the module registering its kind.
        The stream, with whatever it drew, stays here; it is rebuilt at the first read there."""
        return {"record": dict(self.record), "module": _RECIPE_MODULES.get(self.kind, "")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state["record"]["kind"] not in _RECIPES and state["module"]:
            importlib.import_module(state["module"])
        self.__init__(state["record"])  # type: ignore[misc]

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
