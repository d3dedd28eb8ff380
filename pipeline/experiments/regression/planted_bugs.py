"""Planted bugs: deliberately faulty ``torch.compile`` backends for mutation testing of the harness.

Each backend wraps Inductor and injects one realistic *silent* numerical fault, so the fused path
still compiles and still shows generated kernels (fusion evidence stays plausible) while its
numbers are wrong. Running the experiments with ``settings.backend = <bug name>`` must turn at
least one check to ERROR (a contradicted claim or an invalid run); :mod:`pipeline.experiments.regression.harness`
measures that (the ``planted_bug_matrix`` asset).

Faults come in three kinds:

* output faults: Inductor compiles the graph unchanged and the wrapper damages what the compiled
  code returns (dropped channel, layout swap, one-ULP rounding change, per-call perturbation,
  stale lanes in the tail of a vectorized row);
* graph faults: the Dynamo graph is traced to ATen (softmax / layer norm decomposed into their
  reductions), an FX pass rewrites the reductions, and Inductor compiles the rewritten graph
  (wrong reduction axis, fp16 accumulation, a bf16 split-K workspace switched on only for long
  rows, reduction results parked in a bf16 scratch buffer);
* input faults: the compiled code is handed damaged inputs, as a kernel with a wrong indexing
  scheme would read them (non-contiguous inputs indexed with contiguous strides).

Some faults fire only where real kernels go wrong: long reductions (C2's 4096-element rows, not
B's 32-wide ones), strided inputs (D's transposed views), row lengths that are not a multiple of
the vector width (D's odd shapes such as (1, 7, 24)). The unit tests show each fires where it
should and leaves the other inputs alone.

``planted_fallback_to_eager`` is the exception: it never calls Inductor, so precisionkit's
``FusedFunction`` raises ``FusionError`` (no generated code) instead of returning numbers.

Call :func:`register_planted_backends` (idempotent) before looking a bug up by name.
"""

from __future__ import annotations

import itertools
import operator
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

aten = torch.ops.aten

#: Reduction ops as they appear in an ATen graph after decomposing softmax / layer norm.
_REDUCTIONS = {
    aten.sum.dim_IntList,
    aten.mean.dim,
    aten.amax.default,
    aten.amin.default,
    aten.var_mean.correction,
    aten.var.correction,
}
#: Contractions: a reduction over K inside a library call (also order-sensitive in real kernels).
_CONTRACTIONS = {aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default}


@dataclass(frozen=True)
class PlantedBug:
    """One faulty backend: its registered name, what it does wrong and which fault class it models."""

    name: str
    fault_class: str
    description: str
    compiler: Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]


# --- helpers ---------------------------------------------------------------------------------


def _inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    from torch._inductor.compile_fx import compile_fx

    compiled = compile_fx(gm, list(example_inputs))
    if not callable(compiled):  # AOT modes return code or weights; this compile must return a callable
        raise TypeError(f"Inductor returned a {type(compiled).__name__}, not a compiled callable")
    return compiled


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


def _aten_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> torch.fx.GraphModule:
    """The Dynamo graph traced to ATen, with softmax and layer norm decomposed into reductions."""
    from torch._decomp import get_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    table = get_decompositions([aten._softmax, aten._log_softmax, aten.native_layer_norm])
    # "real" mode on Dynamo's fake inputs keeps their static sizes (mode "fake" would make them symbolic).
    # get_decompositions is typed with OperatorBase keys, make_fx's table with OpOverload ones (same objects).
    return make_fx(gm, decomposition_table=table, tracing_mode="real")(*example_inputs)  # type: ignore[arg-type]


def _has_node(gm: torch.fx.GraphModule, targets: set[Any]) -> bool:
    return any(n.op == "call_function" and n.target in targets for n in gm.graph.nodes)


def _reduced_dims(node: torch.fx.Node, rank: int) -> list[int] | None:
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None:
        return None
    if isinstance(dims, int):
        return [dims % rank]
    if not isinstance(dims, (list, tuple)) or not all(isinstance(d, int) for d in dims):
        raise TypeError(f"{node.format_node()} reduces over {dims!r}: expected an int or a list of ints")
    return sorted(int(d) % rank for d in dims)


def _static_shape(node: Any) -> tuple[int, ...] | None:
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
    return _wrap_outputs(_inductor(gm, example_inputs), lambda t: _drop_last_channel(t) if t.dim() >= 1 else t)


def _swap_layout(t: torch.Tensor) -> torch.Tensor:
    if t.dim() < 2 or t.shape[-1] < 2 or t.shape[-2] < 2:
        return t
    # The buffer of [..., A, B] read as if it were stored [..., B, A] (NCHW vs NHWC mix-up): shape kept.
    return _same_values_keep_grad(t, t.transpose(-1, -2).contiguous().reshape(t.shape))


def layout_swap_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor, then every floating output of rank >= 2 has its last two dims' data permuted (shape kept)."""
    return _wrap_outputs(_inductor(gm, example_inputs), _swap_layout)


def _away_from_zero(t: torch.Tensor) -> torch.Tensor:
    steps = torch.sign(t).to(torch.int8)  # +1 ULP in magnitude: rounding away from zero
    return _same_values_keep_grad(t, _step_ulp(t, steps))


def off_by_one_ulp_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Inductor, then every nonzero finite output element moves one ULP away from zero (rounding change)."""
    return _wrap_outputs(_inductor(gm, example_inputs), _away_from_zero)


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
    compiled = _inductor(gm, example_inputs)
    if not _has_node(_aten_graph(gm, example_inputs), _REDUCTIONS | _CONTRACTIONS):
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
    return _wrap_outputs(_inductor(gm, example_inputs), _stale_vector_tail)


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
    compiled = _inductor(gm, example_inputs)

    def run(*args: Any) -> Any:
        return _call(compiled, tuple(_read_as_if_contiguous(a) for a in args))

    return run


# --- graph faults ----------------------------------------------------------------------------


def _rewrite_wrong_axis(gm: torch.fx.GraphModule) -> int:
    """Reductions over the last dim of an [..., A, B] input read it along the other axis: the
    input is walked column-major (transpose + reshape back to [..., A, B]) before reducing."""
    count = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _REDUCTIONS:
            continue
        src = node.args[0]
        shape = _static_shape(src)
        if shape is None or len(shape) < 2 or shape[-1] < 2 or shape[-2] < 2:
            continue
        if _reduced_dims(node, len(shape)) != [len(shape) - 1]:
            continue
        with graph.inserting_before(node):
            t = graph.call_function(aten.transpose.int, (src, -2, -1))
            c = graph.call_function(aten.clone.default, (t,), {"memory_format": torch.contiguous_format})
            walked = graph.call_function(aten.view.default, (c, list(shape)))
        node.replace_input_with(src, walked)
        count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count


#: Sequential steps of the planted fp16 accumulator: a row longer than this is summed in this many
#: chunks (each chunk's fp32 partial then added into the fp16 accumulator), a shorter row element by element.
FP16_ACCUMULATOR_STEPS = 64


def _round_mantissa(graph: torch.fx.Graph, x: torch.fx.Node, dropped_bits: int) -> torch.fx.Node:
    """fp32 -> nearest value with ``23 - dropped_bits`` mantissa bits (ties to even), by integer bit
    arithmetic: 13 dropped bits give fp16's precision, 16 bf16's (fp32's exponent range is kept).

    Inductor elides an fp32 -> fp16 -> fp32 cast pair unless ``emulate_precision_casts`` is set,
    so a cast would not round; the bit form cannot be elided."""
    bits = graph.call_function(aten.view.dtype, (x, torch.int32))
    odd = graph.call_function(
        aten.bitwise_and.Scalar, (graph.call_function(aten.bitwise_right_shift.Tensor_Scalar, (bits, dropped_bits)), 1)
    )
    half = (1 << (dropped_bits - 1)) - 1
    bumped = graph.call_function(aten.add.Tensor, (graph.call_function(aten.add.Tensor, (bits, half)), odd))
    rounded = graph.call_function(aten.bitwise_and.Scalar, (bumped, -(1 << dropped_bits)))
    return graph.call_function(aten.view.dtype, (rounded, torch.float32))


FP16_DROPPED_BITS = 13  # fp32's 23 mantissa bits -> fp16's 10
BF16_DROPPED_BITS = 16  # fp32's 23 mantissa bits -> bf16's 7


def _round_to_fp16_precision(graph: torch.fx.Graph, x: torch.fx.Node) -> torch.fx.Node:
    """fp32 -> nearest value with fp16's 10-bit mantissa (see :func:`_round_mantissa`)."""
    return _round_mantissa(graph, x, FP16_DROPPED_BITS)


def _round_to_bf16_precision(graph: torch.fx.Graph, x: torch.fx.Node) -> torch.fx.Node:
    """fp32 -> nearest value with bf16's 7-bit mantissa (see :func:`_round_mantissa`)."""
    return _round_mantissa(graph, x, BF16_DROPPED_BITS)


def _fp16_sequential_sum(graph: torch.fx.Graph, src: torch.fx.Node, shape: tuple[int, ...]) -> torch.fx.Node:
    """Sum over the last dim with an fp16 accumulator: inputs rounded to fp16 precision, then added
    in order (per element, or per chunk for long rows) with the running sum rounded after every add."""
    lead = list(shape[:-1])
    n = shape[-1]
    steps = min(n, FP16_ACCUMULATOR_STEPS)
    chunk = -(-n // steps)
    y = graph.call_function(aten._to_copy.default, (src,), {"dtype": torch.float32})
    y = _round_to_fp16_precision(graph, y)
    if steps * chunk != n:
        y = graph.call_function(aten.constant_pad_nd.default, (y, [0, steps * chunk - n], 0.0))
    y = graph.call_function(aten.view.default, (y, [*lead, steps, chunk]))
    partials = graph.call_function(aten.sum.dim_IntList, (y, [-1]))
    acc = _round_to_fp16_precision(graph, graph.call_function(aten.select.int, (partials, -1, 0)))
    for i in range(1, steps):
        part = graph.call_function(aten.select.int, (partials, -1, i))
        acc = _round_to_fp16_precision(graph, graph.call_function(aten.add.Tensor, (acc, part)))
    return acc


def _rewrite_last_dim_sums(gm: torch.fx.GraphModule, summed: Callable[..., torch.fx.Node], min_length: int = 2) -> int:
    """Replace every ``sum``/``mean`` over the last dim of at least ``min_length`` elements by
    ``summed(graph, src, shape)`` (a sum over the last dim, fp32), keeping mean, keepdim and dtype."""
    count = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (aten.sum.dim_IntList, aten.mean.dim):
            continue
        src = node.args[0]
        shape = _static_shape(src)
        out = node.meta.get("val")
        if shape is None or len(shape) < 1 or shape[-1] < min_length or not isinstance(out, torch.Tensor):
            continue
        if not src.meta["val"].is_floating_point() or _reduced_dims(node, len(shape)) != [len(shape) - 1]:
            continue
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        with graph.inserting_before(node):
            y = summed(graph, src, shape)
            if node.target is aten.mean.dim:
                y = graph.call_function(aten.div.Tensor, (y, float(shape[-1])))
            if keepdim:
                y = graph.call_function(aten.unsqueeze.default, (y, -1))
            y = graph.call_function(aten._to_copy.default, (y,), {"dtype": out.dtype})
        node.replace_all_uses_with(y)
        graph.erase_node(node)
        count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count


def _rewrite_fp16_accumulation(gm: torch.fx.GraphModule) -> int:
    """``sum``/``mean`` over the last dim accumulate in fp16 (see :func:`_fp16_sequential_sum`)."""
    return _rewrite_last_dim_sums(gm, _fp16_sequential_sum)


#: The planted split-K path switches on for reductions longer than this many elements ...
LONG_REDUCTION_THRESHOLD = 1024
#: ... and splits the row into chunks of this many elements (each chunk summed in fp32).
SPLIT_CHUNK = 256


def _bf16_workspace_sum(graph: torch.fx.Graph, src: torch.fx.Node, shape: tuple[int, ...]) -> torch.fx.Node:
    """Split-K sum over the last dim whose second stage uses a bf16 workspace: each chunk of
    ``SPLIT_CHUNK`` elements is summed in fp32 (inputs exact), each partial is stored at bf16
    precision and the partials are added in order with the running sum rounded to bf16 precision."""
    lead = list(shape[:-1])
    n = shape[-1]
    steps = -(-n // SPLIT_CHUNK)
    y = graph.call_function(aten._to_copy.default, (src,), {"dtype": torch.float32})
    if steps * SPLIT_CHUNK != n:
        y = graph.call_function(aten.constant_pad_nd.default, (y, [0, steps * SPLIT_CHUNK - n], 0.0))
    y = graph.call_function(aten.view.default, (y, [*lead, steps, SPLIT_CHUNK]))
    partials = graph.call_function(aten.sum.dim_IntList, (y, [-1]))
    acc = _round_to_bf16_precision(graph, graph.call_function(aten.select.int, (partials, -1, 0)))
    for i in range(1, steps):
        part = _round_to_bf16_precision(graph, graph.call_function(aten.select.int, (partials, -1, i)))
        acc = _round_to_bf16_precision(graph, graph.call_function(aten.add.Tensor, (acc, part)))
    return acc


def _rewrite_long_reduction(gm: torch.fx.GraphModule) -> int:
    """``sum``/``mean`` over a last dim longer than ``LONG_REDUCTION_THRESHOLD`` take the split-K
    path of :func:`_bf16_workspace_sum`; shorter reductions are left exactly as they were."""
    return _rewrite_last_dim_sums(gm, _bf16_workspace_sum, min_length=LONG_REDUCTION_THRESHOLD + 1)


#: Reductions whose results the planted bf16-scratch bug rounds (var_mean through its getitems).
_SCRATCH_REDUCTIONS = (aten.sum.dim_IntList, aten.mean.dim, aten.var.correction, aten.var_mean.correction)


def _reduction_results(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """Nodes holding a reduction's tensor result: the reduction itself, or the getitems of a
    tuple-valued one (var_mean)."""
    found = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target not in _SCRATCH_REDUCTIONS:
            continue
        if isinstance(node.meta.get("val"), torch.Tensor):
            found.append(node)
        else:
            found.extend(u for u in node.users if u.op == "call_function" and u.target is operator.getitem)
    return found


def _rewrite_bf16_scratch(gm: torch.fx.GraphModule) -> int:
    """Every fp32 or fp16 reduction result (sum, mean, var, var_mean) is rounded to bf16 precision
    before its consumers read it: the kernel parks it in a bf16 scratch buffer, against the graph's
    dtype. bf16 graphs' fp32 internals are hit as well; the graph's own dtypes are unchanged."""
    count = 0
    graph = gm.graph
    for node in _reduction_results(graph):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dtype not in (torch.float32, torch.float16):
            continue
        with graph.inserting_before(node.next):  # a fixed anchor keeps the new nodes in order
            x32 = graph.call_function(aten._to_copy.default, (node,), {"dtype": torch.float32})
            y = _round_to_bf16_precision(graph, x32)
            y = graph.call_function(aten._to_copy.default, (y,), {"dtype": val.dtype})
        node.replace_all_uses_with(y, delete_user_cb=lambda user: user is not x32)  # noqa: B023 - used during this call
        count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count


def _graph_fault_backend(rewrite: Callable[[torch.fx.GraphModule], int]) -> Callable[..., Callable[..., Any]]:
    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        traced = _aten_graph(gm, example_inputs)
        if rewrite(traced):
            return _inductor(traced, example_inputs)
        return _inductor(gm, example_inputs)  # nothing to damage: the healthy compile

    return backend


wrong_axis_backend = _graph_fault_backend(_rewrite_wrong_axis)
wrong_axis_backend.__doc__ = "Reductions over the last dim read their input along the wrong axis, then Inductor."
fp16_accumulation_backend = _graph_fault_backend(_rewrite_fp16_accumulation)
fp16_accumulation_backend.__doc__ = "sum/mean over the last dim accumulate in fp16, then Inductor."

long_reduction_backend = _graph_fault_backend(_rewrite_long_reduction)
long_reduction_backend.__doc__ = (
    "sum/mean over a last dim longer than LONG_REDUCTION_THRESHOLD use a bf16 split-K workspace, then Inductor."
)
bf16_scratch_backend = _graph_fault_backend(_rewrite_bf16_scratch)
bf16_scratch_backend.__doc__ = (
    "fp32/fp16 reduction results (sum, mean, var) rounded to bf16 precision before use, then Inductor."
)


def fallback_to_eager_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Claims to fuse but returns the graph's own forward: op by op, no generated code."""
    return gm.forward


# --- the catalogue and its registration ------------------------------------------------------

PLANTED_BUGS: dict[str, PlantedBug] = {
    bug.name: bug
    for bug in (
        PlantedBug(
            "planted_drop_channel",
            "fused kernel drops a channel",
            "last element of the last dim of every floating graph output set to 0",
            drop_channel_backend,
        ),
        PlantedBug(
            "planted_wrong_axis",
            "reduction over the wrong axis",
            "FX pass: sum/amax/mean/var_mean over the last dim of [..., A, B] read the input column-major "
            "(softmax and layer norm included, via their ATen decomposition)",
            wrong_axis_backend,
        ),
        PlantedBug(
            "planted_layout_swap",
            "NCHW/NHWC-style layout swap",
            "outputs of rank >= 2: the last two dims' data permuted (buffer read transposed), shape kept",
            layout_swap_backend,
        ),
        PlantedBug(
            "planted_fp16_accumulation",
            "fp16 accumulation in a long reduction",
            "FX pass: sum/mean over the last dim round their input to fp16 precision and accumulate sequentially "
            "(up to 64 steps) with the running sum rounded to fp16 precision after each add (softmax's "
            "denominator included)",
            fp16_accumulation_backend,
        ),
        PlantedBug(
            "planted_off_by_one_ulp",
            "off-by-one-ULP rounding change",
            "every nonzero finite output moved one ULP away from zero (nextafter)",
            off_by_one_ulp_backend,
        ),
        PlantedBug(
            "planted_fallback_to_eager",
            "fused path silently falls back to eager",
            "backend returns gm.forward without calling Inductor (no generated code)",
            fallback_to_eager_backend,
        ),
        PlantedBug(
            "planted_nondeterministic_reduction",
            "non-deterministic reduction order",
            "outputs of graphs with a reduction or matmul get -1/0/+1 ULP per element from a per-call RNG",
            nondeterministic_reduction_backend,
        ),
        PlantedBug(
            "planted_long_reduction_bf16",
            "precision lost only in long reductions (split-K workspace)",
            f"FX pass: sum/mean over a last dim longer than {LONG_REDUCTION_THRESHOLD} elements switch to a "
            f"split-K path: {SPLIT_CHUNK}-element chunks summed in fp32, then the partials stored and added in "
            "order at bf16 precision; shorter reductions compile unchanged",
            long_reduction_backend,
        ),
        PlantedBug(
            "planted_contiguous_only",
            "kernel correct only for contiguous inputs (stride bug)",
            "every dense non-contiguous floating input (a transposed or permuted view) is indexed with "
            "contiguous strides: its storage read in memory order as if it were row-major; contiguous "
            "inputs are unaffected",
            contiguous_only_backend,
        ),
        PlantedBug(
            "planted_bf16_scratch",
            "intermediate rounded against the graph's dtype (bf16 scratch buffer)",
            "FX pass: every fp32 or fp16 reduction result (sum, mean, var, var_mean: softmax's denominator, "
            "layer norm's mean and variance) is rounded to bf16 precision before its consumers read it",
            bf16_scratch_backend,
        ),
        PlantedBug(
            "planted_vector_tail",
            "wrong result only in the odd tail of a vectorized loop",
            f"outputs whose last dim is longer than {VECTOR_WIDTH} and not a multiple of it: the last "
            f"(length % {VECTOR_WIDTH}) elements of every row take the values {VECTOR_WIDTH} positions "
            "earlier (stale lanes of the previous full vector)",
            vector_tail_backend,
        ),
    )
}

_registered_lock = threading.Lock()


def register_planted_backends() -> list[str]:
    """Register every planted bug as a ``torch.compile`` backend (idempotent); returns the names."""
    from torch._dynamo import list_backends, register_backend

    with _registered_lock:
        known = set(list_backends(exclude_tags=()))
        for bug in PLANTED_BUGS.values():
            if bug.name not in known:
                register_backend(compiler_fn=bug.compiler, name=bug.name, tags=("planted_bug",))
    return list(PLANTED_BUGS)
