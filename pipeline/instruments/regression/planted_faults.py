"""The planted bugs' output and input faults, and the helpers every planted backend shares.

Output faults: the healthy compiler (Inductor, or another adapter's compiler under
:func:`compiling_with`) compiles the graph unchanged and the wrapper damages what the compiled
code returns (dropped channel, layout swap, one-ULP rounding change, per-call perturbation, stale
lanes in the tail of a vectorized row). Input faults: the compiled code is handed damaged inputs,
as a kernel with a wrong indexing scheme would read them (non-contiguous inputs indexed with
contiguous strides). ``fallback_to_eager_backend`` never calls Inductor at all.

The graph faults are :mod:`.planted_graph_faults`; the catalogue is :mod:`.planted_bugs`.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

aten = torch.ops.aten

#: Reduction ops as they appear in an ATen graph after decomposing softmax / layer norm.
REDUCTIONS = {
    aten.sum.dim_IntList,
    aten.mean.dim,
    aten.amax.default,
    aten.amin.default,
    aten.var_mean.correction,
    aten.var.correction,
}
#: Contractions: a reduction over K inside a library call (also order-sensitive in real kernels).
CONTRACTIONS = {aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default}


# --- helpers ---------------------------------------------------------------------------------


def inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """``gm`` compiled by Inductor, as the healthy backend compiles it."""
    from torch._inductor.compile_fx import compile_fx

    compiled = compile_fx(gm, list(example_inputs))
    if not callable(compiled):  # AOT modes return code or weights; this compile must return a callable
        raise TypeError(f"Inductor returned a {type(compiled).__name__}, not a compiled callable")
    return compiled


#: A healthy compile: a graph and its example inputs to the compiled callable.
CompileFn = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]
#: The compiles a planted fault wraps, innermost last (:func:`compiling_with`); empty: Inductor.
_healthy = threading.local()


def healthy_compile(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """``gm`` compiled as the healthy compiler of this thread compiles it: Inductor, or the compiler a
    :func:`compiling_with` block names (another adapter's ``torch.compile`` backend, see :mod:`.planted_on`)."""
    stack: list[CompileFn] = getattr(_healthy, "stack", [])
    if not stack:
        return inductor(gm, example_inputs)
    compiled = stack[-1](gm, list(example_inputs))
    if not callable(compiled):
        raise TypeError(f"the healthy compiler returned a {type(compiled).__name__}, not a compiled callable")
    return compiled


@contextlib.contextmanager
def compiling_with(compile_fn: CompileFn) -> Iterator[None]:
    """Inside the block, this thread's planted faults wrap ``compile_fn`` instead of Inductor."""
    stack: list[CompileFn] = getattr(_healthy, "stack", None) or []
    _healthy.stack = stack
    stack.append(compile_fn)
    try:
        yield
    finally:
        stack.pop()


def _call(compiled: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    # compile_fx's result takes positional arguments (its copied ``_boxed_call`` attribute notwithstanding).
    return compiled(*args)


def _is_float_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0


def _map_outputs(outs: Any, transform: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(outs, (list, tuple)):
        return type(outs)(transform(o) if _is_float_tensor(o) else o for o in outs)
    return transform(outs) if _is_float_tensor(outs) else outs


def _wrap_outputs(
    compiled: Callable[..., Any], transform: Callable[[torch.Tensor], torch.Tensor]
) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        return _map_outputs(_call(compiled, args), transform)

    return run


def _same_values_keep_grad(original: torch.Tensor, damaged: torch.Tensor) -> torch.Tensor:
    """``damaged``'s values with ``original``'s autograd history (training still backpropagates)."""
    if original.requires_grad:
        return original + (damaged - original).detach()
    return damaged


def _step_ulp(t: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Move each finite element ``steps`` ULPs (an integer tensor of -1/0/+1) along the number line."""
    up = torch.nextafter(t, torch.full_like(t, float("inf")))
    down = torch.nextafter(t, torch.full_like(t, float("-inf")))
    out = torch.where(steps > 0, up, torch.where(steps < 0, down, t))
    return torch.where(torch.isfinite(t), out, t)


def aten_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> torch.fx.GraphModule:
    """The Dynamo graph traced to ATen, with softmax and layer norm decomposed into reductions."""
    from torch._decomp import get_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    table = get_decompositions([aten._softmax, aten._log_softmax, aten.native_layer_norm])
    # "real" mode on Dynamo's fake inputs keeps their static sizes (mode "fake" would make them symbolic).
    # get_decompositions is typed with OperatorBase keys, make_fx's table with OpOverload ones (same objects).
    return make_fx(gm, decomposition_table=table, tracing_mode="real")(*example_inputs)  # type: ignore[arg-type]


def _has_node(gm: torch.fx.GraphModule, targets: set[Any]) -> bool:
    return any(n.op == "call_function" and n.target in targets for n in gm.graph.nodes)


def reduced_dims(node: torch.fx.Node, rank: int) -> list[int] | None:
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None:
        return None
    if isinstance(dims, int):
        return [dims % rank]
    if not isinstance(dims, (list, tuple)) or not all(isinstance(d, int) for d in dims):
        raise TypeError(f"{node.format_node()} reduces over {dims!r}: expected an int or a list of ints")
    return sorted(int(d) % rank for d in dims)


def static_shape(node: Any) -> tuple[int, ...] | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    # make_fx under Dynamo's fake mode reports static sizes as SymInts with a concrete value.
    if not all(is_concrete_int(s) for s in val.shape):
        return None
    return tuple(int(s) for s in val.shape)


# --- output faults ---------------------------------------------------------------------------


def _drop_last_channel(t: torch.Tensor) -> torch.Tensor:
    keep = torch.ones(t.shape[-1], dtype=torch.bool, device=t.device)
    keep[-1] = False
    return _same_values_keep_grad(t, torch.where(keep, t, torch.zeros((), dtype=t.dtype, device=t.device)))


def drop_channel_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor, then the last element of the last dim of every floating output is zeroed."""
    return _wrap_outputs(healthy_compile(gm, example_inputs), lambda t: _drop_last_channel(t) if t.dim() >= 1 else t)


def _swap_layout(t: torch.Tensor) -> torch.Tensor:
    if t.dim() < 2 or t.shape[-1] < 2 or t.shape[-2] < 2:
        return t
    # The buffer of [..., A, B] read as if it were stored [..., B, A] (NCHW vs NHWC mix-up): shape kept.
    return _same_values_keep_grad(t, t.transpose(-1, -2).contiguous().reshape(t.shape))


def layout_swap_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor, then every floating output of rank >= 2 has its last two dims' data permuted (shape kept)."""
    return _wrap_outputs(healthy_compile(gm, example_inputs), _swap_layout)


def _away_from_zero(t: torch.Tensor) -> torch.Tensor:
    steps = torch.sign(t).to(torch.int8)  # +1 ULP in magnitude: rounding away from zero
    return _same_values_keep_grad(t, _step_ulp(t, steps))


def off_by_one_ulp_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor, then every nonzero finite output element moves one ULP away from zero (rounding change)."""
    return _wrap_outputs(healthy_compile(gm, example_inputs), _away_from_zero)


_call_counter = itertools.count()
_counter_lock = threading.Lock()


def _per_call_jitter(t: torch.Tensor) -> torch.Tensor:
    # A fresh RNG per call (seeded from a process-wide call counter): each call of the compiled
    # graph perturbs other elements by -1/0/+1 ULP, as an order-nondeterministic reduction would.
    with _counter_lock:
        call = next(_call_counter)
    rng = random.Random(0x5EED ^ (call * 0x9E3779B1))
    g = torch.Generator().manual_seed(rng.getrandbits(63))
    steps = torch.randint(-1, 2, t.shape, generator=g, dtype=torch.int8).to(t.device)
    return _same_values_keep_grad(t, _step_ulp(t, steps))


def nondeterministic_reduction_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor; outputs of graphs that reduce (sum/max/mean/var or a matmul) get a per-call +-1 ULP jitter."""
    compiled = healthy_compile(gm, example_inputs)
    if not _has_node(aten_graph(gm, example_inputs), REDUCTIONS | CONTRACTIONS):
        return compiled  # pure data movement / elementwise: no reduction order to vary
    return _wrap_outputs(compiled, _per_call_jitter)


#: Lanes of the planted vectorized loop (fp32 lanes of a 256-bit register): a row whose length is
#: longer than this and not a multiple of it has a masked tail of ``length % VECTOR_WIDTH`` elements.
VECTOR_WIDTH = 8


def _stale_vector_tail(t: torch.Tensor) -> torch.Tensor:
    if t.dim() < 1:
        return t
    n = t.shape[-1]
    tail = n % VECTOR_WIDTH
    if n <= VECTOR_WIDTH or tail == 0:
        return t
    # The masked epilogue stores the lanes still in the register from the last full vector:
    # element n - tail + i receives element n - tail - VECTOR_WIDTH + i.
    damaged = t.detach().clone()
    damaged[..., n - tail :] = t.detach()[..., n - tail - VECTOR_WIDTH : n - VECTOR_WIDTH]
    return _same_values_keep_grad(t, damaged)


def vector_tail_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor, then outputs whose last dim is longer than ``VECTOR_WIDTH`` and not a multiple of it
    get their tail elements from the previous full vector (the remainder loop is wrong)."""
    return _wrap_outputs(healthy_compile(gm, example_inputs), _stale_vector_tail)


# --- input faults ----------------------------------------------------------------------------


def _is_dense_permutation(t: torch.Tensor) -> bool:
    """True when ``t`` covers a gap-free block of its storage in some dim order (e.g. a transpose of
    a contiguous tensor): sorted by stride, each stride is the product of the smaller dims' sizes."""
    expected = 1
    for size, stride in sorted(
        ((n, st) for n, st in zip(t.shape, t.stride(), strict=False) if n != 1), key=lambda p: p[1]
    ):
        if stride != expected:
            return False
        expected *= size
    return True


def _read_as_if_contiguous(t: Any) -> Any:
    """A dense, non-contiguous floating input (e.g. a transposed view) read with contiguous strides:
    its storage, in memory order, taken as the logical row-major element order. The damaged values
    are handed over with the input's own strides, so the compiled code's stride asserts hold.
    Contiguous inputs, broadcasts (stride 0) and non-dense views (slices) are left alone."""
    if not _is_float_tensor(t) or t.dim() < 2 or t.is_contiguous() or not _is_dense_permutation(t):
        return t
    flat = t.detach().as_strided((t.numel(),), (1,), t.storage_offset())  # the dense span, memory order
    wrong = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    wrong.copy_(flat.view(t.shape))
    return _same_values_keep_grad(t, wrong)


def contiguous_only_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor, but the kernel indexes every input as if it were contiguous: a transposed (or
    otherwise permuted) input is read in storage order; contiguous inputs give the right result."""
    compiled = healthy_compile(gm, example_inputs)

    def run(*args: Any) -> Any:
        return _call(compiled, tuple(_read_as_if_contiguous(a) for a in args))

    return run


# --- no compile at all ----------------------------------------------------------------------


def fallback_to_eager_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Claims to fuse but returns the graph's own forward: op by op, no generated code."""
    return gm.forward
