"""The ``opinfo`` generator's samples: each op's own sample arguments per dtype (from torch's
``sample_inputs`` / ``reference_inputs``), as templates with a slot per tensor, and how a
template is written as a call in a program's source (see :mod:`.opinfo`)."""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .opinfo_ops import _MAX_LITERAL, _MAX_NUMEL, _SAMPLES, _callee, op_db


@dataclass(frozen=True)
class Slot:
    """A tensor of a sample: ``chain`` (the value the op is fed), ``input`` (a seeded input),
    ``literal`` (small integer tensors, written out: indices whose values matter)."""

    role: str
    shape: tuple[int, ...]
    dtype: str
    values: Any = None  # the literal's nested list; for an integer input, (values kind, scale)


@dataclass(frozen=True)
class Template:
    """One sample of one op, its tensors replaced by slots: how to write the call."""

    key: str
    dtype: str
    callee: tuple[str, str]
    input: Any
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    slots: tuple[Slot, ...]

    @property
    def head(self) -> Slot:
        return self.slots[0]


class _Unwritable(Exception):
    pass


_SAMPLE_CACHE: dict[tuple[str, str], list[Template]] = {}

#: ops whose mask says where their indices are in bounds (true: read there, false: the fill value);
#: a seeded mask would make them read out of bounds where it is true, which the op leaves undefined
#: (eager clamps the index, Inductor reads past the row: seed 500673), so the sample's mask is kept
_MASK_OF_INDICES = {"_unsafe_masked_index"}


def _stable(text: str) -> int:
    import zlib

    return zlib.crc32(text.encode())


def templates(key: str, dtype: str) -> list[Template]:
    """The writable samples of op ``key`` for ``dtype`` (first :data:`_SAMPLES` of its
    ``reference_inputs`` where it has them, else of ``sample_inputs``), drawn under a seed fixed by
    the op and dtype, so the list is the same in every process; cached."""
    cached = _SAMPLE_CACHE.get((key, dtype))
    if cached is not None:
        return cached
    op = op_db()[key]
    callee = _callee(op)
    out: list[Template] = []
    if callee is not None:
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
            warnings.simplefilter("ignore")
            torch.manual_seed(_stable(f"{key}:{dtype}"))
            try:
                source = op.reference_inputs if op.reference_inputs_func is not None else op.sample_inputs
                samples = list(itertools.islice(source("cpu", getattr(torch, dtype)), _SAMPLES))
            except Exception:  # noqa: BLE001 - an op whose samples cannot be made on this build
                samples = []
            for sample in samples:
                try:
                    out.append(_template(key, dtype, callee, sample))
                except _Unwritable:
                    continue
    _SAMPLE_CACHE[(key, dtype)] = out
    return out


def _template(key: str, dtype: str, callee: tuple[str, str], sample: Any) -> Template:
    slots: list[Slot] = []

    def conv(obj: Any, first: bool = False) -> Any:
        if isinstance(obj, torch.Tensor):
            if obj.is_complex() or obj.layout != torch.strided or obj.numel() > _MAX_NUMEL:
                raise _Unwritable
            d = str(obj.dtype).removeprefix("torch.")
            shape = tuple(obj.shape)
            if first:
                if obj.numel() == 0:
                    raise _Unwritable
                slot = Slot("chain", shape, d)
            elif obj.dtype == torch.bool and key in _MASK_OF_INDICES:
                if obj.numel() > _MAX_LITERAL:
                    raise _Unwritable
                slot = Slot("literal", shape, d, obj.tolist())
            elif obj.is_floating_point() or obj.dtype == torch.bool:
                slot = Slot("input", shape, d)
            elif obj.numel() <= _MAX_LITERAL:
                slot = Slot("literal", shape, d, obj.tolist())
            else:
                low, high = int(obj.min()), int(obj.max())
                kind = ("index", float(max(high + 1, 1))) if low >= 0 else ("int", float(max(abs(low), high, 1)))
                slot = Slot("input", shape, d, kind)
            slots.append(slot)
            return ("__slot__", len(slots) - 1)
        if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
            items = [conv(o, first and i == 0) for i, o in enumerate(obj)]
            return ("__list__" if isinstance(obj, list) else "__tuple__", tuple(items))
        if isinstance(obj, torch.Size):
            return ("__tuple__", tuple(int(s) for s in obj))
        if isinstance(obj, complex):
            raise _Unwritable
        if obj is None or isinstance(obj, (bool, int, float, str)) or obj is Ellipsis:
            return obj
        if isinstance(obj, (torch.dtype, torch.memory_format, torch.layout)):
            if isinstance(obj, torch.dtype) and obj.is_complex:
                raise _Unwritable
            return ("__torch__", str(obj).removeprefix("torch."))
        if isinstance(obj, torch.device):
            return ("__device__", None)
        if isinstance(obj, slice):
            return ("__slice__", (conv(obj.start), conv(obj.stop), conv(obj.step)))
        raise _Unwritable

    first = conv(sample.input, first=True)
    if not slots or slots[0].role != "chain":
        raise _Unwritable
    args = tuple(conv(a) for a in sample.args)
    kwargs = tuple((str(k), conv(v)) for k, v in sample.kwargs.items())
    return Template(key, dtype, callee, first, args, kwargs, tuple(slots))


def _number(x: float | int | bool) -> str:
    if isinstance(x, (bool, int)):
        return repr(x)
    if math.isnan(x):
        return "float('nan')"
    if math.isinf(x):
        return "float('inf')" if x > 0 else "-float('inf')"
    return repr(x)


def _write(obj: Any, names: Sequence[str], device: str) -> str:
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], str) and obj[0].startswith("__"):
        tag, body = obj
        if tag == "__slot__":
            return names[body]
        if tag in ("__list__", "__tuple__"):
            items = [_write(o, names, device) for o in body]
            if tag == "__list__":
                return "[" + ", ".join(items) + "]"
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if tag == "__torch__":
            return f"torch.{body}"
        if tag == "__device__":
            return repr(device)
        if tag == "__slice__":
            return "slice(" + ", ".join(_write(o, names, device) for o in body) + ")"
    if obj is Ellipsis:
        return "..."
    if isinstance(obj, (bool, int, float)):
        return _number(obj)
    return repr(obj)


def _call(t: Template, names: Sequence[str], device: str) -> str:
    head = _write(t.input, names, device)
    args = [_write(a, names, device) for a in t.args] + [f"{k}={_write(v, names, device)}" for k, v in t.kwargs]
    kind, name = t.callee
    if kind == "attr":
        return f"{head}.{name}"
    if kind == "method":
        if t.input[0] != "__slot__":  # a list as the receiver: not writable as a method call
            raise _Unwritable
        return f"{head}.{name}({', '.join(args)})"
    return f"{name}({', '.join([head, *args])})"
