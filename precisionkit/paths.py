"""Execution paths: eager (op by op) and fused (``torch.compile`` with a named backend), where a
fused run carries evidence that it really compiled and fused.

A fused path that compiled no graph (fell back to eager), broke the graph, or shows no fusion in
what its compiler produced raises :class:`FusionError` instead of returning numbers that silently
equal eager's. What counts as fusion, and how it is seen, is the compiler's adapter's business
(:mod:`precisionkit.backends`): for Inductor, at least one generated kernel.

:func:`capture_generated_code` (Inductor's, from :mod:`precisionkit.backends.inductor`) is the
evidence-gathering part on its own, for code that a fused path compiles later than its first call
(e.g. the backward graph, compiled at the first ``backward()``).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from unittest import mock

import torch

from .backends import adapter_for_backend
from .backends.base import BackendAdapter, CompileCapture
from .backends.inductor import GeneratedCode, InductorAdapter, capture_generated_code, normalize_code
from .hosttraffic import suspended as suspended_host_traffic

__all__ = [
    "FusedFunction",
    "FusionError",
    "FusionEvidence",
    "GeneratedCode",
    "capture_generated_code",
    "eager",
    "fused",
    "inductor_cache_dir",
    "normalize_code",
    "without_guard_latency_probe",
]


class FusionError(RuntimeError):
    """The fused path did not demonstrably compile and fuse the workload."""


@dataclass(frozen=True)
class FusionEvidence:
    """Proof that a fused run compiled and fused: what was generated, and how it was reached.

    ``code_sha256`` hashes the compiled code with machine-specific paths and per-process ids
    stripped, so equal hashes mean equal compiled programs across processes and machines.

    ``kernel_count`` / ``kernel_names`` count and name every unit the compiler produced (Inductor:
    its generated kernels); ``fused_units`` counts those that compute two or more source operations
    (0 where the compiler does not say what a unit computes, as Inductor's C++ code does not).
    ``compiler`` is the adapter's name, ``partitions`` how many subgraphs the compiler compiled,
    ``fallback_ops`` the operations it left to eager inside a compiled graph, ``precisions`` the
    distinct precisions its units reported running in, ``compiler_version`` its version.

    >>> ev = FusionEvidence("inductor", {}, "cpu", 1, 0, 0, 1, ("k0",), (), "ab12", 0.5)
    >>> ev.compiler, ev.partitions, ev.as_metadata()["fallback_ops"]
    ('inductor', 0, '')
    """

    backend: str
    options: dict[str, Any]
    device: str
    graph_count: int
    graph_breaks: int
    recompiles: int
    kernel_count: int
    kernel_names: tuple[str, ...]
    extern_calls: tuple[str, ...]
    code_sha256: str
    compile_seconds: float
    break_reasons: tuple[str, ...] = field(default=())
    #: Fused library kernels the code calls (an attention kernel put in by a pattern rewrite).
    fused_library_calls: tuple[str, ...] = field(default=())
    compiler: str = "inductor"
    partitions: int = 0
    fused_units: int = 0
    fallback_ops: tuple[str, ...] = field(default=())
    precisions: tuple[str, ...] = field(default=())
    compiler_version: str = ""

    def as_metadata(self) -> dict[str, Any]:
        """Flat, JSON-friendly view for asset metadata and tables."""
        d = asdict(self)
        d["kernel_names"] = ", ".join(self.kernel_names)
        d["extern_calls"] = ", ".join(self.extern_calls)
        d["break_reasons"] = "; ".join(self.break_reasons)
        d["fused_library_calls"] = ", ".join(self.fused_library_calls)
        d["fallback_ops"] = ", ".join(self.fallback_ops)
        d["precisions"] = ", ".join(self.precisions)
        d["options"] = ", ".join(f"{k}={v}" for k, v in sorted(self.options.items())) or "(none)"
        return d


@contextmanager
def without_guard_latency_probe() -> Iterator[None]:
    """Skip Dynamo's guard-latency probe for compiles inside the ``with`` block.

    After building a frame's guards Dynamo times one evaluation of them for its compile metrics
    (``guard_latency_us``), first flushing the CPU caches, which takes about 20 ms per compiled
    graph on a 2-core CPU: a quarter of the compile time of the small graphs the experiments
    compile by the hundred. The measurement feeds only that metric and a debug log line, so it is
    replaced by one that reports 0 us; guards, generated code and results are unchanged. Where
    torch has no such probe, nothing is patched.
    """
    from torch._dynamo import guards

    if not callable(getattr(guards, "profile_guard_manager", None)):
        yield
        return
    with mock.patch.object(guards, "profile_guard_manager", _no_guard_latency):
        yield


def _no_guard_latency(*args: Any, **kwargs: Any) -> float:
    return 0.0


def _device_of(args: tuple[Any, ...]) -> str:
    for a in args:
        if isinstance(a, torch.Tensor):
            return str(a.device)
    return "cpu"


def _private_copy(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of a plain function with its own code object. Dynamo keys its compile cache on code
    objects, so each FusedFunction gets cache entries of its own: its recompile count is its own,
    and many fused variants of one workload never run into Dynamo's per-code cache limit."""
    if not inspect.isfunction(fn):
        return fn
    if _source_file(fn) is None:
        # A function with no source file (made by exec, as the fuzzer's graphs are): torch.compile
        # before 2.8 runs such a function through one shared wrapper frame, whose per-code
        # recompile limit then silently sends every fused function after the eighth to eager.
        # Give it a frame of its own instead, defined here, with a code object of its own.
        return _private_copy(_calling(fn))
    clone = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    clone.__qualname__ = fn.__qualname__
    clone.__doc__ = fn.__doc__
    return clone


def _source_file(fn: Callable[..., Any]) -> str | None:
    try:
        return inspect.getsourcefile(fn)
    except TypeError:
        return None


def _calling(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A plain function of this module that calls ``fn`` (Dynamo traces through it into ``fn``)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "call")
    return call


def eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The eager path: ``fn`` itself, op by op, each op's output rounded to its working dtype."""
    return fn


class FusedFunction:
    """``fn`` compiled once by ``torch.compile`` with the backend registered under ``backend``.

    ``backend`` names a compiler's adapter or a ``torch.compile`` backend; the adapter
    (:func:`precisionkit.backends.adapter_for_backend`) compiles, captures what the compiler produced
    and judges whether it shows fusion. A backend without an adapter of its own compiles itself and
    is judged by the Inductor code it generated.

    The first call compiles and records :attr:`evidence`; later calls reuse the compiled artifact
    and any further compilation counts as a recompile (see ``evidence.recompiles``). ``options`` go
    to the adapter's compiler: for Inductor and the backends without an adapter, they patch
    ``torch._inductor.config`` while the backend compiles (e.g. ``{"emulate_precision_casts": True}``).

    >>> import torch
    >>> fused = FusedFunction(lambda x: torch.nn.functional.gelu(x * 2 + 1))
    >>> _ = fused(torch.randn(8))
    >>> fused.evidence.kernel_count >= 1, fused.evidence.compiler
    (True, 'inductor')
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        backend: str = "inductor",
        options: dict[str, Any] | None = None,
        *,
        require_fusion: bool = True,
        dynamic: bool = False,
    ) -> None:
        #: The compiler's adapter: it compiles, captures and judges fusion.
        self.adapter: BackendAdapter = adapter_for_backend(backend)
        self.fn = fn
        self.backend = backend
        self.options = dict(options or {})
        self.require_fusion = require_fusion
        self._compiler = self.adapter.compiler(self.options)
        self._graphs = 0
        self._graph_ops = 0
        self._graphs_at_first_call: int | None = None
        self._evidence: FusionEvidence | None = None
        #: What the adapter captured at the first call (None before it).
        self.capture: CompileCapture | None = None
        self.code = ""
        self._compiled = torch.compile(_private_copy(fn), backend=self._counting_backend, dynamic=dynamic)

    def _counting_backend(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self._graphs += 1
        self._graph_ops += sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
        return self._compiler(gm, example_inputs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # A host-traffic counter steps aside: Dynamo guards on the active function modes (a counter
        # would recompile the function), and compiled code makes no host read of its own.
        with suspended_host_traffic():
            if self._evidence is None:
                return self._first_call(args, kwargs)
            return self._compiled(*args, **kwargs)

    def _first_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        from torch._dynamo.utils import counters

        breaks_before = dict(counters["graph_break"])
        start = time.perf_counter()
        with self.adapter.capture() as captured, without_guard_latency_probe():
            out = self._compiled(*args, **kwargs)
        seconds = time.perf_counter() - start
        reasons = tuple(
            f"{reason.strip().splitlines()[0]} (x{count - breaks_before.get(reason, 0)})"
            for reason, count in counters["graph_break"].items()
            if count > breaks_before.get(reason, 0)
        )
        self._graphs_at_first_call = self._graphs
        if not captured.graph_ops:
            # The adapter did not count the source operations; the graphs Dynamo handed over did.
            captured.graph_ops = self._graph_ops
        self.capture = captured
        self.code = captured.code
        units = captured.units
        # Inductor's evidence hashes its code even when there is none (today's rows keep their
        # hash); another compiler that exposes no code has no hash.
        hashed = bool(captured.code) or isinstance(self.adapter, InductorAdapter)
        self._evidence = FusionEvidence(
            backend=self.backend,
            options=self.options,
            device=_device_of(args),
            graph_count=self._graphs,
            graph_breaks=max(self._graphs - 1, len(reasons)),
            recompiles=0,
            kernel_count=len(units),
            kernel_names=tuple(u.name for u in units),
            extern_calls=tuple(captured.extern_calls),
            code_sha256=hashlib.sha256(captured.code.encode()).hexdigest() if hashed else "",
            compile_seconds=seconds,
            break_reasons=reasons,
            fused_library_calls=tuple(captured.fused_library_calls),
            compiler=self.adapter.name,
            partitions=captured.partitions,
            fused_units=sum(1 for u in units if u.fuses),
            fallback_ops=tuple(captured.fallback_ops),
            precisions=tuple(sorted({u.precision for u in units if u.precision})),
            compiler_version=_compiler_version(self.adapter),
        )
        if self.require_fusion:
            self._verify(self._evidence, captured)
        return out

    def _verify(self, ev: FusionEvidence, captured: CompileCapture) -> None:
        where = f"fused path (backend {self.backend!r}) for {getattr(self.fn, '__name__', self.fn)!r}"
        if ev.graph_count == 0:
            raise FusionError(f"{where} compiled no graph: it fell back to eager")
        if ev.graph_breaks:
            raise FusionError(
                f"{where} broke the graph {ev.graph_breaks} time(s): {'; '.join(ev.break_reasons) or 'see TORCH_LOGS=graph_breaks'}"
            )
        problem = self.adapter.fusion_problem(captured)
        if problem:  # with the failure the compiler logged and hid, where its own refusal does not name it
            raise FusionError(f"{where} {self.adapter.naming_logged(problem, captured)}")

    @property
    def evidence(self) -> FusionEvidence:
        """Evidence of the first call, with the recompile count as of now."""
        if self._evidence is None:
            raise FusionError("the fused function has not been called yet, so nothing was compiled")
        recompiles = self._graphs - (self._graphs_at_first_call or 0)
        if recompiles == self._evidence.recompiles:
            return self._evidence
        return replace(self._evidence, recompiles=recompiles)


def fused(
    fn: Callable[..., Any], backend: str = "inductor", options: dict[str, Any] | None = None, **kwargs: Any
) -> FusedFunction:
    """Shorthand for :class:`FusedFunction`."""
    return FusedFunction(fn, backend, options, **kwargs)


def inductor_cache_dir() -> str:
    """Where Inductor keeps generated code (``TORCHINDUCTOR_CACHE_DIR`` or its default)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return os.environ.get("TORCHINDUCTOR_CACHE_DIR") or cache_dir()


#: Compiler version per adapter class and backend, read once per process: an adapter's provenance may
#: query its runtime (OpenVINO reads device properties), and fused paths are made by the hundred.
_VERSIONS: dict[tuple[type, str], str] = {}


def _compiler_version(adapter: Any) -> str:
    key = (type(adapter), adapter.dynamo_backend)
    if key not in _VERSIONS:
        _VERSIONS[key] = str(adapter.provenance().get("version", ""))
    return _VERSIONS[key]
