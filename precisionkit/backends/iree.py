"""IREE through iree-turbine's ``turbine_cpu`` backend: each FX graph is imported to MLIR (torch
dialect), compiled by IREE for the ``llvm-cpu`` target and run on the ``local-task`` device.

IREE groups the graph's operations into dispatch regions; each region becomes one executable, and
a region is this adapter's fused unit. A copy IREE leaves to its runtime, outside any dispatch (a
concatenation of reshaped inputs becomes ``flow.tensor.update`` of one result buffer, with no executable
at all), is a unit of kind ``transfer``. To see which source operations each region computes,
:meth:`IREEAdapter.capture` replaces, inside its ``with`` block, the one function through which
iree-turbine compiles a program source (``iree.turbine.runtime.launch._jit_callback``). The
replacement lets iree-turbine compile and load the program exactly as before, then compiles the same
source a second time with the same flags, stopping after IREE's ``flow`` phase (where the dispatch
regions are formed and named), with every torch operation of the source tagged by a location
``pk<index>:<op>``. IREE carries locations through fusion, so the tags found inside a dispatch's
executable name the operations it computes. The second compile runs ``iree-compile`` in a
subprocess and takes a fraction of a second for a small graph.

``turbine_cpu`` compiles a whole graph or fails: it never leaves operations to eager, so
``fallback_ops`` stays empty.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.metadata
import importlib.util
import re
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

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

#: The module, and the function in it, through which iree-turbine compiles a program source for a
#: device (``Launchable.jit_compile`` looks the function up in the module at each call).
_LAUNCH_MODULE = "iree.turbine.runtime.launch"
_HOOKED_FUNCTION = "_jit_callback"
#: The module that defines the ``turbine_cpu`` backend (registered through the
#: ``torch_dynamo_backends`` entry point of iree-turbine).
_BACKEND_MODULE = "iree.turbine.dynamo.backends.base"
#: The module whose ``DEVICE_TARGET_COMPILE_FLAGS`` holds the flags each IREE device compiles with.
_DEVICE_MODULE = "iree.turbine.runtime.device"
#: Packages the adapter needs, by import name (pip names in :data:`_DISTRIBUTIONS`).
_IMPORTS = ("iree.turbine", "iree.compiler", "iree.runtime")
_DISTRIBUTIONS = ("iree-turbine", "iree-base-compiler", "iree-base-runtime")
#: The IREE device iree-turbine creates for a torch CPU tensor, and the target it compiles for.
_DEVICE = "local-task"

# A torch-dialect operation that computes something (not a constant or a list construction):
# ``%3 = torch.aten.sub.Tensor %arg0, ...``, ``torch.prims.convert_element_type``, or a custom op
# ``torch.operator "name"``.
_SOURCE_OP = re.compile(r'^\s*(?:%[^=]*=\s*)?torch\.(?:((?:aten|prims)\.[\w.]+)|operator "([^"]+)")')
# An SSA value: ``%3``, ``%arg0``, ``%int1_2``; the results a line defines are left of its ``=``.
_SSA_VALUE = re.compile(r"%[\w.$-]+")
# A list construction passes its elements on to the operation that consumes the list.
_LIST_CONSTRUCT = re.compile(r"^\s*(%[\w.$-]+)\s*=\s*torch\.prim\.ListConstruct\b")
_TAG = re.compile(r'"pk(\d+):([^"]+)"')
_EXECUTABLE = re.compile(r"^  flow\.executable (?:\w+ )*@(\S+) \{$")
_EXPORT = re.compile(r"flow\.executable\.export (?:\w+ )*@([^\s(]+)")
# A tensor transfer the flow phase keeps outside any dispatch: a copy the runtime does itself (a concatenation
# of reshaped inputs becomes updates of one result buffer, with no executable at all).
_TRANSFER = re.compile(r"=\s*flow\.tensor\.(update|slice|splat|clone|transfer|fill|copy)\b")
_LOC_ALIAS_DEF = re.compile(r"^(#loc\d*) = (loc\(.*\))$", re.MULTILINE)
_LOC_ALIAS_USE = re.compile(r"loc\((#loc\d*)\)")
# A location, with one level of nested parentheses (``loc(callsite("a" at "b"))``).
_LOC = re.compile(r' ?loc\((?:[^()"]|"[^"]*"|\((?:[^()"]|"[^"]*")*\))*\)')
# An arith or math operation and its type signature (``: f32``; ``: bf16 to f32`` for a cast); at the
# flow phase the operations inside a dispatch work on scalars, so the signature names element types.
_COMPUTE_OP = re.compile(r"=\s*(?:arith|math)\.(\w+)\b[^:]*:\s*(.*)$")
_ELEMENT_TYPE = re.compile(r"\b(bf16|f16|f32|f64|f8E\w+|i1|i8|i16|i32|i64)\b")
_PRECISION = {
    "bf16": "bfloat16",
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "f8E4M3FN": "float8_e4m3fn",
    "f8E5M2": "float8_e5m2",
    "f8E4M3FNUZ": "float8_e4m3fnuz",
    "f8E5M2FNUZ": "float8_e5m2fnuz",
    "i1": "bool",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
}


@dataclass(frozen=True)
class _Compiled:
    """What one program compiled inside a capture produced, as read from its flow phase."""

    flags: tuple[str, ...]
    units: tuple[FusedUnit, ...]
    source_ops: int
    code: str
    source_edges: int = 0


# Captures open now, outermost first: every compile reports to all of them, so nested captures each
# see the graphs compiled inside them. The compile hook is installed while any capture or any
# compiler call from this adapter is active (counted in _installs).
_lock = threading.Lock()
_active: list[list[_Compiled]] = []
_installs = 0
_original_jit_callback: Any = None
# Compiler flags added by IREEAdapter.compiler(options) for the compile running in this context.
_extra_flags: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("pk_iree_extra_flags", default=())


def _launch() -> Any:
    return importlib.import_module(_LAUNCH_MODULE)


@contextmanager
def _hook_installed() -> Iterator[None]:
    """Route iree-turbine's compiles through :func:`_recording_jit_callback` while active."""
    global _installs, _original_jit_callback
    launch = _launch()
    with _lock:
        if _installs == 0:
            _original_jit_callback = getattr(launch, _HOOKED_FUNCTION)
            setattr(launch, _HOOKED_FUNCTION, _recording_jit_callback)
        _installs += 1
    try:
        yield
    finally:
        with _lock:
            _installs -= 1
            if _installs == 0:
                setattr(launch, _HOOKED_FUNCTION, _original_jit_callback)
                _original_jit_callback = None


class _DeviceWithFlags:
    """An iree-turbine device whose compile flags end with extra ones; everything else is the
    device's own."""

    def __init__(self, device: Any, extra: tuple[str, ...]) -> None:
        self._device = device
        self.compile_target_flags = tuple(device.compile_target_flags) + extra

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device, name)


def _recording_jit_callback(program_source: Any) -> Callable[[Any], Any]:
    """Stand-in for iree-turbine's ``_jit_callback``: the original compiles and loads the program
    (with the extra flags of the running :meth:`IREEAdapter.compiler` call appended to the device's
    target flags), then every open capture gets the program's dispatches."""
    original = _original_jit_callback(program_source)
    extra = _extra_flags.get()

    def callback(device: Any) -> Any:
        target = _DeviceWithFlags(device, extra) if extra else device
        module = original(target)
        with _lock:
            listeners = list(_active)
        if listeners:
            compiled = _analyze(program_source, tuple(target.compile_target_flags))
            for listener in listeners:
                listener.append(compiled)
        return module

    return callback


@functools.cache
def _session_flags() -> frozenset[str]:
    """The names (``--iree-...``) of the iree-compile flags a compiler session accepts; the others
    are process-wide and cannot be set per compile."""
    session = importlib.import_module("iree.compiler.api").Session()
    try:
        return frozenset(flag.split("=", 1)[0] for flag in session.get_flags())
    finally:
        session.close()


def _source_text(program_source: Any) -> str:
    if isinstance(program_source, str):
        return program_source
    if isinstance(program_source, (bytes, bytearray, memoryview)):
        return bytes(program_source).decode()
    raise TypeError(f"cannot read dispatches of a program given as {type(program_source).__name__}")


def _tag_source_ops(source: str) -> tuple[str, list[str]]:
    """The source with a location ``pk<i>:<op>`` on each computing torch operation, and the
    operations' names in source order."""
    names: list[str] = []
    lines = []
    for line in source.splitlines():
        match = _SOURCE_OP.match(line)
        if match:
            name = match.group(1) or match.group(2)
            line = f'{line} loc("pk{len(names)}:{name}")'
            names.append(name)
        lines.append(line)
    return "\n".join(lines) + "\n", names


def _source_edges(source: str) -> int:
    """How many operands of the source's computing torch operations are another computing operation's
    result (through a ``torch.prim.ListConstruct``, as ``aten.cat`` takes its inputs), each
    (producer, consumer) pair once."""
    producer: dict[str, int] = {}  # SSA value -> index of the computing operation that defines it
    lists: dict[str, set[int]] = {}  # list value -> the computing operations whose results it holds
    edges: set[tuple[int, int]] = set()
    index = 0
    for line in source.splitlines():
        if "=" in line:
            defined, _, used = line.partition("=")
        else:
            defined, used = "", line
        if (listed := _LIST_CONSTRUCT.match(line)) is not None:
            lists[listed.group(1)] = {producer[v] for v in _SSA_VALUE.findall(used) if v in producer}
            continue
        if not _SOURCE_OP.match(line):
            continue
        for value in _SSA_VALUE.findall(used.split(":")[0]):
            edges.update((p, index) for p in ({producer[value]} if value in producer else lists.get(value, set())))
        for value in _SSA_VALUE.findall(defined):
            producer[value] = index
        index += 1
    return len(edges)


def _resolve_loc_aliases(text: str) -> str:
    """Replace ``loc(#locN)`` references by the location they name (the printer uses aliases for
    locations it prints more than once)."""
    aliases = dict(_LOC_ALIAS_DEF.findall(text))
    text = _LOC_ALIAS_DEF.sub("", text)
    for _ in range(8):  # aliases may refer to aliases (fused locations of fused locations)
        resolved = _LOC_ALIAS_USE.sub(lambda m: aliases.get(m.group(1), m.group(0)), text)
        if resolved == text:
            break
        text = resolved
    return text


def _precision(body: str) -> str:
    """The element types the arith and math operations of an executable compute in, as torch dtype
    names joined by ``+`` (floating-point types when there are any, else integer types)."""
    found: set[str] = set()
    for line in body.splitlines():
        match = _COMPUTE_OP.search(line)
        if match and match.group(1) != "constant":
            found.update(_ELEMENT_TYPE.findall(match.group(2)))
    floats = sorted(_PRECISION.get(t, t) for t in found if not t.startswith("i"))
    ints = sorted(_PRECISION[t] for t in found if t.startswith("i"))
    return "+".join(floats or ints)


def _analyze(program_source: Any, flags: tuple[str, ...]) -> _Compiled:
    """Compile ``program_source`` with ``flags`` up to IREE's flow phase and read its dispatches."""
    tagged, names = _tag_source_ops(_source_text(program_source))
    tool = importlib.import_module("iree.compiler.tools.binaries").find_tool("iree-compile")
    run = subprocess.run(
        [tool, "-", "--compile-to=flow", "--mlir-print-debuginfo", *flags],
        input=tagged.encode(),
        capture_output=True,
        timeout=600,
        check=False,
    )
    if run.returncode != 0:
        raise RuntimeError(
            f"iree-compile could not rerun the program to read its dispatches (exit {run.returncode}): "
            + run.stderr.decode(errors="replace")[-2000:]
        )
    text = _resolve_loc_aliases(run.stdout.decode())
    units: list[FusedUnit] = []
    lines = text.splitlines()
    i = 0
    transfers = 0
    while i < len(lines):
        if not _EXECUTABLE.match(lines[i]):
            if (transfer := _TRANSFER.search(lines[i])) is not None:
                indices = sorted({int(index) for index, _ in _TAG.findall(lines[i])})
                ops = tuple(names[index] for index in indices if index < len(names))
                units.append(FusedUnit(name=f"transfer_{transfers}_{transfer.group(1)}", ops=ops, kind="transfer"))
                transfers += 1
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith("  }"):
            end += 1
        block = "\n".join(lines[i : end + 1])
        indices = sorted({int(index) for index, _ in _TAG.findall(block)})
        ops = tuple(names[index] for index in indices if index < len(names))
        precision = _precision(_LOC.sub("", block))
        for export in _EXPORT.findall(block):
            units.append(FusedUnit(name=export, ops=ops, precision=precision, kind="dispatch"))
        i = end + 1
    program = _LOC.sub("", text)
    code = "\n".join(
        [
            "flags: " + " ".join(flags),
            *(f"dispatch {u.name}: {', '.join(u.ops)} [{u.precision}]" for u in units),
            program.strip(),
        ]
    )
    source_edges = _source_edges(_source_text(program_source))
    return _Compiled(flags=flags, units=tuple(units), source_ops=len(names), code=code, source_edges=source_edges)


class IREEAdapter(BackendAdapter):
    """IREE (llvm-cpu target, local-task device) through iree-turbine's ``turbine_cpu`` backend.

    Options for :meth:`compiler`: ``{"flags": [...]}``, iree-compile flags appended after the
    device's target flags for every graph compiled by that backend callable (a later flag wins over
    an earlier one of the same name); ``turbine_cpu`` itself takes no options. Without
    ``compile_backward`` the backend is the registered ``turbine_cpu`` (what :func:`~precisionkit.backends.wrapped_backend`
    wraps), whose backward graph, compiled lazily at the first ``backward()``, gets no extra flags and fails on
    any training step (:mod:`~precisionkit.backends.iree_training`). With ``{"compile_backward": True}`` (E's
    ``training_options``) it is ``turbine_cpu``'s own composition with the backward handed to IREE as
    :func:`~precisionkit.backends.iree_training.training_backend` does, flags and all.
    """

    name = "iree"
    title = "IREE"
    dynamo_backend = "turbine_cpu"
    extra = "iree"
    not_applicable: Mapping[str, str] = MappingProxyType(
        {
            "C1": "IREE generates no C++: its dispatches are lowered through MLIR to LLVM IR and an "
            "embedded ELF, so there is no Inductor C++ source to read the instruction route from.",
            "C3": "IREE has no Inductor-generated code with rsqrt Newton iterations to count: it lowers "
            "math.rsqrt itself through MLIR and LLVM.",
        }
    )

    intents_lacking: Mapping[str, str] = MappingProxyType({})
    training_options: Mapping[str, Any] = MappingProxyType({"compile_backward": True})
    training_options_why = (
        "iree-turbine's turbine_cpu fails on a training step's backward graph; the adapter hands IREE the backward "
        "itself (precisionkit.backends.iree_training)"
    )
    binaries_unreadable = (
        "iree-turbine loads each program as one IREE module (an embedded ELF holding every dispatch), which the "
        "adapter does not read back; the compiled program is compared by its flow-phase text (code_sha256)"
    )

    def intents(self, device: str = "cpu") -> dict[str, Any]:
        """IREE's answers to the intents, as iree-compile flags (``{"flags": [...]}``):

        - ``one_thread``: no split reduction (``--iree-dispatch-creation-enable-split-reduction=false``):
          a row is reduced inside one workgroup, which one worker thread runs. iree-turbine's compile
          already leaves split reduction off (measured: the flag changes neither result nor dispatches).
        - ``faithful_casts``: ``{}``: IREE keeps a narrowing cast pair between fused operations and
          computes a fused fp16 chain in fp16 (measured: an fp32 -> fp16 -> fp32 pair rounds as eager's).
        - ``whole_graph``: ``{}``: ``turbine_cpu`` compiles the whole graph or fails.
        - ``reduction_knobs``: reassociated floating-point reductions (vectorized partial sums), and
          split reduction across workgroups.
        - ``reduction_tilings``: reassociated reductions at a vector width of 16, 32 and 64 bytes (the
          partial sums per vector lane; without reassociation the width changes no addition's order).
        """
        reassociate = "--iree-llvmcpu-reassociate-fp-reductions=true"
        return {
            ONE_THREAD: {"flags": ["--iree-dispatch-creation-enable-split-reduction=false"]},
            FAITHFUL_CASTS: {},
            WHOLE_GRAPH: {},
            REDUCTION_KNOBS: {
                "reassociate_fp_reductions": {"flags": [reassociate]},
                "split_reduction": {"flags": ["--iree-dispatch-creation-enable-split-reduction=true"]},
            },
            REDUCTION_TILINGS: {
                f"reassociate_vw{width}": {
                    "flags": [reassociate, f"--iree-llvmcpu-target-vector-width-in-bytes={width}"]
                }
                for width in (16, 32, 64)
            },
        }

    def merge_options(self, base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
        """``extra``'s flags after ``base``'s (a later flag of the same name wins)."""
        merged = {**base, **extra}
        if "flags" in base or "flags" in extra:
            merged["flags"] = [*base.get("flags", ()), *extra.get("flags", ())]
        return merged

    def disable_caches(self) -> dict[str, Any]:
        """Nothing to turn off: iree-turbine keeps compiled programs in memory, per process."""
        return {"cache_files_before_compile": 0, "compiler_cache": "none on disk: iree-turbine caches per process"}

    def missing(self) -> str | None:
        for module in _IMPORTS:
            try:
                found = importlib.util.find_spec(module) is not None
            except ImportError:  # a parent package is missing
                found = False
            if not found:
                return f"IREE is not installed ({module} cannot be imported): pip install 'fusion-precision[iree]'"
        return None

    def prepare(self) -> None:
        importlib.import_module(_BACKEND_MODULE)

    def setup_source(self) -> str:
        """The import of iree-turbine's dynamo backends, which registers ``"turbine_cpu"``."""
        return (
            f"# the fused path is torch.compile(backend={self.dynamo_backend!r}): needs torch and iree-turbine only\n"
            f"import {_BACKEND_MODULE}  # registers torch.compile's {self.dynamo_backend!r}\n"
        )

    def compiler(self, options: Mapping[str, Any]) -> Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]:
        unknown = sorted(set(options) - {"flags", "compile_backward"})
        if unknown:
            raise ValueError(
                f"IREE adapter options are {{'flags': [...], 'compile_backward': bool}}; unknown: {unknown}"
            )
        backward = options.get("compile_backward", False)
        if not isinstance(backward, bool):
            raise ValueError(f"IREE adapter option 'compile_backward' is true or false, got {backward!r}")
        flags = options.get("flags", ())
        if isinstance(flags, str) or not all(isinstance(f, str) for f in flags):
            raise ValueError(f"IREE adapter option 'flags' is a list of iree-compile flags, got {flags!r}")
        extra = tuple(flags)
        unsupported = [f for f in extra if f.split("=", 1)[0] not in _session_flags()]
        if unsupported:
            raise ValueError(
                f"iree-turbine compiles in a compiler session, which does not take {unsupported} "
                "(only per-session iree-compile flags apply)"
            )
        from torch._dynamo import lookup_backend

        from .iree_training import training_backend

        self.prepare()

        def flagged(compile_fn: Callable[[torch.fx.GraphModule, list[Any]], Any]) -> Callable[..., Any]:
            def compile_with_flags(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
                token = _extra_flags.set(extra)
                try:
                    with _hook_installed():
                        compiled: Callable[..., Any] = compile_fn(gm, example_inputs)
                        return compiled
                finally:
                    _extra_flags.reset(token)

            return compile_with_flags

        if not backward:
            return flagged(lookup_backend(self.dynamo_backend))
        # turbine_cpu is aot_autograd(fw_compiler=_backend): the compiler itself, which has no public name
        return training_backend(importlib.import_module(_BACKEND_MODULE)._backend, flagged)  # noqa: SLF001

    @contextmanager
    def capture(self) -> Iterator[CompileCapture]:
        capture = CompileCapture()
        compiled: list[_Compiled] = []
        with _hook_installed():
            with _lock:
                _active.append(compiled)
            try:
                yield capture
            finally:
                with _lock:
                    # By identity: two captures' lists are equal when they saw the same compiles.
                    del _active[next(i for i, c in enumerate(_active) if c is compiled)]
                for program in compiled:
                    capture.units.extend(program.units)
                    capture.graph_ops += program.source_ops
                    capture.graph_edges = (capture.graph_edges or 0) + program.source_edges
                capture.partitions = len(compiled)
                capture.code = "\n\n".join(program.code for program in compiled)

    def provenance(self) -> dict[str, str]:
        """The three packages' versions (``version`` is the compiler's), the IREE device and the
        target flags iree-turbine compiles for it with (backend ``llvm-cpu``, CPU features of the
        host)."""
        info: dict[str, str] = {}
        for distribution in _DISTRIBUTIONS:
            try:
                info[distribution] = importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                info[distribution] = "not installed"
        # The compiler's own version is the evidence's compiler_version.
        info["version"] = info["iree-base-compiler"]
        info["device"] = _DEVICE
        try:
            target_flags: Sequence[str] = importlib.import_module(_DEVICE_MODULE).DEVICE_TARGET_COMPILE_FLAGS[_DEVICE]
        except (ImportError, AttributeError, KeyError):
            return info
        info["target_flags"] = " ".join(target_flags)
        for flag in target_flags:
            key, _, value = flag.lstrip("-").partition("=")
            if key == "iree-hal-target-backends":
                info["target_backend"] = value
            elif key == "iree-llvmcpu-target-cpu-features":
                info["target_cpu_features"] = value
        return info

    def knobs(self) -> dict[str, dict[str, Any]]:
        """The flag sets of :data:`_KNOBS`, as options for :meth:`compiler`."""
        return {name: {"flags": list(flags)} for name, flags in _KNOBS.items()}


#: Layer-bisection knobs: each is a set of iree-compile flags passed through
#: :meth:`IREEAdapter.compiler`. iree-turbine compiles at ``--iree-opt-level=O0`` and IREE has no
#: per-session flag that stops dispatch-region fusion, so the knobs change layers rather than
#: switch fusion off.
_KNOBS: dict[str, tuple[str, ...]] = {
    # Dispatch formation: also fuse a reduction into the consumer of another (one dispatch for
    # layer_norm + gelu instead of two).
    "aggressive_fusion": ("--iree-dispatch-creation-enable-aggressive-fusion=true",),
    # Every pipeline at O3: aggressive fusion plus reassociated floating-point reductions.
    "opt_level_O3": ("--iree-opt-level=O3",),
    # CPU code generation: reductions may be reassociated (vectorized partial sums).
    "reassociate_fp_reductions": ("--iree-llvmcpu-reassociate-fp-reductions=true",),
    # CPU code generation for a generic x86-64 CPU instead of the host's (no FMA, no AVX-512).
    "generic_cpu": ("--iree-llvmcpu-target-cpu=generic", "--iree-llvmcpu-target-cpu-features="),
    # Input conversion: keep f64 arithmetic in f64 (IREE demotes it to f32 by default, including the
    # f64 accumulation torch-mlir asks for in var_mean).
    "keep_f64": ("--iree-input-demote-f64-to-f32=false",),
    # CPU code generation: no microkernels (matmuls and other contractions get generated code).
    "no_ukernels": ("--iree-llvmcpu-enable-ukernels=none",),
    # CPU code generation: keep the roundings to f16/bf16 between fused operations.
    "keep_intermediate_roundings": ("--iree-llvmcpu-skip-intermediate-roundings=false",),
}
