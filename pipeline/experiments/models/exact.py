"""The part of M's rule that is not a ULP distance: integer and bool outputs, and the class of a
float element (NaN, +inf, -inf, +0, -0, finite nonzero), judged against the fp64 re-execution
with the differential tester's own rule.

That rule is precisionkit's ``diff`` reproducer rule (:mod:`precisionkit.repro`); its ``kind`` and
``wrong`` are executed here from precisionkit's source, not restated:

* an integer or bool element is wrong where fused differs from eager and from the fp64
  re-execution (an index that picks fp64's optimum among ties of the working dtype is right);
* a float element is wrong where its class differs from eager's and eager has fp64's class
  (fp64 rounded to the output's dtype); a zero against a finite nonzero value is left to the value
  test, here M's scale-aware ULP test. ``wrong``'s own value test is switched off: its tolerance
  grows with the square root of the graph's longest reduction (``REDUCTION``), which is set to
  infinity, so no finite error exceeds it.

Candidates (elements whose class, or integer value, differs from eager's) are found where the
outputs are; only those elements go to the host for ``wrong``.

Two more parts of the rule judge in the program's own dtypes, where plain fp64 never overflows:

* a float element whose class (or a bool element whose value) fused changed against the
  dtype-faithful re-execution (each op in fp64, rounded to the dtype eager gives it), where eager has
  that class in every run of it (:func:`class_changes`): a float16 product that overflows is inf
  there as in eager, so a fused path that keeps it finite in float32 and then says ``isinf`` is False
  is wrong, while fp64 sides with it;
* an output computed from another output that disagrees with itself recomputed in eager from
  fused's value of that output (:func:`inconsistent_output`): fused returns ``y`` = inf and
  ``isinf(y)`` False.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch

from precisionkit.repro import Case, Input, namespace


@functools.cache
def diff_rule() -> dict[str, Any]:
    """The ``diff`` rule's definitions (``kind``, ``wrong``), its value test switched off."""
    case = Case(id="models_exact_part", source="def graph(x):\n    return x\n", inputs=(Input("x", (1,)),), rule="diff")
    scope = namespace(case)
    scope["REDUCTION"] = math.inf  # wrong's value tolerance: (rtol |ref| + afac max|ref|) * inf
    return scope


@dataclass(frozen=True)
class Judged:
    """One output's non-ULP judgement: elements fused got wrong under the rule; elements where fused
    differs from eager (in value for integer and bool outputs, in class for float ones) and has
    fp64's value or class (a tie fp64 breaks as fused did, a sign or special eager lost); and the
    first wrong element as text ("" when none)."""

    wrong: int
    fp64_sided: int
    example: str = ""


def _example(e: torch.Tensor, f: torch.Tensor, r: torch.Tensor, where: torch.Tensor, index: int) -> str:
    at = tuple(int(v) for v in where.nonzero()[0])
    return f"output {index} at {at}: eager {e[at].item()!r}, fused {f[at].item()!r}, fp64 {r[at].item()!r}"


def judge_exact(e: torch.Tensor, f: torch.Tensor, r: torch.Tensor, index: int) -> Judged:
    """Eager ``e`` and fused ``f`` of one output against fp64's ``r`` (same shape): integer and bool
    outputs element by element, float outputs by class. A fused output whose shape or dtype differs
    from eager's is wrong in every element."""
    if e.shape != f.shape or e.dtype != f.dtype:
        shown = f"eager {tuple(e.shape)} {e.dtype}, fused {tuple(f.shape)} {f.dtype}"
        return Judged(max(e.numel(), 1), 0, f"output {index}: shape or dtype differs: {shown}")
    rule = diff_rule()
    candidates = rule["kind"](f) != rule["kind"](e) if e.is_floating_point() else f != e
    if not bool(candidates.any()):
        return Judged(0, 0)
    ce, cf, cr = (t[candidates].cpu() for t in (e, f, r))
    bad = rule["wrong"](ce, cf, cr)
    wrong = int(bad.sum())
    # fp64 with fused: its value (integer, bool) or its class (float, fp64 rounded to the output's dtype)
    with_fp64 = rule["kind"](cr.to(cf.dtype)) == rule["kind"](cf) if cf.is_floating_point() else cr.to(cf.dtype) == cf
    sided = int(with_fp64.sum())
    if not wrong:
        return Judged(0, sided)
    full = torch.zeros(e.shape, dtype=torch.bool)
    full[candidates.cpu()] = bad
    return Judged(wrong, sided, _example(e.cpu(), f.cpu(), r.cpu(), full, index))


def faithful_runs(graph: Any, inputs: tuple[torch.Tensor, ...]) -> list[list[torch.Tensor]]:
    """Per output, the dtype-faithful re-executions of ``graph`` on ``inputs`` (the ``diff`` rule's
    ``faithful``: every op computed in fp64 and its result rounded to the dtype eager gives it; the
    run as is, then with every result moved one ULP up, and down, before its rounding)."""
    with torch.no_grad():
        runs: list[list[torch.Tensor]] = diff_rule()["faithful"](graph, lambda: [t.clone() for t in inputs])
    return runs


def class_changes(e: torch.Tensor, f: torch.Tensor, runs: list[torch.Tensor], index: int) -> Judged:
    """Elements of one output whose class (a bool's value) fused changed against the dtype-faithful
    reference, where eager has that reference's class in all of its runs (``class_changed``)."""
    if e.shape != f.shape or e.dtype != f.dtype or not runs:
        return Judged(0, 0)
    bad = diff_rule()["class_changed"](e, f, runs)
    if not bool(bad.any()):
        return Judged(0, 0)
    at = tuple(int(v) for v in bad.nonzero()[0])
    shown = (
        f"output {index} at {at}: eager {e[at].item()!r}, fused {f[at].item()!r}, dtype-faithful {runs[0][at].item()!r}"
    )
    return Judged(int(bad.sum()), 0, shown)


def inconsistent_output(
    graph: Any, inputs: tuple[torch.Tensor, ...], fused: list[torch.Tensor]
) -> tuple[int, int, str]:
    """(output, elements, example) of the first fused output that disagrees in class (a bool in
    value) with itself recomputed in eager from the fused output it is computed from (``inconsistent``);
    (-1, 0, "") when every such pair agrees or no output is computed from another."""
    with torch.no_grad():
        found = diff_rule()["inconsistent"](graph, lambda: [t.clone() for t in inputs], fused)
    if found is None:
        return -1, 0, ""
    i, j, bad, again = found
    at = tuple(int(v) for v in bad.nonzero()[0])
    shown = f"output {j} at {at}: fused {fused[j].cpu()[at].item()!r}, eager from fused output {i} {again[at].item()!r}"
    return j, int(bad.sum()), shown
