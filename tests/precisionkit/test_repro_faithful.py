"""The ``diff`` rule in the program's own dtype: a float16 product that overflows is inf in eager, and
a fused path that keeps it finite in float32 and then says ``isinf`` is False (and lets the inf
through ``where``) is wrong, although plain fp64, which never overflows, sides with it. Two parts
catch it: the class against the dtype-faithful reference (each op in fp64, rounded to the dtype
eager gives it) and the consistency of outputs computed from other outputs. Upcasting that only
makes a value more accurate changes no class and stays clean."""

from __future__ import annotations

import torch

from precisionkit.repro import Case, Input, namespace, reproduces

#: |x| > 256 overflows float16 in x * x: 9 of the 32 elements drawn at scale 300
OVERFLOW = "def graph(x):\n    y = x * x\n    return y, torch.isinf(y), y / x, torch.where(torch.isinf(y), 0, y)\n"
#: a float16 chain that stays finite: Inductor keeps it in float32 and rounds once, at the store
UPCAST = "def graph(x, w):\n    y = x * w + 0.1\n    z = torch.exp(y) * 0.5 - x\n    return (z * z).sum(-1), z\n"


def _overflow() -> Case:
    return Case("overflow", OVERFLOW, (Input("x", (4, 8), "float16", 3, scale=300.0),), rule="diff")


def _upcast() -> Case:
    inputs = (Input("x", (4, 33), "float16", 5), Input("w", (4, 33), "float16", 6))
    return Case("upcast", UPCAST, inputs, rule="diff", extra={"reduction": 33})


def test_the_float16_overflow_is_wrong_under_inductor_and_clean_under_eager() -> None:
    assert reproduces(_overflow(), "inductor") == (
        True,
        "output 1: 9 of 32 elements change class against the dtype-faithful reference; at (0, 4): eager True, "
        "fused (inductor) False, dtype-faithful True, fp64 False",
    )
    assert reproduces(_overflow(), "eager") == (False, "every output agrees with eager and fp64 (eager)")


def test_plain_fp64_sides_with_the_fused_path_and_the_faithful_reference_with_eager() -> None:
    scope = namespace(_overflow())
    graph, make = scope["graph"], scope["make"]
    y64, isinf64, _, _ = scope["reference"](graph, make())
    assert int(isinf64.sum()) == 0 and int(y64.abs().gt(65504).sum()) == 9  # fp64 never overflows
    runs = scope["faithful"](graph, make)
    # every run of the faithful reference (plain and jittered) has the 9 infs, isinf True there, where 0
    assert [int(r.isinf().sum()) for r in runs[0]] == [9, 9, 9]
    assert [int(r.sum()) for r in runs[1]] == [9, 9, 9]
    assert [int((r == 0).sum()) for r in runs[3]] == [9, 9, 9]
    eager = graph(*make())
    fused = [eager[0], torch.isinf(make()[0].float() ** 2), eager[2], eager[0]]  # Inductor's outputs
    assert [int(m.sum()) for m in map(scope["class_changed"], eager, fused, runs)] == [0, 9, 0, 9]


def test_an_output_computed_from_another_must_agree_with_it() -> None:
    scope = namespace(_overflow())
    graph, make, inconsistent = scope["graph"], scope["make"], scope["inconsistent"]
    eager = list(graph(*make()))
    assert inconsistent(graph, make, eager) is None
    fused = [eager[0], torch.zeros_like(eager[1]), eager[2], eager[3]]  # y = inf, isinf(y) False
    i, j, bad, again = inconsistent(graph, make, fused)
    assert (i, j, int(bad.sum()), int(again.sum())) == (0, 1, 9, 9)


def test_a_near_tie_decided_by_a_rounding_is_not_inconsistent() -> None:
    # 3 x rounds to -1 in float16 for x = -0.3335; fused compares the float32 product, below -1
    source = "def graph(x):\n    y = x * 3\n    return y, y >= -1.0\n"
    scope = namespace(Case("tie", source, (Input("x", (1, 1), "float16", 0),), rule="diff"))
    x = torch.tensor([[-0.33349609375]], dtype=torch.float16)
    y = x * 3
    assert y.item() == -1.0 and (x.float() * 3).item() == -1.00048828125
    fused = [y, (x.float() * 3) >= -1.0]  # False
    # recomputed from y as returned: True; nudged one ULP down: False. A rounding decides: not judged
    assert scope["inconsistent"](scope["graph"], lambda: [x.clone()], fused) is None
    assert scope["inconsistent"](scope["graph"], lambda: [x.clone()], [y, ~fused[1]]) is None


def test_upcasting_that_only_improves_accuracy_stays_clean() -> None:
    case = _upcast()
    assert reproduces(case, "inductor") == (False, "every output agrees with eager and fp64 (inductor)")
    scope = namespace(case)
    graph, make = scope["graph"], scope["make"]
    with torch.no_grad():
        eager, fused = graph(*make()), torch.compile(graph, backend="inductor")(*make())
        ref = scope["reference"](graph, make())
    err = lambda t, r: float((t.double() - r).abs().max())  # noqa: E731
    # Inductor's float32 intermediates put the sum closer to fp64 than eager's float16 steps
    assert err(fused[0], ref[0]) < err(eager[0], ref[0])
    assert not any(bool(scope["class_changed"](e, f, [e]).any()) for e, f in zip(eager, fused, strict=True))
    assert scope["inconsistent"](graph, make, list(fused)) is None
