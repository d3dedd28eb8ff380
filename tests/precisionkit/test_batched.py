import math

import numpy as np
import pytest
import torch

from precisionkit import error_stats
from precisionkit.batched import BATCHED_KEYS, error_stats_per_set

# Max and percentiles must equal error_stats bit for bit; means may differ only by summation order.
EXACT = [k for k in BATCHED_KEYS if not k.endswith("_mean")]
MEANS = [k for k in BATCHED_KEYS if k.endswith("_mean")]


def _assert_matches(batched, a, ref):
    for i in range(a.shape[0]):
        single = error_stats(a[i], ref[i])
        for key in EXACT:
            got, want = batched[key][i], single[key]
            if want is None:
                assert math.isnan(got), (i, key, got)
            else:
                assert got == want, (i, key, got, want)
        for key in MEANS:
            if single[key] is None:
                assert math.isnan(batched[key][i])
            else:
                assert batched[key][i] == pytest.approx(single[key], rel=1e-12, abs=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_equals_error_stats_per_set(dtype):
    gen = torch.Generator().manual_seed(7)
    # Sets of different character: plain, wide dynamic range, subnormal-sized references, zeros.
    ref = torch.randn(5, 3, 67, generator=gen, dtype=torch.float64)
    ref[1] *= torch.pow(10.0, torch.rand(3, 67, generator=gen, dtype=torch.float64) * 6 - 3)
    ref[2] *= 1e-6
    ref[3, 0, :10] = 0.0
    a = (ref * (1 + 1e-3 * torch.randn(ref.shape, generator=gen, dtype=torch.float64))).to(dtype)
    batched = error_stats_per_set(a, ref)
    assert set(batched) == set(BATCHED_KEYS)
    assert all(len(v) == 5 for v in batched.values())
    _assert_matches(batched, a, ref)
    # The percentile path is exercised with non-trivial interpolation (n-1 not a multiple of 100).
    assert np.all(batched["ulp_p99"] <= batched["ulp_max"])
    assert np.any(batched["ulp_p50"] > 0)


def test_nan_and_inf_are_counted_and_excluded_like_error_stats():
    ref = torch.linspace(-3, 3, 4 * 50, dtype=torch.float64).reshape(4, 50)
    a = ref.to(torch.float16).clone()
    a[0, 3] = torch.nan  # one-sided NaN: mismatch
    a[1, 5] = torch.nan
    ref[1, 5] = torch.nan  # both NaN: matched
    a[2, 7] = torch.inf
    ref[2, 7] = torch.inf  # same infinity: matched
    a[2, 8] = -torch.inf  # infinity vs finite: mismatch
    a[3, :] = torch.nan  # nothing left to compare
    batched = error_stats_per_set(a, ref)
    assert batched["nan_mismatch"].tolist() == [1, 0, 0, 50]
    assert batched["nan_matched"].tolist() == [0, 1, 0, 0]
    assert batched["inf_matched"].tolist() == [0, 0, 1, 0]
    assert batched["inf_mismatch"].tolist() == [0, 0, 1, 0]
    assert batched["n_compared"].tolist() == [49, 49, 48, 0]
    assert math.isnan(batched["ulp_max"][3]) and math.isnan(batched["ulp_p99"][3])
    _assert_matches(batched, a, ref)


def test_a_worse_set_shows_in_its_own_row_only():
    ref = torch.randn(3, 100, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    a = ref.to(torch.float16).clone()
    a[1, 42] = a[1, 42] * 1.5
    s = error_stats_per_set(a, ref)
    assert s["ulp_max"][0] <= 0.5 and s["ulp_max"][2] <= 0.5  # correctly rounded: at most half a ULP
    assert s["ulp_max"][1] > 100


def test_rejects_bad_input_with_a_clear_error():
    with pytest.raises(ValueError, match="shape mismatch"):
        error_stats_per_set(torch.zeros(2, 3, dtype=torch.float16), torch.zeros(2, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="floating dtypes"):
        error_stats_per_set(torch.zeros(2, 3, dtype=torch.int32), torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="leading set axis"):
        error_stats_per_set(torch.tensor(1.0), torch.tensor(1.0, dtype=torch.float64))


def test_percentiles_only_of_the_measures_asked_and_the_rest_unchanged():
    gen = torch.Generator().manual_seed(3)
    ref = torch.randn(4, 300, dtype=torch.float64, generator=gen)
    a = (ref * (1 + 1e-3 * torch.randn(4, 300, dtype=torch.float64, generator=gen))).to(torch.float16)
    full = error_stats_per_set(a, ref)
    some = error_stats_per_set(a, ref, percentiles_of=("ulp", "sulp"))
    left_out = {"abs_p50", "abs_p99", "rel_p50", "rel_p99"}
    assert set(full) - set(some) == left_out
    for key, values in some.items():  # every statistic given is the one the full call gives, bit for bit
        assert np.array_equal(values, full[key], equal_nan=True), key
    assert set(error_stats_per_set(a, ref, percentiles_of=())) == set(full) - left_out - {
        "ulp_p50",
        "ulp_p99",
        "sulp_p50",
        "sulp_p99",
    }
    with pytest.raises(ValueError, match="percentiles_of names no error measure ulps"):
        error_stats_per_set(a, ref, percentiles_of=("ulps",))
