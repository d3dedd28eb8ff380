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
    """Every backend torch.compile knows now, every offered one, and every compiler's adapter by its
    name (``inductor``, ``openvino``, ``iree`` and those of the ``fusion_precision.backends`` entry
    point group): an adapter name resolves to its ``torch.compile`` backend through
    :func:`precisionkit.backends.adapter_for_backend`, wherever a fused path is made."""
    from torch._dynamo import list_backends

    from precisionkit.backends import adapter_names

    return set(list_backends(exclude_tags=())) | offered() | set(adapter_names())


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


# --- compilers' adapters (precisionkit.backends) ------------------------------------------------


def adapter_named(name: str) -> object | None:
    """The adapter registered under ``name`` (a built-in one or a user's, by entry point), not checked
    for its compiler; None for a name that is only a ``torch.compile`` backend (``aot_eager``, a
    planted-bug backend). Raises :class:`precisionkit.backends.AdapterLoadError` for an adapter
    that cannot be loaded and :class:`~precisionkit.backends.MissingCompiler` for a built-in whose
    module imports a compiler that is not installed."""
    from precisionkit.backends import adapter_names, get_adapter

    if name not in adapter_names():
        return None
    return get_adapter(name, require_installed=False)


def adapter_problem(name: str) -> str | None:
    """Why the compiler of adapter ``name`` cannot run here, in one line that names the command that
    installs it (the adapter's ``missing()``, or the compiler package its module failed to import);
    None when it can run, or when ``name`` names no adapter."""
    from precisionkit.backends import AdapterLoadError, MissingCompiler, get_adapter

    try:
        if adapter_named(name) is None:
            return None
        get_adapter(name)  # checks missing(): MissingCompiler with the install line
    except (MissingCompiler, AdapterLoadError) as exc:
        return " ".join(str(exc).split())
    return None


def adapter_title(name: str) -> str:
    """The compiler's name for people (``OpenVINO``); the backend name itself for a backend without
    an adapter of its own."""
    from precisionkit.backends import AdapterLoadError, MissingCompiler

    try:
        adapter = adapter_named(name)
    except (AdapterLoadError, MissingCompiler):  # an adapter that cannot load still has a name to show
        adapter = None
    return str(getattr(adapter, "title", "") or name)
