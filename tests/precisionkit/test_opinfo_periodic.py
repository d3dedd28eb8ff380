"""The opinfo generator draws no periodic op (sin, cos, tan, sinc) on a computed value whose ULP
exceeds 1: no digit of the result is known there, so a fused run whose argument differs by a
legitimate rounding may return anything. Seed 500646 took sin of a convolution's 1e301 and then an
LDL factorization (whose integer pivots end the rule's jittered runs): a false alarm of the campaign.
A program's own inputs keep such values."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("expecttest")  # torch's op database needs it

from precisionkit.difftest import generate
from precisionkit.difftest.opinfo_guards import _beyond_phase


def test_seed_500646_takes_no_sine_of_its_convolution() -> None:
    case = generate(500646, "opinfo")
    ops = [o["op"] for o in case.extra["ops"]]
    assert ops[0] == "nn.functional.conv2d" and "sin" not in ops


def test_the_phase_is_lost_where_the_ulp_exceeds_one() -> None:
    assert _beyond_phase(torch.tensor([1.0, 2.0**53 + 2.0], dtype=torch.float64))
    assert not _beyond_phase(torch.tensor([1.0, 2.0**52], dtype=torch.float64))
    assert _beyond_phase(torch.tensor([3000.0], dtype=torch.float16))
    assert not _beyond_phase(torch.tensor([float("inf"), float("nan"), 1.0]))
    assert not _beyond_phase(torch.tensor([5, 2**60]))
