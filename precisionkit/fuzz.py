"""Differential graph fuzzer: random small PyTorch graphs run eager, fused and in fp64.

A graph is a short list of :class:`Op` (elementwise, broadcasting binary ops, reductions, matmul,
layernorm, softmax, transpose, reshape, concat) over seeded inputs. The same seed always gives
the same op list, the same printed source and the same input values (each input draws from a
generator of its own seed, so dropping one input while shrinking leaves the others' values
alone). :meth:`FuzzGraph.source` prints the graph as a standalone Python function, which is both
what runs (via ``exec``) and what a reproducer script contains. A run takes its device
(``device=``): inputs are drawn there from their seeds, every path runs there, and the fp64
reference too where the device has the ops in fp64 (on the host otherwise).

Classification of one graph (first that applies):

* ``invalid``: the eager path raised or the fp64 reference is not finite (a generator problem,
  not a compiler one; never expected);
* ``compile_error``: the fused path raised from inside Dynamo/Inductor (compile stage);
* ``crash``: the fused path raised anything else;
* ``mismatch``: the fused result is outside the tolerance against fp64
  (``max |fused - ref| / (atol + rtol |ref|) > 1``) AND more than ``EAGER_MARGIN`` times eager's
  ratio, or its shape differs, or it is non-finite where the reference is finite. ``atol``/``rtol``
  come from :func:`precisionkit.tolerance` for the op in the graph whose tolerance is largest
  (its class and reduction size), so a graph is judged by its loosest legitimate source of error;
* ``graph_break``: more than one graph was compiled;
* ``ok``.

Failing graphs are shrunk greedily (delta debugging over the op list): candidate graphs drop
one op (its uses take its first input when the shapes agree) or end early at an earlier value,
dead ops and unused inputs are removed, and a candidate replaces the current graph when it
fails with the same class. The result is written as a script that imports only torch and exits
1 when the failure reproduces (0 when it does not).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from .paths import fused
from .tolerance import Tolerance, tolerance

#: Fused error must exceed eager's tolerance ratio by this factor to count as a mismatch.
EAGER_MARGIN = 2.0
FUZZ_DTYPES = ("float32", "float16", "bfloat16")
CLASSES = ("ok", "mismatch", "graph_break", "compile_error", "crash", "invalid")
_ROWS = (4, 8, 16)
_COLS = (8, 16, 32, 64)
_MAX_LAST = 128

# Shared verbatim by the in-process fuzzer and every reproducer script, so both judge alike.
_RUNTIME_SRC = '''
def make_inputs(specs, dtype, device="cpu"):
    """Inputs in float64 from one generator per input (name, shape, scale, seed), cast to dtype, on
    device (drawn there where torch has a generator for it, so the seed decides the values there)."""
    out = []
    draw = device if torch.device(device).type in ("cpu", "cuda", "xpu", "mps") else "cpu"
    for _name, shape, scale, seed in specs:
        g = torch.Generator(draw).manual_seed(seed)
        out.append((torch.randn(shape, generator=g, dtype=torch.float64, device=draw) * scale).to(device, dtype))
    return out


def reference(fn, inputs):
    """fp64 on the inputs' device, on the host where that device lacks the op in fp64: (out, where)."""
    up = [t.to(torch.float64) for t in inputs]
    where = str(up[0].device) if up else "cpu"
    try:
        return fn(*up), where
    except (RuntimeError, NotImplementedError, TypeError):
        if where == "cpu":
            raise
        return fn(*[t.cpu() for t in up]), "cpu"


def tol_ratio(out, ref, atol, rtol):
    """(max abs error, max of |out - ref| / (atol + rtol |ref|)) over the finite reference;
    infinite when out is non-finite where the reference is finite."""
    o = out.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    keep = torch.isfinite(r)
    o, r = o[keep], r[keep]
    if o.numel() == 0:
        return 0.0, 0.0
    if not bool(torch.isfinite(o).all()):
        return float("inf"), float("inf")
    err = (o - r).abs()
    return float(err.max()), float((err / (atol + rtol * r.abs())).max())


def judge(eager, fused_out, ref, atol, rtol, margin):
    """Class ('ok' / 'mismatch' / 'invalid') and (eager abs, eager ratio, fused abs, fused ratio)."""
    if not bool(torch.isfinite(ref).all()):
        return "invalid", (math.nan,) * 4
    e_abs, e_ratio = tol_ratio(eager, ref, atol, rtol)
    if tuple(fused_out.shape) != tuple(ref.shape):
        return "mismatch", (e_abs, e_ratio, math.inf, math.inf)
    f_abs, f_ratio = tol_ratio(fused_out, ref, atol, rtol)
    bad = f_ratio > 1.0 and f_ratio > margin * e_ratio
    return ("mismatch" if bad else "ok"), (e_abs, e_ratio, f_abs, f_ratio)
'''
_RUNTIME: dict[str, Any] = {"torch": torch, "math": math}
exec(compile(_RUNTIME_SRC, "<precisionkit.fuzz runtime>", "exec"), _RUNTIME)


@dataclass(frozen=True)
class Op:
    """``out = <kind>(args..., attrs)``; ``op_class``/``k`` feed :func:`precisionkit.tolerance`."""

    out: str
    kind: str
    args: tuple[str, ...]
    shape: tuple[int, ...]
    attr: Any = None
    op_class: str = "elementwise"
    k: int = 1

    def line(self) -> str:
        """The op as one line of Python source."""
        a = self.args
        t = {
            "relu": "torch.relu({0})",
            "tanh": "torch.tanh({0})",
            "sigmoid": "torch.sigmoid({0})",
            "sin": "torch.sin({0})",
            "gelu": "F.gelu({0})",
            "silu": "F.silu({0})",
            "scale": "{0} * {attr!r}",
            "shift": "{0} + {attr!r}",
            "add": "{0} + {1}",
            "sub": "{0} - {1}",
            "mul": "{0} * {1}",
            "sum": "{0}.sum(dim=-1, keepdim=True)",
            "mean": "{0}.mean(dim=-1, keepdim=True)",
            "amax": "{0}.amax(dim=-1, keepdim=True)",
            "matmul": "{0} @ {1}",
            "layer_norm": "F.layer_norm({0}, ({attr},))",
            "softmax": "torch.softmax({0}, dim=-1)",
            "transpose": "{0}.transpose(-1, -2)",
            "reshape": "{0}.reshape({attr})",
            "cat": "torch.cat([{0}, {1}], dim=-1)",
        }[self.kind]
        return f"{self.out} = {t.format(*a, attr=self.attr)}"

    def label(self) -> str:
        """Short name for tables, with the reduction size where there is one."""
        return f"{self.kind}(K={self.k})" if self.k > 1 else self.kind


@dataclass(frozen=True)
class FuzzGraph:
    """A seeded graph: inputs ``(name, shape, scale, seed)``, ops, output value name, dtype."""

    seed: int
    dtype: str
    inputs: tuple[tuple[str, tuple[int, ...], float, int], ...]
    ops: tuple[Op, ...]
    output: str

    def op_list(self) -> str:
        """The ops in order, e.g. ``matmul(K=32) -> gelu``."""
        return " -> ".join(op.label() for op in self.ops)

    def source(self) -> str:
        """The graph as a standalone function ``graph(<inputs>)`` (needs ``torch`` and ``F``)."""
        body = "\n".join(f"    {op.line()}" for op in self.ops)
        names = ", ".join(name for name, *_ in self.inputs)
        return f"def graph({names}):\n{body}\n    return {self.output}\n"

    def function(self) -> Callable[..., torch.Tensor]:
        """The printed source, executed: the function that every path runs."""
        scope: dict[str, Any] = {"torch": torch, "F": torch.nn.functional}
        exec(compile(self.source(), f"<fuzz graph seed={self.seed}>", "exec"), scope)
        graph: Callable[..., torch.Tensor] = scope["graph"]
        return graph

    def make_inputs(self, device: str = "cpu") -> list[torch.Tensor]:
        """The graph's inputs in its dtype on ``device`` (same values on every call and in reproducers)."""
        inputs: list[torch.Tensor] = _RUNTIME["make_inputs"](self.inputs, getattr(torch, self.dtype), device)
        return inputs

    def tolerance(self) -> tuple[Tolerance, str, int]:
        """The loosest legitimate tolerance of the graph's ops: (Tolerance, op_class, reduction size)."""
        dtype = getattr(torch, self.dtype)
        best = None
        for op in self.ops:
            tol = tolerance(dtype, op.op_class, op.k)
            if best is None or tol.atol > best[0].atol:
                best = (tol, op.op_class, op.k)
        return best or (tolerance(dtype), "elementwise", 1)

    def pruned(self) -> FuzzGraph:
        """Dead ops and unused inputs removed."""
        live = {self.output}
        kept = []
        for op in reversed(self.ops):
            if op.out in live:
                kept.append(op)
                live.update(op.args)
        inputs = tuple(i for i in self.inputs if i[0] in live)
        return replace(self, ops=tuple(reversed(kept)), inputs=inputs)


class _Builder:
    def __init__(self, seed: int, rng: random.Random) -> None:
        self.seed, self.rng = seed, rng
        self.inputs: list[tuple[str, tuple[int, ...], float, int]] = []
        self.ops: list[Op] = []
        self.shapes: dict[str, tuple[int, ...]] = {}

    def new_input(self, prefix: str, shape: tuple[int, ...], scale: float = 1.0) -> str:
        name = f"{prefix}{len(self.inputs)}"
        # Per-input seed: values do not depend on which other inputs exist.
        self.inputs.append((name, shape, scale, (self.seed * 1009 + len(self.inputs) * 7919) % (2**62)))
        self.shapes[name] = shape
        return name

    def add(
        self,
        kind: str,
        args: tuple[str, ...],
        shape: tuple[int, ...],
        attr: Any = None,
        op_class: str = "elementwise",
        k: int = 1,
    ) -> str:
        out = f"v{len(self.ops)}"
        self.ops.append(Op(out, kind, args, tuple(shape), attr, op_class, k))
        self.shapes[out] = tuple(shape)
        return out


def generate(seed: int, *, dtype: str | None = None, n_ops: int | None = None) -> FuzzGraph:
    """A random valid graph; the same ``seed`` (and arguments) always gives the same graph."""
    rng = random.Random(seed)
    dtype = dtype or rng.choice(FUZZ_DTYPES)
    if dtype not in FUZZ_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(FUZZ_DTYPES)}, got {dtype!r}")
    n_ops = n_ops if n_ops is not None else rng.randint(2, 6)
    if n_ops < 1:
        raise ValueError(f"n_ops must be >= 1, got {n_ops}")
    b = _Builder(seed, rng)
    shape: tuple[int, ...] = (rng.choice(_ROWS), rng.choice(_COLS))
    if rng.random() < 0.4:
        shape = (rng.choice((2, 3)), *shape)
    cur = b.new_input("x", shape)
    kinds = (
        ["unary"] * 4
        + ["binary"] * 3
        + ["reduce", "matmul", "layer_norm", "softmax", "transpose", "reshape", "cat", "const"]
    )
    while len(b.ops) < n_ops:
        if b.ops and rng.random() < 0.2:
            cur = rng.choice([op.out for op in b.ops])  # branch from an earlier value: a DAG
        s = b.shapes[cur]
        n = s[-1]
        kind = rng.choice(kinds)
        if kind == "unary":
            cur = b.add(rng.choice(("relu", "gelu", "tanh", "sigmoid", "silu", "sin")), (cur,), s)
        elif kind == "const":
            which = rng.choice(("scale", "shift"))
            cur = b.add(which, (cur,), s, attr=round(rng.uniform(0.5, 2.0) * rng.choice((1, -1)), 3))
        elif kind == "binary":
            same = [v for v, vs in b.shapes.items() if vs in (s, (*s[:-1], 1)) and v != cur and not v.startswith("w")]
            if same and rng.random() < 0.5:
                other = rng.choice(same)
            else:
                other = b.new_input("b", rng.choice((s, (n,), (*s[:-1], 1))))
            cur = b.add(rng.choice(("add", "sub", "mul")), (cur, other), s)
        elif kind == "reduce" and n > 1:
            which = rng.choice(("sum", "mean", "amax"))
            cls = "elementwise" if which == "amax" else "matmul"  # a sum is K additions, like a dot
            cur = b.add(which, (cur,), (*s[:-1], 1), op_class=cls, k=n if cls == "matmul" else 1)
        elif kind == "matmul":
            m = rng.choice(_COLS)
            w = b.new_input("w", (n, m), 1.0 / math.sqrt(n))
            cur = b.add("matmul", (cur, w), (*s[:-1], m), op_class="matmul", k=n)
        elif kind == "layer_norm" and n > 1:
            cur = b.add("layer_norm", (cur,), s, attr=n, op_class="layernorm", k=n)
        elif kind == "softmax" and n > 1:
            cur = b.add("softmax", (cur,), s, op_class="softmax", k=n)
        elif kind == "transpose":
            cur = b.add("transpose", (cur,), (*s[:-2], s[-1], s[-2]))
        elif kind == "reshape":
            new = (s[0] * s[1], s[2]) if len(s) == 3 else ((2, s[0] // 2, s[1]) if s[0] % 2 == 0 else None)
            if new is not None:
                cur = b.add("reshape", (cur,), new, attr=new)
        elif kind == "cat" and 2 * n <= _MAX_LAST:
            partners = [v for v, vs in b.shapes.items() if vs == s and v != cur and not v.startswith("w")]
            other = rng.choice(partners) if partners and rng.random() < 0.5 else b.new_input("c", s)
            cur = b.add("cat", (cur, other), (*s[:-1], 2 * n))
    graph = FuzzGraph(seed, dtype, tuple(b.inputs), tuple(b.ops), cur)
    return graph.pruned()


@dataclass
class FuzzOutcome:
    """One graph's verdict and numbers (a table row via :meth:`row`)."""

    graph: FuzzGraph
    klass: str
    eager_abs_err: float = math.nan
    eager_tol_ratio: float = math.nan
    fused_abs_err: float = math.nan
    fused_tol_ratio: float = math.nan
    atol: float = math.nan
    rtol: float = math.nan
    op_class: str = ""
    reduction_size: int = 1
    graph_count: int | None = None
    kernel_count: int | None = None
    compile_seconds: float | None = None
    detail: str = ""
    shrunk: FuzzGraph | None = None
    reproducer: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """Flat table row (seed, ops, class, errors, tolerance, evidence, reproducer)."""
        return {
            "seed": self.graph.seed,
            "dtype": self.graph.dtype,
            "ops": self.graph.op_list(),
            "n_ops": len(self.graph.ops),
            "class": self.klass,
            "fused_abs_err": self.fused_abs_err,
            "eager_abs_err": self.eager_abs_err,
            "fused_tol_ratio": self.fused_tol_ratio,
            "eager_tol_ratio": self.eager_tol_ratio,
            "atol": self.atol,
            "rtol": self.rtol,
            "op_class": self.op_class,
            "reduction_size": self.reduction_size,
            "graph_count": self.graph_count,
            "kernel_count": self.kernel_count,
            "compile_seconds": self.compile_seconds,
            "detail": self.detail,
            "shrunk_ops": self.shrunk.op_list() if self.shrunk is not None else "",
            "shrunk_n_ops": len(self.shrunk.ops) if self.shrunk is not None else None,
            "reproducer": self.reproducer,
        }


def _is_compile_stage(exc: BaseException) -> bool:
    mod = type(exc).__module__ or ""
    return mod.startswith(("torch._dynamo", "torch._inductor")) or "Compil" in type(exc).__name__


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def run_graph(
    graph: FuzzGraph, backend: str = "inductor", options: dict[str, Any] | None = None, device: str = "cpu"
) -> FuzzOutcome:
    """Run ``graph`` on ``device`` eager, fused (``backend``, ``options``) and in fp64 (on the
    device where it has the ops in fp64, on the host otherwise: ``extra["reference_device"]``), and
    classify it."""
    tol, op_class, k = graph.tolerance()
    out = FuzzOutcome(graph, "ok", atol=tol.atol, rtol=tol.rtol, op_class=op_class, reduction_size=k)
    out.extra["device"] = device
    fn = graph.function()
    inputs = graph.make_inputs(device)
    try:
        with torch.no_grad():
            eager = fn(*inputs)
            ref, out.extra["reference_device"] = _RUNTIME["reference"](fn, inputs)
    except Exception as exc:  # noqa: BLE001
        out.klass, out.detail = "invalid", f"eager: {_short(exc)}"
        return out
    compiled = fused(fn, backend, options, require_fusion=False)
    start = time.perf_counter()
    try:
        with torch.no_grad():
            fused_out = compiled(*inputs)
    except Exception as exc:  # noqa: BLE001
        out.klass = "compile_error" if _is_compile_stage(exc) else "crash"
        out.detail = _short(exc)
        out.compile_seconds = time.perf_counter() - start
        return out
    ev = compiled.evidence
    out.graph_count, out.kernel_count, out.compile_seconds = ev.graph_count, ev.kernel_count, ev.compile_seconds
    klass, (e_abs, e_ratio, f_abs, f_ratio) = _RUNTIME["judge"](eager, fused_out, ref, tol.atol, tol.rtol, EAGER_MARGIN)
    out.eager_abs_err, out.eager_tol_ratio, out.fused_abs_err, out.fused_tol_ratio = e_abs, e_ratio, f_abs, f_ratio
    if klass == "ok" and (ev.graph_breaks or ev.graph_count != 1):
        klass = "graph_break"
        out.detail = f"{ev.graph_count} graphs; {'; '.join(ev.break_reasons)}"
    out.klass = klass
    return out


def _candidates(graph: FuzzGraph) -> Iterable[FuzzGraph]:
    """Smaller graphs: end at an earlier value, or drop one op (uses take its first input)."""
    for j, op in enumerate(graph.ops[:-1]):
        yield replace(graph, ops=graph.ops[: j + 1], output=op.out).pruned()
    for i in range(len(graph.ops) - 1, -1, -1):
        op = graph.ops[i]
        src = op.args[0]
        src_shape = next((s for n, s, *_ in graph.inputs if n == src), None) or next(
            (o.shape for o in graph.ops if o.out == src), None
        )
        if src_shape != op.shape:
            continue
        ops = tuple(replace(o, args=tuple(src if a == op.out else a for a in o.args)) for o in graph.ops if o is not op)
        output = src if graph.output == op.out else graph.output
        if not any(o.out == output for o in ops):
            continue  # at least one op must remain
        yield replace(graph, ops=ops, output=output).pruned()


def shrink(
    graph: FuzzGraph,
    klass: str,
    backend: str = "inductor",
    options: dict[str, Any] | None = None,
    *,
    max_checks: int = 24,
    device: str = "cpu",
) -> tuple[FuzzGraph, int]:
    """Greedy delta debugging: the smallest graph found that still fails with ``klass``, and the
    number of candidate runs spent (at most ``max_checks``; each is one compile)."""
    current, checks = graph, 0
    improved = True
    while improved and checks < max_checks:
        improved = False
        seen = set()
        for cand in _candidates(current):
            key = cand.source()
            if key in seen or len(cand.ops) >= len(current.ops) or not cand.ops:
                continue
            seen.add(key)
            if checks >= max_checks:
                break
            checks += 1
            if run_graph(cand, backend, options, device).klass == klass:
                current, improved = cand, True
                break
    return current, checks


def reproducer_script(
    graph: FuzzGraph, outcome: FuzzOutcome, backend: str, options: dict[str, Any] | None = None, device: str = "cpu"
) -> str:
    """A standalone script (imports torch, and the compiler of a backend adapter such as
    ``openvino``, only) that exits 1 while the failure reproduces."""
    from .backends import compile_target

    tol, _, _ = graph.tolerance()
    backend, setup = compile_target(backend)  # iree -> turbine_cpu, and the import that registers it
    header = f'''#!/usr/bin/env python
"""Reproducer written by precisionkit.fuzz (seed {graph.seed}, {graph.dtype}, class {outcome.klass!r}).

Ops: {graph.op_list()}
Runs the graph eager, in fp64 and with torch.compile(backend=BACKEND); exits 1 when the fused
result fails as recorded, 0 when it does not. ``--setup FILE`` runs FILE first (e.g. to register
a custom backend), ``--backend NAME`` overrides the backend.
"""
import argparse
import math
import runpy
import sys

import torch
import torch.nn.functional as F
{setup}
BACKEND = {backend!r}
OPTIONS = {dict(options or {})!r}
DTYPE = torch.{graph.dtype}
DEVICE = {device!r}
EXPECTED = {outcome.klass!r}
ATOL, RTOL, EAGER_MARGIN = {tol.atol!r}, {tol.rtol!r}, {EAGER_MARGIN!r}
INPUTS = {list(graph.inputs)!r}
'''
    main = """

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default=BACKEND)
    ap.add_argument("--setup", default=None, help="python file to run first (registers custom backends)")
    ns = ap.parse_args()
    if ns.setup:
        runpy.run_path(ns.setup)
    from torch._dynamo import lookup_backend

    inner = lookup_backend(ns.backend)
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        if OPTIONS:
            from torch._inductor import config

            with config.patch(OPTIONS):
                return inner(gm, example_inputs)
        return inner(gm, example_inputs)

    inputs = make_inputs(INPUTS, DTYPE, DEVICE)
    with torch.no_grad():
        eager = graph(*inputs)
        ref, _where = reference(graph, inputs)
        try:
            fused_out = torch.compile(graph, backend=counting)(*inputs)
        except Exception as exc:
            print(f"fused path raised {type(exc).__name__}: {exc}")
            return 1 if EXPECTED in ("compile_error", "crash") else 0
    klass, (e_abs, e_ratio, f_abs, f_ratio) = judge(eager, fused_out, ref, ATOL, RTOL, EAGER_MARGIN)
    if klass == "ok" and len(graphs) != 1:
        klass = "graph_break"
    print(f"class={klass} expected={EXPECTED} graphs={len(graphs)} eager_abs={e_abs:.3g} eager_ratio={e_ratio:.3g} "
          f"fused_abs={f_abs:.3g} fused_ratio={f_ratio:.3g} (atol={ATOL:g}, rtol={RTOL:g})")
    return 1 if klass == EXPECTED else 0


if __name__ == "__main__":
    sys.exit(main())
"""
    return header + "\n" + _RUNTIME_SRC.strip() + "\n\n\n" + graph.source() + main


def fuzz(
    seeds: Iterable[int],
    *,
    backend: str = "inductor",
    options: dict[str, Any] | None = None,
    out_dir: str | Path | None = None,
    shrink_failures: bool = True,
    max_shrink_checks: int = 24,
    log: Callable[[str], None] | None = None,
    device: str = "cpu",
) -> list[FuzzOutcome]:
    """Generate, run and classify one graph per seed on ``device``; shrink failures and (with
    ``out_dir``) save each shrunk reproducer as ``out_dir/repro_seed<seed>.py``."""
    outcomes = []
    for seed in seeds:
        graph = generate(seed)
        outcome = run_graph(graph, backend, options, device)
        if outcome.klass not in ("ok", "invalid") and shrink_failures:
            small, checks = shrink(graph, outcome.klass, backend, options, max_checks=max_shrink_checks, device=device)
            outcome.shrunk = small
            outcome.extra["shrink_checks"] = checks
            if out_dir is not None:
                path = Path(out_dir) / f"repro_seed{seed}.py"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(reproducer_script(small, outcome, backend, options, device))
                outcome.reproducer = str(path)
        if log:
            log(f"seed {seed}: {outcome.klass} ({graph.dtype}; {graph.op_list()})")
        outcomes.append(outcome)
    return outcomes
