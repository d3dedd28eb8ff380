"""How a program's fused path is compiled: statically (the default), with every size symbolic
(``torch.compile(dynamic=True)``), or with one dimension of one input marked dynamic
(``torch._dynamo.maybe_mark_dynamic``, which lets the compiler specialize the size where the program
forces it instead of failing).

A program says which in ``case.extra["compile"]``: ``{"mode": "dynamic"}`` or
``{"mode": "mark_dynamic", "input": k, "dim": d}``; no entry means static. The runner compiles that
way in process (:func:`compiled_as`), and the program's reproducer file does too: its ``setup``
(:func:`setup_source`) applies the same wrapper of ``torch.compile`` when the file runs as a script,
and nothing when :func:`precisionkit.repro.namespace` executes it in a process that runs other
programs.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from ..repro import Case

COMPILE_MODES = ("static", "dynamic", "mark_dynamic")


def mode_of(case: Case) -> Mapping[str, Any]:
    """The program's compile record (``{"mode": "static"}`` when it has none)."""
    record = case.extra.get("compile") or {"mode": "static"}
    if record.get("mode") not in COMPILE_MODES:
        raise ValueError(f"case {case.id!r}: compile mode must be one of {', '.join(COMPILE_MODES)}, got {record!r}")
    return dict(record)


def wrap(compile_fn: Callable[..., Any], record: Mapping[str, Any]) -> Callable[..., Any]:
    """``torch.compile`` as the record says: with ``dynamic=True``, or returning a function that
    marks dimension ``dim`` of argument ``input`` dynamic before each call."""
    if record["mode"] == "dynamic":
        return functools.partial(compile_fn, dynamic=True)
    if record["mode"] == "mark_dynamic":
        k, d = int(record["input"]), int(record["dim"])

        def compile_marked(fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
            compiled = compile_fn(fn, **kwargs)

            def call(*args: Any) -> Any:
                torch._dynamo.maybe_mark_dynamic(args[k], d)
                return compiled(*args)

            return call

        return compile_marked
    return compile_fn


@contextlib.contextmanager
def compiled_as(case: Case) -> Iterator[None]:
    """While inside, ``torch.compile`` compiles as ``case`` says (static programs: unchanged)."""
    record = mode_of(case)
    if record["mode"] == "static":
        yield
        return
    original = torch.compile
    torch.compile = wrap(original, record)
    try:
        yield
    finally:
        torch.compile = original


def setup_source(record: Mapping[str, Any]) -> str:
    """The reproducer's setup lines that compile as ``record`` says when the file runs as a script."""
    if record["mode"] == "static":
        return ""
    if record["mode"] == "dynamic":
        return (
            'if __name__ == "__main__":  # the tester compiled this program with dynamic=True\n'
            "    import functools\n"
            "    torch.compile = functools.partial(torch.compile, dynamic=True)\n"
        )
    k, d = int(record["input"]), int(record["dim"])
    return (
        f'if __name__ == "__main__":  # the tester marked dim {d} of input {k} dynamic\n'
        "    _compile = torch.compile\n"
        "    def _marked(fn, **kwargs):\n"
        "        compiled = _compile(fn, **kwargs)\n"
        "        def call(*args):\n"
        f"            torch._dynamo.maybe_mark_dynamic(args[{k}], {d})\n"
        "            return compiled(*args)\n"
        "        return call\n"
        "    torch.compile = _marked\n"
    )
