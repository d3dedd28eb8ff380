"""precisionkit.bits: bit_equal, bit_mismatch and ulp_diff."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pk_testlib import (
    DTYPE_NAMES,
    FORMATS,
    from_bits,
    inf_bits,
    is_nan_bits,
    max_finite_bits,
    reference_ulp,
)

import precisionkit.bits as bits_module
from precisionkit import ULP_NAN, ULP_SATURATED, bit_equal, bit_mismatch, ulp_diff

# ---------------------------------------------------------------------------------------------
# bit_equal / bit_mismatch
# ---------------------------------------------------------------------------------------------


def test_constants_have_documented_values():
    assert ULP_NAN == 2**63 - 1
    assert ULP_SATURATED == 2**63 - 2
    assert bits_module._CPU_CHUNK == 2**18


def test_bit_equal_identical_tensors():
    x = torch.tensor([1.0, -2.5, 0.0, float("inf")])
    assert bit_equal(x, x.clone()) is True


def test_bit_equal_signed_zeros_are_unequal():
    assert bit_equal(torch.tensor([0.0]), torch.tensor([-0.0])) is False
    assert bit_equal(torch.tensor([-0.0]), torch.tensor([-0.0])) is True


def test_bit_equal_nan_payloads(dtype_name):
    _torch_dtype, _, _, width, mantissa = FORMATS[dtype_name]
    quiet = inf_bits(dtype_name) | (1 << (mantissa - 1))
    other_payload = quiet | 1
    a = from_bits([quiet], dtype_name)
    assert torch.isnan(a).all() and torch.isnan(from_bits([other_payload], dtype_name)).all()
    assert bit_equal(a, from_bits([quiet], dtype_name)) is True
    assert bit_equal(a, from_bits([other_payload], dtype_name)) is False
    # the same payload with the sign bit set is a different pattern as well
    assert bit_equal(a, from_bits([quiet | (1 << (width - 1))], dtype_name)) is False


def test_bit_equal_shape_mismatch_names_both_sides():
    with pytest.raises(ValueError, match=r"a has shape \(2,\), b has shape \(3,\)"):
        bit_equal(torch.zeros(2), torch.zeros(3))


def test_bit_equal_does_not_broadcast():
    with pytest.raises(ValueError, match="shape mismatch"):
        bit_equal(torch.zeros(2, 3), torch.zeros(1, 3))


def test_bit_equal_dtype_mismatch_names_both_sides():
    with pytest.raises(ValueError, match=r"a is torch\.float32, b is torch\.float16"):
        bit_equal(torch.zeros(2), torch.zeros(2, dtype=torch.float16))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, torch.uint8])
def test_bit_equal_rejects_non_float_dtypes(dtype):
    x = torch.zeros(3, dtype=dtype)
    with pytest.raises(TypeError, match="floating dtypes only"):
        bit_equal(x, x)


def test_bit_equal_rejects_integer_numpy_arrays():
    with pytest.raises(TypeError, match="int64"):
        bit_equal(np.arange(3), np.arange(3))


@pytest.mark.parametrize("bad", [[1.0, 2.0], 1.0, "x", None])
def test_bit_equal_rejects_non_arrays(bad):
    with pytest.raises(TypeError, match=r"a must be a torch\.Tensor or numpy\.ndarray"):
        bit_equal(bad, torch.zeros(2))
    with pytest.raises(TypeError, match=r"b must be a torch\.Tensor or numpy\.ndarray"):
        bit_equal(torch.zeros(2), bad)


def test_bit_equal_non_contiguous_views():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    transposed = base.t()
    assert not transposed.is_contiguous()
    assert bit_equal(transposed, transposed.contiguous()) is True
    stepped = base[:, ::2]
    assert not stepped.is_contiguous()
    assert bit_equal(stepped, torch.tensor([[0.0, 2, 4], [6, 8, 10], [12, 14, 16], [18, 20, 22]]))
    changed = stepped.clone()
    changed[3, 1] += 1
    assert bit_equal(stepped, changed) is False


def test_bit_equal_numpy_arrays_including_bfloat16():
    a = np.array([1.0, -0.0, 3.5], dtype=np.float32)
    assert bit_equal(a, a.copy()) is True
    assert bit_equal(a, np.array([1.0, 0.0, 3.5], dtype=np.float32)) is False
    b = np.array([1.0, 2.0, -3.0], dtype=ml_dtypes.bfloat16)
    assert bit_equal(b, b.copy()) is True
    assert bit_equal(b, np.array([1.0, 2.0, 3.0], dtype=ml_dtypes.bfloat16)) is False
    # negative strides (torch.from_numpy cannot take them directly)
    assert bit_equal(b[::-1], np.array([-3.0, 2.0, 1.0], dtype=ml_dtypes.bfloat16)) is True
    assert bit_equal(a[::-2], np.array([3.5, 1.0], dtype=np.float32)) is True


def test_bit_equal_mixed_torch_and_numpy():
    assert bit_equal(torch.tensor([1.5, 2.0]), np.array([1.5, 2.0], dtype=np.float32)) is True


def test_bit_mismatch_count_first_index_and_mask_torch():
    a = torch.zeros(3, 4)
    b = a.clone()
    b[1, 2] = -0.0
    b[2, 0] = 1.0
    m = bit_mismatch(a, b)
    assert m.count == 2
    assert m.total == 12
    assert m.first_index == (1, 2)
    assert bool(m) is True
    assert isinstance(m.mask, torch.Tensor) and m.mask.dtype == torch.bool
    expected = torch.zeros(3, 4, dtype=torch.bool)
    expected[1, 2] = expected[2, 0] = True
    assert torch.equal(m.mask, expected)


def test_bit_mismatch_equal_inputs():
    a = torch.ones(5, dtype=torch.float16)
    m = bit_mismatch(a, a.clone())
    assert (m.count, m.total, m.first_index, bool(m)) == (0, 5, None, False)
    assert not m.mask.any()


def test_bit_mismatch_numpy_bfloat16_returns_numpy_mask():
    a = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=ml_dtypes.bfloat16)
    b = a.copy()
    b[1, 1] = 5.0
    m = bit_mismatch(a, b)
    assert (m.count, m.total, m.first_index) == (1, 4, (1, 1))
    assert isinstance(m.mask, np.ndarray) and m.mask.dtype == np.bool_
    np.testing.assert_array_equal(m.mask, [[False, False], [False, True]])


def test_bit_mismatch_transposed_view_reports_logical_index():
    base = torch.zeros(2, 3)
    other = base.clone()
    other[0, 2] = 7.0  # logical index (2, 0) of the transposed view
    m = bit_mismatch(base.t(), other.t())
    assert (m.count, m.first_index) == (1, (2, 0))


# ---------------------------------------------------------------------------------------------
# ulp_diff: containers
# ---------------------------------------------------------------------------------------------


def test_ulp_diff_tensor_in_tensor_out():
    out = ulp_diff(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 4.0]))
    assert isinstance(out, torch.Tensor)
    assert out.dtype == torch.int64 and out.device == torch.device("cpu")
    assert out.tolist() == [0, 2**23]


def test_ulp_diff_numpy_in_numpy_out():
    out = ulp_diff(np.array([[1.0]], dtype=np.float16), np.array([[2.0]], dtype=np.float16))
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.int64 and out.shape == (1, 1)
    assert out.tolist() == [[1024]]


def test_ulp_diff_numpy_bfloat16():
    a = np.array([1.0, 1.0, -1.0], dtype=ml_dtypes.bfloat16)
    b = np.array([1.0, 1.0078125, 1.0], dtype=ml_dtypes.bfloat16)  # 1 + 2**-7: next bf16 after 1
    out = ulp_diff(a, b)
    assert isinstance(out, np.ndarray) and out.dtype == np.int64
    assert out.tolist() == [0, 1, 2 * 0x3F80]


def test_ulp_diff_non_contiguous_inputs_keep_logical_shape():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) + 1
    other = base.clone()
    other[2, 1] = torch.nextafter(other[2, 1], torch.tensor(float("inf")))
    out = ulp_diff(base.t(), other.t())
    assert out.shape == (4, 3)
    expected = torch.zeros(4, 3, dtype=torch.int64)
    expected[1, 2] = 1
    assert torch.equal(out, expected)
    stepped = ulp_diff(base[:, ::2], other[:, ::2])
    assert stepped.tolist() == [[0, 0], [0, 0], [0, 0]]


def test_ulp_diff_empty_and_zero_dim():
    assert ulp_diff(torch.empty(0, 3), torch.empty(0, 3)).shape == (0, 3)
    assert int(ulp_diff(torch.tensor(1.0), torch.tensor(-1.0))) == 2 * 0x3F800000


def test_ulp_diff_validation_matches_bit_equal():
    with pytest.raises(ValueError, match="dtype mismatch"):
        ulp_diff(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    with pytest.raises(TypeError, match="floating dtypes only"):
        ulp_diff(torch.zeros(2, dtype=torch.int32), torch.zeros(2, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"must be a torch\.Tensor or numpy\.ndarray"):
        ulp_diff([1.0], [1.0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_ulp_diff_cuda_matches_cpu(name):
    rng = np.random.default_rng(7)
    width = FORMATS[name][3]
    raw = [int(v) for v in rng.integers(0, 2**width, size=4096, dtype=np.uint64)]
    a, b = from_bits(raw[:2048], name), from_bits(raw[2048:], name)
    on_gpu = ulp_diff(a.cuda(), b.cuda())
    assert on_gpu.device.type == "cuda" and on_gpu.dtype == torch.int64
    assert torch.equal(on_gpu.cpu(), ulp_diff(a, b))


# ---------------------------------------------------------------------------------------------
# ulp_diff: special values per dtype
# ---------------------------------------------------------------------------------------------


def _ulp_bits(a_bits: int, b_bits: int, name: str) -> int:
    return int(ulp_diff(from_bits([a_bits], name), from_bits([b_bits], name))[0])


def test_ulp_diff_special_values(dtype_name):
    width = FORMATS[dtype_name][3]
    mantissa = FORMATS[dtype_name][4]
    sign = 1 << (width - 1)
    pos_zero, neg_zero = 0, sign
    min_sub = 1
    max_sub = (1 << mantissa) - 1
    min_normal = 1 << mantissa
    max_finite = max_finite_bits(dtype_name)
    inf = inf_bits(dtype_name)
    qnan = inf | (1 << (mantissa - 1))

    assert _ulp_bits(pos_zero, neg_zero, dtype_name) == 0
    assert _ulp_bits(neg_zero, neg_zero, dtype_name) == 0
    assert _ulp_bits(min_sub, pos_zero, dtype_name) == 1
    assert _ulp_bits(min_sub, neg_zero, dtype_name) == 1
    assert _ulp_bits(min_sub, sign | min_sub, dtype_name) == 2  # smallest subnormal vs its negative
    assert _ulp_bits(max_sub, min_normal, dtype_name) == 1  # subnormal -> normal boundary
    assert _ulp_bits(sign | max_sub, sign | min_normal, dtype_name) == 1
    assert _ulp_bits(min_normal, pos_zero, dtype_name) == min_normal
    assert _ulp_bits(max_finite, inf, dtype_name) == 1
    assert _ulp_bits(sign | max_finite, sign | inf, dtype_name) == 1
    assert _ulp_bits(inf, inf, dtype_name) == 0
    assert _ulp_bits(qnan, qnan, dtype_name) == 0
    assert _ulp_bits(qnan, sign | qnan | 1, dtype_name) == 0  # both NaN: 0 whatever the payloads
    assert _ulp_bits(qnan, pos_zero, dtype_name) == ULP_NAN
    assert _ulp_bits(inf, qnan, dtype_name) == ULP_NAN
    if width < 64:
        assert _ulp_bits(max_finite, sign | max_finite, dtype_name) == 2 * max_finite
        assert _ulp_bits(inf, sign | inf, dtype_name) == 2 * inf
    else:
        assert _ulp_bits(max_finite, sign | max_finite, dtype_name) == ULP_SATURATED
        assert _ulp_bits(inf, sign | inf, dtype_name) == ULP_SATURATED


def test_ulp_diff_min_subnormal_vs_negative_via_values():
    cases = {
        torch.float16: 2.0**-24,
        torch.bfloat16: 2.0**-133,
        torch.float32: 2.0**-149,
        torch.float64: 2.0**-1074,
    }
    for dtype, tiny in cases.items():
        t = torch.tensor([tiny], dtype=torch.float64).to(dtype)
        assert float(t) == tiny
        assert int(ulp_diff(t, -t)[0]) == 2, dtype
        assert int(ulp_diff(torch.zeros(1, dtype=dtype), -torch.zeros(1, dtype=dtype))[0]) == 0


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (torch.float16, 2 * 0x7BFF),
        (torch.bfloat16, 2 * 0x7F7F),
        (torch.float32, 4278190078),
        (torch.float64, ULP_SATURATED),
    ],
)
def test_ulp_diff_max_vs_negative_max(dtype, expected):
    big = torch.tensor([torch.finfo(dtype).max], dtype=dtype)
    assert int(ulp_diff(big, -big)[0]) == expected
    inf = torch.tensor([float("inf")], dtype=dtype)
    assert int(ulp_diff(big, inf)[0]) == 1
    assert int(ulp_diff(-big, -inf)[0]) == 1


def test_ulp_diff_fp32_opposite_sign_where_numpy_nulp_diff_overflows():
    big = np.array([np.finfo(np.float32).max], dtype=np.float32)
    assert int(ulp_diff(big, -big)[0]) == 4278190078
    try:
        from numpy.testing import nulp_diff  # type: ignore[attr-defined]
    except ImportError:
        from numpy.testing._private.utils import nulp_diff
    with np.errstate(all="ignore"):
        assert float(np.asarray(nulp_diff(big, -big)).reshape(-1)[0]) != 4278190078


# ---------------------------------------------------------------------------------------------
# ulp_diff: exhaustive neighbour tests for the 16-bit formats
# ---------------------------------------------------------------------------------------------


def _all_16bit_patterns() -> np.ndarray:
    return np.arange(2**16, dtype=np.uint32).astype(np.uint16)


def _bit_successor(bits: np.ndarray) -> np.ndarray:
    """Next value toward +inf by bit arithmetic on sign-magnitude 16-bit patterns."""
    bits = bits.astype(np.int64)
    negative = bits >= 0x8000
    out = np.where(negative, bits - 1, bits + 1)
    out = np.where(bits == 0x8000, 0x0001, out)  # -0 -> smallest positive subnormal
    return out.astype(np.uint16)


def test_every_fp16_pattern_is_one_ulp_from_its_successor():
    patterns = _all_16bit_patterns()
    values = patterns.view(np.float16)
    keep = ~np.isnan(values) & ~(np.isposinf(values))
    values = values[keep]
    with np.errstate(over="ignore"):  # max -> inf is the intended last step
        successor = np.nextafter(values, np.float16(np.inf))  # numpy's own float16 nextafter
    assert successor.dtype == np.float16
    assert len(values) == 2**16 - 2 * (2**10 - 1) - 1  # all but the NaNs and +inf
    # the bit-arithmetic successor agrees with numpy's nextafter (so it is trustworthy for bf16)
    assert np.array_equal(_bit_successor(patterns[keep]), successor.view(np.uint16))
    out = ulp_diff(values, successor)
    assert out.dtype == np.int64
    assert np.array_equal(out, np.ones(len(values), dtype=np.int64))
    # and in the other direction, as torch tensors
    back = ulp_diff(torch.from_numpy(successor), torch.from_numpy(values))
    assert torch.equal(back, torch.ones(len(values), dtype=torch.int64))


def test_every_bf16_pattern_is_one_ulp_from_its_successor():
    patterns = _all_16bit_patterns()
    values = patterns.view(ml_dtypes.bfloat16)
    as_f32 = values.astype(np.float32)  # exact
    keep = ~np.isnan(as_f32) & ~np.isposinf(as_f32)
    successor = _bit_successor(patterns[keep]).view(ml_dtypes.bfloat16)
    # the bit successor is the next distinct value of the sorted bf16 value set (+0 == -0 there)
    lo, hi = as_f32[keep], successor.astype(np.float32)
    ordered = np.unique(as_f32[~np.isnan(as_f32)])
    assert np.array_equal(hi, ordered[np.searchsorted(ordered, lo, side="right")])
    out = ulp_diff(values[keep], successor)
    assert isinstance(out, np.ndarray)
    assert np.array_equal(out, np.ones(int(keep.sum()), dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# ulp_diff against an independent slow reference; chunked and threaded CPU path
# ---------------------------------------------------------------------------------------------


def _random_patterns(name: str, n: int, seed: int) -> list[int]:
    """Random patterns, enriched with specials (zeros, subnormals, max, inf, NaNs)."""
    width, mantissa = FORMATS[name][3], FORMATS[name][4]
    rng = np.random.default_rng(seed)
    raw = [int(v) for v in rng.integers(0, 2**width, size=n, dtype=np.uint64)]
    sign = 1 << (width - 1)
    specials = [
        0,
        sign,
        1,
        sign | 1,
        (1 << mantissa) - 1,
        1 << mantissa,
        max_finite_bits(name),
        inf_bits(name),
        inf_bits(name) | 1,
        sign | inf_bits(name),
        sign | max_finite_bits(name),
    ]
    positions = rng.integers(0, n, size=n // 8)
    for i, p in enumerate(positions):
        raw[int(p)] = specials[i % len(specials)]
    return raw


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_ulp_diff_matches_slow_reference_on_random_patterns(name):
    n = 3000
    a_bits = _random_patterns(name, n, seed=1)
    b_bits = _random_patterns(name, n, seed=2)
    # half the pairs close together, so small distances are exercised too
    for i in range(0, n, 2):
        b_bits[i] = (a_bits[i] + (i % 7) - 3) % (1 << FORMATS[name][3])
    out = ulp_diff(from_bits(a_bits, name), from_bits(b_bits, name)).tolist()
    expected = [reference_ulp(x, y, name) for x, y in zip(a_bits, b_bits, strict=False)]
    assert out == expected


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_internal_torch_path_matches_slow_reference(name):
    """The torch implementation (used on GPUs and for fp64) agrees with the reference for every
    width, so the GPU path is covered on a CPU-only machine too."""
    n = 2000
    a_bits, b_bits = _random_patterns(name, n, seed=3), _random_patterns(name, n, seed=4)
    a, b = from_bits(a_bits, name), from_bits(b_bits, name)
    out = torch.empty(n, dtype=torch.int64)
    bits_module._ulp_torch(a, b, out)
    bits_module._fix_nans(a, b, out)
    assert out.tolist() == [reference_ulp(x, y, name) for x, y in zip(a_bits, b_bits, strict=False)]


@pytest.mark.parametrize("name", ["float16", "float32"])
@pytest.mark.parametrize("nan_chunk", [3, 4])  # with two worker threads: one chunk per worker
def test_ulp_diff_spanning_several_chunks_with_late_nans(name, nan_chunk):
    chunk = bits_module._CPU_CHUNK
    n = 5 * chunk + 123
    torch_dtype = FORMATS[name][0]
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, generator=gen, dtype=torch.float64).to(torch_dtype)
    b = torch.nextafter(a, torch.full_like(a, float("inf")))  # exactly 1 ULP everywhere
    b[-1] = a[-1]  # tail element of the short last chunk: 0
    nan_pos = nan_chunk * chunk + 17
    a[nan_pos] = float("nan")  # exactly one side NaN
    a[nan_pos + 1] = float("nan")
    b[nan_pos + 1] = float("nan")  # both NaN
    b[n - 2] = float("nan")  # NaN on the b side in the last, partial chunk
    out = ulp_diff(a.reshape(-1, 1), b.reshape(-1, 1)).reshape(-1)
    expected = torch.ones(n, dtype=torch.int64)
    expected[-1] = 0
    expected[nan_pos] = ULP_NAN
    expected[nan_pos + 1] = 0
    expected[n - 2] = ULP_NAN
    assert torch.equal(out, expected)


@pytest.mark.parametrize("threads", [1, 3, 6])
def test_ulp_diff_every_chunk_written_whatever_the_worker_count(monkeypatch, threads):
    """Regression: with a NaN found by the first worker, the other workers' chunks must still be
    computed (an early-exiting ``any(pool.map(...))`` cancelled workers that had not started,
    leaving uninitialised memory in their chunks)."""
    monkeypatch.setattr(bits_module.torch, "get_num_threads", lambda: threads)
    chunk = bits_module._CPU_CHUNK
    n = 6 * chunk
    a = torch.zeros(n, dtype=torch.float16)
    b = torch.full((n,), 2.0**-24, dtype=torch.float16)  # 1 ULP everywhere
    a[5] = float("nan")  # in chunk 0, i.e. found by worker 0
    expected = torch.ones(n, dtype=torch.int64)
    expected[5] = ULP_NAN
    for _ in range(5):
        assert torch.equal(ulp_diff(a, b), expected)


class _LazyExecutor:
    """Stands in for ThreadPoolExecutor with the worst legal scheduling: a task runs only when
    its result is consumed, as a queued task that is cancelled before a thread picks it up."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def map(self, fn, items):
        return (fn(item) for item in items)


def test_ulp_diff_consumes_every_worker_result(monkeypatch):
    """Deterministic version of the regression above: every worker's chunks are computed even
    when an earlier worker already reported a NaN."""
    monkeypatch.setattr(bits_module.torch, "get_num_threads", lambda: 3)
    monkeypatch.setattr(bits_module, "ThreadPoolExecutor", _LazyExecutor)
    chunk = bits_module._CPU_CHUNK
    a = torch.zeros(3 * chunk, dtype=torch.float32)
    b = torch.full((3 * chunk,), -(2.0**-149), dtype=torch.float32)
    a[0] = float("nan")
    out = ulp_diff(a, b)
    assert int(out[0]) == ULP_NAN
    assert torch.equal(out[1:], torch.ones(3 * chunk - 1, dtype=torch.int64))


# ---------------------------------------------------------------------------------------------
# Hypothesis properties
# ---------------------------------------------------------------------------------------------


def _value(name: str, allow_nan: bool = False):
    width = FORMATS[name][3]
    patterns = st.integers(min_value=0, max_value=2**width - 1)
    if not allow_nan:
        patterns = patterns.filter(lambda b: not is_nan_bits(b, name))
    return patterns


def _tensor(bits_list: list[int], name: str) -> torch.Tensor:
    return from_bits(bits_list, name)


@pytest.mark.parametrize("name", DTYPE_NAMES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_property_symmetry(name, data):
    a = data.draw(st.lists(_value(name, allow_nan=True), min_size=1, max_size=16))
    b = data.draw(st.lists(_value(name, allow_nan=True), min_size=len(a), max_size=len(a)))
    ta, tb = _tensor(a, name), _tensor(b, name)
    assert torch.equal(ulp_diff(ta, tb), ulp_diff(tb, ta))


@pytest.mark.parametrize("name", DTYPE_NAMES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_property_zero_iff_equal(name, data):
    a = data.draw(st.lists(_value(name), min_size=1, max_size=16))
    # mix of identical values, the other zero, and arbitrary values
    b = [data.draw(st.sampled_from([x, x ^ (1 << (FORMATS[name][3] - 1)), None])) for x in a]
    b = [data.draw(_value(name)) if y is None else y for y in b]
    ta, tb = _tensor(a, name), _tensor(b, name)
    assert torch.equal(ulp_diff(ta, tb) == 0, ta == tb)  # +0 == -0 numerically, and 0 ULP apart


@pytest.mark.parametrize("name", DTYPE_NAMES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_property_triangle_equality_same_sign(name, data):
    width = FORMATS[name][3]
    sign = data.draw(st.sampled_from([0, 1 << (width - 1)]))
    magnitudes = st.integers(min_value=0, max_value=inf_bits(name))  # zero .. inf, no NaN
    mags = sorted(data.draw(st.lists(magnitudes, min_size=3, max_size=3)))
    x, y, z = (_tensor([sign | m], name) for m in mags)  # ordered by magnitude, same side of 0
    d_xy, d_yz, d_xz = (int(ulp_diff(p, q)[0]) for p, q in ((x, y), (y, z), (x, z)))
    assert d_xz == d_xy + d_yz
    assert d_xz == mags[2] - mags[0]


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_property_triangle_equality_across_zero(name, data):
    """ord is monotone through zero, so the distance adds up across the sign change as well
    (fp64 is excluded: those sums can saturate)."""
    width = FORMATS[name][3]
    neg = data.draw(st.integers(min_value=0, max_value=inf_bits(name)))
    pos = data.draw(st.integers(min_value=0, max_value=inf_bits(name)))
    x, zero, z = _tensor([(1 << (width - 1)) | neg], name), _tensor([0], name), _tensor([pos], name)
    assert int(ulp_diff(x, z)[0]) == int(ulp_diff(x, zero)[0]) + int(ulp_diff(zero, z)[0]) == neg + pos
