"""Two causes of false alarms of the ``diff`` rule, found by the opinfo campaign of seeds 510000-511039.

* **A max pool's tied maxima.** Which of a window's equal maxima (or NaNs) a max pool names is
  documented nowhere (eager's CPU kernel names the last, Inductor's the first), so an index that follows
  that choice is not judged. Overlapping windows (kernel 3, stride 2) share elements: each window's
  named element is knocked out only with the windows it shares none with, or a neighbour's knock-out
  hides its tie (opinfo-510947: max_pool1d over NaN only, the second window's index was judged).
  argmax and max over a dim document the first maximum: their finite ties stay judged.
* **A float16 part cast from a bool or an integer.** Such a part is float16 in the fp64 reference too
  (no float input to widen), and the jittered runs now move it by a float16 rounding, not by the
  unit roundoff of the program's float inputs and outputs (opinfo-510510: a bool cast to float16,
  then log-softmax, returned as float64, and 510708: a bool cast to float16, glu and a power; one float16 ULP
  apart was judged at fp64's tolerance). A
  difference of 1 % there is still caught."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from dispatch_faults import register_faults

from precisionkit.repro import Case, Input, reproduces
from precisionkit.repro_rules import CHECKS

NAN = float("nan")


def _rule() -> dict[str, Any]:
    scope: dict[str, Any] = {"torch": torch, "REDUCTION": 1}
    exec(CHECKS["diff"], scope)
    return scope


def _pool1d(x: torch.Tensor) -> list[torch.Tensor]:
    return [F.max_pool1d(x, kernel_size=3, stride=2, padding=1, return_indices=True)[1]]


def test_every_overlapping_window_of_nans_is_tied() -> None:
    x = torch.full((1, 2, 3), NAN)  # two windows per row, sharing element 1
    ties = _rule()["nan_ties"](_pool1d, lambda: [x.clone()], _pool1d(x))
    assert ties[0].tolist() == [[[True, True], [True, True]]]


def test_equal_maxima_of_a_pool_are_tied_and_a_lone_maximum_is_not() -> None:
    x = torch.tensor([[[1.0, 3.0, 2.0, 3.0, 0.5]]])  # windows [pad, 1, 3], [3, 2, 3], [3, 0.5, pad]
    ties = _rule()["nan_ties"](_pool1d, lambda: [x.clone()], _pool1d(x))
    assert ties[0].tolist() == [[[False, True, False]]]
    zeros = torch.tensor([[[0.0, -0.0, 0.0, 5.0]]])  # +0 and -0 are equal maxima

    def pool2(x: torch.Tensor) -> list[torch.Tensor]:
        return [F.max_pool1d(x, kernel_size=2, stride=2, return_indices=True)[1]]

    assert _rule()["nan_ties"](pool2, lambda: [zeros.clone()], pool2(zeros))[0].tolist() == [[[True, False]]]


def test_an_adaptive_pools_tie_is_found_in_every_window_that_holds_it() -> None:
    y = torch.arange(49.0).reshape(1, 1, 7, 7) * -1.0
    y[0, 0, 2, 2] = y[0, 0, 2, 3] = 9.0

    def pool(x: torch.Tensor) -> list[torch.Tensor]:
        return [F.adaptive_max_pool2d(x, (3, 3), return_indices=True)[1]]

    ties = _rule()["nan_ties"](pool, lambda: [y.clone()], pool(y))
    # (2, 2) lies in row windows 0 and 1 and column windows 0 and 1, (2, 3) in column window 1 only
    assert ties[0].tolist() == [[[[False, True, False], [False, True, False], [False, False, False]]]]


def test_an_argmaxs_finite_tie_stays_judged() -> None:
    x = torch.tensor([[1.0, 3.0, 3.0]])
    assert _rule()["nan_ties"](lambda x: [torch.argmax(x, -1)], lambda: [x.clone()], [torch.argmax(x, -1)]) is None


CAST_PART = "def graph(b):\n    h = b.to(torch.float16) * 0.3 + 0.7\n    return torch.log_softmax(h, -1).double()\n"


FAULTS = {
    "pk_test_fp16_part_one_ulp": lambda t: torch.nextafter(t, torch.full_like(t, float("inf"))),
    "pk_test_fp16_part_one_percent": lambda t: t * 1.01,
}
# every aten _log_softmax of a float16 result
register_faults(FAULTS, lambda func, out: func._schema.name == "aten::_log_softmax" and out.dtype == torch.float16)


def _cast_case(backend: str) -> Case:
    return Case("cast-part", CAST_PART, (Input("b", (4, 6), "bool", 3, values="bool"),), backend=backend, rule="diff")


def test_a_float16_part_cast_from_a_bool_one_ulp_off_is_not_judged() -> None:
    assert reproduces(_cast_case("pk_test_fp16_part_one_ulp")) == (
        False,
        "every output agrees with eager and fp64 (pk_test_fp16_part_one_ulp)",
    )


def test_a_float16_part_cast_from_a_bool_one_percent_off_is_caught() -> None:
    hit, msg = reproduces(_cast_case("pk_test_fp16_part_one_percent"))
    assert hit and msg.startswith("output 0: 24 of 24 elements wrong"), msg


@pytest.mark.parametrize("seed", [510947, 510510, 510708])
def test_the_campaigns_two_programs_are_clean(seed: int) -> None:
    pytest.importorskip("expecttest")  # torch's op database needs it
    from precisionkit.difftest import generate

    found, message = reproduces(generate(seed, "opinfo"))
    assert not found, message
