"""The ``diff`` rule and a remainder that rounding decides whole: where every quotient of a remainder
exceeds 1 / u (u: the unit roundoff of the program's narrowest float dtype), the last bits of its
computed divisor decide the result entirely, so a fused run whose divisor differs by one ULP (a
legitimate rounding) may return any value in the divisor's range. The rule's jittered fp64 runs then
measure that, as they measure any ill-conditioned output. A remainder of the program's own inputs,
which no rounding moves, is still judged, and so is one whose quotients fit the dtype's integers.

The first program is the opinfo campaign's finding opinfo-500260-int64 cut to its shape: 0.5 modulo
a computed value near 6e-24 (a quotient near 8e22), the compiler's result one ULP off upstream."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from precisionkit.repro import Case, Input, reproduces
from precisionkit.repro_rules import CHECKS

# a sum of values scaled by 1e-20 (about 1e-19) divides 0.5: quotients near 5e18, beyond fp64's exact integers (2^53)
TINY_DIVISOR = (
    "def graph(x):\n    s = (x.abs() * 1e-20).sum()\n    return torch.remainder(torch.ones_like(s) * 0.5, s)\n"
)
# the same sum divides 3.25 times itself: a quotient of 3.25, which one ULP does not move across a jump
SMALL_QUOTIENT = "def graph(x):\n    s = x.abs().sum()\n    return torch.remainder(s * 3.25, s)\n"
# the program's inputs themselves: x near 1e20 over y near 1, exact operands
INPUTS = "def graph(x, y):\n    return torch.remainder(x, y)\n"


class _Fault(TorchDispatchMode):
    """Runs the graph as eager does but for one aten op, whose result ``fix(args, out)`` replaces."""

    def __init__(self, name: str, fix: Any) -> None:
        super().__init__()
        self.name, self.fix = name, fix

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        return self.fix(args, out) if func._schema.name == self.name else out


def _sum_one_ulp_up(args: Any, out: torch.Tensor) -> torch.Tensor:
    """A sum one ULP above eager's: another order of its additions."""
    return torch.nextafter(out, torch.full_like(out, float("inf")))


def _remainder_by_formula(args: Any, out: torch.Tensor) -> torch.Tensor:
    """a - b * floor(a / b) in the operands' dtype: inexact where the quotient exceeds 1 / u."""
    a, b = args[0], args[1]
    return a - b * torch.floor(a / b)


FAULTS = {
    "pk_test_sum_one_ulp_up": ("aten::sum", _sum_one_ulp_up),
    "pk_test_remainder_by_formula": ("aten::remainder", _remainder_by_formula),
}


def _register() -> None:
    from torch._dynamo import list_backends, register_backend

    known = set(list_backends(exclude_tags=()))
    for backend_name, (op, fix) in FAULTS.items():
        if backend_name not in known:

            def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], op: str = op, fix: Any = fix) -> Any:
                def run(*args: Any) -> Any:
                    with _Fault(op, fix):
                        return gm(*args)

                return run

            register_backend(compiler_fn=backend, name=backend_name)


_register()

X = Input("x", (4, 5), "float64", 3)


def _case(source: str, backend: str, *inputs: Input) -> Case:
    return Case("mod", source, inputs or (X,), backend=backend, rule="diff")


def test_a_remainder_one_ulp_of_its_divisor_decides_is_not_judged() -> None:
    assert reproduces(_case(TINY_DIVISOR, "pk_test_sum_one_ulp_up")) == (
        False,
        "every output agrees with eager and fp64 (pk_test_sum_one_ulp_up)",
    )


def test_a_remainder_of_exact_operands_computed_wrong_is_still_caught() -> None:
    x, y = Input("x", (3, 7), "float64", 4, scale=1e20), Input("y", (3, 7), "float64", 5)
    hit, msg = reproduces(_case(INPUTS, "pk_test_remainder_by_formula", x, y))
    assert hit and msg.startswith("output 0: "), msg


def test_a_small_quotient_stays_a_jump_and_its_remainder_is_judged() -> None:
    scope: dict[str, Any] = {"torch": torch, "REDUCTION": 1}
    exec(CHECKS["diff"], scope)
    x = torch.tensor([[1.5, -2.0], [0.25, 3.0]], dtype=torch.float64)
    tiny: dict[str, Any] = {}
    exec(TINY_DIVISOR, scope | {"__name__": "tiny"}, tiny)
    small: dict[str, Any] = {}
    exec(SMALL_QUOTIENT, scope | {"__name__": "small"}, small)
    u = 2.0**-53
    assert [len(runs) for runs in scope["jittered"](tiny["graph"], [x], u)] == [3]
    assert [len(runs) for runs in scope["jittered"](small["graph"], [x], u)] == [0]
    # there one ULP up of the sum moves the remainder by about one ULP: within the rule's tolerance
    assert reproduces(_case(SMALL_QUOTIENT, "pk_test_sum_one_ulp_up"))[0] is False
