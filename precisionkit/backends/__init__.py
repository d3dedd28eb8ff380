"""The registry of fusing compilers' adapters (:class:`~precisionkit.backends.base.BackendAdapter`).

Built-in adapters are named here and imported only when asked for, so importing precisionkit imports
no compiler: ``inductor``, ``openvino`` and ``iree``. Anyone else's compiler comes in through the
entry point group ``fusion_precision.backends`` of an installed distribution; its value is
``module:Class`` naming a BackendAdapter subclass, or a function of no arguments returning an
adapter. A built-in name wins over an entry point of the same name.

- :func:`get_adapter` gives the adapter registered under a name.
- :func:`adapter_for_backend` gives the adapter for a ``torch.compile`` backend name (what
  :class:`~precisionkit.paths.FusedFunction` uses).
- :func:`adapter_names` lists what can be asked for.
- :func:`wrapped_backend` routes, for a block, every compile of an adapter's backend through a function of
  the caller's (a planted fault, a counter), the original compile in hand.

What experiments ask of a compiler is an intent (:data:`INTENTS`: ``one_thread``, ``faithful_casts``,
``whole_graph``, ``reduction_knobs``, ``reduction_tilings``), answered by each adapter's
:meth:`~BackendAdapter.intent` / :meth:`~BackendAdapter.intent_variants`, or not, with
:meth:`~BackendAdapter.why_not`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .base import (
    FAITHFUL_CASTS,
    INTENTS,
    ONE_THREAD,
    REDUCTION_KNOBS,
    REDUCTION_TILINGS,
    WHOLE_GRAPH,
    BackendAdapter,
    CompileCapture,
    FusedUnit,
    Intent,
    failures_logged,
)

#: The entry point group a distribution registers its adapter in.
ENTRY_POINT_GROUP = "fusion_precision.backends"

#: Built-in adapters: name -> ``module:Class``.
BUILTIN: dict[str, str] = {
    "inductor": "precisionkit.backends.inductor:InductorAdapter",
    "openvino": "precisionkit.backends.openvino:OpenVINOAdapter",
    "iree": "precisionkit.backends.iree:IREEAdapter",
}
# The pip extra of each built-in whose compiler is a separate package (for the install line of an
# adapter that cannot even be imported without it).
_BUILTIN_EXTRAS = {"openvino": "openvino", "iree": "iree"}

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "FAITHFUL_CASTS",
    "INTENTS",
    "ONE_THREAD",
    "REDUCTION_KNOBS",
    "REDUCTION_TILINGS",
    "WHOLE_GRAPH",
    "AdapterLoadError",
    "BackendAdapter",
    "CompileCapture",
    "FusedUnit",
    "Intent",
    "MissingCompiler",
    "adapter_for_backend",
    "adapter_names",
    "compile_target",
    "failures_logged",
    "get_adapter",
    "install_line",
    "wrapped_backend",
]


class MissingCompiler(RuntimeError):
    """An adapter's compiler is not installed here; the message is one line ending in the command
    that installs it."""


class AdapterLoadError(RuntimeError):
    """An adapter could not be loaded (its module failed to import, or its entry point named
    something that is not an adapter); the message names the adapter and the cause."""


def install_line(extra: str | None) -> str:
    """The command that installs a compiler through precisionkit's pip extra.

    >>> install_line("openvino")
    "pip install 'fusion-precision[openvino]'"
    """
    return f"pip install 'fusion-precision[{extra}]'" if extra else ""


def _entry_points() -> dict[str, EntryPoint]:
    """The group's entry points by name, read afresh from the distributions on ``sys.path`` (cached
    per ``sys.path``: the scan costs milliseconds and fused paths are made by the hundred)."""
    return _entry_points_on(tuple(sys.path))


@lru_cache(maxsize=8)
def _entry_points_on(path: tuple[str, ...]) -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def adapter_names() -> list[str]:
    """The built-in adapters' names, then those of the entry points (sorted), each once."""
    return list(BUILTIN) + sorted(n for n in _entry_points() if n not in BUILTIN)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _load_builtin(name: str) -> Callable[[], BackendAdapter]:
    module_name, _, attr = BUILTIN[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name or module_name.startswith(f"{exc.name}."):
            raise AdapterLoadError(
                f"adapter {name!r}: {module_name} is not part of this precisionkit ({_one_line(str(exc))})"
            ) from exc
        # The adapter's module is here, the compiler package it imports is not.
        extra = _BUILTIN_EXTRAS.get(name)
        install = f"; install it with {install_line(extra)}" if extra else ""
        raise MissingCompiler(
            f"adapter {name!r} cannot run here: module {exc.name!r} is not installed{install}"
        ) from exc
    except Exception as exc:
        raise AdapterLoadError(
            f"adapter {name!r}: importing {module_name} failed: {type(exc).__name__}: {_one_line(str(exc))}"
        ) from exc
    try:
        factory = getattr(module, attr)
    except AttributeError as exc:
        raise AdapterLoadError(f"adapter {name!r}: {module_name} defines no {attr}") from exc
    return factory  # type: ignore[no-any-return]


def _load_entry_point(ep: EntryPoint) -> Callable[[], BackendAdapter]:
    where = f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP!r}"
    try:
        loaded = ep.load()
    except Exception as exc:
        raise AdapterLoadError(f"{where} failed to load: {type(exc).__name__}: {_one_line(str(exc))}") from exc
    if not callable(loaded):
        raise AdapterLoadError(f"{where} names a {type(loaded).__name__}, not an adapter class or factory")
    return loaded  # type: ignore[no-any-return]


def _instantiate(name: str, factory: Callable[[], BackendAdapter], where: str) -> BackendAdapter:
    try:
        adapter = factory()
    except Exception as exc:
        raise AdapterLoadError(
            f"{where}: making the adapter failed: {type(exc).__name__}: {_one_line(str(exc))}"
        ) from exc
    if not isinstance(adapter, BackendAdapter):
        raise AdapterLoadError(f"{where} gave a {type(adapter).__name__}, not a BackendAdapter")
    if not adapter.name:
        adapter.name = name
    elif adapter.name != name:
        raise AdapterLoadError(f"{where} gave an adapter named {adapter.name!r}, registered as {name!r}")
    return adapter


def _load(name: str) -> BackendAdapter:
    """The adapter registered as ``name`` (not checked for its compiler)."""
    if name in BUILTIN:
        return _instantiate(name, _load_builtin(name), f"adapter {name!r}")
    ep = _entry_points().get(name)
    if ep is None:
        raise ValueError(f"no adapter named {name!r}; adapters: {', '.join(adapter_names())}")
    return _instantiate(name, _load_entry_point(ep), f"entry point {ep.name!r} ({ep.value})")


def _checked(adapter: BackendAdapter) -> BackendAdapter:
    reason = adapter.missing()
    if reason:
        install = install_line(adapter.extra)
        tail = f"; install it with {install}" if install and install not in reason else ""
        raise MissingCompiler(_one_line(f"{adapter.title or adapter.name} cannot run here: {reason}{tail}"))
    return adapter


def get_adapter(name: str, *, require_installed: bool = True) -> BackendAdapter:
    """A new instance of the adapter registered as ``name``.

    Raises ValueError for a name no adapter has (listing those there are), :class:`AdapterLoadError`
    for an adapter that fails to load, and, with ``require_installed``, :class:`MissingCompiler` for
    one whose compiler is not installed (its :meth:`~BackendAdapter.missing` gives a reason).

    >>> get_adapter("inductor").title
    'Inductor'
    """
    adapter = _load(name)
    return _checked(adapter) if require_installed else adapter


def _by_dynamo_backend(backend_name: str) -> BackendAdapter | None:
    """The first adapter (built-ins, then entry points) that compiles with ``backend_name``; adapters
    that cannot be loaded are passed over here (asking for one by name says why)."""
    for name in adapter_names():
        if name == "inductor":
            continue  # Inductor's adapter serves every backend without an adapter of its own
        try:
            adapter = _load(name)
        except (AdapterLoadError, MissingCompiler, ValueError):
            continue
        if adapter.dynamo_backend == backend_name:
            return adapter
    return None


def _registered_backends() -> list[str]:
    from torch._dynamo import list_backends

    return list(list_backends(exclude_tags=()))


def adapter_for_backend(backend_name: str) -> BackendAdapter:
    """The adapter that compiles a fused path with torch.compile backend ``backend_name``.

    In order: the adapter named ``backend_name``; the adapter whose ``dynamo_backend`` is
    ``backend_name``; for any other backend registered with torch.compile, the Inductor adapter
    with that backend doing the compiling (:class:`~precisionkit.backends.inductor.InductorAdapter`
    with ``dynamo_backend=backend_name``). That covers backends that wrap Inductor's ``compile_fx``
    (their evidence is the Inductor code they generate) and ``eager`` / ``aot_eager`` (which generate
    none, so they only pass as fused with ``require_fusion=False``).

    A name that is neither is a ValueError that lists the adapters and the registered backends; an
    adapter whose compiler is not installed is :class:`MissingCompiler`.

    >>> adapter_for_backend("aot_eager").name, adapter_for_backend("aot_eager").dynamo_backend
    ('inductor', 'aot_eager')
    """
    from .inductor import InductorAdapter

    if backend_name == "inductor":
        return InductorAdapter()
    if backend_name in BUILTIN or backend_name in _entry_points():
        return get_adapter(backend_name)
    adapter = _by_dynamo_backend(backend_name)
    if adapter is not None:
        return _checked(adapter)
    from torch._dynamo import lookup_backend

    try:
        lookup_backend(backend_name)
    except Exception as exc:
        raise ValueError(
            f"unknown torch.compile backend {backend_name!r}; registered: {', '.join(_registered_backends())}; "
            f"adapters: {', '.join(adapter_names())}"
        ) from exc
    return InductorAdapter(dynamo_backend=backend_name)


def compile_target(name: str) -> tuple[str, str]:
    """(``torch.compile`` backend name, setup source) for ``name``: an adapter's name (``openvino``,
    ``iree``, a user's entry point) gives the backend it compiles with (``iree`` compiles with
    ``turbine_cpu``), registered in this process, and the lines a standalone reproducer runs to
    register it (:meth:`BackendAdapter.setup_source`); any other name (``inductor``, ``eager``, a
    backend a test registered) is returned as it is, with no setup.

    >>> compile_target("inductor")
    ('inductor', '')
    """
    if name == "inductor" or (name not in BUILTIN and name not in _entry_points()):
        return name, ""
    adapter = get_adapter(name)
    adapter.prepare()
    return adapter.dynamo_backend, adapter.setup_source()


#: What :func:`wrapped_backend` calls for each compile: ``wrapper(original_compile, gm, example_inputs)``,
#: ``original_compile(gm, example_inputs)`` being the backend as it was, with the compile's options bound.
BackendWrapper = Callable[[Callable[[Any, list[Any]], Any], Any, list[Any]], Any]


@contextlib.contextmanager
def wrapped_backend(adapter_name: str, wrapper: BackendWrapper) -> Iterator[str]:
    """Inside the block, every compile of the ``torch.compile`` backend that adapter ``adapter_name``
    compiles with goes through ``wrapper(original_compile, gm, example_inputs)``, where
    ``original_compile(gm, example_inputs)`` compiles with the backend as it was (the options the
    compile named, such as OpenVINO's ``options=``, bound); yields that backend's registered name. A
    fused path made inside the block with the adapter's name (or that backend's), and any compile that
    looks the backend up by name inside it, is served by the wrapper: ``torch.compile(backend="inductor")``
    bypasses torch's registry, so hand it ``torch._dynamo.lookup_backend(name)`` instead.

    Dynamo's caches are reset on entry and on exit, so no graph compiled one way is served the other;
    the original backend is back after the block, also when it raises. Blocks nest (the inner wraps the
    outer's wrapped backend).

    >>> import torch
    >>> from precisionkit.paths import fused
    >>> seen = []
    >>> def counting(original, gm, example_inputs):
    ...     seen.append(len(example_inputs))
    ...     return original(gm, example_inputs)
    >>> with wrapped_backend("inductor", counting) as name:
    ...     _ = fused(lambda x: torch.tanh(x * 2 + 1), name)(torch.randn(8))
    >>> name, seen
    ('inductor', [1])
    """
    import torch
    from torch._dynamo.backends import registry

    adapter = get_adapter(adapter_name)
    adapter.prepare()
    name = adapter.dynamo_backend
    original = registry.lookup_backend(name)

    def wrapped(gm: Any, example_inputs: list[Any], **kwargs: Any) -> Any:
        return wrapper(lambda g, e: original(g, e, **kwargs), gm, example_inputs)

    # torch lists registered backends by their tags
    wrapped._tags = getattr(original, "_tags", ())  # type: ignore[attr-defined]  # noqa: SLF001
    torch._dynamo.reset()
    registry._COMPILER_FNS[name] = wrapped  # noqa: SLF001 - torch has no call that replaces a registered backend
    try:
        yield name
    finally:
        registry._COMPILER_FNS[name] = original  # noqa: SLF001
        torch._dynamo.reset()
