"""Planted bugs: deliberately faulty ``torch.compile`` backends for mutation testing of the harness.

Each backend wraps Inductor and injects one realistic *silent* numerical fault, so the fused path
still compiles and still shows generated kernels (fusion evidence stays plausible) while its
numbers are wrong. Running the experiments with ``settings.backend = <bug name>`` must turn at
least one asset check red; :mod:`pipeline.assets.regression` measures that (``planted_bug_matrix``).

Faults come in two kinds:

* output faults: Inductor compiles the graph unchanged and the wrapper damages what the compiled
  code returns (dropped channel, layout swap, one-ULP rounding change, per-call perturbation);
* graph faults: the Dynamo graph is traced to ATen (softmax / layer norm decomposed into their
  reductions), an FX pass rewrites the reductions, and Inductor compiles the rewritten graph
  (wrong reduction axis, fp16 accumulation).

``planted_fallback_to_eager`` is the exception: it never calls Inductor, so precisionkit's
``FusedFunction`` raises ``FusionError`` (no generated code) instead of returning numbers.

Call :func:`register_planted_backends` (idempotent) before looking a bug up by name.
"""

from __future__ import annotations

import itertools
import random
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

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

    return compile_fx(gm, list(example_inputs))


def _call(compiled: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    # compile_fx's result takes positional arguments (its copied ``_boxed_call`` attribute notwithstanding).
    return compiled(*args)


def _is_float_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0


def _map_outputs(outs: Any, transform: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(outs, (list, tuple)):
        return type(outs)(transform(o) if _is_float_tensor(o) else o for o in outs)
    return transform(outs) if _is_float_tensor(outs) else outs


def _wrap_outputs(compiled: Callable[..., Any], transform: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
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
    return make_fx(gm, decomposition_table=table, tracing_mode="real")(*example_inputs)


def _has_node(gm: torch.fx.GraphModule, targets: set[Any]) -> bool:
    return any(n.op == "call_function" and n.target in targets for n in gm.graph.nodes)


def _reduced_dims(node: torch.fx.Node, rank: int) -> list[int] | None:
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None:
        return None
    dims = [dims] if isinstance(dims, int) else list(dims)
    return sorted(d % rank for d in dims)


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


def _round_to_fp16_precision(graph: torch.fx.Graph, x: torch.fx.Node) -> torch.fx.Node:
    """fp32 -> nearest value with fp16's 10-bit mantissa (ties to even), by integer bit arithmetic.

    Inductor elides an fp32 -> fp16 -> fp32 cast pair unless ``emulate_precision_casts`` is set,
    so a cast would not round; the bit form cannot be elided. (fp32's exponent range is kept.)"""
    bits = graph.call_function(aten.view.dtype, (x, torch.int32))
    odd = graph.call_function(aten.bitwise_and.Scalar, (graph.call_function(aten.bitwise_right_shift.Tensor_Scalar, (bits, 13)), 1))
    bumped = graph.call_function(aten.add.Tensor, (graph.call_function(aten.add.Tensor, (bits, 0x0FFF)), odd))
    rounded = graph.call_function(aten.bitwise_and.Scalar, (bumped, -(1 << 13)))
    return graph.call_function(aten.view.dtype, (rounded, torch.float32))


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


def _rewrite_fp16_accumulation(gm: torch.fx.GraphModule) -> int:
    """``sum``/``mean`` over the last dim accumulate in fp16 (see :func:`_fp16_sequential_sum`)."""
    count = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (aten.sum.dim_IntList, aten.mean.dim):
            continue
        src = node.args[0]
        shape = _static_shape(src)
        out = node.meta.get("val")
        if shape is None or len(shape) < 1 or shape[-1] < 2 or not isinstance(out, torch.Tensor):
            continue
        if not src.meta["val"].is_floating_point() or _reduced_dims(node, len(shape)) != [len(shape) - 1]:
            continue
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        with graph.inserting_before(node):
            y = _fp16_sequential_sum(graph, src, shape)
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


def fallback_to_eager_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Claims to fuse but returns the graph's own forward: op by op, no generated code."""
    return gm.forward


# --- the catalogue and its registration ------------------------------------------------------

PLANTED_BUGS: dict[str, PlantedBug] = {
    bug.name: bug
    for bug in (
        PlantedBug("planted_drop_channel", "fused kernel drops a channel",
                   "last element of the last dim of every floating graph output set to 0", drop_channel_backend),
        PlantedBug("planted_wrong_axis", "reduction over the wrong axis",
                   "FX pass: sum/amax/mean/var_mean over the last dim of [..., A, B] read the input column-major "
                   "(softmax and layer norm included, via their ATen decomposition)", wrong_axis_backend),
        PlantedBug("planted_layout_swap", "NCHW/NHWC-style layout swap",
                   "outputs of rank >= 2: the last two dims' data permuted (buffer read transposed), shape kept",
                   layout_swap_backend),
        PlantedBug("planted_fp16_accumulation", "fp16 accumulation in a long reduction",
                   "FX pass: sum/mean over the last dim round their input to fp16 precision and accumulate sequentially "
                   "(up to 64 steps) with the running sum rounded to fp16 precision after each add (softmax's "
                   "denominator included)", fp16_accumulation_backend),
        PlantedBug("planted_off_by_one_ulp", "off-by-one-ULP rounding change",
                   "every nonzero finite output moved one ULP away from zero (nextafter)", off_by_one_ulp_backend),
        PlantedBug("planted_fallback_to_eager", "fused path silently falls back to eager",
                   "backend returns gm.forward without calling Inductor (no generated code)", fallback_to_eager_backend),
        PlantedBug("planted_nondeterministic_reduction", "non-deterministic reduction order",
                   "outputs of graphs with a reduction or matmul get -1/0/+1 ULP per element from a per-call RNG",
                   nondeterministic_reduction_backend),
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
