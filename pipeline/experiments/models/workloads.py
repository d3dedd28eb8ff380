"""Your own workloads in M, without editing the project.

``FUSION_WORKLOADS=pkg.module:NAME`` (or ``--workloads`` on the CLI; several separated by commas)
names objects importable from Python's path. Each names one workload or a list (tuple) of them. A
workload is any object with

* ``name``: a non-empty ``str`` (unique across the run);
* ``build()``: returns an ``nn.Module`` or a plain callable (the module is put in eval mode; weights
  are the builder's business: seed them for a reproducible run; ``build()`` runs under a fixed torch
  seed);
* ``inputs(generator, batch)``: returns a tuple of tensors for one batch of ``batch`` samples, drawn
  from ``generator`` and on ``generator.device`` (the run's device);
* optionally ``dtypes``: a tuple of dtype names (``"float32"``, ``"bfloat16"``, ``"float16"``) the
  workload runs in (default: the profile's).

No base class to import. Floating inputs and parameters are cast to each dtype; integer and bool
inputs (token ids, masks) are passed as they are. Floating outputs are compared against an fp64
re-execution; integer and bool outputs (indices, predictions) must be bit-exact between eager and fused.

:func:`load_workloads` checks every named object before anything runs and raises
:class:`WorkloadError` with one line naming the workload and the problem.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

ENV = "FUSION_WORKLOADS"
DTYPE_NAMES = ("float32", "bfloat16", "float16")


class WorkloadError(ValueError):
    """A workload spec that cannot run: the message is one line naming the spec and the problem."""


def parse_spec(text: str) -> list[str]:
    """``"a.b:X, c:Y"`` -> ``["a.b:X", "c:Y"]``; each must be ``module:NAME``."""
    specs = [s.strip() for s in text.split(",") if s.strip()]
    for spec in specs:
        module, _, attr = spec.partition(":")
        if not module or not attr:
            raise WorkloadError(f"workload spec {spec!r}: expected module:NAME (e.g. mypkg.models:WORKLOADS)")
    return specs


def _resolve(spec: str) -> list[Any]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise WorkloadError(f"workload spec {spec!r}: cannot import module {module_name!r} ({exc})") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise WorkloadError(f"workload spec {spec!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return list(obj) if isinstance(obj, (list, tuple)) else [obj]


def _label(spec: str, obj: Any) -> str:
    name = getattr(obj, "name", None)
    return f"workload {name!r} ({spec})" if isinstance(name, str) and name else f"workload from {spec}"


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def check_workload(obj: Any, spec: str, device: torch.device, batch: int = 1) -> None:
    """Raise :class:`WorkloadError` (one line) unless ``obj`` builds and yields valid inputs on ``device``."""
    where = _label(spec, obj)
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name.strip():
        raise WorkloadError(f"{where}: `name` must be a non-empty str, got {name!r}")
    for method in ("build", "inputs"):
        if not callable(getattr(obj, method, None)):
            raise WorkloadError(f"{where}: has no callable `{method}`")
    dtypes = getattr(obj, "dtypes", None)
    if dtypes is not None and (
        not isinstance(dtypes, (tuple, list)) or not dtypes or any(d not in DTYPE_NAMES for d in dtypes)
    ):
        raise WorkloadError(f"{where}: `dtypes` must be a non-empty tuple of {', '.join(DTYPE_NAMES)}, got {dtypes!r}")
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            built = obj.build()
    except Exception as exc:  # noqa: BLE001 - any failure of user code is reported as its one line
        raise WorkloadError(f"{where}: build() raised {type(exc).__name__}: {exc}") from None
    if not (isinstance(built, nn.Module) or callable(built)):
        raise WorkloadError(f"{where}: build() must return an nn.Module or a callable, got {type(built).__name__}")
    generator = torch.Generator(device=device).manual_seed(0)
    try:
        inputs = obj.inputs(generator, batch)
    except Exception as exc:  # noqa: BLE001 - as above
        raise WorkloadError(f"{where}: inputs(generator, batch) raised {type(exc).__name__}: {exc}") from None
    if not isinstance(inputs, tuple) or not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise WorkloadError(
            f"{where}: inputs(generator, batch) must return a non-empty tuple of tensors, got {type(inputs).__name__}"
        )
    wrong = [str(t.device) for t in inputs if t.device.type != device.type]
    if wrong:
        raise WorkloadError(
            f"{where}: inputs(generator, batch) returned tensors on {', '.join(sorted(set(wrong)))}, expected "
            f"{device} (the generator's device)"
        )


def load_workloads(text: str | None, device: torch.device | str = "cpu") -> list[Any]:
    """The workloads ``text`` names (default: ``$FUSION_WORKLOADS``), each checked on ``device``;
    :class:`WorkloadError` with one line on the first problem (a duplicate name included)."""
    text = os.environ.get(ENV, "") if text is None else text
    device = torch.device(device)
    out: list[Any] = []
    seen: dict[str, str] = {}
    for spec in parse_spec(text):
        for obj in _resolve(spec):
            check_workload(obj, spec, device)
            if obj.name in seen:
                raise WorkloadError(f"workload {obj.name!r} ({spec}): the name is also used by {seen[obj.name]}")
            seen[obj.name] = spec
            out.append(obj)
    return out


class CallableModule(nn.Module):
    """A workload's plain callable as a module, so it can be copied, cast and hooked like one."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def as_module(built: Any) -> nn.Module:
    """A workload's built model as a module (a plain callable is wrapped in :class:`CallableModule`)."""
    return built if isinstance(built, nn.Module) else CallableModule(built)


def workload_dtypes(obj: Any, default: Sequence[str]) -> tuple[str, ...]:
    dtypes = getattr(obj, "dtypes", None)
    return tuple(dtypes) if dtypes else tuple(default)
