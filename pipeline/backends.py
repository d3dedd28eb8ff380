"""torch.compile backends that register on demand.

An experiment may offer backends that are registered with torch.compile only when a run uses them
(the planted-bug backends of the regression experiment): it offers their names and a function that
registers them. The settings accept an offered name as a known backend, and a run that names one
registers it in each process that runs a step. Offers are made when the registry of experiments
is imported, which the code location and the CLI do before they check settings.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

_OFFERED: dict[str, Callable[[], object]] = {}


def offer(names: Iterable[str], register: Callable[[], object]) -> None:
    """Make ``names`` known backends, registered by ``register()`` when a run first needs one."""
    for name in names:
        _OFFERED[name] = register


def offered() -> set[str]:
    return set(_OFFERED)


def known_backends() -> set[str]:
    """Every backend torch.compile knows now, and every offered one."""
    from torch._dynamo import list_backends

    return set(list_backends(exclude_tags=())) | offered()


def ensure_registered(name: str) -> None:
    """Register ``name`` with torch.compile if it is offered and not registered yet (idempotent)."""
    from torch._dynamo import list_backends

    if name in _OFFERED and name not in list_backends(exclude_tags=()):
        _OFFERED[name]()


def registrar(name: str) -> str | None:
    """Where a fresh process finds the function that registers offered backend ``name``, as
    ``module:function`` (None for a backend that is not offered): a worker started without the
    registry of experiments registers it by :func:`register_by`, knowing nothing of who offered it."""
    register = _OFFERED.get(name)
    return None if register is None else f"{register.__module__}:{register.__qualname__}"


def register_by(spec: str) -> None:
    """Call the registering function :func:`registrar` named (``module:function``)."""
    module, sep, function = spec.partition(":")
    if not sep or not module or not function or "." in function:
        raise ValueError(f"a backend registrar is module:function, got {spec!r}")
    getattr(importlib.import_module(module), function)()
