"""Sizes the code keeps to, checked on the source by ast: no module of the packages over 600 lines and
no function over 80 lines of code (its docstring aside), so that each reads in one sitting."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("precisionkit", "pipeline", "scripts", "benchmarks")
MODULE_LINES, FUNCTION_LINES = 600, 80


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The lines of ``fn`` from its ``def`` (decorators aside) to its end, less its docstring's."""
    assert fn.end_lineno is not None
    lines = fn.end_lineno - fn.lineno + 1
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        assert first.end_lineno is not None
        lines -= first.end_lineno - first.lineno + 1
    return lines


def long_functions(source: str) -> list[tuple[str, int]]:
    return [
        (node.name, code_lines(node))
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and code_lines(node) > FUNCTION_LINES
    ]


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in modules() if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert long == {}


def test_no_function_is_over_80_lines_of_code():
    long = {f"{p.relative_to(ROOT)}:{name}": n for p in modules() for name, n in long_functions(p.read_text())}
    assert long == {}


def test_the_function_rule_counts_code_not_its_docstring():
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    doc = '    """' + "\n".join(["A docstring"] * 30) + '"""\n'
    assert long_functions(f"def short():\n{doc}{body}\n") == []  # 1 + 79 lines of code
    assert long_functions(f"def long():\n{doc}{body}\n    x = 1\n") == [("long", 81)]
    assert len(modules()) > 100 and ROOT / "pipeline" / "plan.py" in modules()
