"""The ``diff`` rule and what a rounding decides: an integer or a bool whose value, or a float whose
inf or NaN class, changes when every step of the fp64 run moves by one rounding (up, down, or either
way at random; a run that jumps is kept) is not judged where fused gives a value such a moved run
gives. The opinfo campaign's program opinfo-530533-float64 solved a 5x5 matrix of one repeated
standard deviation: which pivot comes out exactly zero (the solve's ``info``) and the sign of the
infinities the solve then gives follow the last bit of that deviation. The unit tests use a tie that
one rounding breaks either way (an argmax, a comparison, the sign of an inf), and a trunc of a value a
rounding carries across an integer. A float's finite value no moved run gives and its zero's sign stay
judged, and an integer no rounding moves (an argmax of distinct values) is judged as before."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from precisionkit.repro_rules import CHECKS

U64 = 2.0**-53


def _rule() -> dict[str, Any]:
    scope: dict[str, Any] = {"torch": torch, "REDUCTION": 1}
    exec(CHECKS["diff"], scope)
    return scope


def _near_tie(x: torch.Tensor) -> list[torch.Tensor]:
    y = x[0] * 3.0  # 1.5, exactly x[1]: one rounding either way breaks the tie
    return [torch.argmax(torch.stack([y, x[1]])), torch.argmax(x), (y - x[1]) * float("inf"), x - x, y > x[1]]


X = torch.tensor([0.5, 1.5, 0.25, 4.0], dtype=torch.float64)


def test_a_moved_run_moves_each_rounded_result_to_a_neighbour_and_leaves_copies_alone() -> None:
    rule = _rule()
    x = torch.tensor([0.3, 0.7, 1.1], dtype=torch.float64)
    exact = x * 3.0
    for how, toward in (("up", float("inf")), ("down", -float("inf"))):
        with rule["Jitter"](U64, 0, True, how):
            y = x * 3.0
            copies = y.repeat(2)
            flipped = -y
        assert torch.equal(y, torch.nextafter(exact, torch.full_like(exact, toward)))
        assert torch.equal(copies, y.repeat(2)) and torch.equal(flipped, -y)  # no rounding there
    with rule["Jitter"](U64, 0, True, "random"):
        y = x * 3.0
    up, down = (torch.nextafter(exact, torch.full_like(exact, v)) for v in (float("inf"), -float("inf")))
    assert bool(((y == up) | (y == down)).all())
    with rule["Jitter"](U64, 0, True, "up"):  # an inf or a NaN stays
        z = torch.tensor([float("inf"), -float("inf"), float("nan")], dtype=torch.float64) * 2.0
    assert z[0] == float("inf") and z[1] == -float("inf") and bool(z[2].isnan())


def test_the_moved_runs_break_a_tie_both_ways_and_leave_distinct_values_alone() -> None:
    rule = _rule()
    base, moved = rule["rounded_runs"](_near_tie, [X], U64)
    assert int(base[0]) == 0 and {int(m[0]) for m in moved} == {0, 1}
    assert {int(m[1]) for m in moved} == {int(base[1])} == {3}
    kind = rule["kind"]
    assert int(kind(base[2])) == 5 and {int(kind(m[2])) for m in moved} == {3, 4}  # NaN, then +inf and -inf
    assert not bool(base[4]) and {bool(m[4]) for m in moved} == {False, True}


def test_fused_values_a_moved_run_gives_are_free_and_others_are_judged() -> None:
    rule = _rule()

    def decided(fused: list[torch.Tensor]) -> list[bool]:
        return [bool(m.all()) for m in rule["rounding_decided"](_near_tie, [X], fused, U64)]

    zeros = torch.zeros(4, dtype=torch.float64)
    fused = [
        torch.tensor(1),
        torch.tensor(3),
        torch.tensor(-float("inf"), dtype=torch.float64),
        zeros,
        torch.tensor(True),
    ]
    assert decided(fused) == [True, False, True, False, True]  # the argmax of distinct values: same as base
    # an index, a class or a value no moved run gives: judged
    wrong = [torch.tensor(2), torch.tensor(2), torch.tensor(1.0, dtype=torch.float64), zeros + 5.0, torch.tensor(False)]
    assert decided(wrong) == [False] * 5
    # a zero's sign is a finite class: judged
    assert decided([fused[0], fused[1], fused[2], -zeros, fused[4]])[3] is False


def test_the_rule_frees_a_tie_a_rounding_breaks_and_judges_an_off_by_one_argmax() -> None:
    rule = _rule()
    eager = _near_tie(X)
    fused = [torch.tensor(1), torch.tensor(2), *eager[2:]]
    masks = rule["rounding_decided"](_near_tie, [X], fused, U64)
    for k in (0, 1):
        bad = rule["wrong"](eager[k], fused[k], eager[k].double()) & ~masks[k]
        assert bool(bad) is (k == 1)


def _campaign(seed: int) -> tuple[bool, str]:
    pytest.importorskip("expecttest")  # torch's op database needs it
    from precisionkit.difftest import generate
    from precisionkit.repro import reproduces

    return reproduces(generate(seed, "opinfo"))


def test_the_campaigns_singular_solve_is_clean() -> None:
    found, message = _campaign(530533)
    assert not found, message


def test_lu_pivots_after_a_bilinear_interpolation_that_turns_inf_into_nan_are_still_judged() -> None:
    """opinfo-530162-float16: Inductor's bilinear interpolation gives NaN where eager and fp64 give
    inf (the defect of 510788), and lu then pivots on other rows; no rounding gives those pivots."""
    found, message = _campaign(530162)
    assert found and message.startswith("output 0:"), message


# --- a float's finite value a rounding decides: trunc, floor, ceil, round of a value near an integer --------

_TRUNC = """def graph(f0):
    sum_1 = torch.sum(f0, dim = -1, keepdim = True)
    sub_1 = sum_1 - f0
    trunc = torch.trunc(sub_1)
    return trunc
"""


def _trunc_case(backend: str, values: str = "grid") -> Any:
    from precisionkit.repro import Case

    return Case.from_json(
        {
            "id": "typed-474986-float32-min",
            "source": _TRUNC,
            "inputs": [
                {
                    "name": "f0",
                    "shape": [2, 63],
                    "dtype": "float32",
                    "seed": 393538750,
                    "layout": "contiguous",
                    "scale": 4.0,
                    "values": values,
                }
            ],
            "backend": backend,
            "rule": "diff",
            "extra": {"reduction": 63},
        }
    )


def test_a_trunc_that_a_rounding_carries_across_an_integer_is_not_judged() -> None:
    """The minimized form of a healthy report's typed-474986: sum - x is -16.9999995 exactly, whose
    float32 rounding is -17.0. The fused sum rounds to -17.0 and truncates to -17; eager's and fp64's
    truncate to -16. The moved fp64 runs give -17 too (a trunc's result is an integer no rounding made,
    so it is not moved itself), so the rule does not judge that element."""
    from precisionkit.repro import reproduces

    rule = _rule()
    case = _trunc_case("inductor")
    scope: dict[str, Any] = {"torch": torch}
    exec(_TRUNC, scope)
    from precisionkit.repro import make_inputs

    base, moved = rule["rounded_runs"](scope["graph"], list(make_inputs(case)), 2.0**-24)
    assert float(base[0][1, 7]) == -16.0 and -17.0 in {float(m[0][1, 7]) for m in moved}
    assert all(bool((m[0] == m[0].round()).all()) for m in moved)  # integers, as trunc gives
    found, message = reproduces(case)
    assert not found, message


def test_a_trunc_off_by_one_no_rounding_gives_is_still_judged() -> None:
    """Control: a fused path whose every trunc is one too low is wrong wherever no moved run takes the
    value there: at every element of normal inputs (none within a rounding of an integer). Of the grid
    inputs above, whose sums are often integers exactly, the elements at an integer are free, as a
    correct compiler's rounding can give either side; the others stay judged."""
    from dispatch_faults import register_faults

    from precisionkit.repro import reproduces

    register_faults({"pk_test_trunc_minus_one": lambda t: t - 1}, lambda func, out: "trunc" in str(func))
    found, message = reproduces(_trunc_case("pk_test_trunc_minus_one", "normal"))
    assert found and message.startswith("output 0: 126 of 126 elements wrong"), message
    found, message = reproduces(_trunc_case("pk_test_trunc_minus_one"))
    assert found and message.startswith("output 0: "), message
