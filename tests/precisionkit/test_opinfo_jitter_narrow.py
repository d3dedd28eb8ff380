"""The ``diff`` rule's jittered runs and a program's own dtypes below fp64: the reference keeps a
``.float()`` or a ``dtype=torch.float32`` the program writes, so that part runs in fp32 there too,
and it is moved by a rounding's worth as the fp64 parts are. A variance of 125 equal fp32 values is 0 in eager, and about 3e-16 when
the mean's sum is one ULP off (another order of its additions): rounding, not a defect. A mean that is
1 % off is still caught.

The program is the opinfo campaign's false alarm opinfo-500629-bool cut to its last op (masked.var of
125 copies of -0.3, written out)."""

from __future__ import annotations

from typing import Any

import torch
from dispatch_faults import register_faults

from precisionkit.repro import Case, Input, reproduces
from precisionkit.repro_rules import CHECKS

VARIANCE = (
    "def graph(x):\n"
    "    v = torch.full((125,), -0.3, dtype=torch.float32) + (x[:1] * 0.0).float()\n"
    "    m = v.sum() / 125\n"
    "    return ((v - m) * (v - m)).sum() / 125\n"
)


FAULTS = {
    "pk_test_fp32_sum_one_ulp": lambda t: torch.nextafter(t, torch.full_like(t, float("inf"))),
    "pk_test_fp32_sum_one_percent": lambda t: t * 1.01,
}
# every aten sum of a nonzero fp32 result: another order of its additions, or a wrong kernel
register_faults(
    FAULTS,
    lambda func, out: func._schema.name == "aten::sum" and out.dtype == torch.float32 and bool((out != 0).all()),
)


def _case(backend: str) -> Case:
    return Case("var", VARIANCE, (Input("x", (3,), "float64", 2),), backend=backend, rule="diff")


def test_a_variance_of_equal_fp32_values_one_ulp_off_is_not_judged() -> None:
    assert reproduces(_case("pk_test_fp32_sum_one_ulp")) == (
        False,
        "every output agrees with eager and fp64 (pk_test_fp32_sum_one_ulp)",
    )


def test_a_variance_whose_mean_is_one_percent_off_is_still_caught() -> None:
    hit, msg = reproduces(_case("pk_test_fp32_sum_one_percent"))
    assert hit and msg.startswith("output 0: 1 of 1 elements wrong; at (): eager 0.0, "), msg


def test_the_narrow_parts_move_unless_that_makes_a_run_jump() -> None:
    scope: dict[str, Any] = {"torch": torch, "REDUCTION": 1}
    exec(CHECKS["diff"], scope)
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)

    def variance(x: torch.Tensor) -> torch.Tensor:
        v = torch.full((125,), -0.3, dtype=torch.float32) + (x[:1] * 0.0).float()
        m = v.sum() / 125
        return ((v - m) * (v - m)).sum() / 125

    def floored(x: torch.Tensor) -> torch.Tensor:  # a floor of a moved fp32 value: those runs jump
        return torch.floor(x.float() * 10.0).double() + x

    u = 2.0**-24
    runs = scope["jittered"](variance, [x], u)[0]
    assert len(runs) == 3 and all(float(t) > 0 for t in runs)  # the fp32 part moved
    runs = scope["jittered"](floored, [x], u)[0]
    assert len(runs) == 3  # the fp64 part alone moved, as before
