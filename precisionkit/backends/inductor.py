"""The Inductor adapter: torch.compile's own fusing compiler, seen through the wrapper code it
generates.

Inductor hands every wrapper module it generates (one per compiled graph, cached or not) to
``GraphLowering.save_output_code``; :func:`capture_generated_code` patches that hook and keeps the
sources. What the fused path needs is read from them: the kernels the code defines (one fused unit
each), the library kernels it calls, and a normalized text whose hash says whether two runs
generated the same program.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from unittest import mock

import torch

from .base import (
    FAITHFUL_CASTS,
    ONE_THREAD,
    REDUCTION_KNOBS,
    REDUCTION_TILINGS,
    WHOLE_GRAPH,
    BackendAdapter,
    CompileCapture,
    FusedUnit,
)

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
# The comment Inductor writes above a kernel it generated (Triton, and wherever its code generator
# records origins): the FX nodes of the graph the kernel computes, topologically sorted or not.
_SOURCE_NODES = re.compile(r"^#\s*(?:Topologically Sorted|Unsorted) Source Nodes: \[([^\]]*)\]")
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


def _kernel_origins(source: str) -> dict[str, tuple[str, ...]]:
    """Kernel name -> the source nodes named in the comment block right above its definition, for
    the kernels that have one (raw source: normalization removes these comments)."""
    lines = source.splitlines()
    out: dict[str, tuple[str, ...]] = {}
    for i, line in enumerate(lines):
        m = _KERNEL_DEF.match(line)
        if m is None:
            continue
        j = i - 1
        while j >= 0 and (not lines[j].strip() or lines[j].lstrip().startswith("#")):
            if nodes := _SOURCE_NODES.match(lines[j].lstrip()):
                out[m.group(1)] = tuple(n.strip() for n in nodes.group(1).split(",") if n.strip())
                break
            j -= 1
    return out


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
    def units(self) -> tuple[FusedUnit, ...]:
        """One unit per kernel of :attr:`kernel_names`, in order: its kind is the ``async_compile``
        entry that builds it (``cpp_pybinding``, ``triton``, ...), its ops the source nodes Inductor's
        comment above it names (none where the code generator writes no such comment, as the C++ one
        does not).

        >>> code = "# Topologically Sorted Source Nodes: [mul, add], Original ATen: [aten.mul, aten.add]\\n"
        >>> GeneratedCode([code + "k0 = async_compile.triton('k0', '''...''')"]).units
        (FusedUnit(name='k0', ops=('mul', 'add'), precision='', kind='triton'),)
        """
        origins: dict[str, tuple[str, ...]] = {}
        for source in self.sources:
            origins.update(_kernel_origins(source))
        return tuple(FusedUnit(name, origins.get(name, ()), kind=kind) for name, kind in _KERNEL_DEF.findall(self.code))

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


def capture_of(generated: GeneratedCode) -> CompileCapture:
    """The :class:`CompileCapture` that ``generated`` shows: a unit per kernel, a partition per
    graph, the normalized code and the library calls.

    >>> cap = capture_of(GeneratedCode(["k0 = async_compile.cpp_pybinding(['float*'], s)\\nextern_kernels.mm("]))
    >>> [u.name for u in cap.units], cap.partitions, cap.extern_calls
    (['k0'], 1, ['mm'])
    """
    return CompileCapture(
        units=list(generated.units),
        partitions=generated.graphs,
        code=generated.code,
        extern_calls=list(generated.extern_calls),
        fused_library_calls=list(generated.fused_library_calls),
    )


#: Inductor config changes that each switch one of its layers off (or change its precision), by the
#: device type they apply to, named as the layer bisection (:mod:`precisionkit.bisect`) names them.
#: Knobs that are not config options (an environment variable, another C++ compiler) stay there.
CPU_KNOBS: dict[str, dict[str, Any]] = {
    "cpp.simdlen=0 (no vectorization)": {"cpp.simdlen": 0},
    "max_fusion_size=1 (fusion off)": {"max_fusion_size": 1},
    "epilogue_fusion=False": {"epilogue_fusion": False},
    "pattern_matcher=False": {"pattern_matcher": False},
    "emulate_precision_casts=True": {"emulate_precision_casts": True},
}
CUDA_KNOBS: dict[str, dict[str, Any]] = {
    "max_fusion_size=1 (fusion off)": {"max_fusion_size": 1},
    "epilogue_fusion=False": {"epilogue_fusion": False},
    "pattern_matcher=False": {"pattern_matcher": False},
    "emulate_precision_casts=True": {"emulate_precision_casts": True},
    "split_reductions=False": {"split_reductions": False},
    "triton.persistent_reductions=False": {"triton.persistent_reductions": False},
    "triton.cudagraphs=False": {"triton.cudagraphs": False},
    "max_autotune=False": {"max_autotune": False},
    "coordinate_descent_tuning=False": {"coordinate_descent_tuning": False},
}


#: Inductor's answers to the intents (:data:`precisionkit.backends.base.INTENTS`), per device type; an
#: intent a device type lacks here is not declared for it.
INTENT_OPTIONS: dict[str, dict[str, Any]] = {
    "cpu": {
        # The C++ kernel splits a reduction into one range per OpenMP thread.
        ONE_THREAD: {"cpp.threads": 1},
        REDUCTION_KNOBS: {
            "cpp.threads=1": {"cpp.threads": 1},
            "cpp.simdlen=0": {"cpp.simdlen": 0},
            "split_reductions=False": {"split_reductions": False},
        },
        # Threads x vector width (simdlen 0: a scalar loop).
        REDUCTION_TILINGS: {
            f"t{t}_simd{w}": {"cpp.threads": t, "cpp.simdlen": w} for t in (1, 2) for w in (0, 256, 512)
        },
    },
    "cuda": {
        # One block walks a row: no split reduction over several blocks.
        ONE_THREAD: {"split_reductions": False},
        REDUCTION_KNOBS: {
            "split_reductions=False": {"split_reductions": False},
            "triton.persistent_reductions=False": {"triton.persistent_reductions": False},
        },
        # Triton's reduction strategies.
        REDUCTION_TILINGS: {
            "split": {"split_reductions": True, "triton.persistent_reductions": True},
            "nosplit_persistent": {"split_reductions": False, "triton.persistent_reductions": True},
            "nosplit_looped": {"split_reductions": False, "triton.persistent_reductions": False},
            "cooperative": {
                "split_reductions": False,
                "triton.cooperative_reductions": True,
                "triton.force_cooperative_reductions": True,
            },
            "min_num_split_64": {"split_reductions": True, "min_num_split": 64},
        },
    },
}
#: Intents Inductor answers the same way on every device type: it elides a narrowing cast pair between
#: fused operations unless ``emulate_precision_casts`` is set, and it compiles every graph it is handed.
INTENTS_EVERYWHERE: dict[str, Any] = {FAITHFUL_CASTS: {"emulate_precision_casts": True}, WHOLE_GRAPH: {}}


@contextmanager
def loaded_wrapper_modules() -> Iterator[list[Any]]:
    """Collect every output-code (wrapper) module Inductor loads inside the ``with`` block: the modules
    whose globals hold the compiled kernels (a C++ kernel's extension module, a Triton launcher)."""
    from torch._inductor.codecache import PyCodeCache

    modules: list[Any] = []
    original = PyCodeCache.load_by_key_path.__func__  # type: ignore[attr-defined]

    def load(cls: Any, *args: Any, **kwargs: Any) -> Any:
        module = original(cls, *args, **kwargs)
        modules.append(module)
        return module

    with mock.patch.object(PyCodeCache, "load_by_key_path", classmethod(load)):
        yield modules


class InductorAdapter(BackendAdapter):
    """Inductor, torch.compile's default compiler.

    ``dynamo_backend`` is ``"inductor"`` unless another backend name is given: a torch.compile
    backend that has no adapter of its own (a test backend wrapping Inductor's ``compile_fx``,
    ``eager``, ``aot_eager``) compiles itself, and this adapter reads whatever Inductor code it
    generated (see :func:`precisionkit.backends.adapter_for_backend`).

    Evidence covers the graphs a first call compiles, less the backward: a backward served from
    AOTAutograd's cache arrives with the forward, a compiled one only at the first ``backward()``,
    and the evidence must not depend on which. Capture the backward with
    :func:`capture_generated_code` where it is wanted.
    """

    name = "inductor"
    title = "Inductor"
    dynamo_backend = "inductor"
    binaries_unreadable = ""
    intents_lacking: Mapping[str, str] = {
        ONE_THREAD: "Inductor has a one-thread (one-block) reduction setting on CPU and CUDA devices only",
        REDUCTION_KNOBS: "Inductor's reduction knobs are declared for CPU and CUDA devices only",
        REDUCTION_TILINGS: "Inductor's reduction tilings are declared for CPU and CUDA devices only",
    }

    def __init__(self, dynamo_backend: str = "inductor") -> None:
        self.dynamo_backend = dynamo_backend

    def intents(self, device: str = "cpu") -> dict[str, Any]:
        """:data:`INTENT_OPTIONS` of ``device``'s type and :data:`INTENTS_EVERYWHERE`: the config
        options each intent patches while Inductor compiles."""
        return {**INTENT_OPTIONS.get(torch.device(device).type, {}), **INTENTS_EVERYWHERE}

    @contextmanager
    def compiled_modules(self) -> Iterator[list[Any] | None]:
        """The wrapper modules Inductor loads inside the block (:func:`loaded_wrapper_modules`)."""
        with loaded_wrapper_modules() as modules:
            yield modules

    def disable_caches(self) -> dict[str, Any]:
        """Turn off Inductor's FX-graph cache and local autotuning cache in this process (the
        environment of a cold start turns the others off; ``autotune_local_cache`` has no variable of
        its own) and return the cache folder, how many files it held, and the cache switches."""
        import os

        from torch._inductor import config as inductor_config
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        inductor_config.fx_graph_cache = False
        inductor_config.autotune_local_cache = False
        folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or cache_dir()
        return {
            "cache_dir": folder,
            "cache_files_before_compile": sum(len(files) for _, _, files in os.walk(folder))
            if os.path.isdir(folder)
            else 0,
            "fx_graph_cache": bool(inductor_config.fx_graph_cache),
            "autotune_local_cache": bool(inductor_config.autotune_local_cache),
            "force_disable_caches": bool(inductor_config.force_disable_caches),
        }

    def setup_source(self) -> str:
        """Nothing: torch registers Inductor (and ``eager``, ``aot_eager``) itself; a test backend
        wrapping Inductor is registered by the case's own setup."""
        return ""

    def compiler(self, options: Mapping[str, Any]) -> Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]:
        """The backend registered as :attr:`dynamo_backend`; ``options`` patch
        ``torch._inductor.config`` while it compiles (``{"emulate_precision_casts": True}``)."""
        from torch._dynamo import lookup_backend

        compile_fn = lookup_backend(self.dynamo_backend)
        if not options:
            return compile_fn
        patch = dict(options)

        def compile_with_options(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
            from torch._inductor import config as inductor_config

            with inductor_config.patch(patch):
                return compile_fn(gm, example_inputs)

        return compile_with_options

    @contextmanager
    def capture(self) -> Iterator[CompileCapture]:
        """Collect the Inductor code generated inside the block (backward graphs left out, see the
        class); the capture is filled when the block ends."""
        captured = CompileCapture()
        with capture_generated_code() as generated:
            try:
                yield captured
            finally:
                filled = capture_of(generated.excluding("backward"))
                for name in ("units", "partitions", "code", "extern_calls", "fused_library_calls"):
                    setattr(captured, name, getattr(filled, name))

    def provenance(self) -> dict[str, str]:
        """torch's version and the code generator Inductor uses per device type (config values only:
        nothing is probed)."""
        from torch._inductor import config as inductor_config

        return {
            "version": torch.__version__,
            "codegen_cpu": str(getattr(inductor_config, "cpu_backend", "cpp")),
            "codegen_cuda": str(getattr(inductor_config, "cuda_backend", "triton")),
        }

    def knobs(self, device: str = "cpu") -> dict[str, dict[str, Any]]:
        """The config knobs of the layer bisection for ``device`` (a torch device string; CPU's set
        unless it is CUDA's): name -> options for :meth:`compiler`."""
        knobs = CUDA_KNOBS if torch.device(device).type == "cuda" else CPU_KNOBS
        return {name: dict(options) for name, options in knobs.items()}

    def fusion_problem(self, capture: CompileCapture) -> str | None:
        """Inductor's rule, as before adapters: the code defines at least one kernel, or calls a fused
        library kernel (a graph rewritten into one attention kernel generates none of its own and is
        still fused). Anything else without generated code ran op by op."""
        if not capture.units and not capture.fused_library_calls:
            return "generated no fused kernel (no generated code was captured)"
        return None
