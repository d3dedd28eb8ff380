"""How the IREE adapter hands iree-turbine a backward graph (:mod:`precisionkit.backends.iree_training`):
under the fake mode of its example inputs, without its ``None`` results, with an embedding's backward
decomposed. The first test runs the graphs in torch and needs no IREE; the others compile with IREE."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from precisionkit.backends import adapter_for_backend
from precisionkit.backends.iree_training import backward_compiler, backward_decompositions

NO_IREE = importlib.util.find_spec("iree.turbine") is None if importlib.util.find_spec("iree") else True
needs_iree = pytest.mark.skipif(NO_IREE, reason="IREE is not installed: pip install 'fusion-precision[iree]'")


def test_the_backward_graph_arrives_without_none_results_under_its_inputs_fake_mode():
    seen: list[dict[str, Any]] = []

    def in_torch(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        (results,) = gm.graph.output_node().args
        seen.append(
            {
                "results": len(results),
                "none": sum(r is None for r in results),
                "fake_mode": any(isinstance(m, FakeTensorMode) for m in _get_current_dispatch_mode_stack()),
                # a tensor made while compiling is fake, as in the forward's compile (IREE's decompositions make one)
                "made": type(torch.zeros(())).__name__,
            }
        )
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 4)
    x, target = torch.randn(5, 3), torch.tensor([0, 3, 1, 1, 2])
    backend = aot_autograd(
        fw_compiler=lambda gm, _: make_boxed_func(gm.forward), bw_compiler=backward_compiler(in_torch)
    )
    torch.compile(lambda a, t: F.cross_entropy(lin(a), t), backend=backend)(x, target).backward()
    fused = (lin.weight.grad.clone(), lin.bias.grad.clone())
    lin.zero_grad()
    F.cross_entropy(lin(x), target).backward()
    # two gradients (weight and bias); the inputs' None results are put back by the wrapper, not compiled
    assert seen == [{"results": 2, "none": 0, "fake_mode": True, "made": "FakeTensor"}]
    torch.testing.assert_close(fused, (lin.weight.grad, lin.bias.grad))


def test_an_embeddings_backward_is_decomposed_down_to_index_put():
    aten = torch.ops.aten
    table = backward_decompositions()
    assert aten.embedding_dense_backward.default in table
    assert aten._unsafe_masked_index_put_accumulate.default in table
    assert aten.embedding.default not in table and aten.index_put.default not in table  # forward ops untouched


@needs_iree
def test_iree_compiles_the_backward_of_cross_entropy_over_an_embedding():
    """iree-turbine's own ``turbine_cpu`` fails on each part of this backward (see the module docstring
    of :mod:`precisionkit.backends.iree_training`); through the adapter with its training options IREE compiles
    it, and the backward program gets the options' iree-compile flags too."""
    adapter = adapter_for_backend("iree")
    torch._dynamo.reset()
    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16)
    ids, target = torch.tensor([[1, 2, 2, 7]]), torch.tensor([[2, 2, 7, 1]])

    def loss(i: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(head(emb(i)).flatten(0, 1), t.flatten())

    with adapter.capture() as captured:
        torch.compile(loss, backend=adapter.compiler(adapter.training_options))(ids, target).backward()
    fused = [p.grad.clone() for p in (emb.weight, head.weight, head.bias)]
    for p in (emb.weight, head.weight, head.bias):
        p.grad = None
    loss(ids, target).backward()
    assert captured.partitions == 2  # the forward program and the backward program
    assert captured.units and captured.fallback_ops == []
    torch.testing.assert_close(fused, [emb.weight.grad, head.weight.grad, head.bias.grad])


@needs_iree
def test_without_its_training_options_iree_compiles_through_turbine_cpu_and_says_why_it_needs_them():
    from precisionkit.backends import wrapped_backend

    adapter = adapter_for_backend("iree")
    assert dict(adapter.training_options) == {"compile_backward": True}
    with pytest.raises(ValueError, match="'compile_backward' is true or false, got 'yes'"):
        adapter.compiler({"compile_backward": "yes"})
    # the registered backend, so a wrapper of it (the planted-bug matrix) serves the adapter's forward compiles
    seen: list[int] = []

    def counting(original: Any, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        seen.append(len(example_inputs))
        return original(gm, example_inputs)

    with wrapped_backend("iree", counting):
        torch.compile(lambda t: torch.tanh(t * 2 + 1), backend=adapter.compiler({}))(torch.randn(8))
    assert seen == [1]
