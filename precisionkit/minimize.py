"""Delta debugging of a :class:`~precisionkit.repro.Case`: the fewest ops and the smallest shapes
that still reproduce.

The graph is traced with ``torch.fx`` and printed back as plain code, so a minimized case is still
a readable function. Candidates, tried greedily until none is accepted (or the budget is spent):

* over ops: end the graph early at one of its values, or bypass one op (its uses read its first
  tensor input instead, where shape and dtype agree); dead ops and unused inputs go; a graph that
  ``torch.fx`` cannot trace (in-place writes, index assignment) is cut by source line instead:
  fewer outputs, an earlier value returned, or one line dropped;
* over dims: every input dim of one size shrinks together to 1, then to half (equal-sized dims
  are usually the same axis, so they shrink as one).

A candidate is accepted when ``predicate(candidate)`` holds; :func:`predicate_for` builds the
usual one: the case reproduces with its backend AND a healthy control backend stays clean, so a
smaller graph never trades the defect for a legitimate difference. It also keeps the failure the
search started from (:class:`Signature`: the op producing the failing output, that output's dtype,
and the class of the difference), so a program holding two defects does not slide from the one it
was given to the other, smaller one.

The result records why the search ended (:attr:`Minimized.ended`: the budget ran out, every candidate
was tried, or there was none to try), and :func:`~precisionkit.repro.minimization_text` says it in one
sentence: "Minimized from N to M ops" only where ops were removed, else why the program could not
shrink, with the counts.

Every candidate keeps the case's device (:attr:`~precisionkit.repro.Case.device`) and Inductor
options: a defect found on CUDA is minimized on CUDA, through the same Triton code path.
"""

from __future__ import annotations

import contextlib
import math
import operator
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.fx

from .repro import Case, Input, namespace, reproduces

_DEAD = re.compile(r";\s+(?:\w+ = )+None$")
_ANNOTATION = re.compile(r"\s*:\s*[\w.]+(?=[,)])")


def _is_shape_node(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is getattr:
        return True
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        return _is_shape_node(node.args[0])
    return False


def count_ops(gm: torch.fx.GraphModule) -> int:
    """Operations of a traced graph, not counting reads of a tensor's shape."""
    return sum(
        1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module") and not _is_shape_node(n)
    )


def trace(case: Case) -> torch.fx.GraphModule:
    """The case's graph traced by ``torch.fx`` with shapes and dtypes recorded on every node, its
    inputs made on the case's device (factory calls in the graph too)."""
    scope = namespace(case)
    from torch.fx.passes.shape_prop import ShapeProp

    with contextlib.nullcontext() if case.device == "cpu" else torch.device(case.device):
        gm = torch.fx.symbolic_trace(scope["graph"])  # constants it folds are made on the device too
        ShapeProp(gm).propagate(*scope["make"]())
    return gm


def graph_source(gm: torch.fx.GraphModule) -> str:
    """A traced graph printed back as ``def graph(...)`` in plain torch code."""
    code = gm.graph.python_code(root_module="self").src
    lines = []
    for line in code.strip().splitlines():
        line = _DEAD.sub("", line.rstrip())
        if re.fullmatch(r"\s+(?:\w+ = )+None", line):
            continue
        if line.startswith("def forward("):  # the original function's annotations are not needed
            line = _ANNOTATION.sub("", re.sub(r"\)\s*->\s*[\w.\[\], ]+:$", "):", line))
        lines.append(line)
    text = "\n".join(lines)
    text = re.sub(r"def forward\(self,? ?", "def graph(", text, count=1)
    prefix = ""
    if re.search(r"\binf\b", text) or re.search(r"\bnan\b", text):
        prefix = "inf, nan = float('inf'), float('nan')\n\n\n"
    return prefix + text + "\n"


def _meta(node: object) -> tuple[tuple[int, ...], torch.dtype] | None:
    if not isinstance(node, torch.fx.Node):
        return None
    tm = node.meta.get("tensor_meta")
    if tm is None or not hasattr(tm, "shape"):
        return None
    return tuple(tm.shape), tm.dtype


def _rebuilt(case: Case, gm: torch.fx.GraphModule, graph: torch.fx.Graph) -> Case | None:
    graph.eliminate_dead_code()
    names = [n.target for n in graph.nodes if n.op == "placeholder"]
    for node in list(graph.nodes):
        if node.op == "placeholder" and not node.users:
            graph.erase_node(node)
    kept = [n.target for n in graph.nodes if n.op == "placeholder"]
    if not kept or len(kept) > len(names):
        return None
    new = torch.fx.GraphModule(gm, graph)
    by_name = {i.name: i for i in case.inputs}
    try:
        return case.with_(source=graph_source(new), inputs=tuple(by_name[str(k)] for k in kept))
    except (KeyError, ValueError):
        return None


def op_candidates(case: Case) -> Iterator[Case]:
    """Smaller graphs: end early at a value, or bypass one op."""
    gm = trace(case)
    nodes = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method") and not _is_shape_node(n)]
    for node in nodes[:-1]:  # end early
        if _meta(node) is None:
            continue
        g = torch.fx.Graph()
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        for n in gm.graph.nodes:
            if n.op == "output":
                break
            env[n] = g.node_copy(n, env.__getitem__)
            if n is node:
                break
        g.output(env[node])
        cand = _rebuilt(case, gm, g)
        if cand is not None:
            yield cand
    for node in reversed(nodes):  # bypass
        meta = _meta(node)
        src = next((a for a in node.all_input_nodes if _meta(a) == meta), None)
        if meta is None or src is None:
            continue
        g = torch.fx.Graph()
        env = {}
        for n in gm.graph.nodes:
            if n is node:
                env[n] = env[src]
                continue
            env[n] = g.node_copy(n, env.__getitem__)
        if count_ops(torch.fx.GraphModule(gm, g)) == 0:
            continue
        cand = _rebuilt(case, gm, g)
        if cand is not None:
            yield cand


def _program(case: Case, head: str, body: list[str], outs: list[str]) -> Case | None:
    """``case`` with another body and return, its unused inputs dropped."""
    text = "\n".join(body) + " " + " ".join(outs)
    kept = tuple(i for i in case.inputs if re.search(rf"\b{re.escape(i.name)}\b", text))
    if not kept:
        return None
    indent = re.match(r"\s*", body[0]).group(0) if body else "    "  # type: ignore[union-attr]
    lines = [f"def graph({', '.join(i.name for i in kept)}):", *body, f"{indent}return {', '.join(outs)}"]
    try:
        return case.with_(source="\n".join(lines) + "\n", inputs=kept)
    except ValueError:
        return None


_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def live_lines(body: list[str], outs: list[str]) -> list[str]:
    """The lines of ``body`` that ``outs`` depend on, by a backward pass over names: an assignment
    ``x = ...`` is kept when ``x`` is live, any other line (an in-place write such as ``x.fill_()``
    or ``x[i] = v``) when it names a live value; what a kept line reads becomes live. A write
    through an alias (``flat = x.view(-1)``; ``flat[i] = v``) is not followed: a candidate that
    loses it fails its check and is not taken."""
    # Only the program's own values count: its assigned names and whatever else the lines name
    # that is not a module, attribute or keyword (``torch``, ``.to``, ``dtype=``) - the graph's
    # parameters are the names read but never assigned.
    assigned = {m.group(1) for m in (re.match(r"\s+(\w+) = ", line) for line in body) if m}
    live = set(outs)
    kept: list[str] = []

    def values(text: str) -> set[str]:
        code = re.sub(r"\.\w+|\b\w+(?==)", "", text)  # drop attributes and keyword names
        return {n for n in _NAME.findall(code) if n in assigned or n not in _NOT_VALUES}

    for line in reversed(body):
        m = re.match(r"\s+(\w+) = (.*)", line)
        if m:
            if m.group(1) not in live:
                continue
            live.discard(m.group(1))
            live.update(values(m.group(2)))
        else:
            names = values(line)
            if not names & live:
                continue
            live.update(names)
        kept.append(line)
    return kept[::-1]


#: Names in a program's lines that are never its values.
_NOT_VALUES = frozenset({"torch", "F", "math", "float", "int", "bool", "True", "False", "None", "abs", "min", "max"})


def single_output(case: Case, k: int) -> Case | None:
    """``case`` reduced to its ``k``-th returned value and the lines it depends on (None when the
    source is not a ``def graph`` with one return line, or ``k`` is out of range)."""
    lines = case.source.rstrip("\n").splitlines()
    if len(lines) < 2 or not lines[0].startswith("def graph(") or not lines[-1].strip().startswith("return "):
        return None
    outs = [o.strip() for o in lines[-1].strip().removeprefix("return ").split(",") if o.strip()]
    if not 0 <= k < len(outs):
        return None
    return _program(case, lines[0], live_lines(lines[1:-1], [outs[k]]), [outs[k]])


def line_candidates(case: Case) -> Iterator[Case]:
    """Smaller programs by source line, for graphs ``torch.fx`` cannot trace (in-place writes,
    index assignment): keep fewer outputs, end early at an assigned value, or drop one line."""
    lines = case.source.rstrip("\n").splitlines()
    if len(lines) < 3 or not lines[0].startswith("def graph(") or not lines[-1].strip().startswith("return "):
        return
    head, body = lines[0], lines[1:-1]
    outs = [o.strip() for o in lines[-1].strip().removeprefix("return ").split(",") if o.strip()]
    found: list[Case | None] = []
    if len(outs) > 1:  # one output, and only the lines it depends on
        found += [_program(case, head, live_lines(body, [o]), [o]) for o in outs]
    for k, line in enumerate(body):
        m = re.match(r"\s+(\w+) = ", line)
        if m and m.group(1) not in outs:
            found.append(_program(case, head, live_lines(body[: k + 1], [m.group(1)]), [m.group(1)]))
    found += [_program(case, head, live_lines(body[:k] + body[k + 1 :], outs), outs) for k in range(len(body))]
    yield from (c for c in found if c is not None)


def dim_candidates(case: Case) -> Iterator[Case]:
    """Smaller inputs: every dim of one size set to 1, then to half of it (largest sizes first)."""
    sizes = sorted({d for i in case.inputs for d in i.shape if d > 1}, reverse=True)
    for size in sizes:
        for new in dict.fromkeys((1, size // 2)):
            if new >= size:
                continue
            inputs = tuple(replace(i, shape=tuple(new if d == size else d for d in i.shape)) for i in case.inputs)
            yield case.with_(inputs=inputs)


def layout_candidates(case: Case) -> Iterator[Case]:
    """Plainer inputs: one non-contiguous input made contiguous, or edge / grid values made normal
    (a defect that needs neither says so by reproducing without them)."""
    for k, i in enumerate(case.inputs):
        if i.layout != "contiguous":
            yield case.with_(inputs=(*case.inputs[:k], replace(i, layout="contiguous"), *case.inputs[k + 1 :]))
        if i.values in ("edge", "grid"):
            yield case.with_(inputs=(*case.inputs[:k], replace(i, values="normal"), *case.inputs[k + 1 :]))


def _plainness(case: Case) -> int:
    return sum((i.layout != "contiguous") + (i.values in ("edge", "grid")) for i in case.inputs)


#: Why a minimization ended (:attr:`Minimized.ended`): ``budget``: ``max_checks`` candidates were tried
#: and more were left; ``exhausted``: every candidate was tried and none more was accepted; ``minimal``:
#: the program had no smaller candidate to try at all.
ENDINGS = ("budget", "exhausted", "minimal")


@dataclass
class Minimized:
    """The smallest case found, and what it took: ``checks`` candidates tried, ``accepted`` of them kept
    (each a step of ``steps``), and why the search ended (``ended``, one of :data:`ENDINGS`) within a
    budget of ``max_checks``."""

    case: Case
    original: Case
    checks: int
    seconds: float
    steps: list[str] = field(default_factory=list)
    ended: str = "exhausted"
    max_checks: int = 40

    @property
    def ops_before(self) -> int:
        return _ops(self.original)

    @property
    def ops_after(self) -> int:
        return _ops(self.case)

    @property
    def accepted(self) -> int:
        return len(self.steps)

    def outcome(self) -> dict[str, Any]:
        """The record a reproducer's texts are written from (:func:`~precisionkit.repro.minimization_text`)."""
        return {
            "ops_before": self.ops_before,
            "ops_after": self.ops_after,
            "shapes_before": [list(i.shape) for i in self.original.inputs],
            "shapes_after": [list(i.shape) for i in self.case.inputs],
            "minimize_checks": self.checks,
            "minimize_accepted": self.accepted,
            "minimize_ended": self.ended,
            "minimize_max_checks": self.max_checks,
            "minimize_seconds": round(self.seconds, 1),
        }


def _ops(case: Case) -> int:
    """Operations of the graph (FX-traced); its source lines where ``torch.fx`` cannot trace it."""
    try:
        return count_ops(torch.fx.symbolic_trace(namespace(case)["graph"]))
    except Exception:  # noqa: BLE001
        return max(0, len(case.source.strip().splitlines()) - 2)


def _lines(case: Case) -> int:
    """Source lines of the graph's body (and its outputs, so dropping one output counts)."""
    lines = case.source.strip().splitlines()
    outs = lines[-1].count(",") + 1 if lines and lines[-1].strip().startswith("return") else 1
    return len(lines) - 2 + outs


def _numel(case: Case) -> int:
    total = 0
    for i in case.inputs:
        n = 1
        for d in i.shape:
            n *= d
        total += n
    return total


def minimize(case: Case, predicate: Callable[[Case], bool], *, max_checks: int = 40) -> Minimized:
    """Greedy delta debugging over ops, then dims, then ops again, until no candidate is accepted
    or ``max_checks`` candidates were tried. ``case`` itself is assumed to satisfy ``predicate``;
    a predicate with an ``anchor`` method (:func:`predicate_for`'s) is shown ``case`` first."""
    start = time.perf_counter()
    anchor = getattr(predicate, "anchor", None)
    if anchor is not None:
        anchor(case)
    current, checks, steps = case, 0, []
    seen: set[tuple[str, tuple[Input, ...]]] = {(case.source, case.inputs)}
    progress, out_of_budget = True, False
    while progress and not out_of_budget:
        progress = False
        for kind, gen in (
            ("ops", op_candidates),
            ("lines", line_candidates),
            ("dims", dim_candidates),
            ("layout", layout_candidates),
        ):
            try:
                cands = list(gen(current))
            except Exception:  # noqa: BLE001 - an untraceable graph keeps its ops
                cands = []
            for cand in cands:
                key = (cand.source, cand.inputs)
                if key in seen:
                    continue
                # each kind is measured in its own unit: FX ops, source lines (what an untraceable
                # program has), input elements
                smaller = {"ops": _ops, "lines": _lines, "dims": _numel, "layout": _plainness}[kind]
                if not smaller(cand) < smaller(current):
                    continue
                if checks >= max_checks:  # a candidate is left untried
                    out_of_budget = True
                    break
                seen.add(key)
                checks += 1
                if predicate(cand):
                    current, progress = cand, True
                    steps.append(f"{kind}: {_ops(cand)} ops, shapes {[i.shape for i in cand.inputs]}")
                    break
            if progress or out_of_budget:
                break
    ended = "budget" if out_of_budget else "exhausted" if checks else "minimal"
    return Minimized(current, case, checks, time.perf_counter() - start, steps, ended, max_checks)


# --- the failure a minimization keeps ------------------------------------------------------------

_OUTPUT = re.compile(r"^output (\d+): ")
_VALUES = re.compile(r"at \([^)]*\): eager (?P<e>\S+), fused \([^)]*\) (?P<f>\S+), fp64 (?P<r>\S+)$")


#: Ops whose result combines several elements (reductions, scans, contractions, normalizations,
#: selections): a defect in one is a defect of that op, so a smaller program must keep it. Any other
#: op producing the failing output (elementwise, movement) counts as one family: a defect that shows
#: in every elementwise op (a wrong vector tail, say) may end in any of them.
COMBINING_OPS = frozenset(
    [
        "argmin",
        "argmax",
        "min",
        "max",
        "amin",
        "amax",
        "aminmax",
        "sum",
        "nansum",
        "mean",
        "nanmean",
        "prod",
        "var",
        "std",
        "var_mean",
        "std_mean",
        "norm",
        "logsumexp",
        "softmax",
        "log_softmax",
        "cumsum",
        "cumprod",
        "cummax",
        "cummin",
        "logcumsumexp",
        "matmul",
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "linear",
        "einsum",
        "layer_norm",
        "group_norm",
        "rms_norm",
        "batch_norm",
        "any",
        "all",
        "topk",
        "sort",
        "argsort",
        "median",
        "nanmedian",
        "mode",
        "kthvalue",
    ]
)


@dataclass(frozen=True)
class Signature:
    """What a failure is, as far as a smaller program must keep it: the op producing the failing
    output (its name where it is in :data:`COMBINING_OPS`, else ``elementwise or movement``;
    ``None`` where the graph cannot be traced), the dtypes of that output and of the op's first
    tensor input, and the class of the difference (``integer``, ``value``, ``sign of zero``,
    ``class finite -> nan``, ``shape or dtype``; ``other`` for rules whose message names no element)."""

    op: str | None
    dtypes: tuple[str, ...] | None
    kind: str

    def kept_by(self, other: Signature) -> bool:
        """Whether ``other`` is the same failure (op and dtypes compared where both are known)."""
        if self.kind != other.kind:
            return False
        known = self.op is not None and other.op is not None
        return not known or (self.op, self.dtypes) == (other.op, other.dtypes)


def _value_class(text: str) -> str:
    if text in ("True", "False"):
        return "integer"
    try:
        int(text)
        return "integer"
    except ValueError:
        pass
    try:
        v = float(text)
    except ValueError:
        return "unknown"
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf"
    return "zero" if v == 0 else "finite"


def difference_kind(message: str) -> str:
    """The class of the difference a check's message reports (see :class:`Signature`).

    >>> difference_kind("output 0: 1 of 8 elements wrong; at (3,): eager 32, fused (inductor) 23, fp64 32")
    'integer'
    >>> difference_kind("output 1: 4 of 8 elements wrong; at (0,): eager -0.0, fused (inductor) 0.0, fp64 -0.0")
    'sign of zero'
    """
    if "shape or dtype differs" in message:
        return "shape or dtype"
    m = _VALUES.search(message.strip())
    if m is None:
        return "other"
    e, f = _value_class(m["e"]), _value_class(m["f"])
    if f == "integer":
        return "integer"
    if e == f == "zero":
        return "sign of zero" if m["e"].startswith("-") != m["f"].startswith("-") else "value"
    return "value" if e == f else f"class {e} -> {f}"


def _op_family(node: object) -> str | None:
    if not isinstance(node, torch.fx.Node) or node.op not in ("call_method", "call_function", "placeholder"):
        return None
    name = str(node.target) if node.op == "call_method" else getattr(node.target, "__name__", str(node.target))
    return name if node.op != "placeholder" and name in COMBINING_OPS else "elementwise or movement"


def _dtype_names(node: object) -> tuple[str, ...] | None:
    out = _meta(node)
    if out is None or not isinstance(node, torch.fx.Node):
        return None
    first = next((m for m in map(_meta, node.args) if m is not None), None)
    return tuple(str(m[1]).removeprefix("torch.") for m in (out, first) if m is not None)


def signature(case: Case, message: str) -> Signature:
    """The failure ``message`` (the case's check reported it) describes, in ``case``'s graph."""
    m = _OUTPUT.match(message.strip())
    k = int(m.group(1)) if m else 0
    op: str | None = None
    dtypes: tuple[str, ...] | None = None
    with contextlib.suppress(Exception):  # an untraceable graph: the class of the difference alone
        gm = trace(case)
        out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        node = outs[k] if k < len(outs) else None
        op, dtypes = _op_family(node), _dtype_names(node)
    return Signature(op, dtypes, difference_kind(message))


class KeepsFailure:
    """The usual predicate: the candidate reproduces with the case's backend, the same failure as
    the case it started from (:meth:`anchor` records it), and (with ``control``) not with the
    healthy control backend."""

    def __init__(self, control: str | None) -> None:
        self.control = control
        self.kept: Signature | None = None

    def anchor(self, case: Case) -> None:
        hit, message = reproduces(case)
        self.kept = signature(case, message) if hit else None

    def __call__(self, case: Case) -> bool:
        hit, message = reproduces(case)
        if not hit or (self.kept is not None and not self.kept.kept_by(signature(case, message))):
            return False
        return self.control is None or not reproduces(case, self.control)[0]


def predicate_for(control: str | None) -> KeepsFailure:
    """Reproduces the same failure with the case's backend, and (with ``control``) not with the
    healthy control (see :class:`KeepsFailure`)."""
    return KeepsFailure(control)
