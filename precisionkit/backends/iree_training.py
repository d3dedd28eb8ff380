"""IREE's backward graph, compiled as iree-turbine compiles its forward graph.

iree-turbine's ``turbine_cpu`` is ``aot_autograd(fw_compiler=_backend)``: AOTAutograd hands the same
``_backend`` the backward graph too, but in two ways it does not expect (iree-turbine 3.9, torch 2.13):

- AOTAutograd compiles a backward graph lazily, at the first ``backward()``, with fake example inputs
  but outside the fake mode the forward is compiled in. ``_backend`` retraces the graph with ``make_fx``
  to apply its decompositions; a decomposition that makes a tensor (``nll_loss_backward``'s scalar 0)
  then makes a real one beside the fake inputs, and the fake mode refuses the mix
  (``AssertionError: Please convert all Tensors to FakeTensors first``).
- A backward graph returns ``None`` as the gradient of each input that needs none (token ids, say);
  the MLIR importer gives a ``None`` result the type ``!torch.none``, which IREE's compiler rejects
  (``unhandled torch type: '!torch.none'``).

:func:`backward_compiler` hands ``_backend`` the backward graph under the fake mode of its own example
inputs, as the forward's compile runs, and without its ``None`` results, which it puts back in their
places after each call. IREE compiles every gradient the graph computes; nothing runs in torch.
:func:`training_backend` composes it as ``turbine_cpu`` is composed, with :func:`backward_decompositions`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

Compiled = Callable[[list[Any]], Any]


def backward_decompositions() -> dict[Any, Callable[..., Any]]:
    """The decompositions AOTAutograd applies while it traces a training step for IREE: an embedding's
    backward, as torch's table decomposes it (``turbine_cpu``'s own pass does too), down to the ``index_put``
    that IREE lowers (torch's table turns it into ``_unsafe_masked_index_put_accumulate``, which IREE has no
    lowering for: ``failed to legalize operation 'torch.operator'``). Neither operation is in a forward graph."""
    from torch._decomp import get_decompositions

    aten = torch.ops.aten
    masked_put = aten._unsafe_masked_index_put_accumulate  # noqa: SLF001 - an ATen operation, named so by torch
    return get_decompositions([aten.embedding_dense_backward, masked_put])


def _tensor_results(values: Any) -> list[Any]:
    """The results of an iree-turbine program as a list (it returns a lone result unwrapped)."""
    if values is None:
        return []
    return [values] if isinstance(values, torch.Tensor) else list(values)


def backward_compiler(
    compile_graph: Callable[[torch.fx.GraphModule, list[Any]], Compiled],
) -> Callable[[torch.fx.GraphModule, list[Any]], Compiled]:
    """An AOTAutograd ``bw_compiler`` that compiles the backward graph with ``compile_graph`` (iree-turbine's
    ``_backend``, a boxed compiler) as described in the module docstring; the compiled function is boxed."""
    from torch._guards import detect_fake_mode

    def compile_backward(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Compiled:
        output = gm.graph.output_node()
        results = list(output.args[0]) if isinstance(output.args[0], tuple | list) else [output.args[0]]
        kept = [i for i, result in enumerate(results) if result is not None]
        if len(kept) < len(results):
            output.args = (tuple(results[i] for i in kept),)
            gm.recompile()
        if not kept:  # no gradient to compute: nothing for IREE to compile

            def no_gradients(args: list[Any]) -> list[Any]:
                args.clear()
                return [None] * len(results)

            setattr(no_gradients, "_boxed_call", True)  # noqa: B010 - the attribute AOTAutograd reads
            return no_gradients
        fake_mode = detect_fake_mode(example_inputs)
        with fake_mode if fake_mode is not None else contextlib.nullcontext():
            compiled = compile_graph(gm, example_inputs)

        def run(args: list[Any]) -> list[Any]:
            values = _tensor_results(compiled(args))
            if len(values) != len(kept):
                raise RuntimeError(f"IREE's backward program returned {len(values)} results, expected {len(kept)}")
            gradients: list[Any] = [None] * len(results)
            for index, value in zip(kept, values, strict=True):
                gradients[index] = value
            return gradients

        setattr(run, "_boxed_call", True)  # noqa: B010 - the attribute AOTAutograd reads
        return run

    return compile_backward


def training_backend(
    compile_graph: Callable[[torch.fx.GraphModule, list[Any]], Compiled],
    around: Callable[[Callable[[torch.fx.GraphModule, list[Any]], Any]], Callable[..., Any]],
) -> Callable[..., Any]:
    """``turbine_cpu``'s composition, ``aot_autograd(fw_compiler=compile_graph)``, with the backward compiled by
    :func:`backward_compiler` and an embedding's backward decomposed (:func:`backward_decompositions`, before
    ``turbine_cpu``'s own decompositions turn it into an operation IREE cannot lower). ``around`` wraps each of
    the two compilers (the adapter's flags), so a backward compiled lazily at ``backward()`` gets them too."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(
        fw_compiler=around(compile_graph),
        bw_compiler=around(backward_compiler(compile_graph)),
        decompositions=backward_decompositions(),
    )
