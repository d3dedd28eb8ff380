"""The planted bugs' graph faults: the Dynamo graph is traced to ATen (softmax / layer norm
decomposed into their reductions), an FX pass rewrites the reductions, and Inductor compiles the
rewritten graph (wrong reduction axis, fp16 accumulation, a bf16 split-K workspace switched on only
for long rows, reduction results parked in a bf16 scratch buffer). A graph with nothing to damage
compiles exactly as the healthy backend would.

The catalogue is :mod:`.planted_bugs`; the shared helpers are :mod:`.planted_faults`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch

from .planted_faults import REDUCTIONS, aten, aten_graph, healthy_compile, reduced_dims, static_shape


def _rewritten(gm: torch.fx.GraphModule, count: int) -> int:
    """After a pass that changed ``count`` nodes: check the graph and regenerate its code; ``count``."""
    if count:
        gm.graph.lint()
        gm.recompile()
    return count


def _rewrite_wrong_axis(gm: torch.fx.GraphModule) -> int:
    """Reductions over the last dim of an [..., A, B] input read it along the other axis: the
    input is walked column-major (transpose + reshape back to [..., A, B]) before reducing."""
    count = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in REDUCTIONS:
            continue
        src = node.args[0]
        shape = static_shape(src)
        if shape is None or len(shape) < 2 or shape[-1] < 2 or shape[-2] < 2:
            continue
        if reduced_dims(node, len(shape)) != [len(shape) - 1]:
            continue
        with graph.inserting_before(node):
            t = graph.call_function(aten.transpose.int, (src, -2, -1))
            c = graph.call_function(aten.clone.default, (t,), {"memory_format": torch.contiguous_format})
            walked = graph.call_function(aten.view.default, (c, list(shape)))
        node.replace_input_with(src, walked)
        count += 1
    return _rewritten(gm, count)


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
        shape = static_shape(src)
        out = node.meta.get("val")
        if shape is None or len(shape) < 1 or shape[-1] < min_length or not isinstance(out, torch.Tensor):
            continue
        if not src.meta["val"].is_floating_point() or reduced_dims(node, len(shape)) != [len(shape) - 1]:
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
    return _rewritten(gm, count)


def _rewrite_fp16_accumulation(gm: torch.fx.GraphModule) -> int:
    """``sum``/``mean`` over the last dim accumulate in fp16 (see :func:`_fp16_sequential_sum`)."""
    return _rewrite_last_dim_sums(gm, _fp16_sequential_sum)


#: The planted split-K path switches on for reductions longer than this many elements ...
LONG_REDUCTION_THRESHOLD = 1024
#: ... and splits the row into chunks of this many elements (each chunk summed in fp32).
SPLIT_CHUNK = 256


def _bf16_partials_sum(graph: torch.fx.Graph, src: torch.fx.Node, shape: tuple[int, ...], steps: int) -> torch.fx.Node:
    """Sum over the last dim in ``steps`` equal chunks (zero-padded), each summed in fp32 (inputs
    exact), each partial stored at bf16 precision and the partials added in order with the running
    sum rounded to bf16 precision."""
    lead = list(shape[:-1])
    n = shape[-1]
    chunk = -(-n // steps)
    y = graph.call_function(aten._to_copy.default, (src,), {"dtype": torch.float32})
    if chunk * steps != n:
        y = graph.call_function(aten.constant_pad_nd.default, (y, [0, chunk * steps - n], 0.0))
    y = graph.call_function(aten.view.default, (y, [*lead, steps, chunk]))
    partials = graph.call_function(aten.sum.dim_IntList, (y, [-1]))
    acc = _round_to_bf16_precision(graph, graph.call_function(aten.select.int, (partials, -1, 0)))
    for i in range(1, steps):
        part = _round_to_bf16_precision(graph, graph.call_function(aten.select.int, (partials, -1, i)))
        acc = _round_to_bf16_precision(graph, graph.call_function(aten.add.Tensor, (acc, part)))
    return acc


#: At most this many split-K partials (a longer row gets longer chunks): each partial is a few graph
#: nodes, and 2^21 terms in 256-element chunks would be 8192 of them, a graph Inductor compiles for hours.
MAX_SPLIT_STEPS = 64


def _bf16_workspace_sum(graph: torch.fx.Graph, src: torch.fx.Node, shape: tuple[int, ...]) -> torch.fx.Node:
    """Split-K sum over the last dim whose second stage uses a bf16 workspace: chunks of
    ``SPLIT_CHUNK`` elements (fewer, longer ones beyond ``MAX_SPLIT_STEPS`` chunks), see
    :func:`_bf16_partials_sum`."""
    return _bf16_partials_sum(graph, src, shape, min(-(-shape[-1] // SPLIT_CHUNK), MAX_SPLIT_STEPS))


def _rewrite_long_reduction(gm: torch.fx.GraphModule) -> int:
    """``sum``/``mean`` over a last dim longer than ``LONG_REDUCTION_THRESHOLD`` take the split-K
    path of :func:`_bf16_workspace_sum`; shorter reductions are left exactly as they were."""
    return _rewrite_last_dim_sums(gm, _bf16_workspace_sum, min_length=LONG_REDUCTION_THRESHOLD + 1)


#: The planted per-thread split switches on for reductions longer than this many elements (2^20):
#: longer than any row of B, C2's 16,384-term rows or D, so only C2's long reductions reach it ...
THREAD_SPLIT_THRESHOLD = 2**20
#: ... and splits the row into this many per-thread partials (the threads of a 48-core machine; with a
#: power-of-two count the partials of uniform data sit on bf16 values and the damage hides).
THREAD_PARTIALS = 48


def _bf16_thread_partials_sum(graph: torch.fx.Graph, src: torch.fx.Node, shape: tuple[int, ...]) -> torch.fx.Node:
    """Per-thread split of a long sum whose combine step uses a bf16 workspace: ``THREAD_PARTIALS``
    ranges, see :func:`_bf16_partials_sum`."""
    return _bf16_partials_sum(graph, src, shape, THREAD_PARTIALS)


def _rewrite_thread_split(gm: torch.fx.GraphModule) -> int:
    """``sum``/``mean`` over a last dim longer than ``THREAD_SPLIT_THRESHOLD`` take the per-thread
    split of :func:`_bf16_thread_partials_sum`; every shorter reduction is left exactly as it was."""
    return _rewrite_last_dim_sums(gm, _bf16_thread_partials_sum, min_length=THREAD_SPLIT_THRESHOLD + 1)


#: Ops between a score tensor and its softmax that keep its values (dtype casts of the decomposition).
_PASS_THROUGH = (aten._to_copy.default, aten.clone.default)


def _feeds_softmax(node: torch.fx.Node) -> bool:
    """Whether ``node`` is the input of a decomposed softmax (its amax), directly or through a cast."""
    for user in node.users:
        if user.op != "call_function":
            continue
        if user.target is aten.amax.default:
            return True
        if user.target in _PASS_THROUGH and _feeds_softmax(user):
            return True
    return False


def _rewrite_dropped_mask(gm: torch.fx.GraphModule) -> int:
    """An additive attention mask is dropped: ``scores + mask`` that feeds a softmax becomes
    ``scores`` (as an attention substitution called without its mask would compute), where ``mask``
    is a graph input broadcast over the scores. Every other add is left as it was."""
    count = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.add.Tensor or len(node.args) < 2:
            continue
        scores, mask = node.args[0], node.args[1]
        if not isinstance(scores, torch.fx.Node) or not isinstance(mask, torch.fx.Node) or mask.op != "placeholder":
            continue
        s_shape, m_shape = static_shape(scores), static_shape(mask)
        if s_shape is None or m_shape is None or m_shape == s_shape or not _feeds_softmax(node):
            continue
        node.replace_all_uses_with(scores)
        graph.erase_node(node)
        count += 1
    return _rewritten(gm, count)


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
    return _rewritten(gm, count)


def _graph_fault_backend(rewrite: Callable[[torch.fx.GraphModule], int]) -> Callable[..., Callable[..., Any]]:
    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        traced = aten_graph(gm, example_inputs)
        if rewrite(traced):
            return healthy_compile(traced, example_inputs)
        return healthy_compile(gm, example_inputs)  # nothing to damage: the healthy compile

    return backend


wrong_axis_backend = _graph_fault_backend(_rewrite_wrong_axis)
wrong_axis_backend.__doc__ = "Reductions over the last dim read their input along the wrong axis, then Inductor."
fp16_accumulation_backend = _graph_fault_backend(_rewrite_fp16_accumulation)
fp16_accumulation_backend.__doc__ = "sum/mean over the last dim accumulate in fp16, then Inductor."

long_reduction_backend = _graph_fault_backend(_rewrite_long_reduction)
long_reduction_backend.__doc__ = (
    "sum/mean over a last dim longer than LONG_REDUCTION_THRESHOLD use a bf16 split-K workspace, then Inductor."
)
thread_split_backend = _graph_fault_backend(_rewrite_thread_split)
thread_split_backend.__doc__ = (
    "sum/mean over a last dim longer than THREAD_SPLIT_THRESHOLD combine per-thread partials in bf16, then Inductor."
)
dropped_mask_backend = _graph_fault_backend(_rewrite_dropped_mask)
dropped_mask_backend.__doc__ = "An additive mask broadcast over a softmax's scores is dropped, then Inductor."
bf16_scratch_backend = _graph_fault_backend(_rewrite_bf16_scratch)
bf16_scratch_backend.__doc__ = (
    "fp32/fp16 reduction results (sum, mean, var) rounded to bf16 precision before use, then Inductor."
)
