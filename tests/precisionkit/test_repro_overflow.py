"""The ``diff`` rule and 16-bit overflow: an inf or NaN that the program's own cast to float16
produces is judged against the fp64 run rounded at that cast, so a fused path that keeps float32
there is caught, while float32 intermediates where the program does not cast stay right."""

from __future__ import annotations

from pathlib import Path

import torch
from repro_backends import SETUP, register

from precisionkit.repro import Case, Input, namespace, reproduces, run_script, write

register()

#: fp16 inputs scaled by 1e5: every |x| > 65504 / 1e5 (about 0.66) overflows fp16 (13 of the 32 drawn)
LITERAL = "def graph(x):\n    return (x * 1e5).to(torch.float16).isinf()\n"
#: the same overflow reached through ``.to(x.dtype)``: a no-op in the plain fp64 run (x is fp64 there)
SPELLED = "def graph(x):\n    return torch.sin((x.float() * 1e5).to(x.dtype))\n"
#: the spelled cast's overflow read by a class test: a bool output, judged against the cast-rounded run
SPELLED_ISINF = "def graph(x):\n    return torch.isinf((x.float() * 1e5).to(x.dtype))\n"
#: fp16 arithmetic the program does not cast: float32 intermediates are the compiler's right
IMPLICIT = "def graph(x):\n    return torch.sin(x * 1e5)\n"


def _case(source: str, dtype: str, backend: str = "pk_test_keep_fp32", **changes: object) -> Case:
    inputs = (Input("x", (4, 8), dtype, 3),)
    return Case("overflow", source, inputs, backend=backend, rule="diff", setup=SETUP).with_(**changes)


def test_a_lost_inf_at_an_explicit_cast_is_wrong() -> None:
    hit, message = reproduces(_case(LITERAL, "float32"))
    assert hit
    assert message == (
        "output 0: 13 of 32 elements wrong; at (0, 2): eager True, fused (pk_test_keep_fp32) False, fp64 True"
    )


def test_a_nan_swallowed_at_a_cast_spelled_by_dtype_is_wrong() -> None:
    hit, message = reproduces(_case(SPELLED, "float16"))
    # sin(inf) is NaN in eager; the fp32 path keeps 1e5 x finite and its sine too
    assert hit and message.startswith("output 0: 13 of 32 elements wrong; at (0, 2): eager nan, fused")


def test_an_inf_lost_at_a_cast_spelled_by_dtype_is_wrong_in_a_bool_output() -> None:
    hit, message = reproduces(_case(SPELLED_ISINF, "float16"))
    assert hit
    assert message == (
        "output 0: 13 of 32 elements wrong; at (0, 2): eager True, fused (pk_test_keep_fp32) False, fp64 True"
    )  # a bool output names the fp64 run it was judged by: the one rounded at the program's casts


def test_only_the_cast_rounded_reference_sees_the_spelled_overflow() -> None:
    scope = namespace(_case(SPELLED, "float16"))
    graph, make, casts_mode, reference, wrong = (scope[k] for k in ("graph", "make", "Casts", "reference", "wrong"))
    casts = casts_mode()
    casts.run(graph, make())
    assert casts.casts == {0: torch.float16}  # .to(x.dtype), the first conversion named to/type/half/...
    (plain,), (kept,) = reference(graph, make()), reference(graph, make(), casts.casts)
    assert plain.dtype == kept.dtype == torch.float64
    assert int(plain.isnan().sum()) == 0 and int(kept.isnan().sum()) == 13
    eager = graph(*make())
    fused = torch.sin(make()[0].float() * 1e5).to(torch.float16)  # float32 kept through the cast
    assert not bool(wrong(eager, fused, plain).any())  # the plain fp64 run alone: blind
    assert int(wrong(eager, fused, plain, kept).sum()) == 13


def test_float32_intermediates_that_lose_an_inf_of_the_programs_own_dtype_change_its_class() -> None:
    # eager's float16 product 1e5 x overflows and sin(inf) is NaN; the plain fp64 run (and the one
    # rounded at the casts: there are none) sides with the float32 path, the dtype-faithful run,
    # rounding each op's result to float16 as eager does, has the NaN in every one of its runs
    assert reproduces(_case(IMPLICIT, "float16")) == (
        True,
        "output 0: 13 of 32 elements change class against the dtype-faithful reference; at (0, 2): eager nan, "
        "fused (pk_test_keep_fp32) -0.5634765625, dtype-faithful nan, fp64 -0.5637153585992782",
    )
    scope = namespace(_case(IMPLICIT, "float16"))
    graph, make = scope["graph"], scope["make"]
    eager, fused = graph(*make()), torch.sin(make()[0].float() * 1e5).to(torch.float16)
    (plain,) = scope["reference"](graph, make())
    assert not bool(scope["wrong"](eager, fused, plain).any())  # the fp64 comparison alone: blind
    (runs,) = scope["faithful"](graph, make)
    assert [int(r.isnan().sum()) for r in runs] == [13, 13, 13]


def test_inductor_rounding_at_the_casts_is_not_flagged() -> None:
    rounded = (("emulate_precision_casts", True),)
    for source, dtype in (
        (LITERAL, "float32"),
        (SPELLED, "float16"),
        (SPELLED_ISINF, "float16"),
        (IMPLICIT, "float16"),
    ):
        case = _case(source, dtype, backend="inductor", options=rounded)
        assert reproduces(case) == (False, "every output agrees with eager and fp64 (inductor)"), source


def test_sign_of_zero_and_integers_are_judged_as_before() -> None:
    wrong = namespace(_case(SPELLED, "float16"))["wrong"]
    e, f = torch.tensor([-0.0], dtype=torch.float16), torch.tensor([0.0], dtype=torch.float16)
    r, c = torch.tensor([0.0], dtype=torch.float64), torch.tensor([-0.0], dtype=torch.float64)
    # eager's -0 matches only the cast-rounded reference: a zero's sign is not an overflow class
    assert wrong(e, f, r, c).tolist() == wrong(e, f, r).tolist() == [False]
    i = torch.tensor([1, 2, 3])
    assert wrong(i, i + torch.tensor([0, 1, 1]), torch.tensor([1.0, 3.0, 2.0]), torch.zeros(3)).tolist() == [
        False,
        False,
        True,
    ]


def test_the_file_rounds_at_the_casts_alone(tmp_path: Path) -> None:
    script = write(_case(SPELLED, "float16"), tmp_path)
    assert "precisionkit" not in script.read_text().replace(SETUP, "")
    run = run_script(script)
    assert run.status == "reproduces" and run.last_line.startswith("REPRODUCES: output 0: 13 of 32 elements wrong")
