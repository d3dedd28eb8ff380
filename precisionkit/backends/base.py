"""What a fusing compiler's adapter declares: how it compiles, what it fused into what, what fell
back to eager, how it was built and set up, and which knobs switch its layers off for a bisection.

An adapter is the one place that knows a compiler's internals. Everything else in precisionkit (the
fused path, its fusion evidence, the bisection, the bug finders) asks the adapter, so a new compiler
comes in by writing one adapter (see :mod:`precisionkit.backends` for the registry and the
``fusion_precision.backends`` entry point).

What an experiment needs of a compiler beyond a forward pass is declared on the adapter too, never in a
table of the experiment's keyed by a compiler's name: the options that make its backend differentiate a
training step (``training_options``), the Python loggers where it reports a failure it then hides by
running the graph another way (``failure_loggers``; every fused path's capture collects them, see
:func:`failures_logged`), and the module globals it carries from one compile to the next
(``process_globals``).

Experiments ask a compiler for *intents* (:data:`INTENTS`), never for a compiler's own option names:
"reduce on one thread", "round casts as eager does". Each adapter says which option set realizes an
intent (:meth:`BackendAdapter.intents`), or that it has none, and why (:meth:`BackendAdapter.why_not`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class Intent:
    """Something an experiment asks of a compiler, in words every compiler's adapter can answer.

    ``variants`` intents are answered by a set of labelled option sets (label -> options, one variant of
    the compiled program each); the others by one option set (``{}`` when the compiler does it by
    default)."""

    name: str
    meaning: str
    variants: bool = False


#: A reduction is walked by one thread (one block on a GPU): one accumulation order, no split of a
#: row across workers. Inductor: ``cpp.threads=1`` on a CPU, ``split_reductions=False`` on CUDA.
ONE_THREAD = "one_thread"
#: Every cast the program writes rounds as eager rounds it: a narrowing cast between fused operations
#: (an fp32 -> fp16 -> fp32 pair) is kept, not elided. Inductor: ``emulate_precision_casts=True``.
FAITHFUL_CASTS = "faithful_casts"
#: Every operation of the graph goes to the compiler, a graph of one operation too (a partitioner that
#: leaves single-operation partitions to torch is told to keep them). Inductor compiles every graph.
WHOLE_GRAPH = "whole_graph"
#: The compiler's own knobs that each may change how a reduction loop is split, vectorized or
#: reassociated: label -> options, one variant each. Inductor: ``cpp.threads=1``, ``cpp.simdlen=0``,
#: ``split_reductions=False`` on a CPU.
REDUCTION_KNOBS = "reduction_knobs"
#: The settings with which the compiler itself tiles a reduction (threads, vector width), label ->
#: options, one variant each. Inductor on a CPU: ``cpp.threads`` x ``cpp.simdlen``.
REDUCTION_TILINGS = "reduction_tilings"

#: Every intent an experiment may ask for, by name.
INTENTS: dict[str, Intent] = {
    i.name: i
    for i in (
        Intent(
            ONE_THREAD, "walk each reduction on one thread (one block on a GPU), without splitting a row across workers"
        ),
        Intent(
            FAITHFUL_CASTS,
            "round every cast between fused operations as eager does (keep an fp32 -> fp16 -> fp32 pair)",
        ),
        Intent(WHOLE_GRAPH, "compile every operation of a graph, a graph of a single operation too"),
        Intent(
            REDUCTION_KNOBS,
            "switch a knob of its own that changes how a reduction is split, vectorized or reassociated",
            True,
        ),
        Intent(REDUCTION_TILINGS, "set the threads and vector width with which it tiles a reduction", True),
    )
}


def intent_spec(name: str) -> Intent:
    """The declared intent ``name``; a ValueError listing the intents for any other name."""
    try:
        return INTENTS[name]
    except KeyError:
        raise ValueError(f"no intent {name!r}; intents: {', '.join(INTENTS)}") from None


@dataclass(frozen=True)
class FusedUnit:
    """One unit of compiled code the compiler produced: a generated kernel (Inductor), a node of the
    runtime model (OpenVINO), a dispatch region (IREE).

    ``ops`` names the source operations the unit computes (FX node or ATen op names, or the original
    layer names a compiler keeps); a unit with two or more is a fusion. ``precision`` is the
    precision the unit executes in as the compiler reports it (``"float32"``, ``"bfloat16"``, ...;
    ``""`` when the compiler does not say).
    """

    name: str
    ops: tuple[str, ...] = ()
    precision: str = ""
    kind: str = ""

    @property
    def fuses(self) -> bool:
        """Whether the unit computes more than one source operation."""
        return len(self.ops) >= 2


@dataclass
class CompileCapture:
    """What an adapter saw while :meth:`BackendAdapter.capture` was active: filled as graphs compile,
    read after the block.

    - ``units``: every fused unit of every graph compiled inside the block, in order.
    - ``partitions``: how many subgraphs the compiler itself compiled (Inductor: one per FX graph;
      OpenVINO: one per supported partition).
    - ``fallback_ops``: source operations left to eager inside a compiled graph (a partitioner's
      unsupported ops); graph breaks are counted by the fused path itself, not here.
    - ``code``: text that identifies the compiled program, with per-process ids and paths removed;
      equal texts mean equal compiled programs (its sha256 is the evidence's ``code_sha256``).
      ``""`` when the compiler exposes nothing to hash.
    - ``extern_calls`` / ``fused_library_calls``: library kernels the compiled code calls (Inductor).
    - ``graph_ops``: how many source operations the compiled graphs held (the denominator of the
      fusion rule: a graph of one op cannot fuse).
    - ``graph_edges``: how many of those operations' inputs are another operation's result (None when
      the adapter did not count them). With none, nothing could fuse (one operation, or operations
      that share only inputs, such as two sums of one tensor): the rule then asks only that the
      compiler compiled the graph.
    - ``compiler_log``: the failures the compiler logged to its adapter's ``failure_loggers`` inside the
      block, one line each (filled for every adapter, whatever its own ``capture`` does).
    """

    units: list[FusedUnit] = field(default_factory=list)
    partitions: int = 0
    fallback_ops: list[str] = field(default_factory=list)
    code: str = ""
    extern_calls: list[str] = field(default_factory=list)
    fused_library_calls: list[str] = field(default_factory=list)
    graph_ops: int = 0
    graph_edges: int | None = None
    compiler_log: list[str] = field(default_factory=list)


def count_edges(graph: torch.fx.Graph, computes: Callable[[torch.fx.Node], bool]) -> int:
    """How many inputs of ``graph``'s computing nodes (``computes``) are another computing node's result
    (each (producer, consumer) pair once): :attr:`CompileCapture.graph_edges` of an FX graph."""
    edges: set[tuple[torch.fx.Node, torch.fx.Node]] = set()
    for node in graph.nodes:
        if computes(node):
            edges.update((p, node) for p in node.all_input_nodes if computes(p))
    return len(edges)


class BackendAdapter:
    """A fusing compiler as precisionkit sees it. Subclass it, set the class attributes, and override
    what differs from ``torch.compile(backend=dynamo_backend)``.

    Class attributes:

    - ``name``: the adapter's registry name (``"inductor"``, ``"openvino"``, ``"iree"``).
    - ``title``: the compiler's name for people (``"OpenVINO"``).
    - ``dynamo_backend``: the ``torch.compile`` backend name it compiles with.
    - ``extra``: the pip extra that installs it (``pip install 'fusion-precision[openvino]'``), or None.
    - ``not_applicable``: claim or experiment id -> why it does not apply to this compiler (e.g. C1's
      instruction route reads Inductor's generated C++); such a claim is stored as "not applicable
      to <title>: <why>", never as a pass.
    - ``intents_lacking``: intent name -> why this compiler has no way to do it (see :meth:`why_not`).
    - ``binaries_unreadable``: why the machine code of the compiled units cannot be read back ("" when
      :meth:`compiled_modules` yields the modules that hold it).

    What an experiment needs beyond a forward pass (neutral by default: a compiler that needs nothing):

    - ``training_options``: the options its backend needs to differentiate a training step (OpenVINO:
      ``{"aot_autograd": True}``), added under a training run's own options (which win); ``{}`` for a
      backend that compiles the backward by itself (Inductor). ``training_options_why`` says why.
    - ``failure_loggers``: names of the Python loggers where the backend reports a failure it then hides
      by running the graph another way (in torch, or with another compiler). Inside every
      :meth:`capture` (an adapter's own too) their failures (:meth:`failure_line`) are collected into
      :attr:`CompileCapture.compiler_log`; the default refusal (:meth:`fusion_problem`) and fallback
      (:meth:`fell_back`) name the compiler's own error text from it, and an adapter's own may
      (:meth:`naming_logged`).
    - ``process_globals``: ``(module, attribute, starting value)`` of each module global the backend
      carries from one compile to the next in a process, whatever options the next compile names (an
      experiment that sets options for its own compiles puts these back after them).

    Intents (:data:`INTENTS`): an experiment asks :meth:`intent` (one option set) or
    :meth:`intent_variants` (labelled option sets) by intent name, never by a compiler's option names;
    an adapter declares what it can do by overriding :meth:`intents`. An intent it leaves out is one the
    compiler does not have: the experiment stores that part as "not applicable to <title>: <why>"
    (:meth:`why_not`), never as a pass. ``{}`` means the compiler already does it with no option; say
    so only where that was measured.

    >>> class Mine(BackendAdapter):
    ...     name, title = "mine", "Mine"
    ...     intents_lacking = {"one_thread": "its runtime's thread pool is process-wide"}
    ...
    ...     def intents(self, device="cpu"):
    ...         return {"faithful_casts": {}, "reduction_knobs": {"reassociate": {"fast_math": True}}}
    >>> Mine().intent("faithful_casts"), Mine().intent("one_thread"), Mine().why_not("one_thread")
    ({}, None, "its runtime's thread pool is process-wide")
    >>> Mine().intent_variants("reduction_knobs")
    {'reassociate': {'fast_math': True}}
    """

    name: str = ""
    title: str = ""
    dynamo_backend: str = ""
    extra: str | None = None
    not_applicable: Mapping[str, str] = {}
    intents_lacking: Mapping[str, str] = {}
    binaries_unreadable: str = "its adapter reads no compiled machine code per unit"
    training_options: Mapping[str, Any] = {}
    training_options_why: str = ""
    failure_loggers: tuple[str, ...] = ()
    process_globals: tuple[tuple[str, str, Any], ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """An adapter's own :meth:`capture` collects its failure loggers too (see ``failure_loggers``)."""
        super().__init_subclass__(**kwargs)
        if "capture" in cls.__dict__:
            cls.capture = _collecting_failures(cls.__dict__["capture"])  # type: ignore[method-assign]

    def missing(self) -> str | None:
        """Why this compiler cannot run here (a package not installed, with the command that
        installs it), or None when it can."""
        return None

    def prepare(self) -> None:
        """Import whatever registers :attr:`dynamo_backend` with torch.compile (idempotent)."""

    def setup_source(self) -> str:
        """Python lines a standalone reproducer runs before ``torch.compile(backend=dynamo_backend)``:
        what registers the backend, using only the compiler's own package where it can (OpenVINO:
        ``import openvino.torch``). The default asks precisionkit for this adapter (a user's adapter
        registered by entry point); "" for a backend torch registers itself."""
        return f"from precisionkit.backends import get_adapter\nget_adapter({self.name!r}).prepare()\n"

    def compiler(self, options: Mapping[str, Any]) -> Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]:
        """The ``torch.compile`` backend callable with ``options`` applied."""
        from torch._dynamo import lookup_backend

        self.prepare()
        # Typed loosely: a backend that takes options takes them as a keyword torch's type omits.
        compile_fn: Callable[..., Any] = lookup_backend(self.dynamo_backend)
        if not options:
            return compile_fn
        return lambda gm, example_inputs: compile_fn(gm, example_inputs, options=dict(options))

    @contextmanager
    def capture(self) -> Iterator[CompileCapture]:
        """Collect the evidence of every compile inside the ``with`` block."""
        yield CompileCapture()

    def provenance(self) -> dict[str, str]:
        """How the compiler was built and set up: version, target, precision hints, as strings."""
        return {}

    def knobs(self) -> dict[str, dict[str, Any]]:
        """Named option sets that each switch one of the compiler's layers off (or change its
        precision), for the layer bisection: name -> options for :meth:`compiler`."""
        return {}

    # --- intents -------------------------------------------------------------------------------

    def intents(self, device: str = "cpu") -> dict[str, Any]:
        """The intents this compiler realizes on ``device`` (a torch device string): intent name ->
        options for :meth:`compiler` (``{}``: it does so by default), or for a ``variants`` intent,
        label -> options. Override it to declare a compiler's; the default declares none."""
        return {}

    def intent(self, name: str, device: str = "cpu") -> dict[str, Any] | None:
        """The options that realize intent ``name`` on ``device`` (``{}``: the compiler does it by
        default), or None when it has no way to (:meth:`why_not` says why)."""
        if intent_spec(name).variants:
            raise ValueError(f"intent {name!r} is a set of variants: ask intent_variants({name!r})")
        value = self.intents(device).get(name)
        return None if value is None else dict(value)

    def intent_variants(self, name: str, device: str = "cpu") -> dict[str, dict[str, Any]] | None:
        """The labelled option sets of variant intent ``name`` on ``device``, or None when the compiler
        has none (:meth:`why_not` says why)."""
        if not intent_spec(name).variants:
            raise ValueError(f"intent {name!r} is one option set: ask intent({name!r})")
        value = self.intents(device).get(name)
        return None if value is None else {label: dict(options) for label, options in value.items()}

    def merge_options(self, base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
        """The options of :meth:`compiler` that are ``base`` (a run's own options) with ``extra`` (an
        intent's) applied over them; the default replaces key by key, an adapter whose options nest
        (OpenVINO's ``config``, IREE's ``flags``) merges them."""
        return {**base, **extra}

    def why_not(self, name: str, device: str = "cpu") -> str:
        """Why this compiler has no way to do intent ``name`` on ``device``: its declared reason
        (``intents_lacking``), else that its adapter declares none. An experiment stores it as
        "not applicable to <title>: <why>"."""
        spec = intent_spec(name)
        return self.intents_lacking.get(name) or (
            f"its adapter declares no way to {spec.meaning} on {torch.device(device).type}"
        )

    # --- what the compiler did with a graph --------------------------------------------------

    def fell_back(self, capture: CompileCapture) -> str | None:
        """Why part of what the compiler was handed ran elsewhere (in torch, or in another compiler)
        after the compiler failed it at compile or run time, or None. A property of the compiler on
        that graph, not of the harness: an experiment may keep such a path as "not fused" with this
        reason (never as a fused result), where the fused path itself raises FusionError.

        The default: a failure the compiler logged to its ``failure_loggers`` (which, by their
        declaration, it then hid), named in its own words; an adapter that overrides this names the
        error itself (:meth:`naming_logged` adds the logged one)."""
        if not capture.compiler_log:
            return None
        return f"ran part of the graph another way after a failure it logged: {capture.compiler_log[0]}"

    def failure_line(self, record: logging.LogRecord) -> str | None:
        """The line to keep of ``record``, logged to one of ``failure_loggers``, or None for a record
        that reports no failure. The default keeps a record at ERROR or above and any whose message says
        "fail" (OpenVINO logs "OpenVINO execution failed with ..." at DEBUG, next to "... successful"),
        its whitespace joined into one line."""
        text = record.getMessage()
        if record.levelno >= logging.ERROR or "fail" in text.lower():
            return " ".join(text.split())
        return None

    def naming_logged(self, reason: str, capture: CompileCapture) -> str:
        """``reason`` with the first failure the compiler logged in ``capture`` after it (``; the compiler
        logged: <line>``), unless there is none or ``reason`` holds it already."""
        if not capture.compiler_log or capture.compiler_log[0] in reason:
            return reason
        return f"{reason}; the compiler logged: {capture.compiler_log[0]}"

    @contextmanager
    def compiled_modules(self) -> Iterator[list[Any] | None]:
        """Collect, inside the ``with`` block, the loaded modules that hold the compiled units' machine
        code (Inductor's wrapper modules), for reading each unit's binary; yields None for a compiler
        whose binaries cannot be read (``binaries_unreadable`` says why)."""
        yield None

    def disable_caches(self) -> dict[str, Any]:
        """Turn off, in this process, every cache through which the compiler could reuse an earlier
        compile (a cold start), and return what was found and set, for the record: at least
        ``cache_files_before_compile`` (files already in its on-disk cache; 0 for one it has none of)."""
        return {"cache_files_before_compile": 0, "compiler_cache": "none read by this adapter"}

    def fusion_problem(self, capture: CompileCapture) -> str | None:
        """Why ``capture`` does not show fusion, or None when it does. The default rule for any
        compiler: at least one unit was compiled, and where an operation of the graphs fed another
        (:attr:`CompileCapture.graph_edges`; where it was not counted, where the graphs held two or
        more operations), at least one unit computes more than one of them. Only units that name
        their operations can show that nothing fused: a unit that names none (the compiler does not
        say, or a rewrite lost the names) may hold several. A refusal names the first failure the
        compiler logged (:meth:`naming_logged`)."""
        if not capture.units and not capture.fused_library_calls:
            return self.naming_logged("generated no fused unit (nothing the compiler produced was captured)", capture)
        could_fuse = capture.graph_ops >= 2 if capture.graph_edges is None else capture.graph_edges >= 1
        named = all(u.ops for u in capture.units)
        fused = any(u.fuses for u in capture.units) or capture.fused_library_calls
        if could_fuse and named and not fused:
            problem = f"put each of the graph's {capture.graph_ops} operations in a unit of its own: nothing was fused"
            return self.naming_logged(problem, capture)
        return None


# Captures whose failure log is being collected (by id): an adapter's capture built on its parent's
# collects each failure once.
_COLLECTING: set[int] = set()


class _FailureHandler(logging.Handler):
    def __init__(self, adapter: BackendAdapter, into: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.adapter, self.into = adapter, into

    def emit(self, record: logging.LogRecord) -> None:
        line = self.adapter.failure_line(record)
        if line:
            self.into.append(line)


@contextmanager
def failures_logged(adapter: BackendAdapter, into: list[str] | None = None) -> Iterator[list[str]]:
    """Collect, inside the block, the failures ``adapter``'s compiler logs to its ``failure_loggers``
    (:meth:`BackendAdapter.failure_line` of each record, appended to ``into``, else to a new list): the
    loggers are set to DEBUG for the block (a backend may report a failure it hides at DEBUG only) and
    put back after it. Every :meth:`BackendAdapter.capture` does this for its
    :attr:`CompileCapture.compiler_log`; an experiment may ask it around more than one fused call."""
    lines: list[str] = [] if into is None else into
    loggers = [logging.getLogger(name) for name in adapter.failure_loggers]
    handler, levels = _FailureHandler(adapter, lines), [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


def _collecting_failures(capture: Callable[..., Any]) -> Callable[..., Any]:
    """``capture`` (an adapter's context manager) with its failure loggers collected into the yielded
    capture's ``compiler_log`` for the block."""

    @functools.wraps(capture)
    @contextmanager
    def collecting(self: BackendAdapter, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with capture(self, *args, **kwargs) as cap:
            if not self.failure_loggers or not isinstance(cap, CompileCapture) or id(cap) in _COLLECTING:
                yield cap
                return
            _COLLECTING.add(id(cap))
            try:
                with failures_logged(self, cap.compiler_log):
                    yield cap
            finally:
                _COLLECTING.discard(id(cap))

    return collecting


BackendAdapter.capture = _collecting_failures(BackendAdapter.__dict__["capture"])  # type: ignore[method-assign]
