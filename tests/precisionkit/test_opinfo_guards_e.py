"""Guards of the opinfo generator against false alarms of campaign e, each a program whose result the
compiler does not decide:

* 550077: a bfloat16 conv2d whose products (near 1e69) overflow its float32 accumulator, so that which
  outputs are +inf, -inf or NaN follows the kernel's order of summation, hence the memory layout (eager on
  Inductor's channels_last copy gives Inductor's NaNs). A convolution whose operands' magnitudes may
  overflow the accumulator is not drawn; one inside the range is, and stays judged.
* 550382 and 550470: laguerre_polynomial_l and chebyshev_polynomial_w of NaN return an uninitialized
  variable (ATen's kernel runs its recurrence only while its first term is not NaN and returns the unset
  result). The step is written ``torch.where(torch.isnan(x), x, ...)``: NaN there, every other element
  judged. 550783's softshrink of NaN (Inductor 0.0, a real defect) before such a polynomial is still caught.
* 551020: solve_ex of singular matrices (equal rows, from a repeat) whose inf/NaN pattern follows which
  pivot one rounding makes exactly zero. A matrix whose condition number is beyond its dtype's precision
  gets a diagonal shift that makes it strictly diagonally dominant; campaigns d and e hold no real defect of
  a solve or an inverse to check against.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("expecttest")  # torch's op database needs it

from precisionkit.difftest import generate
from precisionkit.difftest.opinfo import _make
from precisionkit.difftest.opinfo_guards import _may_overflow, _nan_masked, _run, _well_posed
from precisionkit.difftest.opinfo_samples import templates
from precisionkit.repro import Case, Input, reproduces


def _line_of(case: Case, call: str) -> str:
    return next(line for line in case.source.splitlines() if call in line)


def _state(env: dict[str, torch.Tensor]) -> SimpleNamespace:
    return SimpleNamespace(env=env, p=SimpleNamespace(device="cpu"))


def _magnitudes(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: torch.where(torch.isfinite(t), t.abs(), 0.0).double() for k, t in tensors.items()}


# --------------------------------------------------------------------------------------- convolution


def test_seed_550077_draws_a_convolution_that_cannot_overflow() -> None:
    case = generate(550077, "opinfo")
    assert case.extra["mode"] == "huge" and case.extra["dtype"] == "bfloat16"
    assert case.extra["ops"][0]["op"] == "nn.functional.conv2d"  # still its first op, other operands
    call = _line_of(case, "F.conv2d(").split(" = ", 1)[1]
    assert call == "F.conv2d(f0, f1, f2, groups=4, stride=(3, 2))"
    inputs = {i.name: t for i, t in zip(case.inputs, _make(case.inputs), strict=True)}
    bound = _run(call, _magnitudes(inputs))  # every product and partial sum is below it, in any order
    assert float(bound.max()) < torch.finfo(torch.float32).max / 2
    found, message = reproduces(case)
    assert not found, message


def _conv_operands(scales: tuple[float, float, float], dtype: str) -> dict[str, torch.Tensor]:
    """The campaign's operands of 550077's conv2d (its seeds and layouts), at ``scales``."""
    specs = [
        ((1, 3, 4, 4), 322836343, "strided"),
        ((3, 3, 3, 3), 322844262, "contiguous"),
        ((3,), 322852181, "contiguous"),
    ]
    inputs = [
        Input(f"f{k}", shape, dtype, seed, layout, scale, "normal")
        for k, ((shape, seed, layout), scale) in enumerate(zip(specs, scales, strict=True))
    ]
    return {i.name: t for i, t in zip(inputs, _make(inputs), strict=True)}


def test_a_convolution_whose_products_overflow_its_accumulator_is_not_drawn() -> None:
    t = templates("nn.functional.conv2d", "bfloat16")[0]  # 550077's sample: stride (2, 2), padding 2
    assert [s.shape for s in t.slots] == [(1, 3, 4, 4), (3, 3, 3, 3), (3,)]
    names = ["f0", "f1", "f2"]
    as_found = _conv_operands((5.296142795705524e36, 3.232509030581985e32, 1.0), "bfloat16")
    assert _may_overflow(_state(as_found), t, names)  # products near 1e69
    huge_input = _conv_operands((float(torch.finfo(torch.bfloat16).max) / 4, 1.0, 1.0), "bfloat16")
    assert _may_overflow(_state(huge_input), t, names)  # the huge mode's largest input, plain weights
    inside = _conv_operands((3.2e32, 1.0, 1.0), "bfloat16")
    assert not _may_overflow(_state(inside), t, names)
    # float16 operands accumulate in float32: 65504 squared times 27 is far inside it
    t16 = templates("nn.functional.conv2d", "float16")[0]
    assert not _may_overflow(_state(_conv_operands((6e4, 6e4, 6e4), "float16")), t16, names)
    # an inf operand's products are inf of a sign fixed by the operands: their sum's class is no order's
    nonfinite = _conv_operands((1.0, 1.0, 1.0), "bfloat16")
    nonfinite["f0"][0, 0, 0, 0] = float("inf")
    assert not _may_overflow(_state(nonfinite), t, names)


def test_a_convolution_of_a_real_defect_stays_as_it_was() -> None:
    """No real defect of a convolution itself is among campaigns d and e; 550824 holds one after a
    conv_transpose2d (multilabel_margin_loss's -1 target), in signed_zero mode: unchanged, still caught."""
    case = generate(550824, "opinfo")
    assert _line_of(case, "F.conv_transpose2d(")
    assert [o["op"] for o in case.extra["ops"]] == [
        "nn.functional.conv_transpose2d",
        "nn.functional.multilabel_margin_loss",
    ]
    found, message = reproduces(case)
    assert found and "eager 0.78" in message and "fused (inductor) 3.2" in message, message


# --------------------------------------------------------------------------------------- polynomials


@pytest.mark.parametrize(
    ("seed", "line"),
    [
        (550382, "v7 = torch.where(torch.isnan(v5), v5, torch.special.laguerre_polynomial_l(v5, 2.0))"),
        (550470, "v5 = torch.where(torch.isnan(v4), v4, torch.special.chebyshev_polynomial_w(v4, 7.0))"),
    ],
)
def test_a_polynomial_of_nan_is_nan(seed: int, line: str) -> None:
    case = generate(seed, "opinfo")
    assert f"    {line}" in case.source.splitlines()
    found, message = reproduces(case)
    assert not found, message


def test_the_mask_keeps_every_value_but_the_unset_ones() -> None:
    x = torch.tensor([float("nan"), 0.5, float("inf"), -2.0, 0.0], dtype=torch.float64)
    for op in (
        "laguerre_polynomial_l",
        "legendre_polynomial_p",
        "chebyshev_polynomial_w",
        "shifted_chebyshev_polynomial_t",
    ):
        call = f"torch.special.{op}(x, 3.0)"
        masked = _nan_masked(f"special.{op}", "x", call, True, 3.0)
        assert masked == f"torch.where(torch.isnan(x), x, {call})"
        got, plain = _run(masked, {"x": x}), _run(call, {"x": x})
        assert got[0].isnan()
        torch.testing.assert_close(got[1:], plain[1:], rtol=0.0, atol=0.0, equal_nan=True)


def test_only_an_unset_result_is_masked() -> None:
    call = "torch.special.laguerre_polynomial_l(x, 1.0)"
    assert _nan_masked("special.laguerre_polynomial_l", "x", call, True, 1.0) == call  # returns before the loop
    assert _nan_masked("special.laguerre_polynomial_l", "x", call, False, 2.0) == call  # an integer x is no NaN
    for op in ("special.chebyshev_polynomial_t", "special.hermite_polynomial_h", "special.hermite_polynomial_he"):
        assert _nan_masked(op, "x", call, True, 5.0) == call  # they set their result: NaN, judged


def test_softshrink_of_nan_before_a_polynomial_is_still_caught() -> None:
    """550783: softshrink of NaN is 0.0 compiled (a real defect); laguerre_polynomial_l of it is now NaN
    in eager, as the fp64 run, and 1 in Inductor."""
    case = generate(550783, "opinfo")
    assert "torch.where(torch.isnan(v4), v4, torch.special.laguerre_polynomial_l(v4, 2.0))" in case.source
    found, message = reproduces(case)
    assert found and "eager nan" in message and "fp64 nan" in message, message


# --------------------------------------------------------------------------------------- solves


def test_seed_551020_solves_a_shifted_matrix() -> None:
    case = generate(551020, "opinfo")
    assert [o["op"] for o in case.extra["ops"]][-1] == "linalg.solve_ex"
    line = _line_of(case, "torch.linalg.solve_ex(")
    assert "reshape((2, 2, 5, 5)) + 32.0 * torch.eye(5, device='cpu')), f3)" in line
    found, message = reproduces(case)
    assert not found, message


def test_seed_560002_takes_the_condition_number_of_a_shifted_matrix() -> None:
    """Campaign f's 560002: the condition number of a rank-2 matrix is inf, or one over the rounding noise
    of its smallest singular value (eager 7.7e33, compiled inf, NaN after a renorm)."""
    case = generate(560002, "opinfo")
    assert [o["op"] for o in case.extra["ops"]][:2] == ["sum", "linalg.cond"]
    assert _line_of(case, "torch.linalg.cond(").endswith("reshape((2, 5, 5)) + 64.0 * torch.eye(5, device='cpu')))")
    found, message = reproduces(case)
    assert not found, message


def test_a_singular_matrix_is_shifted_well_away_from_singular() -> None:
    values = torch.tensor([0.5, -1.25, 3.0, 2.0, -0.75, 1.5, 4.0, -2.5, 0.25, 1.0, -3.5, 2.75, 0.125, -1.0, 3.25])
    singular = values.repeat(7)[:100].reshape(2, 2, 5, 5)  # rows repeat every 3: rank 3, as 551020's
    assert int(torch.linalg.matrix_rank(singular.double()).max()) == 3
    shifted = _well_posed(_state({"a": singular}), "a")
    assert (
        shifted == "(a + 32.0 * torch.eye(5, device='cpu'))"
    )  # 32 > 2 * 10.625 + 1, 10.625 the largest absolute row sum
    m = _run(shifted, {"a": singular}).double()
    assert float(torch.linalg.cond(m).max()) < 4.0
    off = m.abs().sum(-1) - m.diagonal(dim1=-2, dim2=-1).abs()
    assert bool((m.diagonal(dim1=-2, dim2=-1).abs() > off).all())  # strictly diagonally dominant


def test_a_well_posed_or_nonfinite_matrix_is_left_as_it_is() -> None:
    well = torch.tensor([[2.0, 1.0], [1.0, 3.0]])
    assert _well_posed(_state({"a": well}), "a") == "a"
    nonfinite = torch.tensor([[1.0, 1.0], [1.0, float("nan")]])
    assert _well_posed(_state({"a": nonfinite}), "a") == "a"
    huge = torch.tensor([[3e38, 3e38], [3e38, 3e38]])  # no shift fits in float32: not drawn
    assert _well_posed(_state({"a": huge}), "a") is None


# ------------------------------------------------------------------------------- singular values


def test_singular_values_of_a_matrix_with_inf_are_not_drawn_where_their_vectors_fail() -> None:
    # campaign g's 580334: linalg.cond of a matrix holding +inf is NaN in eager (singular values only),
    # while the compiled graph asks LAPACK for the singular vectors, which raises for it (not for some
    # others); a matrix whose vectors LAPACK computes is drawn
    from precisionkit.difftest.opinfo_guards import _guarded_call

    t = templates("linalg.cond", "float32")[0]
    finite = torch.tensor([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]])
    inf = float("inf")  # 580334's matrix
    with_inf = torch.tensor(
        [
            [0.09, 0.08, 0.10, 0.13, 0.0],
            [inf, 0, 0, 0.02, inf],
            [0, inf, 0.17, 0.24, 0.016],
            [0.1, inf, inf, inf, 0],
            [inf, 0, inf, inf, inf],
        ]
    )
    with pytest.raises(RuntimeError, match="converge"):
        torch.linalg.cond(with_inf.clone().requires_grad_())  # the vectors: what the compiled program runs
    assert torch.isnan(torch.linalg.cond(with_inf)).all()  # the values alone: eager's NaN
    assert _guarded_call(_state({"a": with_inf}), "linalg.cond", t, ["a"]) is None
    one_inf = finite.clone()
    one_inf[1, 1] = inf
    assert torch.isnan(torch.linalg.cond(one_inf.clone().requires_grad_())).all()  # vectors LAPACK computes
    assert _guarded_call(_state({"a": one_inf}), "linalg.cond", t, ["a"]) == "torch.linalg.cond(a)"
    assert _guarded_call(_state({"a": finite}), "linalg.cond", t, ["a"]) == "torch.linalg.cond(a)"
