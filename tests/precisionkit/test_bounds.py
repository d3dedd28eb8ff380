"""precisionkit.bounds is the one home of the error-bound maths: exact values, clear errors, and no
other module of precisionkit/ or pipeline/ defining unit roundoff or gamma_k again."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

import precisionkit
from precisionkit.bounds import (
    gamma,
    gamma_tilde,
    matmul_error_bound,
    p_lambda,
    rounding_error,
    underflow_error,
    unit_roundoff,
)

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "precisionkit" / "bounds.py"
#: Names a second definition of the unit roundoff or of gamma_k would likely take (u16, _unit32,
#: unit_roundoff, gamma, gamma_k, gamma_tilde, ...), leading underscores allowed.
DEFINITION = re.compile(r"_*(unit_?round_?off\w*|unit\d*|u\d+|gamma(_k|_tilde)?)", re.IGNORECASE)
EXACT = {"float16": 2**-11, "bfloat16": 2**-8, "float32": 2**-24, "float64": 2**-53}


@pytest.mark.parametrize(("name", "u"), EXACT.items())
def test_unit_roundoff_of_dtypes_and_names(name, u):
    dtype = getattr(torch, name)
    assert unit_roundoff(dtype) == unit_roundoff(name) == unit_roundoff(f"torch.{name}") == u
    assert u == torch.finfo(dtype).eps / 2  # half the machine epsilon, exactly
    assert underflow_error(name) == torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps / 2


@pytest.mark.parametrize("bad", [torch.int32, torch.bool, "float8_e4m3fn", "half", "fp16", ""])
def test_unit_roundoff_rejects_other_formats(bad):
    with pytest.raises(ValueError, match=r"no unit roundoff for .*expected one of float16, bfloat16, float32, float64"):
        unit_roundoff(bad)


def test_gamma_takes_a_unit_or_a_dtype_and_checks_k_u_below_one():
    assert gamma(0, torch.float32) == 0.0
    assert gamma(3, "float16") == gamma(3, 2**-11) == 3 * 2**-11 / (1 - 3 * 2**-11)
    assert gamma(2047, "float16") == 2047 / 1
    with pytest.raises(ValueError, match=r"gamma_k undefined: k\*u = 1.0 >= 1"):
        gamma(2048, "float16")
    with pytest.raises(ValueError, match="k must be >= 0"):
        gamma(-1, 0.1)
    with pytest.raises(ValueError, match="no unit roundoff"):
        gamma(1, torch.int8)
    assert gamma_tilde(16384, "float32", 6.0) == gamma_tilde(16384, 2**-24, 6.0) < gamma(16384, "float32")
    assert p_lambda(6.0, "float32") == p_lambda(6.0, 2**-24)


def test_rounding_and_matmul_bounds_exact():
    assert rounding_error(2.0, torch.float16) == 2**-10 + 2**-25
    t = torch.tensor([0.0, 4.0], dtype=torch.float64)
    assert rounding_error(t, "bfloat16").tolist() == [2**-134, 2**-6 + 2**-134]
    a = torch.tensor([[[1.0, -1.0, 2.0]]], dtype=torch.float64)
    b = torch.ones(1, 3, 2, dtype=torch.float64)
    assert matmul_error_bound(a, b).tolist() == [[[gamma(3, 2**-24) * 4.0] * 2]]


def test_public_api_exports_the_bounds():
    for name in ("unit_roundoff", "gamma", "gamma_tilde", "rounding_error", "matmul_error_bound"):
        assert name in precisionkit.__all__ and getattr(precisionkit, name) is globals()[name]
    assert "summation_error_bound" in precisionkit.__all__ and "SummationBound" in precisionkit.__all__


def _definitions(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line name`` of every function (or lambda bound to a name) named like a unit roundoff
    or gamma_k, and of every ``<x>.eps / 2`` (a unit roundoff written out), in one source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        name = None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = node.name
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            name = next((t.id for t in node.targets if isinstance(t, ast.Name)), None)
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and isinstance(node.left, ast.Attribute)
            and node.left.attr == "eps"
            and isinstance(node.right, ast.Constant)
            and node.right.value == 2
        ):
            name = ast.unparse(node)
        if name is not None and (DEFINITION.fullmatch(name) or name.endswith("eps / 2")):
            found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    return found


def test_the_scan_finds_a_second_definition(tmp_path):
    # The check below would pass vacuously if the scan missed what it looks for.
    src = tmp_path / "other.py"
    src.write_text(
        "def unit_roundoff(d):\n    return 2.0 ** -24\n"
        "def _gamma_k(k, u):\n    return k * u / (1 - k * u)\n"
        "U16 = lambda: torch.finfo(torch.float16).eps / 2\n"
        "def units(x):\n    return x\n"
    )
    found = [f.split(" ", 1)[1] for f in _definitions(src, tmp_path)]
    assert found == ["unit_roundoff", "_gamma_k", "U16", "torch.finfo(torch.float16).eps / 2"]


def test_no_other_module_defines_unit_roundoff_or_gamma():
    sources = sorted(p for tree in ("precisionkit", "pipeline") for p in (ROOT / tree).rglob("*.py"))
    assert HOME in sources and len(sources) > 50
    others = [f for p in sources if p != HOME for f in _definitions(p)]
    assert others == [], "defined outside precisionkit/bounds.py (import it from there instead):\n" + "\n".join(others)


def test_the_reproducers_unit_roundoff_is_this_modules_written_out():
    # A standalone reproducer imports only torch, so the diff rule's text (precisionkit.repro_rules)
    # carries this module's table, written into it as literals, and no unit roundoff of its own.
    from precisionkit import bounds
    from precisionkit.repro_rules import CHECKS

    text = CHECKS["diff"]
    assert "eps / 2" not in text
    line = next(x for x in text.splitlines() if x.startswith("UNIT_ROUNDOFF = "))
    assert line.startswith(
        "UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24, "
        "torch.float64: 2.0**-53}"
    )
    scope: dict = {"torch": torch}
    exec(compile(text, "<diff rule>", "exec"), scope)
    assert scope["UNIT_ROUNDOFF"] == bounds.UNIT_ROUNDOFF
    for name, u in EXACT.items():
        t = torch.zeros(2, dtype=getattr(torch, name))
        assert scope["unit_roundoff"]([t, torch.zeros(2, dtype=torch.float64)]) == unit_roundoff(name) == u
    assert scope["unit_roundoff"]([torch.zeros(2, dtype=torch.int32)]) == unit_roundoff("float64")


def test_a_written_diff_reproducer_carries_the_table_and_runs_alone(tmp_path: Path) -> None:
    """The table is written into the file, which runs in a fresh interpreter that imports no precisionkit: one
    element of a float16 output garbled sends the rule through its jittered runs (sized by the file's
    unit_roundoff, 2^-11 here) and still reproduces."""
    from repro_backends import SETUP

    from precisionkit.repro import Case, Input, run_script, write

    source = "def graph(x):\n    return x * 3.0\n"
    inputs = (Input("x", (2, 8), "float16", 1),)
    case = Case("u", source, inputs, backend="pk_test_garbage_one", rule="diff", setup=SETUP)
    text = (script := write(case, tmp_path / "u")).read_text()
    assert "UNIT_ROUNDOFF = {torch.float16: 2.0**-11, " in text
    assert "precisionkit" not in text.replace(SETUP, "")
    run = run_script(script)
    assert run.returncode == 1, run
    assert run.last_line.startswith("REPRODUCES: output 0: 1 of 16 elements wrong; at (1, 7): eager "), run.last_line
