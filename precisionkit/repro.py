"""Standalone reproducers: a :class:`Case` (a graph, seeded inputs, a backend, a rule) rendered as
one Python file that needs only torch.

The file builds its inputs from seeds, runs the graph eagerly and through ``torch.compile`` (and
an fp64 reference where the rule needs one), prints the comparison and exits 1 while the defect
reproduces, 0 once it does not. ``python repro.py BACKEND`` runs it with another backend, which is
how :mod:`precisionkit.bisect` walks the compiler's layers.

The rule that decides "reproduces" is one small function (``check``) whose source is both pasted
into the file and executed in-process by :func:`reproduces`, so the minimizer and the file judge
alike:

* ``bitwise``: some element of the fused result differs in its bits from eager's (any NaN equals
  any NaN). The rule for graphs that only move data.
* ``ulp``: the fused result's largest distance from the fp64 reference, in units in the last
  place of its dtype, exceeds eager's by more than ``slack``. The rule for an arithmetic fault a
  healthy control compiler does not have.
* ``fp64``: fused fails the tolerance ``atol + rtol |ref|`` against the fp64 reference and is more
  than twice as far outside it as eager (the fuzzer's rule).
* ``repeat``: two calls of the same compiled function differ in their bits.
* ``compiled``: the fused path generated no kernel (it ran eagerly).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

RULES = ("bitwise", "ulp", "fp64", "repeat", "compiled")
LAYOUTS = ("contiguous", "transposed")

_BITS = (
    "def bits(t):\n"
    "    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])\n"
)
_OUTS = "def outs(o):\n    return list(o) if isinstance(o, (tuple, list)) else [o]\n"

_CHECKS = {
    "bitwise": _BITS
    + _OUTS
    + """def check(graph, args, backend):
    with torch.no_grad():
        eager, fused = outs(graph(*args)), outs(torch.compile(graph, backend=backend)(*args))
    bad = [(bits(e) != bits(f)) & ~(e.isnan() & f.isnan()) if e.is_floating_point() else e != f for e, f in zip(eager, fused)]
    n, total = sum(int(b.sum()) for b in bad), sum(b.numel() for b in bad)
    return n > 0, f"{n} of {total} elements differ in their bits between eager and fused ({backend})"
""",
    "ulp": _BITS
    + _OUTS
    + """def ulps(t, ref):  # largest distance from ref rounded to t's dtype, in its units in the last place
    keep = torch.isfinite(ref)
    a, b = (bits(v).to(torch.int64)[keep] for v in (t, ref.to(t.dtype)))
    mag = (1 << (8 * t.element_size() - 1)) - 1
    a, b = (torch.where(v < 0, -(v & mag), v) for v in (a, b))
    return int((a - b).abs().max()) if a.numel() else 0


def check(graph, args, backend):
    with torch.no_grad():
        ref = outs(graph(*[a.double() if a.is_floating_point() else a for a in args]))
        eager, fused = outs(graph(*args)), outs(torch.compile(graph, backend=backend)(*args))
    e, f = max(map(ulps, eager, ref)), max(map(ulps, fused, ref))
    return f > e + SLACK, f"largest error against fp64: eager {e} ULP, fused ({backend}) {f} ULP (allowed: eager + {SLACK})"
""",
    "fp64": _OUTS
    + """def ratio(t, ref):  # largest |t - ref| / (ATOL + RTOL |ref|) over the finite reference
    keep = torch.isfinite(ref)
    t, ref = t.double()[keep], ref[keep]
    if not bool(torch.isfinite(t).all()):
        return float("inf")
    return float(((t - ref).abs() / (ATOL + RTOL * ref.abs())).max()) if t.numel() else 0.0


def check(graph, args, backend):
    with torch.no_grad():
        ref = outs(graph(*[a.double() if a.is_floating_point() else a for a in args]))
        eager, fused = outs(graph(*args)), outs(torch.compile(graph, backend=backend)(*args))
    e, f = max(map(ratio, eager, ref)), max(map(ratio, fused, ref))
    return f > 1 and f > 2 * e, f"error / tolerance against fp64: eager {e:.3g}, fused ({backend}) {f:.3g}"
""",
    "repeat": _BITS
    + _OUTS
    + """def check(graph, args, backend):
    fn = torch.compile(graph, backend=backend)
    with torch.no_grad():
        first, second = outs(fn(*args)), outs(fn(*args))
    n = sum(int((bits(a) != bits(b)).sum()) for a, b in zip(first, second))
    return n > 0, f"{n} elements differ between two calls of the same fused ({backend}) function"
""",
    "compiled": """def check(graph, args, backend):
    from torch._inductor import config, metrics

    config.fx_graph_cache = False  # a cache hit generates no code either
    before = metrics.generated_kernel_count
    with torch.no_grad():
        torch.compile(graph, backend=backend)(*args)
    n = metrics.generated_kernel_count - before
    return n == 0, f"the fused path ({backend}) generated {n} kernels"
""",
}


@dataclass(frozen=True)
class Input:
    """One seeded input: ``randn(shape) * scale`` drawn in fp64 from its own generator, cast to
    ``dtype``; ``transposed`` stores it with its last two dims swapped (a non-contiguous view)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    seed: int = 0
    layout: str = "contiguous"
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"input {self.name!r}: layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.layout == "transposed" and len(self.shape) < 2:
            raise ValueError(f"input {self.name!r}: a transposed input needs at least 2 dims, got {self.shape}")
        if not isinstance(getattr(torch, self.dtype, None), torch.dtype):
            raise ValueError(f"input {self.name!r}: {self.dtype!r} is not a torch dtype")


@dataclass(frozen=True)
class Case:
    """A defect to reproduce: ``source`` defines ``def graph(<inputs>)`` (using ``torch`` and ``F``)."""

    id: str
    source: str
    inputs: tuple[Input, ...]
    backend: str = "inductor"
    rule: str = "bitwise"
    title: str = ""
    origin: str = ""
    #: Python lines the file runs before compiling (e.g. registering a custom backend)
    setup: str = ""
    atol: float = 0.0
    rtol: float = 0.0
    slack: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"case {self.id!r}: rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        if "def graph(" not in self.source:
            raise ValueError(f"case {self.id!r}: source must define graph(...)")
        if self.rule == "fp64" and self.atol <= 0 and self.rtol <= 0:
            raise ValueError(f"case {self.id!r}: the fp64 rule needs atol or rtol > 0")

    def with_(self, **changes: Any) -> Case:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Case:
        inputs = tuple(Input(**{**i, "shape": tuple(i["shape"])}) for i in data["inputs"])
        return cls(**{**data, "inputs": inputs})


def _inputs_src(inputs: Sequence[Input]) -> str:
    specs = [(tuple(i.shape), f"torch.{i.dtype}", i.seed, i.layout, i.scale) for i in inputs]
    simple = all(i.layout == "contiguous" and i.scale == 1.0 for i in inputs)
    if simple:
        rows = ", ".join(f"({s!r}, {d}, {k})" for s, d, k, _, _ in specs)
        return (
            f"SPECS = [{rows}]  # (shape, dtype, seed) per input, drawn in fp64\n"
            "make = lambda: [torch.randn(s, generator=torch.Generator().manual_seed(k), dtype=torch.float64).to(d) "
            "for s, d, k in SPECS]\n"
        )
    rows = ", ".join(f"({s!r}, {d}, {k}, {lay!r}, {sc!r})" for s, d, k, lay, sc in specs)
    return (
        f"SPECS = [{rows}]  # (shape, dtype, seed, layout, scale)\n\n\n"
        "def make():\n"
        "    out = []\n"
        "    for shape, dtype, seed, layout, scale in SPECS:\n"
        "        t = shape[:-2] + shape[:-3:-1] if layout == 'transposed' else shape\n"
        "        t = (torch.randn(t, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale).to(dtype)\n"
        "        out.append(t.transpose(-1, -2) if layout == 'transposed' else t)\n"
        "    return out\n"
    )


def _constants(case: Case) -> str:
    if case.rule == "ulp":
        return f"SLACK = {case.slack!r}\n"
    if case.rule == "fp64":
        return f"ATOL, RTOL = {case.atol!r}, {case.rtol!r}\n"
    return ""


def render(case: Case) -> str:
    """The reproducer file's text."""
    what = case.title or case.id
    setup = (case.setup.strip() + "\n") if case.setup.strip() else ""
    return (
        f'"""{what}: rule {case.rule!r}. Exits 1 while it reproduces. Usage: python repro.py [BACKEND]"""\n'
        "import sys\n\n"
        "import torch\n"
        "import torch.nn.functional as F\n\n"
        + setup
        + _constants(case)
        + "\n"
        + case.source.strip()
        + "\n\n\n"
        + _inputs_src(case.inputs)
        + "\n\n"
        + _CHECKS[case.rule]
        + "\n\n"
        "if __name__ == '__main__':\n"
        f"    reproduces, message = check(graph, make(), sys.argv[1] if len(sys.argv) > 1 else {case.backend!r})\n"
        "    print(('REPRODUCES: ' if reproduces else 'clean: ') + message)\n"
        "    sys.exit(int(reproduces))\n"
    )


def namespace(case: Case) -> dict[str, Any]:
    """The reproducer's definitions (graph, make, check, ...) executed in this process."""
    scope: dict[str, Any] = {"__name__": f"precisionkit_repro_{case.id}", "F": torch.nn.functional}
    exec(compile(render(case), f"<repro {case.id}>", "exec"), scope)
    return scope


def make_inputs(case: Case) -> list[torch.Tensor]:
    """The case's inputs, exactly as its file builds them."""
    inputs: list[torch.Tensor] = namespace(case)["make"]()
    return inputs


def reproduces(case: Case, backend: str | None = None) -> tuple[bool, str]:
    """Run the case's rule in this process (Dynamo reset first); an exception in the graph, its
    inputs or the compiler counts as "does not reproduce" and is named in the message."""
    torch._dynamo.reset()
    try:
        scope = namespace(case)
        result: tuple[bool, str] = scope["check"](scope["graph"], scope["make"](), backend or case.backend)
    except Exception as exc:  # noqa: BLE001 - a candidate that does not run does not reproduce
        return False, f"raised {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[
            :300
        ]
    finally:
        torch._dynamo.reset()
    return bool(result[0]), str(result[1])


def write(case: Case, folder: str | os.PathLike[str]) -> Path:
    """Write ``repro.py`` and ``case.json`` into ``folder`` atomically; returns the script's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("case.json", json.dumps(case.to_json(), indent=2) + "\n"), ("repro.py", render(case))):
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, folder / name)
    return folder / "repro.py"


@dataclass(frozen=True)
class ScriptRun:
    """One run of a reproducer file in a fresh interpreter."""

    returncode: int
    output: str
    seconds: float

    @property
    def reproduces(self) -> bool:
        return self.returncode == 1

    @property
    def status(self) -> str:
        """``reproduces`` (exit 1), ``clean`` (exit 0) or ``error`` (anything else: it did not run)."""
        return {1: "reproduces", 0: "clean"}.get(self.returncode, "error")

    @property
    def last_line(self) -> str:
        lines = [line for line in self.output.strip().splitlines() if line.strip()]
        return lines[-1] if lines else ""


def run_script(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    python: str | None = None,
    env: dict[str, str] | None = None,
    prelude: str = "",
    timeout: float = 900.0,
    cwd: str | os.PathLike[str] | None = None,
) -> ScriptRun:
    """Run a reproducer in a fresh interpreter (``python``, default this one). ``prelude`` is
    Python run first in the same interpreter (e.g. Inductor config changes); ``env`` is added to
    this process's environment."""
    import time

    launch = [python or sys.executable]
    if prelude:
        code = (
            f"{prelude}\nimport runpy, sys\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
        )
        launch += ["-c", code]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [*launch, str(script), *args],
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
        )
        rc, out = proc.returncode, (proc.stdout + proc.stderr)
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        rc, out = -9, f"timed out after {timeout:.0f} s\n{partial}"
    return ScriptRun(rc, out, time.perf_counter() - start)


def ops_of(case: Case) -> int:
    """How many operations the graph has (FX-traced call nodes; 0 if it cannot be traced)."""
    try:
        gm = torch.fx.symbolic_trace(namespace(case)["graph"])
    except Exception:  # noqa: BLE001
        return 0
    return sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


def lines_of(case: Case) -> int:
    """Non-blank lines of the rendered file."""
    return sum(1 for line in render(case).splitlines() if line.strip())


Predicate = Callable[[Case], bool]
