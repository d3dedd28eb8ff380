"""What a fusing compiler's adapter declares: how it compiles, what it fused into what, what fell
back to eager, how it was built and set up, and which knobs switch its layers off for a bisection.

An adapter is the one place that knows a compiler's internals. Everything else in precisionkit (the
fused path, its fusion evidence, the bisection, the bug finders) asks the adapter, so a new compiler
comes in by writing one adapter (see :mod:`precisionkit.backends` for the registry and the
``fusion_precision.backends`` entry point).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch


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
    """

    units: list[FusedUnit] = field(default_factory=list)
    partitions: int = 0
    fallback_ops: list[str] = field(default_factory=list)
    code: str = ""
    extern_calls: list[str] = field(default_factory=list)
    fused_library_calls: list[str] = field(default_factory=list)
    graph_ops: int = 0


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
    """

    name: str = ""
    title: str = ""
    dynamo_backend: str = ""
    extra: str | None = None
    not_applicable: Mapping[str, str] = {}

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

    def fusion_problem(self, capture: CompileCapture) -> str | None:
        """Why ``capture`` does not show fusion, or None when it does. The default rule for any
        compiler: at least one unit was compiled, and where the graphs held two or more source
        operations, at least one unit computes more than one of them."""
        if not capture.units and not capture.fused_library_calls:
            return "generated no fused unit (nothing the compiler produced was captured)"
        if capture.graph_ops >= 2 and not any(u.fuses for u in capture.units) and not capture.fused_library_calls:
            return f"put each of the graph's {capture.graph_ops} operations in a unit of its own: nothing was fused"
        return None
