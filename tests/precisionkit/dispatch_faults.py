"""Fault backends for rule tests: a ``torch.compile`` backend that runs the graph eagerly, with every aten
result that a test's predicate picks replaced by the fault's value (another order of a sum's additions,
one ULP off, a wrong kernel)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: (func, its result) -> whether the fault replaces that result
Picks = Callable[[Any, Any], bool]


class _Fault(TorchDispatchMode):
    def __init__(self, picks: Picks, move: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.picks, self.move = picks, move

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        return self.move(out) if self.picks(func, out) else out


def register_faults(faults: Mapping[str, Callable[[torch.Tensor], torch.Tensor]], picks: Picks) -> None:
    """Register each ``name -> move`` of ``faults`` as a backend (once per process)."""
    from torch._dynamo import list_backends, register_backend

    known = set(list_backends(exclude_tags=()))
    for name, move in faults.items():
        if name in known:
            continue

        def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], move: Any = move) -> Any:
            def run(*args: Any) -> Any:
                with _Fault(picks, move):
                    return gm(*args)

            return run

        register_backend(compiler_fn=backend, name=name)
