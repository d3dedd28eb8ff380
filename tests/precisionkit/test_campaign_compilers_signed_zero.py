"""The typed generator's signed-zero stage selects zeros with ``where`` only: which zero minimum,
maximum or clamp return for +0 and -0 is fixed by no rule (eager's minimum answers differently in its
vector loop and its scalar tail; Inductor's clamp(+0, max=-0.0) is -0 where eager's is +0), so
OpenVINO's -0 from ``clamp(z, max=-0.0)`` was a false alarm (campaign findings typed-907079-float32
and typed-907115-float32)."""

from __future__ import annotations

import re

from precisionkit import difftest


def test_no_signed_zero_of_the_stage_goes_through_minimum_maximum_or_clamp() -> None:
    stages = 0
    for seed in range(907000, 907600):
        source = difftest.generate(seed, "typed").source
        zeros = re.findall(r"^\s+(v\d+) = torch\.copysign\(torch\.zeros_like\(", source, re.M)
        for name in zeros:
            stages += 1
            for line in source.splitlines():
                if re.search(rf"torch\.(?:minimum|maximum|clamp)\([^\n]*\b{name}\b", line):
                    raise AssertionError(f"typed-{seed}: {line.strip()}")
    assert stages >= 20  # the stage is drawn: its zeros go through where and min / max over a dim


def test_the_stage_still_selects_signed_zeros_with_where() -> None:
    wheres = 0
    for seed in range(907000, 907600):
        source = difftest.generate(seed, "typed").source
        zeros = set(re.findall(r"^\s+(v\d+) = torch\.copysign\(torch\.zeros_like\(", source, re.M))
        wheres += sum(
            1 for line in source.splitlines() if "torch.where(" in line and zeros & set(re.findall(r"\bv\d+\b", line))
        )
    assert wheres >= 10


FLOAT_MIN_MAX = re.compile(
    r"torch\.(?:minimum|maximum)\(.*dtype=|torch\.minimum\((\w+), -\1\)|torch\.maximum\(-(\w+), \2\)"
    r"|torch\.clamp\(\w+, min=-abs\("
)
#: a second operand or bound that can be a zero of the other sign: another value, zeros, a zero constant
MEETS_ZERO = re.compile(r"as_tensor\((?:[fv]\d|torch\.zeros_like|-?0\.0,)|abs\(-?0\.0\)|\((\w+), -\1\)|\(-(\w+), \2\)")


def test_a_float_minimum_maximum_or_clamp_that_may_meet_two_zeros_has_its_zero_made_positive() -> None:
    """minimum(x, -x) of x = +0 is -0 or +0 by where eager's loop is (typed-908094-float16, IREE): the
    generator writes + 0.0 after each minimum, maximum or clamp whose operands can be +0 and -0, and
    nothing after one with a nonzero bound, where -0 stays judged (clamp(-0.0, -1000.0, 1001.0) is -0)."""
    guarded = kept = 0
    for seed in range(907000, 907600):
        for line in difftest.generate(seed, "typed").source.splitlines():
            if not FLOAT_MIN_MAX.search(line):
                continue
            if MEETS_ZERO.search(line):
                assert line.rstrip().endswith(") + 0.0"), (seed, line)
                guarded += 1
            else:
                assert not line.rstrip().endswith("+ 0.0"), (seed, line)
                kept += 1
    assert guarded >= 20 and kept >= 10
