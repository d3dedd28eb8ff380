"""The ``diff`` rule and an index of tied NaNs: where a max pool's window, or an argmax's row, holds
two or more NaNs, which of them the index names is unspecified (eager's CPU pool names the last,
Inductor's kernel the first), so an output that follows that choice is not judged. An index of a NaN
alone in its window, or of a finite maximum, is still judged: a compiler that gets it wrong is caught.

The first program is the opinfo campaign's false alarm opinfo-500087-int64 cut to its last op:
adaptive_max_pool3d over windows of NaN only, its index returned."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from precisionkit.repro import Case, Input, reproduces
from precisionkit.repro_rules import CHECKS

NAN = float("nan")

# channel 0 is NaN throughout (20 tied NaNs), channel 1 holds one NaN at flat index 7, channel 2 none
POOL = (
    "def graph(x):\n"
    "    x = x.clone()\n"
    "    x[0] = float('nan')\n"
    "    x[1, 0, 1, 2] = float('nan')\n"
    "    values, index = F.adaptive_max_pool3d(x, (1, 1, 1), True)\n"
    "    return values, index, index.to(torch.float32) * 0.5\n"
)
# row 0 is NaN throughout, row 1 holds one NaN at index 3, row 2 none
ARGMAX = (
    "def graph(x):\n"
    "    x = x.clone()\n"
    "    x[0] = float('nan')\n"
    "    x[1, 3] = float('nan')\n"
    "    return torch.argmax(x, dim=-1), torch.max(x, dim=-1).indices\n"
)


class _IndexFault(TorchDispatchMode):
    """Replaces the index that aten's adaptive_max_pool3d (output size 1), argmax and max.dim return
    with ``pick(x, values, index)``: a kernel's own choice."""

    def __init__(self, pick: Any) -> None:
        super().__init__()
        self.pick = pick

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func._schema.name.split("::")[-1]
        x = args[0]
        if name == "adaptive_max_pool3d":
            flat = x.flatten(-3)
            return out[0], self.pick(flat, out[0].flatten(-3), out[1].flatten(-3)).reshape(out[1].shape)
        if name == "argmax" or (name == "max" and func._overloadname == "dim"):
            index = (out if name == "argmax" else out[1]).unsqueeze(-1)
            new = self.pick(x, x.gather(-1, index), index).squeeze(-1)
            return new if name == "argmax" else (out[0], new)
        return out


def _first_nan(x: torch.Tensor, values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Inductor's choice: the first NaN of the row (eager's pool names the last)."""
    first = x.isnan().to(torch.int8).argmax(-1, keepdim=True)
    return torch.where(values.isnan(), first, index)


def _last_nan(x: torch.Tensor, values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The last NaN of the row (eager's argmax names the first)."""
    n = x.shape[-1]
    last = n - 1 - x.isnan().to(torch.int8).flip(-1).argmax(-1, keepdim=True)
    return torch.where(values.isnan(), last, index)


def _nan_blind(x: torch.Tensor, values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """A kernel that skips NaN: the index of the finite maximum, wherever the row has one (a real
    defect where a row holds one NaN: the maximum is that NaN)."""
    return torch.nan_to_num(x, nan=-float("inf")).argmax(-1, keepdim=True)


BACKENDS = {"pk_test_first_nan": _first_nan, "pk_test_last_nan": _last_nan, "pk_test_nan_blind": _nan_blind}


def _register() -> None:
    from torch._dynamo import list_backends, register_backend

    known = set(list_backends(exclude_tags=()))
    for name, pick in BACKENDS.items():
        if name not in known:

            def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], pick: Any = pick) -> Any:
                def run(*args: Any) -> Any:
                    with _IndexFault(pick):
                        return gm(*args)

                return run

            register_backend(compiler_fn=backend, name=name)


_register()


def _case(source: str, shape: tuple[int, ...], backend: str) -> Case:
    return Case("ties", source, (Input("x", shape, "float32", 5),), backend=backend, rule="diff")


def test_a_pool_index_among_tied_nans_is_not_judged() -> None:
    # fused names NaN 0 of channel 0, eager NaN 19: the index and the float made from it both follow it
    assert reproduces(_case(POOL, (3, 2, 2, 5), "pk_test_first_nan")) == (
        False,
        "every output agrees with eager and fp64 (pk_test_first_nan)",
    )


def test_an_argmax_among_tied_nans_is_not_judged() -> None:
    assert reproduces(_case(ARGMAX, (3, 6), "pk_test_last_nan")) == (
        False,
        "every output agrees with eager and fp64 (pk_test_last_nan)",
    )


def test_an_index_of_a_lone_nan_or_a_finite_maximum_is_still_judged() -> None:
    # channel 1's maximum is its one NaN (index 7); a NaN-blind kernel names the finite maximum
    hit, msg = reproduces(_case(POOL, (3, 2, 2, 5), "pk_test_nan_blind"))
    assert hit and msg.startswith(
        "output 1: 1 of 3 elements wrong; at (1, 0, 0, 0): eager 7, fused (pk_test_nan_blind) "
    )
    hit, msg = reproduces(_case(ARGMAX, (3, 6), "pk_test_nan_blind"))
    assert hit and msg.startswith("output 0: 1 of 3 elements wrong; at (1,): eager 3, fused (pk_test_nan_blind) ")


def _rule() -> dict[str, Any]:
    scope: dict[str, Any] = {"torch": torch, "REDUCTION": 1}
    exec(CHECKS["diff"], scope)
    return scope


def test_the_moved_run_marks_only_what_follows_a_tied_nan() -> None:
    rule = _rule()
    x = torch.tensor([[NAN, 1.0, NAN], [2.0, NAN, 0.0], [1.0, 3.0, 2.0]])

    def graph(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        index = torch.argmax(x, dim=-1)
        return index, torch.max(x, dim=1, keepdim=True).indices * 2.0, torch.argmin(x)

    eager = list(graph(x))
    ties = rule["nan_ties"](graph, lambda: [x.clone()], eager)
    assert [m.tolist() for m in ties] == [[True, False, False], [[True], [False], [False]], True]
    finite = torch.tensor([[0.0, 1.0], [1.0, 1.0]])
    assert rule["nan_ties"](graph, lambda: [finite.clone()], list(graph(finite))) is None


def test_wrong_leaves_out_the_tied_elements_in_value_and_class() -> None:
    rule = _rule()
    tied = torch.tensor([True, False])
    assert rule["wrong"](torch.tensor([19, 7]), torch.tensor([0, 5]), torch.tensor([19, 7]), tied=tied).tolist() == [
        False,
        True,
    ]
    eager, fused, ref = (
        torch.tensor([9.5, 3.5]),
        torch.tensor([0.0, 2.5]),
        torch.tensor([9.5, 3.5], dtype=torch.float64),
    )
    assert rule["wrong"](eager, fused, ref, tied=tied).tolist() == [False, True]
