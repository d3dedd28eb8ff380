"""precisionkit._native: the C first pass of error_stats against the torch one, and how the
kernel is built, cached and given up on."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import precisionkit.stats as stats_module
from precisionkit import _native, error_stats
from precisionkit.stats import STAT_KEYS

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
SUMS = {key for key in STAT_KEYS if key.endswith("_mean")} | {"cosine"}

needs_kernel = pytest.mark.skipif(_native.load("first_pass") is None, reason="the C first pass cannot be built here")


def _both(monkeypatch, a, ref) -> tuple[dict, dict]:
    monkeypatch.setenv("PRECISIONKIT_NATIVE", "1")
    native = error_stats(a, ref)
    monkeypatch.setenv("PRECISIONKIT_NATIVE", "0")
    reference = error_stats(a, ref)
    monkeypatch.delenv("PRECISIONKIT_NATIVE")
    return native, reference


def _cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(41)
    ref = torch.randn(96, 700, generator=gen, dtype=F64) * torch.logspace(-4, 4, 96, dtype=F64)[:, None]
    special = ref.clone()
    a_special = special.to(F16)
    a_special[0, :5] = float("nan")
    special[1, :3] = float("inf")
    a_special[1, :2] = float("inf")  # two matched infinities, one mismatch
    special[2, 7] = float("nan")
    a_special[2, 7] = float("nan")
    special[3, :] = 0.0  # a row whose scale is zero
    a_special[4, 9] = 65504.0  # an error near the fp64 maximum
    special[4, 9] = -1.7e308
    ties = (torch.arange(1, 3001, dtype=F64) * 2.0**-12 + 1.0).reshape(3, 1000)
    return {
        "fp16, rows over eight decades": (ref.to(F16), ref),
        "bf16 perturbed": (((ref * (1 + 1e-3)).to(BF16)), ref),
        "fp32 with an fp32 reference": (ref.to(F32) * 1.0001, ref.to(F32)),
        "fp16, NaN, infinities, zero row, huge error": (a_special, special),
        "bf16 ties": (ties.to(BF16), ties),
        "fp16 non-contiguous reference": (ref.t().contiguous().to(F16), ref.t()),
    }


@pytest.fixture
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@needs_kernel
@pytest.mark.parametrize("threads", [1, 3], indirect=True)
@pytest.mark.parametrize("name", list(_cases()))
def test_native_first_pass_equals_torch_first_pass(monkeypatch, name, threads):
    """Counts, maxima and percentiles are bit-identical, with one thread or several gathering
    into the same windows; sums (means, cosine) differ only by the order of addition."""
    a, ref = _cases()[name]
    monkeypatch.setattr(stats_module, "_CPU_CHUNK", 4096)  # many chunks, and rows split across them
    native, reference = _both(monkeypatch, a, ref)
    assert native.keys() == reference.keys()
    for key, value in reference.items():
        if key in SUMS and value is not None and math.isfinite(value):
            assert native[key] == pytest.approx(value, rel=1e-12, abs=0.0), key
        elif isinstance(value, float) and math.isnan(value):  # the cosine, where |ref|**2 overflows
            assert math.isnan(native[key]), key
        else:
            assert native[key] == value, key


@needs_kernel
def test_native_first_pass_counts_excluded_pairs():
    a = torch.tensor([float("nan"), float("inf"), float("-inf"), 1.0, float("nan"), 2.0], dtype=F16)
    ref = torch.tensor([float("nan"), float("inf"), float("inf"), float("nan"), 1.0, 2.0], dtype=F64)
    s = error_stats(a, ref)
    assert (s["nan_matched"], s["inf_matched"], s["inf_mismatch"], s["nan_mismatch"]) == (1, 1, 1, 2)
    assert s["n_compared"] == 1 and s["abs_max"] == 0.0 and s["exact_fraction"] == 1.0


@needs_kernel
def test_native_means_are_compensated():
    """The C pass adds block sums with compensation: its mean of a million errors is the
    correctly rounded sum divided by n, where a running sum drifts in the last digits."""
    gen = torch.Generator().manual_seed(7)
    ref = torch.randn(1 << 20, generator=gen, dtype=F64) * 1000
    a = ref.to(F16)
    errs = (a.to(F64) - ref).abs().numpy()
    exact = math.fsum(errs.tolist()) / errs.size
    assert np.cumsum(errs)[-1] / errs.size != exact  # the running sum is off
    assert error_stats(a, ref)["abs_mean"] == exact


def test_disabled_kernel_is_not_built(monkeypatch, tmp_path):
    monkeypatch.setenv("PRECISIONKIT_NATIVE", "0")
    monkeypatch.setenv("PRECISIONKIT_CACHE_DIR", str(tmp_path))
    _native.compile_kernel.cache_clear()
    assert _native.load("first_pass") is None
    assert list(tmp_path.iterdir()) == []


def test_failed_build_warns_and_falls_back(monkeypatch, tmp_path):
    """A compiler that fails leaves a warning naming the kernel, no file in the cache, and the
    torch path's statistics."""
    monkeypatch.setenv("PRECISIONKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "false")
    _native.compile_kernel.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"compiling first_pass\.c failed; using the torch implementation"):
            assert _native.load("first_pass") is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # given up once: no warning per call
            s = error_stats(torch.tensor([1.0, 2.0], dtype=F16), torch.tensor([1.0, 2.0 + 2**-11], dtype=F64))
        assert s["ulp_max"] == 0.25
        assert list(tmp_path.iterdir()) == []
    finally:
        _native.compile_kernel.cache_clear()


@needs_kernel
def test_kernel_is_built_once_into_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PRECISIONKIT_CACHE_DIR", str(tmp_path))
    _native.compile_kernel.cache_clear()
    try:
        assert _native.load("first_pass") is not None
        (built,) = tmp_path.iterdir()  # the library, and no temporary folder left behind
        assert built.name.startswith("first_pass-") and built.suffix == ".so"
        stamp = built.stat().st_mtime_ns
        _native.compile_kernel.cache_clear()
        assert _native.load("first_pass") is not None
        assert built.stat().st_mtime_ns == stamp  # loaded from the cache, not compiled again
    finally:
        _native.compile_kernel.cache_clear()


def test_unknown_kernel_is_an_error():
    with pytest.raises(ValueError, match=r"no native kernel 'nosuch'"):
        _native.load("nosuch")


def test_numpy_reference_in_native_path_matches_numpy_percentiles():
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((40, 333))
    a = ref.astype(np.float16)
    s = error_stats(a, ref)
    err = np.abs(a.astype(np.float64) - ref)
    assert (s["abs_p50"], s["abs_p99"], s["abs_max"]) == (*np.percentile(err, [50, 99]), err.max())
