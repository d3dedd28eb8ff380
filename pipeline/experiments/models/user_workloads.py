"""Your own workloads in M, without editing the project.

``FUSION_WORKLOADS=pkg.module:NAME`` (or ``--workloads`` on the CLI; several separated by commas)
names objects importable from Python's path. Each names one workload or a list (tuple) of them. A
workload is any object with

* ``name``: a non-empty ``str`` (unique across the run);
* ``build()``: returns an ``nn.Module`` or a plain callable (the module is put in eval mode; weights
  are the builder's business: seed them for a reproducible run; ``build()`` runs under a fixed torch
  seed). A module is compiled as it is; a plain callable is compiled itself (``torch.compile(fn)``),
  never wrapped in a module, so a function from a file loaded outside ``sys.modules`` compiles too;
  a callable has no parameters to cast and no submodules for the divergence locator;
* ``inputs(generator, batch)``: returns a tuple of tensors for one batch of ``batch`` samples, drawn
  from ``generator`` and on ``generator.device`` (the run's device);
* optionally ``dtypes``: a tuple of dtype names the workload runs in (default: the profile's), either

  - float names (:data:`FLOAT_DTYPES`: ``"float32"``, ``"bfloat16"``, ``"float16"``), one run per
    name: floating inputs, parameters and buffers are cast to it; integer and bool inputs (token
    ids, masks) are passed as they are; or
  - one integer or bool name (:data:`NATIVE_DTYPES`: ``"bool"``, ``"uint8"``, ``"int8"``,
    ``"int16"``, ``"int32"``, ``"int64"``), for a workload that computes on integer or bool data:
    one run in the workload's native dtypes, nothing cast (inputs as ``inputs()`` returns them,
    the module as ``build()`` made it). The name states the dtype of those inputs and is checked:
    at least one input has it. Float and integer names do not mix.

No base class to import. Every output may be floating, integer or bool (predictions, indices,
masks). Floating outputs are judged against an fp64 re-execution (the working inputs and
parameters upcast exactly; integer and bool inputs as they are) by their scale-aware ULP error, in
ULPs of the run's dtype (of the output's own dtype in a native run), and by class (NaN, +-inf, the
sign of a zero); integer and bool outputs are wrong only where fused differs from eager and fp64
does not side with fused (:mod:`.exact`).

:func:`load_workloads` checks every named object before anything runs and raises
:class:`WorkloadError` with one line naming the workload and the problem.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

ENV = "FUSION_WORKLOADS"
#: Dtype names a workload may run in with its floating inputs and parameters cast (one run each).
FLOAT_DTYPES = ("float32", "bfloat16", "float16")
#: Integer and bool dtype names: one run in the workload's native dtypes, nothing cast.
NATIVE_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64")
DTYPE_NAMES = FLOAT_DTYPES + NATIVE_DTYPES


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
    if dtypes is not None:
        _check_dtypes(where, dtypes)
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
    native = [d for d in dtypes or () if d in NATIVE_DTYPES]
    if dtypes and native and not any(str(t.dtype).removeprefix("torch.") == native[0] for t in inputs):
        found = ", ".join(sorted({str(t.dtype).removeprefix("torch.") for t in inputs}))
        raise WorkloadError(
            f"{where}: `dtypes` {tuple(dtypes)!r} declares a native {native[0]} run, but no input is {native[0]} "
            f"(inputs: {found}); name the inputs' integer dtype, or float dtypes to cast to"
        )


def _check_dtypes(where: str, dtypes: Any) -> None:
    allowed = f"float names {', '.join(FLOAT_DTYPES)} (cast), or one of {', '.join(NATIVE_DTYPES)} (native)"
    if not isinstance(dtypes, (tuple, list)) or not dtypes:
        raise WorkloadError(f"{where}: `dtypes` must be a non-empty tuple of {allowed}; got {dtypes!r}")
    bad = [d for d in dtypes if d not in DTYPE_NAMES]
    if bad:
        raise WorkloadError(f"{where}: `dtypes` names {', '.join(map(repr, bad))}; allowed: {allowed}")
    native = [d for d in dtypes if d in NATIVE_DTYPES]
    if native and len(dtypes) > 1:
        raise WorkloadError(
            f"{where}: `dtypes` {tuple(dtypes)!r}: an integer or bool name ({native[0]}) means one run with nothing "
            "cast, so it stands alone; allowed: " + allowed
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


def workload_dtypes(obj: Any, default: Sequence[str]) -> tuple[str, ...]:
    """The dtypes ``obj`` declares, else ``default`` (the profile's, or the run's configured ones)."""
    dtypes = getattr(obj, "dtypes", None)
    return tuple(dtypes) if dtypes else tuple(default)
