"""fp64 re-execution of a graph: the judge that eager and fused results are compared against."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch


def _upcast(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        # Always a copy: .to()/.cpu() return the caller's own tensor when nothing changes (an
        # fp64 or integer CPU input), and a graph that writes in place would then modify it.
        dtype = torch.float64 if value.is_floating_point() else value.dtype
        return value.detach().to(device="cpu", dtype=dtype, copy=True)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(_upcast(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_upcast(v) for v in value)
    if isinstance(value, dict):
        return {k: _upcast(v) for k, v in value.items()}
    return value


def _check_outputs(value: Any, path: str) -> None:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.dtype != torch.float64:
            raise TypeError(
                f"fp64_reference: output {path} is {value.dtype}, not torch.float64; the graph "
                "casts to a fixed dtype internally, so it cannot serve as an fp64 reference"
            )
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_outputs(v, f"{path}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_outputs(v, f"{path}[{k!r}]")


@contextmanager
def _float64_defaults() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # factory calls without dtype= build fp64 tensors
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def fp64_reference(graph: Callable[..., Any], inputs: Any) -> Any:
    """Re-execute ``graph`` on the CPU in float64 and return its outputs.

    ``graph`` is a function, ``nn.Module`` or fx ``GraphModule``; ``inputs`` is one tensor or a
    tuple/list of positional arguments. Floating inputs are upcast exactly (every fp16/bf16/fp32
    value is representable in fp64); non-floating inputs keep their dtype. Modules are deep-copied
    and the copy's parameters and buffers upcast, so neither the caller's module nor its inputs
    change. Runs without autograd and with autocast disabled. Returns the graph's output
    structure (tensor / tuple / list / dict) holding float64 tensors; raises ``TypeError`` naming
    the output when a floating output is not float64 (the graph hard-casts internally).

    >>> import torch
    >>> fp64_reference(lambda x: x * 3, torch.tensor([0.1], dtype=torch.float16)).dtype
    torch.float64
    """
    args = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    args = _upcast(tuple(args))
    if isinstance(graph, torch.nn.Module):
        graph = copy.deepcopy(graph).to(device="cpu", dtype=torch.float64)
    with torch.no_grad(), torch.autocast("cpu", enabled=False), _float64_defaults():
        out = graph(*args)
    _check_outputs(out, "output")
    return out
