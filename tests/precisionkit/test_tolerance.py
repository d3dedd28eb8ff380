"""precisionkit.tolerance: tolerance() and the assert_* helpers."""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest
import torch

from precisionkit import (
    ULP_NAN,
    Tolerance,
    assert_bit_equal,
    assert_close_to_reference,
    assert_ulp_within,
    tolerance,
)
from precisionkit.tolerance import OP_CLASSES

pytest_plugins = ["pytester"]

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64

# The seed-001 decision matrix as documented: op class -> (float32 atol, float16 atol)
MATRIX = {
    "elementwise": (1e-7, 1e-3),
    "matmul": (1e-5, 5e-2),
    "conv": (1e-4, 5e-2),
    "batchnorm": (1e-4, 1e-1),
    "softmax": (1e-5, 5e-2),
    "layernorm": (1e-4, 1e-1),
    "e2e": (1e-3, 5e-1),
}

# ---------------------------------------------------------------------------------------------
# tolerance()
# ---------------------------------------------------------------------------------------------


def test_op_classes_are_the_decision_matrix_rows():
    assert tuple(MATRIX) == OP_CLASSES


def test_docstring_example():
    tol = tolerance(F32, "matmul", 4096)  # sqrt(4096) * 1e-7 = 6.4e-6 < 1e-5
    assert tol.atol == 1e-5
    assert tol.rtol == 1e-5
    assert tol.source == "matmul/torch.float32/K=4096: decision matrix"


@pytest.mark.parametrize("op_class", list(MATRIX))
def test_decision_matrix_values_at_k1(op_class):
    fp32, fp16 = MATRIX[op_class]
    assert tolerance(F32, op_class).atol == fp32
    assert tolerance(F16, op_class).atol == fp16
    assert tolerance(BF16, op_class).atol == fp16 * 8  # 3 fewer mantissa bits: x 2**3
    assert tolerance(F64, op_class).atol == fp32 * 1e-7
    for dtype in (F32, F16, BF16, F64):
        assert tolerance(dtype, op_class).source == f"{op_class}/{dtype}/K=1: decision matrix"


def test_rtol_per_dtype():
    assert tolerance(F64).rtol == 1e-10
    assert tolerance(F32).rtol == 1e-5
    assert tolerance(F16).rtol == 1e-2
    assert tolerance(BF16).rtol == 8e-2


def test_defaults_are_elementwise_k1():
    assert tolerance(F16) == tolerance(F16, "elementwise", 1)
    assert tolerance(F16).atol == 1e-3


@pytest.mark.parametrize(
    "dtype, op_class, k, expected_atol, rule",
    [
        (F32, "matmul", 4096, 1e-5, "decision matrix"),  # 6.4e-6 < 1e-5
        (F16, "matmul", 4096, 5e-2, "decision matrix"),  # 6.4e-3 < 5e-2
        (F32, "elementwise", 10_000, math.sqrt(10_000) * 1e-7, "sqrt(K) rule"),  # 1e-5 > 1e-7
        (F32, "matmul", 1_000_000, math.sqrt(1_000_000) * 1e-7, "sqrt(K) rule"),  # 1e-4 > 1e-5
        (F16, "matmul", 2**20, 1024 * 1e-4, "sqrt(K) rule"),  # 0.1024 > 5e-2
        (F16, "elementwise", 400, 20 * 1e-4, "sqrt(K) rule"),  # 2e-3 > 1e-3
        (BF16, "elementwise", 10_000, 100 * 8e-4, "sqrt(K) rule"),  # 0.08 > 8e-3
        (BF16, "e2e", 10_000, 4.0, "decision matrix"),  # 0.08 < 5e-1 * 8
        (F64, "elementwise", 10**6, 1000 * 1e-15, "sqrt(K) rule"),  # 1e-12 > 1e-7 * 1e-7
        (F64, "matmul", 100, 1e-5 * 1e-7, "decision matrix"),  # 1e-14 < 1e-12
    ],
)
def test_sqrt_k_rule(dtype, op_class, k, expected_atol, rule):
    tol = tolerance(dtype, op_class, reduction_size=k)
    assert tol.atol == pytest.approx(expected_atol, rel=1e-12)
    assert tol.source == f"{op_class}/{dtype}/K={k}: {rule}"


def test_tolerance_unpacks_as_atol_rtol():
    atol, rtol = tolerance(F16, "softmax")
    assert (atol, rtol) == (5e-2, 1e-2)
    assert isinstance(tolerance(F16), Tolerance)


def test_unknown_op_class_raises_value_error_listing_known_ones():
    with pytest.raises(ValueError, match=r"unknown op_class 'attention'; expected one of elementwise, matmul"):
        tolerance(F32, "attention")


def test_bad_dtype_and_reduction_size():
    with pytest.raises(TypeError, match=r"no tolerance for dtype torch\.int32"):
        tolerance(torch.int32)
    with pytest.raises(ValueError, match="reduction_size must be >= 1, got 0"):
        tolerance(F32, "matmul", 0)


# ---------------------------------------------------------------------------------------------
# assert_bit_equal
# ---------------------------------------------------------------------------------------------


def test_assert_bit_equal_passes_on_identical_bits():
    x = torch.tensor([1.0, float("nan"), -0.0], dtype=F16)
    assert_bit_equal(x, x.clone())
    assert_bit_equal(np.array([1.5], dtype=ml_dtypes.bfloat16), np.array([1.5], dtype=ml_dtypes.bfloat16))


def test_assert_bit_equal_message():
    actual = torch.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=F16)
    expected = torch.tensor([[2.0, 1.0 + 2**-10], [1.0 + 2**-9, 3.0]], dtype=F16)
    with pytest.raises(AssertionError) as info:
        assert_bit_equal(actual, expected, msg="fused vs eager")
    text = str(info.value)
    assert text.startswith("fused vs eager: not bit-equal: 2 of 4 elements differ")
    assert "first at index (0, 1): actual 1.0 (0x3c00), expected 1.0009765625 (0x3c01)" in text
    assert text.endswith("max ULP distance 2")


def test_assert_bit_equal_nan_against_number_says_nan_not_the_sentinel():
    with pytest.raises(AssertionError) as info:
        assert_bit_equal(torch.tensor([1.0, float("nan")], dtype=F16), torch.tensor([1.0, 1.5], dtype=F16))
    assert str(info.value) == (
        "not bit-equal: 1 of 2 elements differ; first at index (1,): actual nan (0x7e00), "
        "expected 1.5 (0x3e00); 1 NaN mismatch, first at index (1,): NaN vs 1.5"
    )


def test_assert_bit_equal_with_nans_and_numbers_gives_the_numbers_ulp_distance():
    actual = torch.tensor([1.0, 1.5, 1.0], dtype=F16)
    expected = torch.tensor([1.0 + 4 * 2**-10, float("nan"), 1.0], dtype=F16)
    with pytest.raises(AssertionError) as info:
        assert_bit_equal(actual, expected)
    text = str(info.value)
    assert text.startswith("not bit-equal: 2 of 3 elements differ; first at index (0,)")
    assert text.endswith("; 1 NaN mismatch, first at index (1,): 1.5 vs NaN; max ULP distance 4")


def test_assert_bit_equal_names_nan_payload_differences():
    quiet = torch.tensor([0x7E00], dtype=torch.int16).view(F16)
    other = torch.tensor([0x7E01], dtype=torch.int16).view(F16)
    with pytest.raises(AssertionError) as info:
        assert_bit_equal(quiet, other)
    assert str(info.value) == (
        "not bit-equal: 1 of 1 elements differ; first at index (0,): actual nan (0x7e00), "
        "expected nan (0x7e01); 1 NaN payload mismatch"
    )


def test_assert_bit_equal_signed_zero_message():
    with pytest.raises(AssertionError, match=re.escape("actual 0.0 (0x00000000), expected -0.0 (0x80000000)")):
        assert_bit_equal(torch.tensor([0.0]), torch.tensor([-0.0]))


# ---------------------------------------------------------------------------------------------
# assert_ulp_within
# ---------------------------------------------------------------------------------------------


def test_assert_ulp_within_passes_at_the_bound():
    a = torch.tensor([1.0, 1.0], dtype=F16)
    b = torch.tensor([1.0, 1.0 + 2 * 2**-10], dtype=F16)
    assert_ulp_within(a, b, 2)
    assert_ulp_within(torch.tensor([0.0]), torch.tensor([-0.0]), 0)


def test_assert_ulp_within_message():
    a = torch.tensor([1.0, 1.0, 1.0], dtype=F16)
    b = torch.tensor([1.0, 1.0 + 2**-10, 1.0 + 3 * 2**-10], dtype=F16)
    with pytest.raises(AssertionError) as info:
        assert_ulp_within(a, b, 1, msg="gelu")
    assert str(info.value) == (
        "gelu: 1 of 3 elements exceed 1 ULP; worst 3 ULP at index (2,): "
        "actual 1.0 (0x3c00), expected 1.0029296875 (0x3c03)"
    )


def test_assert_ulp_within_nan_against_number_says_nan_not_the_sentinel():
    with pytest.raises(AssertionError) as info:
        assert_ulp_within(torch.tensor([float("nan")]), torch.tensor([1.5]), 1000)
    assert str(info.value) == "1 of 1 elements exceed 1000 ULP; 1 NaN mismatch, first at index (0,): NaN vs 1.5"
    assert str(ULP_NAN) not in str(info.value)


def test_assert_ulp_within_reports_the_worst_number_and_the_nans_apart():
    a = torch.tensor([1.0, 2.0, 1.0, 1.0], dtype=F16)
    b = torch.tensor([float("nan"), float("nan"), 1.0 + 3 * 2**-10, 1.0], dtype=F16)
    with pytest.raises(AssertionError) as info:
        assert_ulp_within(a, b, 1)
    assert str(info.value) == (
        "3 of 4 elements exceed 1 ULP; worst 3 ULP at index (2,): actual 1.0 (0x3c00), "
        "expected 1.0029296875 (0x3c03); 2 NaN mismatches, first at index (0,): 1.0 vs NaN"
    )


def test_assert_ulp_within_nan_faces_nan_at_zero_ulp():
    assert_ulp_within(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0]), 0)


def test_assert_ulp_within_requires_same_dtype():
    with pytest.raises(ValueError, match=r"actual is torch\.float16, expected is torch\.float32"):
        assert_ulp_within(torch.ones(1, dtype=F16), torch.ones(1), 1)


# ---------------------------------------------------------------------------------------------
# assert_close_to_reference
# ---------------------------------------------------------------------------------------------


def test_assert_close_to_reference_passes_within_default_tolerance():
    ref = torch.tensor([1.0, 100.0, float("nan"), float("inf")], dtype=F64)
    actual = torch.tensor([1.0005, 100.9, float("nan"), float("inf")], dtype=F16)  # atol 1e-3 + 1e-2|ref|
    assert_close_to_reference(actual, ref)


def test_assert_close_to_reference_message_with_default_tolerance():
    actual = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=F16)
    ref = torch.tensor([[1.0, 1.5], [1.25, 1.0]], dtype=F64)
    with pytest.raises(AssertionError) as info:
        assert_close_to_reference(actual, ref, msg="layer 3")
    assert str(info.value) == (
        "layer 3: 2 of 4 elements outside tolerance (atol=0.001, rtol=0.01; "
        "elementwise/torch.float16/K=1: decision matrix); worst at index (0, 1): "
        "actual 1.0 (0x3c00), reference 1.5 (0x3ff8000000000000), abs error 0.5"
    )


def test_assert_close_to_reference_uses_op_class_and_reduction_size():
    actual = torch.tensor([1.0], dtype=F32)
    ref = torch.tensor([1.0 + 5e-5], dtype=F64)
    # matmul, K=4096 -> atol 1e-5, rtol 1e-5: allowed 2e-5 < 5e-5
    with pytest.raises(
        AssertionError, match=re.escape("(atol=1e-05, rtol=1e-05; matmul/torch.float32/K=4096: decision matrix)")
    ):
        assert_close_to_reference(actual, ref, op_class="matmul", reduction_size=4096)
    # K = 10**8 -> sqrt rule atol 1e-3: passes
    assert_close_to_reference(actual, ref, op_class="matmul", reduction_size=10**8)


def test_assert_close_to_reference_given_tolerance_is_reported_as_given():
    with pytest.raises(AssertionError, match=re.escape("(atol=0.1, rtol=0; given)")):
        assert_close_to_reference(torch.tensor([1.0]), torch.tensor([1.5], dtype=F64), atol=0.1, rtol=0.0)
    assert_close_to_reference(torch.tensor([1.0]), torch.tensor([1.5], dtype=F64), atol=0.5, rtol=0.0)


@pytest.mark.parametrize(
    "actual, ref",
    [
        (float("nan"), 1.0),
        (1.0, float("nan")),
        (float("inf"), 1.0),
        (float("inf"), -float("inf")),
        (1.0, float("inf")),
    ],
)
def test_assert_close_to_reference_specials_must_match(actual, ref):
    with pytest.raises(AssertionError, match="1 of 1 elements outside tolerance"):
        assert_close_to_reference(torch.tensor([actual], dtype=F16), torch.tensor([ref], dtype=F64))


def test_assert_close_to_reference_worst_is_largest_excess_and_nans_are_named_apart():
    actual = torch.tensor([1.0, 2.0, float("nan")], dtype=F32)
    ref = torch.tensor([1.1, 3.0, 0.0], dtype=F64)
    with pytest.raises(AssertionError) as info:
        assert_close_to_reference(actual, ref)
    text = str(info.value)
    assert text.startswith("3 of 3 elements outside tolerance")
    assert text.endswith(
        "worst at index (1,): actual 2.0 (0x40000000), reference 3.0 (0x4008000000000000), abs error 1; "
        "1 NaN mismatch, first at index (2,): NaN vs 0.0"
    )
    with pytest.raises(AssertionError, match=r"2 of 2 elements .* worst at index \(1,\): actual 2\.0 \(0x40000000\)"):
        assert_close_to_reference(actual[:2], ref[:2])


def test_assert_close_to_reference_only_nan_mismatches_has_no_worst_number():
    with pytest.raises(AssertionError) as info:
        assert_close_to_reference(torch.tensor([1.0], dtype=F16), torch.tensor([float("nan")], dtype=F64))
    assert str(info.value) == (
        "1 of 1 elements outside tolerance (atol=0.001, rtol=0.01; elementwise/torch.float16/K=1: "
        "decision matrix); 1 NaN mismatch, first at index (0,): 1.0 vs NaN"
    )


def test_assert_close_to_reference_infinity_of_the_wrong_sign_is_the_worst():
    actual = torch.tensor([1.0, float("inf")], dtype=F32)
    ref = torch.tensor([1.5, -float("inf")], dtype=F64)
    with pytest.raises(AssertionError, match=r"2 of 2 elements .* worst at index \(1,\): actual inf .* abs error inf$"):
        assert_close_to_reference(actual, ref)


def test_assert_close_to_reference_validation():
    with pytest.raises(ValueError, match=r"actual has shape \(2,\), reference has shape \(3,\)"):
        assert_close_to_reference(torch.zeros(2), torch.zeros(3, dtype=F64))
    with pytest.raises(ValueError, match="unknown op_class"):
        assert_close_to_reference(torch.zeros(2), torch.zeros(2, dtype=F64), op_class="nope")


# ---------------------------------------------------------------------------------------------
# pytest tracebacks
# ---------------------------------------------------------------------------------------------

HELPER_FAILURES = {
    "assert_bit_equal": lambda: assert_bit_equal(torch.tensor([1.0]), torch.tensor([2.0])),
    "assert_ulp_within": lambda: assert_ulp_within(torch.tensor([1.0]), torch.tensor([2.0]), 0),
    "assert_close_to_reference": lambda: assert_close_to_reference(torch.tensor([1.0]), torch.tensor([2.0], dtype=F64)),
}


@pytest.mark.parametrize("helper", sorted(HELPER_FAILURES))
def test_helper_frames_are_hidden_from_pytest_tracebacks(helper):
    with pytest.raises(AssertionError) as info:
        HELPER_FAILURES[helper]()
    every = [entry.name for entry in info.traceback]
    shown = [entry.name for entry in info.traceback.filter(info)]
    assert every[-1] == helper  # raised in the helper itself ...
    assert helper not in shown  # ... which pytest leaves out of the report
    assert shown[-1] == "<lambda>"


def test_failure_report_points_at_the_test_and_says_nan(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_nan_report="""
        import torch
        from precisionkit import assert_ulp_within

        def test_kernel():
            assert_ulp_within(torch.tensor([float("nan")]), torch.tensor([1.5]), 4)
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            ">*assert_ulp_within(*",
            "E *AssertionError: 1 of 1 elements exceed 4 ULP; 1 NaN mismatch, first at index (0,): NaN vs 1.5",
            "test_nan_report.py:5: AssertionError",
        ]
    )
    assert "tolerance.py" not in result.stdout.str()
