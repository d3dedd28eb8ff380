"""A zero remainder's sign is not the typed generator's to judge: eager returns the dividend's sign
(``torch.remainder(-0.0, 3.0)`` is -0.0), while torch documents the divisor's (``a - floor(a / b) * b``
gives +0.0), so a compiler that follows the documentation was flagged (OpenVINO, campaign finding
typed-907089-float32). The generator writes ``torch.remainder(x, y) + 0.0``: both zeros become +0.0,
and every nonzero remainder is judged as before."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from precisionkit import difftest
from precisionkit.repro import Case, Input, reproduces

BACKEND = "pk_test_remainder_as_documented"
#: a remainder computed wrong: half of eager's
HALVED = "pk_test_remainder_halved"


class _Remainder(TorchDispatchMode):
    """Eager but for aten::remainder, whose result ``fix(a, b, out)`` replaces."""

    def __init__(self, fix: Any) -> None:
        super().__init__()
        self.fix = fix

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        return self.fix(args[0], args[1], out) if func._schema.name == "aten::remainder" else out


FIXES = {
    BACKEND: lambda a, b, out: a - torch.floor(a / b) * b,  # as torch documents it
    HALVED: lambda a, b, out: out * 0.5,
}


def _register() -> None:
    from torch._dynamo import list_backends, register_backend

    known = set(list_backends(exclude_tags=()))
    for name, fix in FIXES.items():
        if name in known:
            continue

        def backend(gm: torch.fx.GraphModule, example_inputs: list[Any], fix: Any = fix) -> Any:
            def run(*args: Any) -> Any:
                with _Remainder(fix):
                    return gm(*args)

            return run

        register_backend(compiler_fn=backend, name=name)


def _case(expr: str) -> Case:
    # negative zeros (a negative value times 0.0) and plain values, each modulo an inexact divisor
    source = f"def graph(x):\n    z = torch.cat([-x.abs() * 0.0, x], dim=1)\n    return {expr}\n"
    return Case("mod-zero", source, (Input("x", (3, 8), "float32", 11),), backend=BACKEND, rule="diff")


def test_the_remainder_of_a_negative_zero_was_judged_and_is_not_in_the_generators_form() -> None:
    _register()
    hit, message = reproduces(_case("torch.remainder(z, 3.0)"))
    assert hit and "eager -0.0, fused (pk_test_remainder_as_documented) 0.0" in message, message
    assert reproduces(_case("torch.remainder(z, 3.0) + 0.0")) == (
        False,
        "every output agrees with eager and fp64 (pk_test_remainder_as_documented)",
    )


def test_a_wrong_nonzero_remainder_is_still_caught_in_the_generators_form() -> None:
    _register()
    source = "def graph(x):\n    return torch.remainder(x * 1000.0, 0.7) + 0.0\n"
    wrong = Case("mod-big", source, (Input("x", (3, 8), "float32", 12),), backend=HALVED, rule="diff")
    assert reproduces(wrong)[0] is True


def test_the_typed_generator_writes_every_float_remainder_with_its_zero_made_positive() -> None:
    float_remainders = 0
    for seed in range(907000, 907400):
        case = difftest.generate(seed, "typed")
        for line in case.source.splitlines():
            if "torch.remainder(" in line and not re.search(r"torch\.remainder\(\w+, 5\)", line):
                assert line.rstrip().endswith(") + 0.0"), (case.id, line)
                float_remainders += 1
    assert float_remainders >= 5
