"""The opinfo generator writes a float remainder as ``... + 0.0``: eager gives a zero remainder the
dividend's sign (-0.0 % 3.0 is -0.0) where torch documents the divisor's, and Inductor, which gives
+0.0 here, was flagged for it (seed 510104: -0.0 % conv2d(...), 96 of its 128 flagged elements). Adding +0.0 makes both zeros
+0.0 and keeps every other value: a remainder that is NaN where eager's is 0 is still caught."""

from __future__ import annotations

import pytest

pytest.importorskip("expecttest")  # torch's op database needs it

from precisionkit.difftest import generate
from precisionkit.repro import Case, reproduces


def _line_of(case: Case, op: str) -> str:
    return next(line for line in case.source.splitlines() if op in line)


def test_seed_510104_keeps_its_nan_remainders_and_loses_its_zero_signs() -> None:
    """As found, all 128 elements were flagged: 96 for a zero's sign (eager -0.0, Inductor +0.0, as
    documented) and 32 where the divisor is infinite (eager 0, Inductor NaN: a real defect, as 500213)."""
    case = generate(510104, "opinfo")
    assert [o["op"] for o in case.extra["ops"]] == ["scatter_reduce.mean", "nn.functional.conv2d", "__rmod__"]
    assert _line_of(case, "__rmod__").endswith("v1.__rmod__(-0.0) + 0.0")
    found, message = reproduces(case)
    assert found and message.startswith("output 0: 32 of 128 elements wrong"), message
    assert "eager 0.0, fused (inductor) nan" in message


def test_a_remainder_that_is_nan_where_eager_is_zero_is_still_caught() -> None:
    case = generate(500213, "opinfo")  # remainder(x, -inf): eager 0 at x = 0, Inductor NaN
    assert _line_of(case, "torch.remainder").endswith("torch.remainder(v3, -float('inf')) + 0.0")
    found, message = reproduces(case)
    assert found and "fused (inductor) nan" in message, message
