"""The opinfo generator gives a special polynomial no scalar degree beyond 1000 in any mode: its
recurrence takes one step per degree, and seed 500661 (int_width mode, legendre_polynomial_p of
2**62 - 1) held the campaign's generation, which runs each step eagerly, for a quarter of an hour
before it was stopped by hand."""

from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("expecttest")  # torch's op database needs it

from precisionkit.difftest import generate
from precisionkit.difftest.opinfo import _DEGREE_LIMIT


def test_seed_500661_generates_at_once_without_a_huge_degree() -> None:
    start = time.perf_counter()
    case = generate(500661, "opinfo")
    assert time.perf_counter() - start < 120
    assert "_polynomial_" not in case.source
    assert [o["op"] for o in case.extra["ops"]][:3] == ["nn.functional.conv2d", "copysign", "argmin"]


def test_no_scalar_degree_beyond_the_limit_in_the_int_width_seeds() -> None:
    assert _DEGREE_LIMIT == 1000
    for seed in (500661, 500087, 500625):
        source = generate(seed, "opinfo").source
        for degree in re.findall(r"_polynomial_\w*\([^,]+, (-?[\d.e+]+|inf|nan)\)", source):
            assert abs(float(degree)) <= _DEGREE_LIMIT, (seed, degree)
