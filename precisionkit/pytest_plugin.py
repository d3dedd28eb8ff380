"""pytest plugin (registered through the ``pytest11`` entry point as ``precisionkit``).

Fixtures:

* ``precision``: the assertion helpers and comparison functions in one object
  (``precision.assert_close_to_reference(out, precision.fp64_reference(fn, x))``).
* ``seeded_inputs``: a factory of reproducible random tensors; the seed derives from
  ``--precisionkit-seed`` and the test's node id, so every test gets its own stable stream.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

from . import (
    assert_bit_equal,
    assert_close_to_reference,
    assert_ulp_within,
    bit_equal,
    error_stats,
    fp64_reference,
    tolerance,
    ulp_diff,
)

_DISTRIBUTIONS = ("normal", "uniform")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("precisionkit")
    group.addoption(
        "--precisionkit-seed",
        type=int,
        default=0,
        help="base seed for the seeded_inputs fixture (default 0)",
    )


@pytest.fixture
def precision() -> SimpleNamespace:
    """Comparison helpers: bit_equal, ulp_diff, error_stats, fp64_reference, tolerance and the
    assert_* helpers."""
    return SimpleNamespace(
        bit_equal=bit_equal,
        ulp_diff=ulp_diff,
        error_stats=error_stats,
        fp64_reference=fp64_reference,
        tolerance=tolerance,
        assert_bit_equal=assert_bit_equal,
        assert_ulp_within=assert_ulp_within,
        assert_close_to_reference=assert_close_to_reference,
    )


def make_seeded_factory(seed: int) -> Callable[..., torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)

    def make(
        *shape: int,
        dtype: torch.dtype = torch.float32,
        distribution: str = "normal",
        low: float = -1.0,
        high: float = 1.0,
        device: str | torch.device = "cpu",
    ) -> torch.Tensor:
        """A tensor drawn in float64 from ``distribution`` then rounded to ``dtype``."""
        if distribution == "normal":
            values = torch.randn(*shape, generator=generator, dtype=torch.float64)
        elif distribution == "uniform":
            values = torch.rand(*shape, generator=generator, dtype=torch.float64) * (high - low) + low
        else:
            raise ValueError(f"unknown distribution {distribution!r}; expected one of {_DISTRIBUTIONS}")
        return values.to(dtype).to(device)

    make.seed = seed  # type: ignore[attr-defined]
    return make


@pytest.fixture
def seeded_inputs(request: pytest.FixtureRequest) -> Callable[..., torch.Tensor]:
    """Factory ``make(*shape, dtype=..., distribution='normal'|'uniform', low, high, device)``."""
    base = request.config.getoption("--precisionkit-seed")
    digest = hashlib.sha256(f"{base}:{request.node.nodeid}".encode()).digest()
    return make_seeded_factory(int.from_bytes(digest[:8], "little") & (2**63 - 1))
