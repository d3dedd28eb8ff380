"""Unit tests of the summation error bounds: exact values on hand-computed inputs, and the bounds
holding against actual fp16/fp32 arithmetic (true on any IEEE device: they are theorems)."""

import math

import pytest
import torch

from precisionkit.bounds import (
    bound_formula,
    chain_length,
    gamma,
    gamma_tilde,
    p_lambda,
    summation_error_bound,
    unit_roundoff,
)

U16, U32 = 2.0**-11, 2.0**-24
TAU16 = 2.0**-25


def test_unit_roundoff_and_gamma():
    assert unit_roundoff(torch.float16) == U16 and unit_roundoff(torch.float32) == U32
    assert unit_roundoff(torch.bfloat16) == 2.0**-8 and unit_roundoff(torch.float64) == 2.0**-53
    assert gamma(0, U32) == 0.0
    assert gamma(3, U16) == pytest.approx(3 * U16 / (1 - 3 * U16), rel=1e-15)
    with pytest.raises(ValueError, match="undefined"):
        gamma(2048, U16)  # k*u = 1
    with pytest.raises(ValueError):
        unit_roundoff(torch.int32)


def test_probabilistic_constants_match_numerics_notes():
    # NUMERICS.md: P(lambda) = 1 - 2 exp(-lambda^2 (1-u)^2 / 2); lambda 2 -> 0.73, 3 -> 0.978, 5 -> 0.999993.
    assert p_lambda(2, U32) == pytest.approx(0.7293, abs=1e-4)
    assert p_lambda(3, U32) == pytest.approx(0.9778, abs=1e-4)
    assert p_lambda(5, U32) == pytest.approx(0.999993, abs=1e-6)
    assert gamma_tilde(16384, U32, 6) == pytest.approx(
        math.expm1(6 * 128 * U32 + 16384 * U32**2 / (1 - U32)), rel=1e-15
    )
    assert gamma_tilde(16384, U32, 6) < gamma(16384, U32)


def test_chain_lengths():
    assert chain_length(16384, "any") == chain_length(16384, "recursive") == 16383
    assert (
        chain_length(16384, "pairwise") == 14
        and chain_length(1000, "pairwise") == 10
        and chain_length(1, "pairwise") == 0
    )
    with pytest.raises(ValueError, match="order"):
        chain_length(8, "kahan")


def test_exact_values_untiled():
    x = torch.tensor([[1.0, -2.0, 3.0, 0.5]], dtype=torch.float64)  # s = 2.5, sum|x| = 6.5, n = 4
    b = summation_error_bound(x)
    e_acc = gamma(3, U32) * 6.5
    assert b.chains == (3,)
    assert b.abs_sum.item() == 6.5 and b.partial_abs_sum is None
    assert b.deterministic.item() == pytest.approx(U16 * 2.5 + (1 + U16) * e_acc + TAU16, rel=1e-14)
    # The fp32 accumulator: no final rounding.
    acc = summation_error_bound(x, output_dtype=torch.float32)
    assert acc.deterministic.item() == pytest.approx(e_acc, rel=1e-14)
    pair = summation_error_bound(x, order="pairwise", output_dtype=torch.float32)
    assert pair.chains == (2,) and pair.deterministic.item() == pytest.approx(gamma(2, U32) * 6.5, rel=1e-14)


def test_exact_values_tiled():
    x = torch.tensor([[1.0, 2.0, -3.0, -1.0]], dtype=torch.float64)  # tile 2: partials 3, -4; P = 7; s = -1
    fp32 = summation_error_bound(x, tile=2, partial_dtype=torch.float32, output_dtype=torch.float32)
    assert fp32.chains == (1, 1) and fp32.partial_abs_sum.item() == 7.0
    assert fp32.deterministic.item() == pytest.approx(gamma(2, U32) * 7.0, rel=1e-14)  # one chain of 1 + 1 adds
    fp16 = summation_error_bound(x, tile=2, partial_dtype=torch.float16, output_dtype=torch.float32)
    e_p = (1 + U16) * gamma(1, U32) * 7.0 + U16 * 7.0 + 2 * TAU16
    assert fp16.deterministic.item() == pytest.approx(e_p + gamma(1, U32) * (7.0 + e_p), rel=1e-14)
    out = summation_error_bound(x, tile=2, partial_dtype=torch.float16)
    e_acc = e_p + gamma(1, U32) * (7.0 + e_p)
    assert out.deterministic.item() == pytest.approx(e_acc + U16 * (1.0 + e_acc) + TAU16, rel=1e-14)
    assert "sum|p_j|" in out.formula and out.formula == bound_formula(tile=2, partial_dtype=torch.float16)


def test_bound_scales_with_abs_sum_not_with_the_sum():
    # A cancelling row: s = 0 exactly, sum|x| = 2048. The bound stays that of sum|x|.
    x = torch.tensor([[1.0, -1.0] * 1024], dtype=torch.float64)
    b = summation_error_bound(x, output_dtype=torch.float32)
    assert x.sum().item() == 0.0
    assert b.deterministic.item() == pytest.approx(gamma(2047, U32) * 2048, rel=1e-14) and b.deterministic.item() > 0
    same_abs = summation_error_bound(x.abs(), output_dtype=torch.float32)
    assert same_abs.deterministic.item() == b.deterministic.item()


def test_fp16_partials_bound_is_at_least_the_fp32_partials_bound():
    x = (torch.rand(16, 4096, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2 - 1).half().double()
    for tile in (512, 1024, 2048):
        f32 = summation_error_bound(x, tile=tile, partial_dtype=torch.float32, lam=6)
        f16 = summation_error_bound(x, tile=tile, partial_dtype=torch.float16, lam=6)
        assert (f16.deterministic >= f32.deterministic).all()
        assert (f16.probabilistic >= f32.probabilistic).all()
        assert (f16.probabilistic <= f16.deterministic).all() and f16.probability < f32.probability < 1


def test_probabilistic_bound_never_exceeds_the_deterministic_one():
    x = torch.ones(1, 16, dtype=torch.float64)
    b = summation_error_bound(x, order="pairwise", lam=6)  # short chain: lambda*sqrt(k) > k
    assert (b.probabilistic <= b.deterministic).all()
    big = summation_error_bound(torch.ones(1, 16384, dtype=torch.float64), lam=6)
    assert big.probability == pytest.approx(1 - 16384 * 2 * math.exp(-36 * (1 - U32) ** 2 / 2), rel=1e-12)
    assert big.probability == pytest.approx(0.9995, abs=1e-4)


def test_bad_requests_are_rejected():
    x = torch.zeros(1, 1000, dtype=torch.float64)
    with pytest.raises(ValueError, match="not a multiple of tile"):
        summation_error_bound(x, tile=512)
    with pytest.raises(ValueError, match="needs a tile"):
        summation_error_bound(x, partial_dtype=torch.float16)


def _recursive_fp16_sum(values: list[float]) -> float:
    acc = torch.tensor(0.0, dtype=torch.float16)
    for v in values:
        acc = acc + torch.tensor(v, dtype=torch.float16)
    return float(acc)


def test_worst_case_fp16_recursive_sum_stays_within_bound():
    # 1 + 2^-11 * 1023: every small term is exactly half an ULP of the running sum and is rounded
    # away (ties to even), the largest relative loss recursive fp16 summation can have per step.
    values = [1.0] + [2.0**-11] * 1023
    x = torch.tensor([values], dtype=torch.float64)
    s = x.sum().item()
    got = _recursive_fp16_sum(values)
    assert got == 1.0 and s == pytest.approx(1.0 + 1023 * 2.0**-11)
    b = summation_error_bound(x, order="recursive", accumulate_dtype=torch.float16, output_dtype=torch.float16)
    assert b.deterministic.item() == pytest.approx(gamma(1023, U16) * x.abs().sum().item(), rel=1e-14)
    assert abs(got - s) <= b.deterministic.item()
    assert abs(got - s) / b.deterministic.item() > 0.2  # a worst case: the bound is not vacuous here


def test_bounds_hold_for_the_framework_sums():
    # The C2 operations on random fp16 rows, against their bounds (holds on any correct device).
    from pipeline.experiments.reduction_order.versions import make_rows, tiled_sum

    x = make_rows(32, 4096, seed=11)
    ref = x.double().sum(-1)
    out16, acc32 = x.sum(-1), x.sum(-1, dtype=torch.float32)
    assert ((out16.double() - ref).abs() <= summation_error_bound(x.double()).deterministic).all()
    assert (
        (acc32.double() - ref).abs() <= summation_error_bound(x.double(), output_dtype=torch.float32).deterministic
    ).all()
    for partials, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        for tile in (512, 2048):
            o16, a32 = tiled_sum(tile, partials)(x)
            for got, out_dtype in ((o16, torch.float16), (a32, torch.float32)):
                b = summation_error_bound(x.double(), tile=tile, partial_dtype=dtype, output_dtype=out_dtype)
                assert ((got.double() - ref).abs() <= b.deterministic).all()
