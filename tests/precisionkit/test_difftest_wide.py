"""The typed generator's wide stage (issue 41, items 3 and 5): softmax / log_softmax over any dim,
sin / cos / tan, exp and log at extreme arguments, wide input scales and constants, strided views,
cat / stack, long odd rows, and values of only +-0, only ties or only huge numbers. Generating
compiles nothing; the programs below run eagerly only."""

from __future__ import annotations

import random
import re
from unittest import mock

import pytest
import torch

from precisionkit import difftest
from precisionkit.difftest import typed, typed_wide
from precisionkit.difftest.features import feature_frequencies, features_of
from precisionkit.difftest.program import Program
from precisionkit.repro import namespace

NEW_FEATURES = (
    "softmax",
    "log_softmax",
    "trig",
    "exp_log_extreme",
    "extreme_magnitude",
    "strided_view",
    "cat_stack",
    "long_odd_row",
    "zero_only_values",
    "tie_only_values",
    "huge_only_values",
)
#: a fixed sample of typed programs, generated once for the module
SAMPLE = [difftest.generate(s, "typed") for s in range(300)]


def _returned(case) -> list[str]:
    return case.source.rstrip().splitlines()[-1].removeprefix("    return ").split(", ")


def _body(case) -> str:
    return case.source.split("\n", 1)[1].rsplit("    return ", 1)[0]


def test_a_seeded_sample_holds_every_new_op_form() -> None:
    src = "\n".join(c.source for c in SAMPLE)
    for form in (
        *(rf"torch\.softmax\(\w+, dim={d}\)" for d in ("0", "1", "-1")),
        *(rf"torch\.log_softmax\(\w+, dim={d}\)" for d in ("0", "1", "-1")),
        *(rf"torch\.{fn}\(f\d+\)" for fn in ("sin", "cos", "tan")),
        r"torch\.tan\(v\d+\.clamp\(-1\.5, 1\.5\)\)",
        r"torch\.exp\(\w+ \+ 8[89]\.",
        r"torch\.exp\(\w+ - 10[04]\.0\)",
        r"torch\.exp\(\w+ \+ 11\.",
        r"torch\.log\(\w+\.abs\(\) \* 1e-40\)",
        r"\.reshape\(\d+, \d+\)\.t\(\) \+ ",
        r"\[::\d, [1-4]::[235]\]",
        r"torch\.as_strided\(\w+\.reshape\(-1\), \(\d+, [234]\), \([1234], 1\)\) \* ",
        r"torch\.cat\(\[\w+, \w+\], dim=0\)",
        r"torch\.cat\(\[\w+, \w+\], dim=-1\)",
        r"torch\.stack\(\[\w+, \w+\], dim=2\)",
        r"torch\.copysign\(torch\.zeros_like\(\w+\), \w+\)",
        r"torch\.round\(\w+\)\.clamp\(-1\.0, 1\.0\)",
        r"\(torch\.sign\(\w+\) \+ 2\.0\) \* 8e\+37",
        r"\(torch\.sign\(\w+\) \+ 2\.0\) \* 16384\.0",
        r"torch\.argmax\(\w+, dim=\d, keepdim=True\)",
        r"torch\.reciprocal\(\w+\)",
        r"torch\.sqrt\(\w+\)",
    ):
        assert re.search(form, src, re.M), form
    scales = {i.scale for c in SAMPLE for i in c.inputs if i.values == "normal"}
    assert set(typed_wide.WIDE_SCALES) <= scales
    widths = {i.shape[-1] for c in SAMPLE for i in c.inputs}
    assert set(typed_wide.LONG_ROWS) <= widths


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_each_new_feature_is_in_one_percent_of_a_plan(device: str) -> None:
    freq = feature_frequencies(1000, device)
    # 10 per 1000: the vocabulary's budget (tests/precisionkit/test_difftest_features.py)
    assert all(freq[f] >= 10 for f in NEW_FEATURES), {f: freq[f] for f in NEW_FEATURES}


def test_each_seeds_earlier_program_is_a_prefix_of_the_new_one() -> None:
    # The range stage comes after this one and is left out of both (it has its own prefix test).
    with mock.patch.object(typed, "range_stage", lambda p, shape: []):
        news = [difftest.generate(seed, "typed") for seed in range(200)]
        with mock.patch.object(typed, "wide_stage", lambda p, shape: []):
            olds = [difftest.generate(seed, "typed") for seed in range(200)]
    for seed, (new, old) in enumerate(zip(news, olds, strict=True)):
        assert new.id == old.id and new.extra["reduction"] == old.extra["reduction"], seed
        assert new.inputs[: len(old.inputs)] == old.inputs, seed
        assert _body(new).startswith(_body(old)), seed
        outs_old, outs_new = _returned(old), _returned(new)
        assert outs_new[: len(outs_old)] == outs_old and len(outs_new) > len(outs_old), seed


def test_new_features_are_read_from_the_new_lines_and_inputs() -> None:
    for seed in range(60):
        with (
            mock.patch.object(typed, "wide_stage", lambda p, shape: []),
            mock.patch.object(typed, "range_stage", lambda p, shape: []),
        ):
            old = difftest.generate(seed, "typed")
        assert not features_of(old) & {"trig", "cat_stack", "long_odd_row", "exp_log_extreme"}, seed
    case = next(c for c in SAMPLE if any(i.shape[-1] in typed_wide.LONG_ROWS for i in c.inputs))
    assert "long_odd_row" in features_of(case)
    case = next(c for c in SAMPLE if any(i.scale == 1e-40 for i in c.inputs) and "e-" not in c.source)
    assert "extreme_magnitude" in features_of(case)


def _stage(seed: int, dtype: str) -> tuple[Program, list[str]]:
    p = Program(seed, random.Random(seed), dtype)
    p.input("f", (3, 9))
    p.add("f", (3, 9), "f0 * 2.0")
    return p, typed_wide.wide_stage(p, (3, 9))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_new_outputs_have_their_recorded_shapes_and_dtypes(dtype: str) -> None:
    seen = set()
    for seed in range(40):
        p, out = _stage(seed, dtype)
        scope = namespace(p.case(out, "typed"))
        with torch.no_grad():
            got = scope["graph"](*scope["make"]())
        got = got if isinstance(got, tuple) else (got,)
        for name, t in zip(out, got, strict=True):
            kind, shape = p.kinds[name]
            seen.add(kind)
            assert tuple(t.shape) == shape, (seed, name)
            want = torch.int64 if kind == "n" else getattr(torch, dtype)
            assert t.dtype == want, (seed, name)
    assert seen == {"f", "n", "s"}


def _value(case, pattern: str) -> list[torch.Tensor]:
    """The values of ``case`` whose line matches ``pattern``, made eagerly."""
    names = re.findall(rf"^    (v\d+) = {pattern}", case.source, re.M)
    if not names:
        return []
    src = case.source.rsplit("    return ", 1)[0] + "    return " + ", ".join(names) + ",\n"
    scope = namespace(case.with_(source=src))
    with torch.no_grad():
        return list(scope["graph"](*scope["make"]()))


def test_pattern_values_hold_only_zeros_ties_or_huge_numbers() -> None:
    counts = dict.fromkeys(("zero", "tie", "huge"), 0)
    for case in SAMPLE[:120]:
        dtype = case.id.rsplit("-", 1)[1]
        big = typed_wide.BIG[dtype]
        for t in _value(case, r"torch\.copysign\(torch\.zeros_like"):
            counts["zero"] += 1
            assert bool(((t == 0) | t.isnan()).all()), case.id
        for t in _value(case, r"torch\.round\(\w+\)\.clamp"):
            counts["tie"] += 1
            assert set(t[~t.isnan()].tolist()) <= {-1.0, 0.0, 1.0}, case.id
        for t in _value(case, r"\(torch\.sign"):
            counts["huge"] += 1
            # 1, 2 or 3 times BIG, each rounded to the dtype (3 * 8e37 is 3.004 * 8e37 in bfloat16)
            ratio = t[~t.isnan()].double() / big
            assert len(set(ratio.tolist())) <= 3 and bool(((ratio > 0.99) & (ratio < 3.01)).all()), case.id
    assert min(counts.values()) >= 3, counts


def test_exp_at_the_float32_threshold_overflows_and_underflows() -> None:
    """exp(x + 89) is inf in float32 for any x above -0.28, exp(x - 104) is zero or subnormal for x
    below 0.03: the forms the stage writes reach both ends of float32's exponent range."""
    case = next(c for c in SAMPLE if re.search(r"torch\.exp\(\w+ \+ 89\.0\)", c.source) and "float32" in c.id)
    hits = _value(case, r"torch\.exp\(\w+ \+ 89\.0\)")
    assert any(bool(t.isinf().any()) for t in hits), case.id
