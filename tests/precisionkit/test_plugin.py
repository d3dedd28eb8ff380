"""precisionkit.pytest_plugin: registration through the pytest11 entry point and its fixtures."""

from __future__ import annotations

import re
from importlib.metadata import entry_points

import pytest
import torch

import precisionkit.pytest_plugin as plugin_module
from precisionkit.pytest_plugin import make_seeded_factory

pytest_plugins = ["pytester"]

INLINE_TESTS = """
import torch


def _dump(label, t):
    print(f"VALUES {label} " + " ".join(f"{v:.17g}" for v in t.double().reshape(-1).tolist()))


def test_first(precision, seeded_inputs):
    x = seeded_inputs(3, 4, dtype=torch.float16)
    assert x.shape == (3, 4) and x.dtype == torch.float16
    ref = precision.fp64_reference(lambda t: t * 2, x)
    assert ref.dtype == torch.float64
    precision.assert_close_to_reference(x * 2, ref)
    precision.assert_bit_equal(x, x.clone())
    assert int(precision.ulp_diff(x, x).max()) == 0
    assert precision.error_stats(x, ref / 2)["exact_fraction"] == 1.0
    assert precision.bit_equal(x, x) and precision.tolerance(torch.float16).atol == 1e-3
    _dump("first", x)
    _dump("first-uniform", seeded_inputs(5, distribution="uniform", low=2.0, high=3.0))


def test_second(seeded_inputs):
    _dump("second", seeded_inputs(3, 4, dtype=torch.float16))


def test_failing_comparison(precision):
    a = torch.tensor([1.0, 2.0], dtype=torch.float16)
    precision.assert_close_to_reference(a, torch.tensor([1.0, 3.0], dtype=torch.float64))
"""


def _values(result) -> dict[str, str]:
    found = {}
    for line in result.outlines:
        m = re.search(r"VALUES (\S+) (.*)$", line)  # -s output may follow the progress text
        if m:
            found[m.group(1)] = m.group(2)
    return found


def _run(pytester: pytest.Pytester, *args: str):
    pytester.makepyfile(test_inline=INLINE_TESTS)
    # hypothesis' plugin costs about 2 s per in-process session and is not needed there
    return pytester.runpytest("-s", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args)


def test_entry_point_is_declared():
    eps = [ep for ep in entry_points(group="pytest11") if ep.name == "precisionkit"]
    assert len(eps) == 1
    assert eps[0].value == "precisionkit.pytest_plugin"


def test_plugin_is_registered_in_this_session(pytestconfig):
    assert pytestconfig.pluginmanager.get_plugin("precisionkit") is plugin_module


def test_plugin_registered_in_a_fresh_session(pytester: pytest.Pytester):
    config = pytester.parseconfigure()
    assert config.pluginmanager.get_plugin("precisionkit") is plugin_module
    assert config.getoption("--precisionkit-seed") == 0


def test_inline_tests_use_the_fixtures(pytester: pytest.Pytester):
    result = _run(pytester)
    result.assert_outcomes(passed=2, failed=1)
    # the failing comparison reports count, index, values, bit patterns and the tolerance used
    result.stdout.fnmatch_lines(
        [
            "*1 of 2 elements outside tolerance (atol=0.001, rtol=0.01; elementwise/torch.float16/K=1:"
            " decision matrix); worst at index (1,): actual 2.0 (0x4000), reference 3.0 (0x4008000000000000)*"
        ]
    )
    values = _values(result)
    assert set(values) == {"first", "first-uniform", "second"}
    first = [float(v) for v in values["first"].split()]
    assert len(first) == 12
    uniform = [float(v) for v in values["first-uniform"].split()]
    assert len(uniform) == 5 and all(2.0 <= v < 3.0 for v in uniform)
    # each test gets its own stream: same shape and dtype, different numbers
    assert values["first"] != values["second"]


def test_seeded_inputs_reproducible_and_seed_dependent(pytester: pytest.Pytester):
    default_a = _values(_run(pytester))
    default_b = _values(_run(pytester, "--precisionkit-seed=0"))
    other = _values(_run(pytester, "--precisionkit-seed=1"))
    other_again = _values(_run(pytester, "--precisionkit-seed", "1"))
    assert default_a == default_b  # same node id and seed: same numbers
    assert other == other_again
    for label in ("first", "first-uniform", "second"):
        assert default_a[label] != other[label], label


def test_plugin_can_be_disabled(pytester: pytest.Pytester):
    result = _run(pytester, "-p", "no:precisionkit")
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(["*fixture 'precision' not found*"])


def test_seed_option_help(pytester: pytest.Pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        ["precisionkit:", "*--precisionkit-seed*", "*base seed for the seeded_inputs fixture (default 0)*"]
    )


def test_factory_is_deterministic_for_a_seed():
    a = make_seeded_factory(123)
    b = make_seeded_factory(123)
    c = make_seeded_factory(124)
    x = a(16, dtype=torch.bfloat16)
    assert a.seed == 123 and x.dtype == torch.bfloat16
    assert torch.equal(x, b(16, dtype=torch.bfloat16))
    assert not torch.equal(x, c(16, dtype=torch.bfloat16))
    # draws are made in fp64 and rounded: the fp32 draw is the rounding of the fp64 stream
    expected = torch.randn(4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert torch.equal(make_seeded_factory(5)(4), expected.to(torch.float32))
    # successive calls continue the stream instead of repeating it
    assert not torch.equal(a(16, dtype=torch.bfloat16), x)


def test_factory_rejects_unknown_distribution():
    with pytest.raises(ValueError, match="unknown distribution 'laplace'"):
        make_seeded_factory(0)(3, distribution="laplace")
