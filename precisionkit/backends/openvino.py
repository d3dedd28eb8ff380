"""The OpenVINO adapter: Intel's inference runtime as a ``torch.compile`` backend (``"openvino"``,
registered by ``import openvino.torch``), seen through the runtime models it compiles.

How the backend works, as far as the adapter depends on it: it decomposes the FX graph dynamo hands
it to ATen operations, and its partitioner (``Partitioner.make_partitions``) moves every run of
operations OpenVINO supports into a ``fused_<n>`` submodule; the operations it does not support,
and supported ones that would form a partition of a single operation, stay in the FX graph and run
in torch. At a partition's first call the backend converts it to an OpenVINO model and compiles it
with ``Core.compile_model``; the CPU plugin then merges operations into the nodes of its runtime
model (an elementwise chain into one node, a GELU into the MVN before it, ...) and chooses each
node's precision. The runtime model names, per node, the original operations it computes, so that
model is the fusion evidence.

:meth:`OpenVINOAdapter.capture` patches four places for the duration of its block and restores them
afterwards (five functions in all):

- ``openvino.Core.compile_model``: every compiled model, each of whose executed runtime nodes
  becomes a :class:`~precisionkit.backends.base.FusedUnit`;
- ``Partitioner.make_partitions``: how many operations the partitioner received and which it left
  to torch;
- ``OpenVINOGraphModule.__call__`` (and the ``openvino_execute`` it calls, for the error): a partition
  whose compile or execution failed, which the backend then runs in torch from that call on without
  saying so (OpenVINO 2026.4 fails every partition with a bfloat16 input this way: its input type table
  has no bfloat16);
- the backend module's ``compile_fx``: a graph the backend failed to convert, which it hands to
  Inductor instead.

Compilation happens at the first call, not at ``torch.compile``: capture around the first call of
the compiled function. Captures nest: every capture active when a model compiles receives it.

On a CPU with bf16 support (``OPTIMIZATION_CAPABILITIES`` lists ``BF16``) the CPU plugin's default
``INFERENCE_PRECISION_HINT`` is ``bf16``, also for an fp32 graph: it runs matrix multiplications
and convolutions in bf16 (their units report ``"bfloat16"``) and keeps normalizations and
elementwise nodes in fp32. The knob ``INFERENCE_PRECISION_HINT=f32`` keeps every node in fp32.

Under an ``ONEDNN_MAX_CPU_ISA`` cap below bf16 the hint is f32 (:mod:`precisionkit.backends.openvino_isa`).
A compiled model is read by :mod:`precisionkit.backends.openvino_model`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import operator
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
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
    count_edges,
)
from .openvino_isa import isa_capped_config
from .openvino_model import NUMERIC_PROPERTIES, _property_text, read_compiled_model

# Read from here before the model reader had a module of its own.
from .openvino_model import OV_TO_TORCH_PRECISION as OV_TO_TORCH_PRECISION
from .openvino_model import CompiledModelRecord as CompiledModelRecord
from .openvino_model import normalize_name as normalize_name
from .openvino_model import torch_precision as torch_precision

# FX node kinds that compute (placeholders, get_attr and output do not).
_CALL_OPS = frozenset({"call_function", "call_method", "call_module"})


def _fx_label(node: torch.fx.Node) -> str:
    """An FX node as the frontend names its operations: ``<node name>/<ATen target>``."""
    if isinstance(node.target, str):
        target = node.target
    elif hasattr(node.target, "overloadpacket"):  # an ATen OpOverload: aten.mul.Tensor
        target = str(node.target)
    else:
        target = getattr(node.target, "__name__", "")
    return f"{node.name}/{target}" if target else node.name


def _computes(node: torch.fx.Node) -> bool:
    """Whether an FX node is an operation (not an input, a parameter, the output, or the selection
    of one result of a multi-output operation)."""
    return node.op in _CALL_OPS and node.target is not operator.getitem


@dataclass
class OpenVINOCapture(CompileCapture):
    """A :class:`~precisionkit.backends.base.CompileCapture` with what only OpenVINO's backend does.

    - ``torch_fallback_partitions``: partitions whose OpenVINO compile or execution failed, which the
      backend runs in torch from then on (their operations are in ``fallback_ops`` too).
    - ``inductor_graphs``: graphs the backend failed to convert and compiled with Inductor instead.
    - ``properties``: the numerics-deciding properties of the last model compiled (see
      :meth:`OpenVINOAdapter.provenance`).
    - ``model_codes``: the code text of each compiled model, in order (``code`` joins them).
    - ``fallback_errors``: the error of each partition the backend ran in torch (type and first line).
    """

    torch_fallback_partitions: int = 0
    fallback_errors: list[str] = field(default_factory=list)
    inductor_graphs: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    model_codes: list[str] = field(default_factory=list)


# The captures active now, each with the adapter it belongs to, and the originals of the patched
# functions (installed while the list is not empty).
_active: list[tuple[OpenVINOCapture, OpenVINOAdapter]] = []
_restore: list[Callable[[], None]] = []
_lock = threading.RLock()
# The error of the partition call running on this thread (the backend swallows it before falling back).
_last_error = threading.local()


def _each_active() -> list[tuple[OpenVINOCapture, OpenVINOAdapter]]:
    with _lock:
        return list(_active)


def _patch(owner: Any, attr: str, make: Callable[[Any], Any]) -> None:
    original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
    setattr(owner, attr, make(getattr(owner, attr)))
    _restore.append(lambda: setattr(owner, attr, original))


def _install() -> None:
    """Patch the backend's four hooks (see the module docstring); :func:`_uninstall` undoes it."""
    import openvino
    from openvino.frontend.pytorch.torchdynamo import backend as ov_backend
    from openvino.frontend.pytorch.torchdynamo import execute as ov_execute
    from openvino.frontend.pytorch.torchdynamo.partition import Partitioner

    def wrap_compile_model(original: Any) -> Any:
        def compile_model(self: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
            # Digest the constants first: compiling may transform the model it is handed.
            digest_of = model if hasattr(model, "get_ordered_ops") else None
            compiled = original(self, model, *args, **kwargs)
            targets = _each_active()
            if targets:
                record = read_compiled_model(compiled, digest_of)
                for cap, adapter in targets:
                    cap.units.extend(record.units)
                    cap.partitions += 1
                    cap.model_codes.append(record.code)
                    cap.code = "\n\n".join(cap.model_codes)
                    cap.properties = dict(record.properties)
                    adapter.last_properties = dict(record.properties)
            return compiled

        return compile_model

    def wrap_make_partitions(original: Any) -> Any:
        def make_partitions(self: Any, graph_module: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
            # Labels first: fusing the partitions rewrites the graph in place.
            labels = {n.name: _fx_label(n) for n in graph_module.graph.nodes if _computes(n)}
            edges = count_edges(graph_module.graph, _computes)
            fused = original(self, graph_module, *args, **kwargs)
            left = [labels[n.name] for n in fused.graph.nodes if _computes(n) and n.name in labels]
            for cap, _adapter in _each_active():
                cap.graph_ops += len(labels)
                cap.graph_edges = (cap.graph_edges or 0) + edges
                cap.fallback_ops.extend(left)
            return fused

        return make_partitions

    def wrap_execute(original: Any) -> Any:
        def execute(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            except Exception as exc:
                _last_error.text = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
                raise

        return execute

    def wrap_module_call(original: Any) -> Any:
        def call(self: Any, *args: Any) -> Any:
            before = bool(getattr(self, "perm_fallback", False))
            _last_error.text = ""
            result = original(self, *args)
            if not before and getattr(self, "perm_fallback", False):
                gm = getattr(self, "gm", None)
                left = [_fx_label(n) for n in gm.graph.nodes if _computes(n)] if gm is not None else []
                error = getattr(_last_error, "text", "") or "no error recorded"
                for cap, _adapter in _each_active():
                    cap.torch_fallback_partitions += 1
                    cap.fallback_ops.extend(left)
                    cap.fallback_errors.append(error)
            return result

        return call

    def wrap_compile_fx(original: Any) -> Any:
        def compile_fx(*args: Any, **kwargs: Any) -> Any:
            for cap, _adapter in _each_active():
                cap.inductor_graphs += 1
            return original(*args, **kwargs)

        return compile_fx

    _patch(openvino.Core, "compile_model", wrap_compile_model)
    _patch(Partitioner, "make_partitions", wrap_make_partitions)
    _patch(ov_execute.OpenVINOGraphModule, "__call__", wrap_module_call)
    _patch(ov_execute, "openvino_execute", wrap_execute)
    _patch(ov_backend, "compile_fx", wrap_compile_fx)


def _owned(outputs: Any) -> Any:
    """``outputs`` with every tensor copied (the backend's own buffers are reused by its next call)."""
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, outputs)


def _uninstall() -> None:
    while _restore:
        _restore.pop()()


class OpenVINOAdapter(BackendAdapter):
    """OpenVINO through its ``torch.compile`` backend, on the device its options name (CPU unless
    ``{"device": ...}`` says otherwise)."""

    name = "openvino"
    title = "OpenVINO"
    dynamo_backend = "openvino"
    extra = "openvino"
    not_applicable: Mapping[str, str] = {
        "C1": "OpenVINO generates no C++ source to read: its CPU plugin runs precompiled and JIT-emitted "
        "kernels whose instructions are not visible as code.",
        "C3": "OpenVINO generates no code in which rsqrt's Newton iterations could be counted: its "
        "normalization runs in the CPU plugin's own MVN kernel.",
        "E": "E trains under bfloat16 autocast on a CPU, and OpenVINO's torch.compile backend passes no bfloat16 "
        "tensor between torch and OpenVINO (measured with openvino 2026.4.1, torch 2.13): a partition with a bfloat16 "
        "input fails (its input type table has no bfloat16) and runs in torch, and a partition's bfloat16 result "
        "comes back as a float16 tensor holding the bfloat16 bits (1.0 reads as 1.875): the bfloat16 values a "
        "fused forward saves for its backward reach the backward as float16, which then fails on a matrix product "
        "of bfloat16 and float16 operands.",
    }

    intents_lacking: Mapping[str, str] = {
        FAITHFUL_CASTS: "OpenVINO removes a narrowing cast pair (fp32 -> fp16 -> fp32) and computes a fused fp16 "
        "chain in fp32, rounding once, and none of its properties keeps the rounding (measured on the CPU plugin "
        "with EXECUTION_MODE_HINT=ACCURACY and INFERENCE_PRECISION_HINT f16 or f32)",
        REDUCTION_TILINGS: "OpenVINO's CPU plugin chooses a reduction's blocking and vector width itself: no "
        "property sets them",
    }
    binaries_unreadable = (
        "OpenVINO's CPU plugin emits its kernels in memory and exposes no binary per runtime node; its compiled "
        "program is compared by the runtime model's text (code_sha256)"
    )
    #: Without ``aot_autograd`` the backend traces a graph for inference under ``no_grad``: its outputs carry
    #: no gradient (and on torch 2.13 that tracing leaves Dynamo guards on sizes with no source). With it, a
    #: forward graph returns a tensor beside its ``detach`` as the backward's saved values (``_log_softmax`` of a
    #: cross-entropy, say); the frontend converts ``detach`` to the tensor itself, and a partition that returns
    #: one tensor twice fails to convert ("Tensor name is not a number", 2026.4) and runs in torch. Disabled,
    #: ``detach`` runs in torch after the partition (a detach computes nothing).
    training_options: Mapping[str, Any] = {"aot_autograd": True, "disabled_ops": ("torch.ops.aten.detach.default",)}
    training_options_why = (
        "OpenVINO's torch.compile backend is differentiable only through AOTAutograd (its aot_autograd option), "
        "and converts a forward graph that returns a tensor beside its detach only with detach left to torch"
    )
    #: The frontend logs a partition it failed to convert or run at DEBUG, then runs it in torch.
    failure_loggers = (
        "openvino.frontend.pytorch.torchdynamo.execute",
        "openvino.frontend.pytorch.torchdynamo.backend",
    )
    #: The backend stores the options of an ``aot_autograd`` compile in ``openvino_options`` and applies them to
    #: every later compile of the process, whatever options that compile names.
    process_globals = (("openvino.frontend.pytorch.torchdynamo.backend", "openvino_options", {}),)

    def __init__(self) -> None:
        #: The numerics-deciding properties of the last model a capture of this adapter saw compile.
        self.last_properties: dict[str, str] = {}

    def intents(self, device: str = "cpu") -> dict[str, Any]:
        """OpenVINO's answers, as backend options. ``one_thread``: ``INFERENCE_NUM_THREADS=1`` (the one
        property that could split a reduction across threads; also the only ``reduction_knobs`` variant:
        no property sets a reduction's order). ``whole_graph``: the backend's ``testing`` option, whose one
        effect (2026.4, ``Partitioner.make_partitions``) is to allow a partition of a single operation:
        without it a graph of one operation is never handed to OpenVINO and runs in torch."""
        one = {"config": {"INFERENCE_NUM_THREADS": "1"}}
        return {ONE_THREAD: one, WHOLE_GRAPH: {"testing": True}, REDUCTION_KNOBS: {"INFERENCE_NUM_THREADS=1": one}}

    def merge_options(self, base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
        """``extra`` over ``base``, the two ``config`` dictionaries (plugin properties) merged."""
        merged = {**base, **extra}
        if isinstance(base.get("config"), Mapping) and isinstance(extra.get("config"), Mapping):
            merged["config"] = {**base["config"], **extra["config"]}
        return merged

    def disable_caches(self) -> dict[str, Any]:
        """Nothing to turn off: OpenVINO's ``torch.compile`` backend caches compiled models on disk only
        with its ``model_caching`` option, and in this process only per partition object."""
        return {
            "cache_files_before_compile": 0,
            "compiler_cache": "none: OpenVINO's backend writes compiled models to disk only with model_caching",
        }

    def fell_back(self, capture: CompileCapture) -> str | None:
        """The partitions the backend ran in torch after OpenVINO failed them (with their errors), and the
        graphs it handed to Inductor after failing to convert them."""
        fell = getattr(capture, "torch_fallback_partitions", 0)
        if fell:
            errors = "; ".join(dict.fromkeys(getattr(capture, "fallback_errors", [])))
            return f"ran {fell} partition(s) in torch after OpenVINO failed to compile or execute them" + (
                f" ({errors})" if errors else ""
            )
        to_inductor = getattr(capture, "inductor_graphs", 0)
        if to_inductor:
            return f"failed to convert {to_inductor} graph(s) and compiled them with Inductor instead"
        return None

    def missing(self) -> str | None:
        """Why OpenVINO cannot run here, or None when the ``openvino`` package is importable."""
        if importlib.util.find_spec("openvino") is None:
            return "the openvino package is not installed: pip install 'fusion-precision[openvino]'"
        return None

    def prepare(self) -> None:
        """Import ``openvino.torch``, which registers the ``"openvino"`` backend with torch.compile.

        The import sets ``torch._dynamo.config.inline_inbuilt_nn_modules``, which torch 2.13 keeps
        only as a deprecated no-op; the FutureWarning that touching it raises, and the
        DeprecationWarnings of the TorchScript decorators the frontend's modules use, are silenced
        here.
        """
        if (reason := self.missing()) is not None:
            raise RuntimeError(f"{self.title}: {reason}")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*inline_inbuilt_nn_modules.*", category=FutureWarning)
            warnings.filterwarnings("ignore", message=".*torch.jit.script_method.*", category=DeprecationWarning)
            import openvino.torch  # noqa: F401

    def compiler(self, options: Mapping[str, Any]) -> Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]:
        """The ``"openvino"`` backend with ``options`` (:func:`isa_capped_config`), its outputs copied: the
        backend returns its infer request's output buffers, which its next call overwrites, so an output
        held across calls would silently become the last call's."""
        compile_fn = super().compiler(isa_capped_config(options, os.environ.get("ONEDNN_MAX_CPU_ISA", "")))

        def compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
            compiled = compile_fn(gm, example_inputs)

            def run(*args: Any) -> Any:
                return _owned(compiled(*args))

            if getattr(compiled, "_boxed_call", False):  # AOTAutograd's calling convention, kept
                setattr(run, "_boxed_call", True)  # noqa: B010 - the attribute torch reads, not ours
            return run

        return compile_graph

    def setup_source(self) -> str:
        """``import openvino.torch`` (which registers the ``"openvino"`` backend), its warnings silenced
        so that the reproducer's last line is its verdict."""
        return (
            "# the fused path is torch.compile(backend='openvino'): needs torch and openvino only\n"
            "import warnings\nwith warnings.catch_warnings():  # openvino.torch registers torch.compile's 'openvino'\n"
            "    warnings.simplefilter('ignore')\n    import openvino.torch  # noqa: F401\n"
        )

    @contextmanager
    def capture(self) -> Iterator[CompileCapture]:
        """Collect every OpenVINO model compiled inside the ``with`` block (see the module docstring
        for what is patched); the yielded :class:`OpenVINOCapture` fills up as partitions compile
        at their first call."""
        self.prepare()
        cap = OpenVINOCapture()
        with _lock:
            if not _active:
                try:
                    _install()
                except BaseException:
                    _uninstall()
                    raise
            _active.append((cap, self))
        try:
            yield cap
        finally:
            with _lock:
                for i, (active, _adapter) in enumerate(_active):
                    if active is cap:
                        del _active[i]
                        break
                if not _active:
                    _uninstall()

    def provenance(self) -> dict[str, str]:
        """The OpenVINO release (``version``) and build, the device, its capabilities (``BF16``
        among them makes bf16 the default inference precision on CPU), and the numerics-deciding
        properties of the last model a capture of this adapter saw compile, else the device's
        defaults (``properties_from`` says which)."""
        import openvino

        props = {"version": importlib.metadata.version("openvino"), "build": str(openvino.get_version())}
        device = "CPU"
        if self.last_properties:
            device = self.last_properties.get("EXECUTION_DEVICES", device) or device
            props.update({k: v for k, v in self.last_properties.items() if k in NUMERIC_PROPERTIES})
            props["properties_from"] = "compiled model"
        else:
            core = openvino.Core()
            for key in NUMERIC_PROPERTIES:
                try:
                    props[key] = _property_text(core.get_property(device, key))
                except RuntimeError:
                    props[key] = ""
            props["properties_from"] = f"{device} defaults"
        props["device"] = device
        try:
            core = openvino.Core()
            props["device_capabilities"] = _property_text(core.get_property(device, "OPTIMIZATION_CAPABILITIES"))
            props["device_name"] = _property_text(core.get_property(device, "FULL_DEVICE_NAME"))
        except RuntimeError:
            pass
        return props

    def knobs(self) -> dict[str, dict[str, Any]]:
        """Option sets for the layer bisection, each a complete ``options`` for :meth:`compiler`.

        - ``INFERENCE_PRECISION_HINT=f32``: no node runs in a lower precision than the graph's
          (the CPU default is bf16 where the CPU supports it).
        - ``EXECUTION_MODE_HINT=ACCURACY``: the plugin keeps the graph's precisions and skips
          optimizations that change numerics.
        - ``SNIPPETS_MODE=DISABLE``: no subgraph kernels generated by OpenVINO's snippets code
          generator (an internal CPU plugin property, not in the public documentation).

        OpenVINO has no property that switches off its graph transformations or the CPU plugin's
        merging of nodes (the fusions the units show).
        """
        return {
            "INFERENCE_PRECISION_HINT=f32 (no bf16/f16 execution)": {"config": {"INFERENCE_PRECISION_HINT": "f32"}},
            "EXECUTION_MODE_HINT=ACCURACY": {"config": {"EXECUTION_MODE_HINT": "ACCURACY"}},
            "SNIPPETS_MODE=DISABLE (no generated subgraph kernels)": {"config": {"SNIPPETS_MODE": "DISABLE"}},
        }

    def fusion_problem(self, capture: CompileCapture) -> str | None:
        """The default rule, after two failures the backend hides: a partition it compiled but then
        ran in torch, and a graph it handed to Inductor."""
        fell_back = getattr(capture, "torch_fallback_partitions", 0)
        if fell_back:
            return f"ran {fell_back} partition(s) in torch after OpenVINO failed to compile or execute them"
        to_inductor = getattr(capture, "inductor_graphs", 0)
        if to_inductor:
            return f"failed to convert {to_inductor} graph(s) and compiled them with Inductor instead"
        return super().fusion_problem(capture)
