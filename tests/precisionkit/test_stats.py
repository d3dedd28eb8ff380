"""precisionkit.stats: error_stats and round_to_dtype."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch

import precisionkit._order_stats as order_stats
import precisionkit.stats as stats_module
from precisionkit import _native, error_stats, round_to_dtype
from precisionkit._tensors import FORMAT
from precisionkit.stats import STAT_KEYS

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


@pytest.fixture(autouse=True, params=["native", "torch"])
def first_pass(request, monkeypatch) -> str:
    """Every test here runs with the fused C first pass and with the torch one: both must give
    the statistics the test expects."""
    if request.param == "torch":
        monkeypatch.setenv("PRECISIONKIT_NATIVE", "0")
    elif _native.load("first_pass") is None:
        pytest.skip("the C first pass cannot be built here")
    return request.param


def t(values, dtype):
    return torch.tensor(values, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# error_stats: hand-computed cases
# ---------------------------------------------------------------------------------------------


def test_docstring_example_exact_values():
    s = error_stats(t([1.0, 2.0], F16), t([1.0, 2.0 + 2**-11], F64))
    assert s["n"] == 2 and s["n_compared"] == 2
    assert s["ulp_max"] == 0.25  # fp16 spacing at 2 is 2**-9
    assert s["ulp_mean"] == 0.125
    assert s["exact_fraction"] == 1.0  # 2 + 2**-11 rounds to 2.0 in fp16
    assert s["abs_max"] == 2**-11
    assert s["abs_mean"] == 2**-12
    assert s["abs_p50"] == 2**-12  # halfway between the two order statistics 0 and 2**-11
    assert s["abs_p99"] == pytest.approx(0.99 * 2**-11, rel=1e-15)
    assert s["rel_max"] == pytest.approx(2**-11 / (2.0 + 2**-11), rel=1e-15)
    assert s["error_balance"] == 0.5  # one below, none above, over two
    assert s["rel_within_1e-3"] == 1.0 and s["rel_within_5e-3"] == 1.0
    ref2 = 2.0 + 2**-11
    cosine = (1.0 + 2.0 * ref2) / (math.sqrt(5.0) * math.sqrt(1.0 + ref2 * ref2))
    assert s["cosine"] == pytest.approx(cosine, rel=1e-15)
    assert (s["nan_matched"], s["inf_matched"], s["nan_mismatch"], s["inf_mismatch"]) == (0, 0, 0, 0)


def test_result_has_every_documented_key_as_plain_python_numbers():
    s = error_stats(t([1.0, 2.0, 3.0], F32), t([1.0, 2.5, 3.0], F64))
    expected_keys = {"n", "n_compared", "nan_matched", "inf_matched", "nan_mismatch", "inf_mismatch"}
    assert set(s) == expected_keys | set(STAT_KEYS)
    assert all(type(s[k]) is int for k in expected_keys)
    assert all(type(s[k]) is float for k in STAT_KEYS)


@pytest.mark.parametrize(
    "dtype, tiny_subnormal, smallest_normal",
    [(F16, 2.0**-24, 2.0**-14), (BF16, 2.0**-133, 2.0**-126), (F32, 2.0**-149, 2.0**-126)],
)
def test_relative_and_ulp_error_at_zero_reference(dtype, tiny_subnormal, smallest_normal):
    s = error_stats(t([tiny_subnormal], dtype), t([0.0], F64))
    assert s["abs_max"] == tiny_subnormal
    assert s["rel_max"] == tiny_subnormal / smallest_normal  # |ref| clamped at tiny(dtype)
    assert s["ulp_max"] == 1.0  # spacing at 0 is the subnormal spacing, 2**(emin - p)
    assert s["exact_fraction"] == 0.0


def test_fp64_result_against_zero_reference():
    s = error_stats(t([2.0**-1074, 0.0], F64), t([0.0, 0.0], F64))
    assert s["ulp_max"] == 1.0
    assert s["rel_max"] == 2.0**-1074 / 2.0**-1022
    assert s["exact_fraction"] == 0.5


def test_ulp_spacing_clamps_at_minimum_normal_exponent():
    # fp16: subnormal spacing is 2**-24 everywhere below 2**-14, not 2**(floor(log2 ref) - 10)
    ref = t([2.0**-20, 3 * 2.0**-24, 2.0**-15], F64)
    a = t([2.0**-20 + 2.0**-24, 4 * 2.0**-24, 2.0**-15 + 2 * 2.0**-24], F16)
    s = error_stats(a, ref)
    assert s["ulp_max"] == 2.0 and s["ulp_mean"] == pytest.approx(4.0 / 3.0, rel=1e-15)
    assert s["ulp_p50"] == 1.0
    assert s["abs_max"] == 2 * 2.0**-24


def test_ulp_error_uses_spacing_around_reference_not_result():
    # ref just below 1: spacing is 2**-11 (binade [0.5, 1)), so 1.0 is 0.25 ULP above it
    s = error_stats(t([1.0], F16), t([1.0 - 2**-13], F64))
    assert s["ulp_max"] == 0.25
    s = error_stats(t([1.0], F16), t([1.0 + 2**-12], F64))
    assert s["ulp_max"] == 0.25  # spacing 2**-10 above 1
    s = error_stats(t([-1.0], BF16), t([-1.0 - 2**-8], F64))
    assert s["ulp_max"] == 0.5  # bf16 spacing at 1 is 2**-7; sign does not matter


def test_exact_fraction_uses_correct_rounding_of_reference():
    ref = t([1 + 2**-11 + 2**-40], F64)
    assert error_stats(t([1 + 2**-10], F16), ref)["exact_fraction"] == 1.0
    assert error_stats(t([1.0], F16), ref)["exact_fraction"] == 0.0  # torch's .to() would say 1.0


def test_error_balance_and_counts_of_sides():
    s = error_stats(t([1.0, 2.0, 3.0, 4.0], F32), t([0.5, 2.5, 2.5, 3.5], F64))
    assert s["error_balance"] == 0.5  # 3 above, 1 below
    s = error_stats(t([1.0, 2.0], F32), t([0.5, 2.5], F64))
    assert s["error_balance"] == 0.0


def test_rel_within_thresholds_are_inclusive():
    ref = t([1000.0] * 4, F64)
    s = error_stats(t([1000.0, 1001.0, 1005.0, 1010.0], F32), ref)  # rel 0, 1e-3, 5e-3, 1e-2
    assert s["rel_within_1e-3"] == 0.5
    assert s["rel_within_5e-3"] == 0.75
    assert s["rel_max"] == 0.01


def test_cosine_cases():
    assert error_stats(t([1.0, 0.0], F32), t([0.0, 1.0], F64))["cosine"] == 0.0
    assert error_stats(t([3.0, 4.0], F32), t([6.0, 8.0], F64))["cosine"] == pytest.approx(1.0, abs=1e-15)
    assert error_stats(t([1.0, 1.0], F32), t([-1.0, -1.0], F64))["cosine"] == pytest.approx(-1.0, abs=1e-15)
    assert error_stats(t([0.0, 0.0], F32), t([0.0, 0.0], F64))["cosine"] == 1.0  # both zero
    assert error_stats(t([0.0, 0.0], F32), t([1.0, 0.0], F64))["cosine"] == 0.0  # one zero


def test_percentiles_match_numpy_linear_interpolation():
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 1000, 1001):
        ref = rng.standard_normal(n)
        a = ref.astype(np.float32)
        a = a + rng.standard_normal(n).astype(np.float32) * np.float32(1e-3)
        s = error_stats(a, ref)
        abs_err = np.abs(a.astype(np.float64) - ref)
        rel_err = abs_err / np.maximum(np.abs(ref), np.finfo(np.float32).tiny)
        for name, values in (("abs", abs_err), ("rel", rel_err)):
            p50, p99 = np.percentile(values, [50, 99])
            assert s[f"{name}_p50"] == pytest.approx(p50, rel=1e-13, abs=0), (n, name)
            assert s[f"{name}_p99"] == pytest.approx(p99, rel=1e-13, abs=0), (n, name)
            assert s[f"{name}_max"] == values.max()
            assert s[f"{name}_mean"] == pytest.approx(values.mean(), rel=1e-12)


def test_percentile_helper_exact_order_statistics():
    values = np.array([5.0, 1.0, 4.0, 2.0, 3.0])
    assert order_stats._exact_percentiles(values.copy(), (0.0, 25.0, 50.0, 62.5, 100.0)) == [
        1.0,
        2.0,
        3.0,
        3.5,
        5.0,
    ]


def test_nan_and_inf_positions_are_counted_and_excluded():
    nan, inf = float("nan"), float("inf")
    a = t([nan, nan, 1.0, inf, inf, -inf, 1.0, inf, nan, 2.0, -inf], F16)
    ref = t([nan, 1.0, nan, inf, -inf, 5.0, inf, nan, -inf, 2.5, -inf], F64)
    s = error_stats(a, ref)
    assert s["n"] == 11
    assert s["nan_matched"] == 1  # position 0
    assert s["nan_mismatch"] == 4  # positions 1, 2, 7, 8 (NaN against anything else)
    assert s["inf_matched"] == 2  # positions 3 and 10
    assert s["inf_mismatch"] == 3  # positions 4, 5, 6
    assert s["n_compared"] == 1  # only position 9
    assert s["abs_max"] == 0.5 and s["abs_mean"] == 0.5
    assert s["rel_max"] == 0.2
    assert s["ulp_max"] == 0.5 / 2**-9
    for key in STAT_KEYS:
        assert math.isfinite(s[key]), key


def test_all_nan_input_gives_none_statistics():
    s = error_stats(torch.full((4,), float("nan"), dtype=F32), torch.full((4,), float("nan"), dtype=F64))
    assert (s["n"], s["n_compared"], s["nan_matched"]) == (4, 0, 4)
    assert all(s[key] is None for key in STAT_KEYS)


def test_empty_input_gives_none_statistics():
    s = error_stats(torch.empty(0, dtype=F16), torch.empty(0, dtype=F64))
    assert (s["n"], s["n_compared"]) == (0, 0)
    assert all(s[key] is None for key in STAT_KEYS)


def test_many_chunks_with_nans_match_numpy():
    """More than one internal chunk (stats._CPU_CHUNK elements), NaNs in the second chunk."""
    n = stats_module._CPU_CHUNK + 1000
    rng = np.random.default_rng(11)
    ref = rng.standard_normal(n)
    a = ref.astype(np.float16)
    nan_positions = np.array([stats_module._CPU_CHUNK + 5, n - 1])
    a[nan_positions] = np.nan
    s = error_stats(torch.from_numpy(a).reshape(8, -1), torch.from_numpy(ref).reshape(8, -1))
    keep = ~np.isnan(a)
    err = np.abs(a[keep].astype(np.float64) - ref[keep])
    assert (s["n"], s["n_compared"], s["nan_mismatch"]) == (n, n - 2, 2)
    assert s["abs_max"] == err.max()
    assert s["abs_mean"] == pytest.approx(err.mean(), rel=1e-12)
    assert s["abs_p99"] == pytest.approx(np.percentile(err, 99), rel=1e-13)
    assert s["exact_fraction"] == 1.0  # numpy's float16 conversion is correctly rounded
    assert s["ulp_max"] <= 0.5


def test_numpy_bfloat16_and_non_contiguous_inputs():
    ref = np.array([[1.0, 2.0], [3.0, 4.0 + 2**-6]])
    a = ref.astype(ml_dtypes.bfloat16)
    s = error_stats(a.T, ref.T)
    assert s["n_compared"] == 4 and s["abs_max"] == 2**-6 and s["exact_fraction"] == 1.0
    assert s["ulp_max"] == 2**-6 / 2**-5  # bf16 spacing at 4 is 2**(2 - 7)


def test_reference_of_other_float_dtype_is_compared_in_fp64():
    s = error_stats(t([1.0], F16), t([1.0 + 2**-20], F32))
    assert s["abs_max"] == 2**-20


def test_inputs_requiring_grad_are_accepted():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    s = error_stats(x * 1.5, torch.tensor([1.5, 3.0], dtype=F64))
    assert s["abs_max"] == 0.0 and s["exact_fraction"] == 1.0


def test_error_stats_validation():
    with pytest.raises(ValueError, match=r"a has shape \(2,\), ref has shape \(3,\)"):
        error_stats(torch.zeros(2), torch.zeros(3, dtype=F64))
    with pytest.raises(TypeError, match="floating"):
        error_stats(torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=F64))
    with pytest.raises(TypeError, match=r"ref must be a torch\.Tensor"):
        error_stats(torch.zeros(2), [0.0, 0.0])


# ---------------------------------------------------------------------------------------------
# round_to_dtype
# ---------------------------------------------------------------------------------------------


def test_round_to_dtype_fp16_double_rounding_case():
    x = t([1 + 2**-11 + 2**-40], F64)
    assert x.to(F16).item() == 1.0  # torch rounds through fp32: 1 + 2**-11 is then a tie -> even
    assert round_to_dtype(x, F16).item() == 1 + 2**-10  # correct: above the tie
    assert round_to_dtype(-x, F16).item() == -(1 + 2**-10)
    assert (-x).to(F16).item() == -1.0
    assert round_to_dtype(x, F16).dtype == F16


def test_round_to_dtype_bf16_double_rounding_case():
    x = t([1 + 2**-8 + 2**-40], F64)
    assert x.to(BF16).item() == 1.0
    assert round_to_dtype(x, BF16).item() == 1 + 2**-7
    assert round_to_dtype(-x, BF16).item() == -(1 + 2**-7)


def test_round_to_dtype_exact_ties_still_go_to_even():
    x = t([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11)], F64)
    assert round_to_dtype(x, F16).tolist() == [1.0, 1 + 2 * 2**-10, -1.0]


def test_round_to_dtype_wider_targets_and_validation():
    x = t([1 + 2**-40, 0.1], F64)
    assert torch.equal(round_to_dtype(x, F32), x.to(F32))
    assert round_to_dtype(x, F64) is x or torch.equal(round_to_dtype(x, F64), x)
    with pytest.raises(TypeError, match="float64"):
        round_to_dtype(x.to(F32), F16)


def test_round_to_dtype_special_values():
    x = t([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e300, -1e300, 1e-300, -1e-300], F64)
    out = round_to_dtype(x, F16)
    bits = out.view(torch.int16).tolist()
    assert bits[:4] == [0x0000, -0x8000, 0x7C00, -0x0400]  # +0, -0, +inf, -inf
    assert math.isnan(out[4].item())
    assert out[5:7].tolist() == [float("inf"), -float("inf")]  # overflow
    assert bits[7:] == [0x0000, -0x8000]  # underflow keeps the sign


def _random_doubles(rng, n: int, lo_exp: int, hi_exp: int, mantissa: int, emin: int) -> np.ndarray:
    """Log-uniform magnitudes in binades ``[lo_exp, hi_exp)`` with random signs, plus exact ties
    of the target format (``mantissa`` explicit bits, minimum normal exponent ``emin``), the
    doubles right next to them, and ties nudged by far less than a float32 ULP."""
    exps = rng.integers(lo_exp, hi_exp, size=n)
    mags = np.ldexp(1.0 + rng.random(n), exps)
    ties = []
    for e in rng.integers(lo_exp, hi_exp, size=n // 2):
        e = int(e)
        step = 2.0 ** (max(e, emin) - mantissa)
        # k * step lies in binade e for normal e; below emin every multiple is subnormal
        k = int(rng.integers(2**mantissa, 2 ** (mantissa + 1))) if e >= emin else int(rng.integers(0, 2**mantissa))
        tie = (k + 0.5) * step
        ties += [tie, np.nextafter(tie, np.inf), np.nextafter(tie, 0.0), tie + tie * 2.0**-40]
    values = np.concatenate([mags, np.array(ties)])
    return values * rng.choice([-1.0, 1.0], size=len(values))


def _grid_round(x: np.ndarray, positive_grid: np.ndarray) -> np.ndarray:
    """Round to nearest, ties to even, onto an ascending grid indexed by bit pattern (so an even
    index is an even mantissa). Differences of neighbours are exact (Sterbenz)."""
    mag = np.abs(x)
    i = np.searchsorted(positive_grid, mag, side="right") - 1
    lo, hi = positive_grid[i], positive_grid[np.minimum(i + 1, len(positive_grid) - 1)]
    d_lo, d_hi = mag - lo, hi - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (i % 2 == 1))
    return np.copysign(np.where(pick_hi, hi, lo), x)


def test_round_to_dtype_fp16_matches_numpy_correct_rounding():
    rng = np.random.default_rng(5)
    # binades from below the smallest subnormal up to the largest finite one
    x = _random_doubles(rng, 6000, -27, 16, mantissa=10, emin=-14)
    x = np.concatenate([x, [65519.99, 65520.0, -65520.0, 2.0**-25, 2.0**-25 * 1.0000001, 3 * 2.0**-26]])
    got = round_to_dtype(torch.from_numpy(x), F16).numpy()
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16)  # numpy converts float64 -> float16 in one rounding
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))
    # a third opinion from the explicit grid rounding, on the finite part
    finite = np.abs(x) < 65504
    grid = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    np.testing.assert_array_equal(got[finite].astype(np.float64), _grid_round(x[finite], grid))
    # torch's own conversion double-rounds on some of these
    assert not np.array_equal(torch.from_numpy(x).to(F16).numpy().view(np.uint16), expected.view(np.uint16))


def test_round_to_dtype_bf16_matches_exact_grid_rounding():
    rng = np.random.default_rng(6)
    x = _random_doubles(rng, 6000, -136, 120, mantissa=7, emin=-126)
    got = round_to_dtype(torch.from_numpy(x), BF16).float().numpy().astype(np.float64)
    grid = np.arange(0x7F80, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_array_equal(got, _grid_round(x, grid))
    assert not np.array_equal(torch.from_numpy(x).to(BF16).float().numpy().astype(np.float64), got)


# ---------------------------------------------------------------------------------------------
# streaming selection: exact percentiles without keeping the errors
# ---------------------------------------------------------------------------------------------


def _numpy_stats(a: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    err = np.abs(a.astype(np.float64) - ref)
    p50, p99 = np.percentile(err, [50, 99])
    return {"abs_p50": p50, "abs_p99": p99, "abs_max": err.max()}


@pytest.mark.parametrize("collect", [1, 3, 1 << 21])
def test_percentiles_exact_when_bins_hold_many_equal_values(monkeypatch, collect):
    """Mostly exact zeros plus a few repeated values: the wanted ranks sit in bins far larger than
    the collection limit, so selection narrows by further passes down to single values."""
    monkeypatch.setattr(stats_module, "_CPU_CHUNK", 64)
    monkeypatch.setattr(order_stats, "_COLLECT", collect)
    rng = np.random.default_rng(21)
    ref = rng.standard_normal(5000)
    a = ref.astype(np.float32).astype(np.float64)
    a[:3000] = ref[:3000]  # exact: error 0
    a[3000:4000] = ref[3000:4000] + 2.0**-20  # one repeated error value
    s = error_stats(torch.from_numpy(a), torch.from_numpy(ref))
    expected = _numpy_stats(a, ref)
    for key, value in expected.items():
        assert s[key] == value, key


def test_percentiles_exact_with_rows_longer_than_a_chunk(monkeypatch):
    monkeypatch.setattr(stats_module, "_CPU_CHUNK", 100)
    rng = np.random.default_rng(22)
    ref = rng.standard_normal((3, 1000)) * np.array([[1.0], [1e-3], [1e3]])
    a = ref.astype(np.float16)
    s = error_stats(torch.from_numpy(a), torch.from_numpy(ref))
    monkeypatch.setattr(stats_module, "_CPU_CHUNK", 1 << 18)
    whole = error_stats(torch.from_numpy(a), torch.from_numpy(ref))
    for key in STAT_KEYS:
        if key.endswith("_mean") or key == "cosine":  # sums: chunking changes their rounding only
            assert s[key] == pytest.approx(whole[key], rel=1e-13), key
        else:
            assert s[key] == whole[key], key
    err = np.abs(a.astype(np.float64) - ref)
    assert s["abs_p99"] == np.percentile(err, 99)
    row_spacing = np.ldexp(1.0, np.floor(np.log2(np.abs(ref).max(axis=1))).astype(int) - 10)
    assert s["sulp_max"] == (err / row_spacing[:, None]).max()


# ---------------------------------------------------------------------------------------------
# error_stats: the first pass's windows and the exactness test from ULP errors
# ---------------------------------------------------------------------------------------------


def _datasets() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    rng = np.random.default_rng(31)
    ref = rng.standard_normal((64, 512))
    rounded = torch.from_numpy(ref).to(F16)
    zeros = ref.astype(np.float32).astype(np.float64)
    zeros[:, :400] = ref[:, :400]  # 78 % exact: the median is an exact zero
    nan = ref.copy()
    nan[::7, ::5] = np.nan
    scaled = ref * np.logspace(-3, 3, 64)[:, None]
    return {
        "fp16 rounding": (rounded, torch.from_numpy(ref)),
        "mostly exact": (torch.from_numpy(zeros), torch.from_numpy(ref)),
        "NaN pairs": (torch.from_numpy(nan).to(BF16), torch.from_numpy(ref)),
        "row scales": (torch.from_numpy(scaled).to(F32), torch.from_numpy(scaled)),
    }


@pytest.mark.parametrize("name", list(_datasets()))
def test_windows_wrong_windows_and_radix_passes_give_identical_statistics(monkeypatch, name):
    """The sample only decides where the first pass gathers errors: windows that hit, windows that
    miss (a sample scaled by 1e6), windows whose buffers fill up and no windows at all give
    bit-identical results."""
    a, ref = _datasets()[name]
    monkeypatch.setattr(stats_module, "_CPU_CHUNK", 4096)
    hit = error_stats(a, ref)
    real_sample = stats_module._sample_errors
    monkeypatch.setattr(
        stats_module, "_sample_errors", lambda *args: {k: v * 1e6 for k, v in real_sample(*args).items()}
    )
    missed = error_stats(a, ref)
    monkeypatch.setattr(stats_module, "_sample_errors", real_sample)
    real_plan = stats_module._plan_windows
    tiny: list[order_stats._Window] = []

    def tiny_buffers(sample, n):  # the windows hit, but their buffers fill up after 100 errors
        windows = real_plan(sample, n)
        for ws in windows.values():
            for w in ws:
                w.buffer = w.buffer[:100] if w.buffer is not None else None
                tiny.append(w)
        return windows

    monkeypatch.setattr(stats_module, "_plan_windows", tiny_buffers)
    overflowed = error_stats(a, ref)
    assert any(w.buffer is None for w in tiny)  # the overflow path ran
    monkeypatch.setattr(stats_module, "_plan_windows", real_plan)
    monkeypatch.setattr(order_stats, "_WINDOW_CAP", 0)
    radix = error_stats(a, ref)
    assert hit == missed == overflowed == radix
    finite = torch.isfinite(a.double()) & torch.isfinite(ref)
    err = (a.double() - ref)[finite].abs().numpy()
    assert hit["abs_p50"] == np.percentile(err, 50) and hit["abs_p99"] == np.percentile(err, 99)


def test_windows_answer_in_one_pass(monkeypatch, first_pass):
    """With the sample's windows, every percentile is selected from the first pass's gathered
    errors: the errors are computed once per chunk, not again (by the torch path's ``_metrics``,
    or, with the C first pass, not at all outside it)."""
    a, ref = _datasets()["fp16 rounding"]
    monkeypatch.setattr(stats_module, "_CPU_CHUNK", 4096)
    calls = []
    real = stats_module._metrics
    monkeypatch.setattr(stats_module, "_metrics", lambda *args: calls.append(1) or real(*args))
    error_stats(a, ref)
    first = 0 if first_pass == "native" else a.numel() // 4096
    assert len(calls) == first
    calls.clear()
    monkeypatch.setattr(order_stats, "_WINDOW_CAP", 0)
    error_stats(a, ref)
    assert len(calls) == first + a.numel() // 4096  # the radix pass computes every chunk again


@pytest.mark.parametrize("dtype", [F16, BF16, F32])
def test_exact_fraction_at_ties_binade_edges_and_subnormals(dtype):
    """Exactness is read from the ULP error (below one half, or a tie won by the even neighbour):
    it agrees with rounding the reference correctly, on midpoints, just below powers of two,
    subnormals, zeros and the largest finite value."""
    _, mantissa, emin = FORMAT[dtype]
    gen = torch.Generator().manual_seed(5)
    base = torch.randn(4000, generator=gen, dtype=F64).to(dtype).to(F64)
    step = torch.ldexp(torch.ones_like(base), torch.floor(torch.log2(base.abs())) - mantissa)
    max_finite = float(torch.finfo(dtype).max)
    refs = torch.cat(
        [
            base + step / 2,  # ties: the even neighbour wins
            base - step / 4,
            base + step * 0.4999,
            torch.tensor([2.0 - 2.0 ** (-mantissa - 2), 2.0 - 2.0 ** (-mantissa - 1), 0.0, -0.0], dtype=F64),
            torch.tensor([2.0 ** (emin - mantissa) * k for k in (0.5, 0.75, 1.5, 2.5)], dtype=F64),
            torch.tensor([max_finite, max_finite * (1 + 2.0 ** (-mantissa - 2))], dtype=F64),
        ]
    )
    up, down = torch.nextafter(refs, torch.tensor(math.inf, dtype=F64)), torch.nextafter(refs, -refs.abs() - 1)
    fractions = []
    for a in (round_to_dtype(refs, dtype), round_to_dtype(up, dtype), round_to_dtype(down, dtype)):
        finite = torch.isfinite(a.to(F64))
        expected = float((a.to(F64) == round_to_dtype(refs, dtype).to(F64))[finite].double().mean())
        assert error_stats(a, refs)["exact_fraction"] == expected
        fractions.append(expected)
    # off a tie by one fp64 step, the rounding moves to the odd neighbour where the tie went even
    assert fractions[0] == 1.0 and 0.5 < fractions[1] < 0.95 and 0.5 < fractions[2] < 0.95, fractions


@pytest.mark.parametrize("exponent", [600, -600, 0])
def test_cosine_is_scale_free_and_finite_beyond_the_range_of_squares(exponent: int) -> None:
    """Squares of |x| > ~1e154 overflow and of |x| < ~1e-154 underflow; cosine is scaled by a power
    of two first, so it is the same number at every scale (and never NaN)."""
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(4096, generator=g, dtype=torch.float64)
    a = ref + 0.01 * torch.randn(4096, generator=g, dtype=torch.float64)
    base = error_stats(a, ref)["cosine"]
    scaled = error_stats(a * 2.0**exponent, ref * 2.0**exponent)["cosine"]
    assert 0.9999 < base < 1.0 and scaled == pytest.approx(base, rel=1e-15)
    opposite = error_stats(-(ref * 2.0**exponent), ref * 2.0**exponent)["cosine"]
    assert opposite == pytest.approx(-1.0, rel=1e-15)


def test_cosine_of_float32_values_near_its_largest() -> None:
    ref = torch.tensor([3.0e38, -1.0e38, 2.0e37, 1.0], dtype=torch.float64)
    s = error_stats(ref.float(), ref)
    assert s["cosine"] == pytest.approx(1.0, abs=1e-7)
