"""Execution paths: eager (op by op) and fused (``torch.compile`` with a named backend), where a
fused run carries evidence that it really compiled and fused.

A fused path that compiled no graph (fell back to eager), broke the graph, or generated no fused
kernel raises :class:`FusionError` instead of returning numbers that silently equal eager's.

:func:`capture_generated_code` is the evidence-gathering part on its own, for code that a fused
path compiles later than its first call (e.g. the backward graph, compiled at the first
``backward()``).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any
from unittest import mock

import torch

from .hosttraffic import suspended as suspended_host_traffic

# Kernel definitions in Inductor's generated wrapper code: ``name = async_compile.<kind>(...``.
_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(\w+)\(", re.MULTILINE)
_EXTERN_CALL = re.compile(r"extern_kernels\.(\w+)\(")
#: Fused library kernels a compiled graph may call instead of generating code: attention kernels
#: that Inductor's pattern matcher substitutes for matmul -> softmax -> matmul (CPU flash attention,
#: CUDA flash / memory-efficient / cuDNN attention).
_FUSED_LIBRARY_CALL = re.compile(
    r"torch\.ops\.aten\.(_scaled_dot_product_\w*attention\w*|_flash_attention_forward|_efficient_attention_forward)\."
)
# AOTAutograd's label of a graph in its generated code: ``# AOT ID: ['0_forward']``.
_AOT_KIND = re.compile(r"^# AOT ID: \['\d+_(\w+)'\]", re.MULTILINE)
# Lines that differ between processes or machines but not in the generated computation (on CUDA,
# ``# kernel path:`` names the cache file each Triton kernel was written to).
_VOLATILE_LINES = re.compile(
    r"^\s*# (AOT ID|Topologically Sorted Source Nodes|Source node to ATen|kernel path:).*$", re.MULTILINE
)
_QUOTED_PATH = re.compile(r"(['\"])/[^'\"\n]*(['\"])")
# Entries of a Triton kernel's ``inductor_meta`` that record how the compiler's caches were set up
# (a cold start disables them by design) and the fingerprint of the Triton build and its environment,
# not what the kernel computes: the Triton source, block sizes and the other entries stay hashed.
_CACHE_META = re.compile(
    r"'(backend_hash|autotune_local_cache|autotune_remote_cache|force_disable_caches)': "
    r"(?:'[^']*'|True|False|None)"
)
# The benchmark harness at the end of a generated module passes the compiled function's name, which
# is the caller's label, not part of the program.
_HARNESS_NAME = re.compile(r"compiled_module_main\('[^']*'")


class FusionError(RuntimeError):
    """The fused path did not demonstrably compile and fuse the workload."""


@dataclass(frozen=True)
class FusionEvidence:
    """Proof that a fused run compiled and fused: what was generated, and how it was reached.

    ``code_sha256`` hashes the generated code with machine-specific paths and per-process ids
    stripped, so equal hashes mean equal generated programs across processes and machines.
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

    def as_metadata(self) -> dict[str, Any]:
        """Flat, JSON-friendly view for asset metadata and tables."""
        d = asdict(self)
        d["kernel_names"] = ", ".join(self.kernel_names)
        d["extern_calls"] = ", ".join(self.extern_calls)
        d["break_reasons"] = "; ".join(self.break_reasons)
        d["fused_library_calls"] = ", ".join(self.fused_library_calls)
        d["options"] = ", ".join(f"{k}={v}" for k, v in sorted(self.options.items())) or "(none)"
        return d


def normalize_code(code: str) -> str:
    """Generated code with per-process ids, absolute paths, cache settings and the harness's label
    removed (what the hash covers).

    >>> a = "# kernel path: /tmp/a/x.py\\nk = 1  # inductor_meta={'backend_hash': 'AB12', 'max_autotune': False}"
    >>> b = "# kernel path: /tmp/b/y.py\\nk = 1  # inductor_meta={'backend_hash': 'CD34', 'max_autotune': False}"
    >>> normalize_code(a) == normalize_code(b)
    True
    >>> normalize_code(a) == normalize_code(a.replace("'max_autotune': False", "'max_autotune': True"))
    False
    """
    code = _VOLATILE_LINES.sub("", code)
    code = _CACHE_META.sub(r"'\1': <cache setting>", code)
    code = _HARNESS_NAME.sub("compiled_module_main(<name>", code)
    return _QUOTED_PATH.sub(r"\1<path>\2", code)


class GeneratedCode:
    """The code Inductor generated while :func:`capture_generated_code` was active, one source per
    compiled graph (including graphs served from Inductor's cache), and what it shows.

    AOTAutograd labels each graph ``forward``, ``backward`` or ``inference`` (:attr:`kinds`);
    :meth:`of_kind` and :meth:`excluding` select by that label.

    >>> captured = GeneratedCode(["# AOT ID: ['0_forward']\\nk0 = async_compile.cpp_pybinding(['float*'], s)"])
    >>> captured.graphs, captured.kinds, captured.kernel_names
    (1, ('forward',), ('k0',))
    >>> captured.of_kind("backward").graphs
    0
    """

    def __init__(self, sources: list[str] | None = None) -> None:
        #: Generated wrapper code as Inductor saved it, one entry per compiled graph.
        self.sources: list[str] = list(sources or [])

    @property
    def graphs(self) -> int:
        """How many graphs generated code."""
        return len(self.sources)

    @property
    def kinds(self) -> tuple[str, ...]:
        """Per source, AOTAutograd's label (``forward``, ``backward``, ``inference``); ``""`` when
        the code carries none."""
        return tuple(m.group(1) if (m := _AOT_KIND.search(c)) else "" for c in self.sources)

    def of_kind(self, *kinds: str) -> GeneratedCode:
        """The sources whose label is one of ``kinds``."""
        return GeneratedCode([c for c, k in zip(self.sources, self.kinds, strict=True) if k in kinds])

    def excluding(self, *kinds: str) -> GeneratedCode:
        """The sources whose label is none of ``kinds``."""
        return GeneratedCode([c for c, k in zip(self.sources, self.kinds, strict=True) if k not in kinds])

    @property
    def code(self) -> str:
        """All sources, normalized (see :func:`normalize_code`) and joined by newlines."""
        return "\n".join(normalize_code(c) for c in self.sources)

    @property
    def kernel_names(self) -> tuple[str, ...]:
        """Names of the kernels the code defines (``name = async_compile.<kind>(...``), in order."""
        return tuple(name for name, _kind in _KERNEL_DEF.findall(self.code))

    @property
    def extern_calls(self) -> tuple[str, ...]:
        """Library kernels the code calls (``extern_kernels.<name>``), sorted, each once."""
        return tuple(sorted(set(_EXTERN_CALL.findall(self.code))))

    @property
    def fused_library_calls(self) -> tuple[str, ...]:
        """Fused library kernels the code calls (an attention kernel a pattern rewrite put in), sorted,
        each once."""
        return tuple(sorted(set(_FUSED_LIBRARY_CALL.findall(self.code))))

    @property
    def sha256(self) -> str:
        """sha256 of :attr:`code`: equal hashes mean equal generated programs."""
        return hashlib.sha256(self.code.encode()).hexdigest()


@contextmanager
def capture_generated_code() -> Iterator[GeneratedCode]:
    """Collect the code Inductor generates inside the ``with`` block.

    The yielded :class:`GeneratedCode` fills up as graphs compile; read it after the block.
    Captures nest: an outer capture also sees what an inner one collects.

    When the backward graph arrives depends on the caches: compiled, it comes at the first
    ``backward()``; served from AOTAutograd's cache, it comes with the forward at the first call.
    To see it in either case, capture the first forward and backward together and keep
    ``captured.of_kind("backward")``.

    >>> with capture_generated_code() as captured:
    ...     pass  # compile and run something here
    >>> captured.graphs
    0
    """
    from torch._inductor.graph import GraphLowering

    captured = GeneratedCode()
    outer = GraphLowering.save_output_code

    def save(code: str) -> None:
        captured.sources.append(code)
        if outer is not None:
            outer(code)

    # Inductor hands every generated wrapper module to this hook (torch's own tests patch it too).
    with mock.patch.object(GraphLowering, "save_output_code", staticmethod(save)):
        yield captured


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

    The first call compiles and records :attr:`evidence`; later calls reuse the compiled artifact
    and any further compilation counts as a recompile (see ``evidence.recompiles``). ``options``
    patch ``torch._inductor.config`` while the backend compiles (e.g.
    ``{"emulate_precision_casts": True}``); they apply to Inductor-based backends.

    >>> import torch
    >>> fused = FusedFunction(lambda x: torch.nn.functional.gelu(x * 2 + 1))
    >>> _ = fused(torch.randn(8))
    >>> fused.evidence.kernel_count >= 1
    True
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
        from torch._dynamo import list_backends, lookup_backend

        try:
            self._compiler = lookup_backend(backend)
        except Exception as exc:
            raise ValueError(
                f"unknown torch.compile backend {backend!r}; registered: {', '.join(list_backends(exclude_tags=()))}"
            ) from exc
        self.fn = fn
        self.backend = backend
        self.options = dict(options or {})
        self.require_fusion = require_fusion
        self._graphs = 0
        self._graphs_at_first_call: int | None = None
        self._evidence: FusionEvidence | None = None
        self.code = ""
        self._compiled = torch.compile(_private_copy(fn), backend=self._counting_backend, dynamic=dynamic)

    def _counting_backend(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        self._graphs += 1
        if self.options:
            from torch._inductor import config as inductor_config

            with inductor_config.patch(self.options):
                return self._compiler(gm, example_inputs)
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
        with capture_generated_code() as captured, without_guard_latency_probe():
            out = self._compiled(*args, **kwargs)
        seconds = time.perf_counter() - start
        reasons = tuple(
            f"{reason.strip().splitlines()[0]} (x{count - breaks_before.get(reason, 0)})"
            for reason, count in counters["graph_break"].items()
            if count > breaks_before.get(reason, 0)
        )
        self._graphs_at_first_call = self._graphs
        # The evidence covers the forward: a backward served from AOTAutograd's cache arrives
        # with it, a compiled one only at the first backward(), and the hash must not depend on that.
        captured = captured.excluding("backward")
        self.code = captured.code
        kernels = captured.kernel_names
        self._evidence = FusionEvidence(
            backend=self.backend,
            options=self.options,
            device=_device_of(args),
            graph_count=self._graphs,
            graph_breaks=max(self._graphs - 1, len(reasons)),
            recompiles=0,
            kernel_count=len(kernels),
            kernel_names=kernels,
            extern_calls=captured.extern_calls,
            code_sha256=captured.sha256,
            compile_seconds=seconds,
            break_reasons=reasons,
            fused_library_calls=captured.fused_library_calls,
        )
        if self.require_fusion:
            self._verify(self._evidence)
        return out

    def _verify(self, ev: FusionEvidence) -> None:
        where = f"fused path (backend {self.backend!r}) for {getattr(self.fn, '__name__', self.fn)!r}"
        if ev.graph_count == 0:
            raise FusionError(f"{where} compiled no graph: it fell back to eager")
        if ev.graph_breaks:
            raise FusionError(
                f"{where} broke the graph {ev.graph_breaks} time(s): {'; '.join(ev.break_reasons) or 'see TORCH_LOGS=graph_breaks'}"
            )
        if ev.kernel_count == 0 and not ev.fused_library_calls:
            # A graph rewritten into one fused library kernel (attention) generates no kernel of its
            # own and is still fused; anything else without generated code ran op by op.
            raise FusionError(f"{where} generated no fused kernel (no generated code was captured)")

    @property
    def evidence(self) -> FusionEvidence:
        """Evidence of the first call, with the recompile count as of now."""
        if self._evidence is None:
            raise FusionError("the fused function has not been called yet, so nothing was compiled")
        recompiles = self._graphs - (self._graphs_at_first_call or 0)
        if recompiles == self._evidence.recompiles:
            return self._evidence
        return FusionEvidence(
            **{
                **asdict(self._evidence),
                "recompiles": recompiles,
                "kernel_names": self._evidence.kernel_names,
                "extern_calls": self._evidence.extern_calls,
                "break_reasons": self._evidence.break_reasons,
                "fused_library_calls": self._evidence.fused_library_calls,
            }
        )


def fused(
    fn: Callable[..., Any], backend: str = "inductor", options: dict[str, Any] | None = None, **kwargs: Any
) -> FusedFunction:
    """Shorthand for :class:`FusedFunction`."""
    return FusedFunction(fn, backend, options, **kwargs)


def inductor_cache_dir() -> str:
    """Where Inductor keeps generated code (``TORCHINDUCTOR_CACHE_DIR`` or its default)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return os.environ.get("TORCHINDUCTOR_CACHE_DIR") or cache_dir()
