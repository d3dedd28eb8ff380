"""The ``diff`` rule and the sign of a zero: a reduction's zero has the sign of its accumulator and
its order (a sum of zeros from a +0 start is +0), so it is not judged; a pointwise op's zero has the
sign its definition gives (atan2(-0, 1) is -0), and a fused run that loses it is still a mismatch."""

from __future__ import annotations

import torch
from repro_backends import SETUP, register

from precisionkit.repro import Case, Input, reproduces
from precisionkit.repro_rules import CHECKS

register()

NORMAL = Input("x", (4, 33), "float32", 5)


def diff_case(source: str, *inputs: Input, backend: str) -> Case:
    return Case("z", source, tuple(inputs), backend=backend, rule="diff", setup=SETUP)


def _rule() -> dict:
    scope: dict = {"torch": torch, "REDUCTION": 1}
    exec(CHECKS["diff"], scope)
    return scope


def test_a_sum_of_zeros_whose_sign_fused_flips_is_not_a_mismatch() -> None:
    # eager sums the zeros from +0 and gets +0; the backend turns every +0 into -0
    source = "def graph(x):\n    return (x * 0.0).sum(-1)\n"
    assert reproduces(diff_case(source, NORMAL, backend="pk_test_negative_zero")) == (
        False,
        "every output agrees with eager and fp64 (pk_test_negative_zero)",
    )
    for reduce in ("x.mean(-1)", "x.cumsum(-1)", "x.prod(-1)", "x @ x.T", "torch.amax(x, dim=-1)"):
        src = f"def graph(x):\n    x = x * 0.0\n    return {reduce} * 2.0\n"
        assert reproduces(diff_case(src, NORMAL, backend="pk_test_negative_zero"))[0] is False, reduce


def test_a_pointwise_signed_zero_lost_beside_a_reduction_is_still_a_mismatch() -> None:
    # atan2(+0, 1) is +0 by definition: fused's -0 there is wrong, in the same program as a sum of zeros
    source = "def graph(x):\n    z = torch.relu(x) * 0.0\n    return z.sum(-1), torch.atan2(z, torch.ones_like(z))\n"
    hit, msg = reproduces(diff_case(source, NORMAL, backend="pk_test_negative_zero"))
    assert hit and msg.startswith("output 1: ") and "eager 0.0, fused (pk_test_negative_zero) -0.0, fp64 0.0" in msg
    hit, msg = reproduces(
        diff_case("def graph(x):\n    return torch.relu(x) * 0.0\n", NORMAL, backend="pk_test_negative_zero")
    )
    assert hit and msg.startswith("output 0: ")


def test_the_flipped_run_marks_only_the_zeros_a_reduction_returns() -> None:
    rule = _rule()

    def graph(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        z = x * 0.0
        return z.sum(-1), torch.atan2(-z.abs(), torch.ones_like(z)), 1.0 / z.sum(-1), torch.maximum(z, -z)

    x = torch.tensor([[1.0, -2.0], [3.0, 4.0]])
    eager = list(graph(x))
    free = rule["reduction_zero_signs"](graph, lambda: [x.clone()], eager)
    assert [m.tolist() for m in free] == [[True, True], [[False, False]] * 2, [True, True], [[False, False]] * 2]


def test_wrong_and_class_changed_leave_out_the_free_elements_only() -> None:
    rule = _rule()
    eager, fused = torch.tensor([0.0, 0.0, -0.0]), torch.tensor([-0.0, -0.0, 0.0])
    ref = torch.tensor([0.0, 0.0, -0.0], dtype=torch.float64)
    free = torch.tensor([True, False, False])
    assert rule["wrong"](eager, fused, ref).tolist() == [True, True, True]
    assert rule["wrong"](eager, fused, ref, None, None, free).tolist() == [False, True, True]
    assert rule["class_changed"](eager, fused, [eager], free).tolist() == [False, True, True]
    b_eager, b_fused = torch.tensor([True, False]), torch.tensor([False, True])
    assert rule["wrong"](b_eager, b_fused, b_eager, None, None, torch.tensor([True, False])).tolist() == [False, True]


def test_an_index_put_marks_its_zeros_only_when_it_accumulates() -> None:
    rule = _rule()
    idx = torch.tensor([0, 0])

    def graph(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = x * 0.0  # +0 and -0 by x's sign
        base = torch.zeros(2)
        return base.index_put((idx,), z, accumulate=False), base.index_put((idx,), z, accumulate=True)

    x = torch.tensor([-1.0, -2.0])
    eager = list(graph(x))
    written, summed = rule["reduction_zero_signs"](graph, lambda: [x.clone()], eager)
    # every zero of an accumulating op's result is marked, its untouched element 1 too (the flip
    # does not know which elements it summed): coarser than needed, never judging a summed zero
    assert written.tolist() == [False, False] and summed.tolist() == [True, True]


def test_a_zero_two_chained_reductions_return_is_free_in_either_sign() -> None:
    # campaign g's 580945: a zero a reduction returns feeds another reduction. Flipped at each, its
    # sign came back to eager's and the element stayed judged; forced to +0 and then to -0, it is free
    rule = _rule()

    def graph(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = x * 0.0  # -0.0 where x is negative
        return z.amax(-1, keepdim=True).amax(-1), torch.atan2(z, torch.ones_like(z))

    x = torch.tensor([[-1.0, -2.0], [3.0, -4.0]])
    eager = list(graph(x))
    assert str(eager[0][0].item()) == "-0.0"  # the maximum of -0.0 and -0.0, twice
    chained, pointwise = rule["reduction_zero_signs"](graph, lambda: [x.clone()], eager)
    assert chained.tolist() == [True, True] and pointwise.tolist() == [[False, False]] * 2


def test_the_dtype_faithful_run_returns_a_mutating_ops_own_results() -> None:
    # campaign g's 580130 and f's 560876: batch norm in training mode writes its running statistics and
    # returns three new tensors; the dtype-faithful run returned the first written argument instead,
    # and the program raised "Object of type 'Tensor' is not an instance of 'sequence'"
    rule = _rule()
    x = torch.linspace(-3.0, 3.0, 2 * 3 * 4, dtype=torch.float64).reshape(2, 3, 4).to(torch.float16)

    def graph(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mean, var = torch.zeros(3, dtype=torch.float16), torch.ones(3, dtype=torch.float16)
        out, saved_mean, _ = torch.ops.aten._native_batch_norm_legit(x, None, None, mean, var, True, 0.5, 1e-5)
        return out, saved_mean, mean

    eager = graph(x.clone())
    runs = rule["faithful"](graph, lambda: [x.clone()])
    assert len(runs) == 3 and all(len(r) == 3 for r in runs)  # per output: as is, one ULP up, one down
    out, saved_mean, running_mean = (r[0] for r in runs)
    assert out.dtype == torch.float16 and out.shape == (2, 3, 4)
    assert torch.equal(saved_mean, eager[1]) and torch.equal(running_mean, eager[2])
    assert float((out.double() - eager[0].double()).abs().max()) <= 2 * 2.0**-10 * 2  # within 2 ULP of ~2
