"""fp64 re-execution of a graph, on the device its inputs are on: the judge that eager and fused
results are compared against."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch


def _upcast(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        # Always a copy: .to() returns the caller's own tensor when nothing changes (an fp64 or
        # integer input already on ``device``), and a graph that writes in place would then modify it.
        dtype = torch.float64 if value.is_floating_point() else value.dtype
        return value.detach().to(device=device, dtype=dtype, copy=True)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(_upcast(v, device) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_upcast(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _upcast(v, device) for k, v in value.items()}
    return value


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _inputs_device(graph: Any, args: tuple[Any, ...]) -> torch.device:
    """The one device the inputs live on (a module's parameters and buffers where no input is a
    tensor; the CPU where neither is)."""
    devices = {t.device for t in _tensors(args)}
    if not devices and isinstance(graph, torch.nn.Module):
        devices = {t.device for t in (*graph.parameters(), *graph.buffers())}
    if len(devices) > 1:
        raise ValueError(
            f"fp64_reference: the inputs are on several devices ({', '.join(sorted(map(str, devices)))}); "
            "pass device= to say where the reference runs"
        )
    return devices.pop() if devices else torch.device("cpu")


@contextmanager
def _on_device(device: torch.device) -> Iterator[None]:
    """Autocast disabled on the CPU and on ``device``'s type (where torch has autocast for it), and
    factory calls without ``device=`` building on ``device`` (on the CPU, torch's default stays)."""
    with ExitStack() as stack:
        for kind in dict.fromkeys(("cpu", device.type)):
            if torch.amp.is_autocast_available(kind):
                stack.enter_context(torch.autocast(kind, enabled=False))
        if device.type != "cpu":
            stack.enter_context(device)
        yield


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


def fp64_reference(graph: Callable[..., Any], inputs: Any, device: torch.device | str | None = None) -> Any:
    """Re-execute ``graph`` in float64 on ``device`` and return its outputs.

    ``graph`` is a function, ``nn.Module`` or fx ``GraphModule``; ``inputs`` is one tensor or a
    tuple/list of positional arguments. ``device`` defaults to the one device the inputs are on
    (their values are not moved: CPU inputs run on the CPU, CUDA inputs on their GPU); inputs on
    several devices need it named. Floating inputs are upcast exactly (every fp16/bf16/fp32 value
    is representable in fp64); non-floating inputs keep their dtype. Every input is copied, and
    modules are deep-copied and the copy's parameters and buffers upcast, so neither the caller's
    module nor its inputs change. Runs without autograd and with autocast disabled (on the CPU and
    on ``device``); floating tensors the graph builds without ``dtype=`` are float64, and those built
    without ``device=`` are on ``device``. Returns the graph's output structure (tensor / tuple /
    list / dict) holding float64 tensors on ``device``; raises ``TypeError`` naming the output when
    a floating output is not float64 (the graph hard-casts internally).

    >>> import torch
    >>> fp64_reference(lambda x: x * 3, torch.tensor([0.1], dtype=torch.float16)).dtype
    torch.float64
    """
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    where = _inputs_device(graph, args) if device is None else torch.device(device)
    args = _upcast(args, where)
    if isinstance(graph, torch.nn.Module):
        graph = copy.deepcopy(graph).to(device=where, dtype=torch.float64)
    with torch.no_grad(), _on_device(where), _float64_defaults():
        out = graph(*args)
    _check_outputs(out, "output")
    return out
