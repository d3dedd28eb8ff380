"""Standalone reproducers: a :class:`Case` (a graph, seeded inputs, a backend, a rule) rendered as
one Python file that needs only torch.

The file builds its inputs from seeds, runs the graph eagerly and through ``torch.compile`` (and
an fp64 reference where the rule needs one), prints the comparison and exits 1 while the defect
reproduces, 0 once it does not. ``python repro.py BACKEND`` runs it with another backend, which is
how :mod:`precisionkit.bisect` walks the compiler's layers.

A case carries its device (``device``): the file draws its inputs there from their seeds (on the
device's own generator where torch has one), runs eager and the fused path there (on CUDA,
Inductor's Triton code), and the fp64 reference too where the device has the op in fp64 (on the
host otherwise); comparisons are made on the host. Inductor ``options`` of the case are patched in
while the fused path compiles and runs. A CPU case draws the same values and compiles the same
way as before cases had a device.

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
* ``repeat``: calls of the same compiled function differ in their bits (8 calls, so a fault that
  changes a few elements at random is seen even on one element).
* ``compiled``: the fused path generated no kernel (it ran eagerly).
* ``diff``: the differential tester's rule (:mod:`precisionkit.difftest`), each path on fresh
  inputs (programs may write to them): an integer or bool output element is wrong where it
  differs from eager's and from the fp64 reference's (an index that picks the fp64 optimum among
  16-bit ties, or a comparison made exact by wider arithmetic, is not a wrong result; for a bool,
  the fp64 run rounded at the program's own 16-bit casts, below, where the program has any: an
  isinf of a cast the program spelled ``.to(x.dtype)`` is true there as in eager); a
  float element is wrong when its class (NaN, +-inf, +-0, finite) differs from eager's where
  eager has the fp64 reference's class (a zero against a finite nonzero value is left to the
  value test: a remainder of 0 or of one ULP is rounding), or where eager's inf or NaN is that of
  the fp64 run rounded at the program's own conversions to float16/bfloat16 (a cast spelled
  ``.to(x.dtype)`` is a no-op in plain fp64; 16-bit arithmetic the program does not cast is not
  rounded, so fp32 intermediates where it does not cast stay right), or when its error against fp64
  exceeds ``rtol |ref| + afac max|ref|``
  (per dtype, widened by sqrt of the longest reduction) plus four times the row's rounding noise:
  eager's largest error in the same row, or, where that flags an element, the largest move of the row
  in three fp64 runs that scale every intermediate result by a random 1 +- u (u the unit roundoff of
  the program's narrowest dtype), so an ill-conditioned row (a softmax over near-tied logits) is not
  judged by eager's luck; runs whose moved values reach a jump (floor, a remainder, a comparison, an
  index) are not used. Rounding noise never counts; garbage, wrong signs and lost specials do.
  Two more parts judge in the program's own dtypes, where plain fp64 never overflows: a float element
  whose class (or a bool element whose value) differs from eager's where eager has the class of the
  *dtype-faithful* reference in each of its three runs (every op computed in fp64 from its operands
  and its result rounded to the dtype eager gives it, once as is, then with every result scaled by
  1 + eps and by 1 - eps before its rounding, so a class one rounding decides is not judged): a float16 ``x * x`` that
  overflows is inf there as in eager, and a fused path that keeps it finite in float32 and says
  ``isinf`` is False is wrong; and an output the program computes from another output (``y`` and
  ``isinf(y)``) whose class (a bool's value) differs from itself recomputed in eager from fused's
  value of that output, as returned and nudged one ULP up, down and at random (a tie decided by a
  rounding is not judged). Upcasting that only makes values more accurate changes no class and
  passes both.

  Left unjudged, because no order of legitimate roundings fixes them: the index a max pool, argmax or
  max over a dim gives among tied NaNs, and a max pool's among equal maxima (+0 and -0 included;
  overlapping windows are tested apart), with what follows from it; the sign of a zero from a
  reduction, a pool, an interpolation or a norm (a sum's zero takes its accumulator's sign); and a
  remainder whose every quotient exceeds 1/u, which the jittered runs then measure instead of calling
  it a jump. The jittered runs move a result below fp64 by at least its own dtype's rounding (a float16
  part cast from a bool holds float16 in the reference too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from . import specials
from .repro_rules import CHECKS, RULES

#: how an input is laid out in memory: its own storage, its last two dims swapped, a size-1 row
#: expanded (stride 0), a view at storage offset 7, every other element of a wider last dim, a 4-D
#: tensor stored channels last (NHWC strides)
LAYOUTS = ("contiguous", "transposed", "broadcast", "offset", "strided", "channels_last")
#: how its values are drawn: ``normal`` (randn * scale), ``edge`` (normal with one element in four
#: replaced by 0, -0, +-inf, NaN, +-1, 0.5, a subnormal or half the largest finite value of the
#: dtype), ``grid`` (randn * scale rounded to a multiple of 0.1 in fp64, then to the dtype: small
#: integers and decimal fractions, whose quotients and roundings land on or next to integers),
#: ``specials`` (normal with one element in 64, at least seven, set to +-0, +-inf, +-the smallest
#: subnormal of the dtype or NaN, from the same generator: :func:`precisionkit.specials.salt_specials`,
#: pasted into the file), ``tail`` (normal with the last element of each row in memory set to
#: +-8 * scale, sign alternating by row: the row's extreme, where a vector loop's remainder reads it),
#: ``int`` (integers in [-scale, scale]), ``index`` (integers in [0, scale)), ``bool``
VALUES = ("normal", "edge", "grid", "specials", "tail", "int", "index", "bool")


@dataclass(frozen=True)
class Input:
    """One seeded input: ``randn(shape) * scale`` drawn in fp64 from its own generator (``values``
    alters or replaces the draw, see :data:`VALUES`), cast to ``dtype``; ``transposed`` stores it
    with its last two dims swapped (a non-contiguous view)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    seed: int = 0
    layout: str = "contiguous"
    scale: float = 1.0
    values: str = "normal"

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"input {self.name!r}: layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.values not in VALUES:
            raise ValueError(f"input {self.name!r}: values must be one of {', '.join(VALUES)}, got {self.values!r}")
        if self.layout in ("transposed", "broadcast") and len(self.shape) < 2:
            raise ValueError(f"input {self.name!r}: a {self.layout} input needs at least 2 dims, got {self.shape}")
        if self.layout == "channels_last" and len(self.shape) != 4:
            raise ValueError(f"input {self.name!r}: a channels_last input needs 4 dims, got {self.shape}")
        if self.layout == "strided" and len(self.shape) < 1:
            raise ValueError(f"input {self.name!r}: a strided input needs at least 1 dim")
        dtype = getattr(torch, self.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"input {self.name!r}: {self.dtype!r} is not a torch dtype")
        if self.values in ("normal", "edge", "grid", "specials", "tail") and not dtype.is_floating_point:
            raise ValueError(f"input {self.name!r}: {self.values} values need a floating dtype, not {self.dtype}")
        if self.values == "bool" and dtype != torch.bool:
            raise ValueError(f"input {self.name!r}: bool values need dtype bool, not {self.dtype}")
        if self.values in ("int", "index") and (dtype.is_floating_point or dtype == torch.bool or self.scale < 1):
            raise ValueError(f"input {self.name!r}: {self.values} values need an integer dtype and scale >= 1")


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
    #: free-form facts about the case (the ``diff`` rule reads ``reduction``: its longest reduction)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    #: the torch device every path runs on: inputs are drawn there from their seeds, eager and the
    #: fused path run there, fp64 too where the device has the op in fp64 (on the host otherwise)
    device: str = "cpu"
    #: Inductor options (``(name, value)`` pairs) patched in while the fused path compiles and runs
    options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"case {self.id!r}: {self.device!r} is not a torch device ({exc})") from None
        if any(not (isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], str)) for o in self.options):
            raise ValueError(f"case {self.id!r}: options must be (name, value) pairs, got {self.options!r}")
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
        options = tuple((str(k), v) for k, v in data.get("options", ()))
        return cls(**{**data, "inputs": inputs, "options": options})


def for_backend(case: Case, name: str) -> Case:
    """``case`` compiled by the adapter or backend ``name`` (:func:`precisionkit.backends.compile_target`):
    its ``backend`` becomes the ``torch.compile`` backend name and its ``setup`` gains the lines that
    register it, so its file needs only torch and that compiler (``import openvino.torch``)."""
    from .backends import compile_target

    backend, setup = compile_target(name)
    if setup and setup.strip() not in case.setup:
        case = case.with_(setup=(case.setup.rstrip() + "\n" + setup).lstrip("\n"))
    return case.with_(backend=backend)


def generator_device(device: str) -> str:
    """Where a case's inputs are drawn: on the device itself where torch has a random generator
    for it (cpu, cuda, xpu, mps), so the program's seed decides the values there; elsewhere (e.g.
    ``meta``) on the host, then moved."""
    kind = torch.device(device).type
    return device if kind in ("cpu", "cuda", "xpu", "mps") else "cpu"


def _on_device(src: str) -> str:
    """``make``'s source drawing on ``GEN_DEVICE`` and returning tensors on ``DEVICE``."""
    src = src.replace("torch.Generator()", "torch.Generator(GEN_DEVICE)").replace(
        "generator=g", "generator=g, device=GEN_DEVICE"
    )
    src = src.replace("dtype=torch.float64).to(d)", "dtype=torch.float64, device=GEN_DEVICE).to(DEVICE, d)")
    src = src.replace("], dtype=torch.float64)", "], dtype=torch.float64, device=GEN_DEVICE)")
    return src.replace("        t = t.reshape(base)\n", "        t = t.to(DEVICE).reshape(base)\n")


def _inputs_src(inputs: Sequence[Input], device: str = "cpu") -> str:
    """``SPECS`` and ``make``; the salting functions first where an input has ``specials`` values
    (left out of the device rewrite: they allocate on their buffer's device)."""
    salted = any(i.values == "specials" for i in inputs)
    return (specials.SOURCE + "\n" if salted else "") + _make_src(inputs, device)


def _make_src(inputs: Sequence[Input], device: str) -> str:
    if device != "cpu":
        return _on_device(_make_src(inputs, "cpu"))
    specs = [(tuple(i.shape), f"torch.{i.dtype}", i.seed, i.layout, i.scale, i.values) for i in inputs]
    simple = all(i.layout == "contiguous" and i.scale == 1.0 and i.values == "normal" for i in inputs)
    if simple:
        rows = ", ".join(f"({s!r}, {d}, {k})" for s, d, k, *_ in specs)
        return (
            f"SPECS = [{rows}]  # (shape, dtype, seed) per input, drawn in fp64\n"
            "make = lambda: [torch.randn(s, generator=torch.Generator().manual_seed(k), dtype=torch.float64).to(d) "
            "for s, d, k in SPECS]\n"
        )
    rows = ",\n    ".join(f"({s!r}, {d}, {k}, {lay!r}, {sc!r}, {v!r})" for s, d, k, lay, sc, v in specs)
    return f"SPECS = [  # (shape, dtype, seed, layout, scale, values)\n    {rows},\n]\n" + _MAKE_SRC


# One generator per input, drawn in fp64 (or as integers) and cast, then laid out (see LAYOUTS, VALUES).
_MAKE_SRC = """def make():
    out = []
    for shape, dtype, seed, layout, scale, values in SPECS:
        g = torch.Generator().manual_seed(seed)
        base = {"transposed": shape[:-2] + shape[:-3:-1], "broadcast": shape[:-2] + (1,) + shape[-1:],
                "strided": shape[:-1] + (2 * shape[-1],)}.get(layout, tuple(shape))
        n = 1
        for d in base:
            n *= d
        n += 7 if layout == "offset" else 0
        if values == "bool":
            t = torch.rand(n, generator=g, dtype=torch.float64) < 0.5
        elif values in ("int", "index"):
            low = -int(scale) if values == "int" else 0
            t = torch.randint(low, int(scale) + (values == "int"), (n,), generator=g)
        else:
            t = torch.randn(n, generator=g, dtype=torch.float64) * scale
            if values == "grid":
                t = torch.round(t * 10.0) / 10.0
            elif values == "edge":
                fi = torch.finfo(dtype)
                edge = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, -1.0, 0.5,
                                     fi.smallest_normal / 4, fi.max / 2], dtype=torch.float64)
                pick = torch.randint(0, 4 * len(edge), (n,), generator=g)
                t = torch.where(pick < len(edge), edge[pick.clamp(max=len(edge) - 1)], t)
            elif values == "specials":
                salt_specials(t, dtype, g)
        t = t.to(dtype)[7:] if layout == "offset" else t.to(dtype)
        t = t.reshape(base)
        if values == "tail" and t.dim() > 0 and t.shape[-1] > 0:
            sign = 1 - 2 * (torch.arange(t[..., -1].numel()) % 2)
            t[..., -1] = (8 * scale * sign).reshape(t[..., -1].shape).to(dtype)
        if layout == "transposed":
            t = t.transpose(-1, -2)
        elif layout == "broadcast":
            t = t.expand(shape)
        elif layout == "strided":
            t = t[..., ::2]
        elif layout == "channels_last":
            t = t.contiguous(memory_format=torch.channels_last)
        out.append(t)
    return out
"""


def _device_constants(case: Case) -> str:
    out = ""
    if case.device != "cpu":
        out += f"DEVICE, GEN_DEVICE = {case.device!r}, {generator_device(case.device)!r}\n"
    if case.options:
        out += f"OPTIONS = {dict(case.options)!r}  # Inductor options of the fused path\n"
    return out


#: The fused path with the case's Inductor options patched in (``config.patch`` also reaches a
#: backend that wraps Inductor, which ``torch.compile(options=...)`` does not).
_OPTIONS_SRC = """def compiled(graph, backend):
    import torch._inductor.config as config
    fn = torch.compile(graph, backend=backend)
    return lambda *a: config.patch(OPTIONS)(fn)(*a)
"""


def _check_src(case: Case) -> str:
    """The rule's check, run on the case's device (factory calls in the graph included) and with its options."""
    src = CHECKS[case.rule]
    if case.options:
        src = _OPTIONS_SRC + src.replace("torch.compile(graph, backend=backend)", "compiled(graph, backend)")
    if case.device != "cpu":
        src = src.replace("with torch.no_grad():", "with torch.no_grad(), torch.device(DEVICE):")
    return src


def sanitizer_command(script: str | os.PathLike[str], python: str | None = None, which: Any = None) -> list[str] | None:
    """The command that runs a reproducer under NVIDIA's ``compute-sanitizer`` (memcheck: out-of-bounds
    and misaligned accesses of the kernels), or None where the tool is not installed. ``which``:
    how the tool is looked up (``shutil.which`` by default)."""
    import shutil

    tool = (which or shutil.which)("compute-sanitizer")
    if not tool:
        return None
    return [str(tool), "--tool", "memcheck", "--error-exitcode", "3", python or sys.executable, str(script)]


def _constants(case: Case) -> str:
    if case.rule == "diff":
        return f"REDUCTION = {int(case.extra.get('reduction', 1))!r}  # longest reduction in the graph\n"
    if case.rule == "ulp":
        return f"SLACK = {case.slack!r}\n"
    if case.rule == "fp64":
        return f"ATOL, RTOL = {case.atol!r}, {case.rtol!r}\n"
    return ""


def render(case: Case, note: str = "") -> str:
    """The reproducer file's text (kept short: one blank line between its parts); ``note``, a line of
    its docstring (what minimizing did: :func:`minimization_text`)."""
    what = case.title or case.id
    setup = (case.setup.strip() + "\n") if case.setup.strip() else ""
    functional = "import torch.nn.functional as F\n" if "F." in case.source else ""
    where = f" on {case.device}" if case.device != "cpu" else ""
    sanitizer = (
        ". A crash: compute-sanitizer --tool memcheck python repro.py"
        if torch.device(case.device).type == "cuda"
        else ""
    )
    parts = [
        f'"""{what}: rule {case.rule!r}{where}. Exits 1 while it reproduces. Usage: python repro.py [BACKEND]'
        f"{sanitizer}" + (f"\n{note}" if note else "") + '"""\n'
        "import sys\nimport torch\n" + functional + setup + _constants(case) + _device_constants(case),
        case.source.strip() + "\n",
        _inputs_src(case.inputs, case.device),
        _check_src(case),
        "if __name__ == '__main__':\n"
        f"    reproduces, message = check(graph, make(), sys.argv[1] if len(sys.argv) > 1 else {case.backend!r})\n"
        "    print(('REPRODUCES: ' if reproduces else 'clean: ') + message)\n"
        "    sys.exit(int(reproduces))\n",
    ]
    return "\n".join(parts)


def minimization_text(record: Mapping[str, Any]) -> str:
    """One sentence on what minimizing did, from :meth:`precisionkit.minimize.Minimized.outcome`'s record
    (a reproducer's ``meta.json`` holds it; :func:`render` puts it in the file's docstring): "Minimized
    from N to M ops" where ops were removed; where none was, why it could not shrink: its budget ran
    out, every candidate tried lost the failure, or the program had no smaller candidate (already minimal).

    >>> minimization_text(
    ...     {
    ...         "ops_before": 3,
    ...         "ops_after": 3,
    ...         "shapes_before": [[4]],
    ...         "shapes_after": [[4]],
    ...         "minimize_checks": 7,
    ...         "minimize_accepted": 0,
    ...         "minimize_ended": "exhausted",
    ...         "minimize_seconds": 1.5,
    ...     }
    ... )
    'Not minimized: could not shrink its 3 ops because every candidate removal lost the failure (7 tried in 1.5 s).'
    """
    before, after = record["ops_before"], record["ops_after"]
    shapes_before, shapes_after = record["shapes_before"], record["shapes_after"]
    checks, seconds = record["minimize_checks"], record["minimize_seconds"]
    ended, accepted = record.get("minimize_ended"), record.get("minimize_accepted", 0)
    budget = record.get("minimize_max_checks", checks)
    shapes = f" and from shapes {shapes_before} to {shapes_after}" if shapes_after != shapes_before else ""
    ops = f"{before} op{'s' if before != 1 else ''}"
    if after < before:
        ran_out = f"; its budget of {budget} ran out" if ended == "budget" else ""
        return f"Minimized from {before} to {after} ops{shapes} ({checks} candidates, {seconds} s{ran_out})."
    if ended == "budget":
        why = f"its budget of {budget} candidates ran out ({checks} tried in {seconds} s)"
    elif ended == "minimal":
        why = "the program was already minimal (no smaller candidate to try)"
    elif ended == "exhausted" and accepted == 0:
        why = f"every candidate removal lost the failure ({checks} tried in {seconds} s)"
    elif ended == "exhausted":
        why = f"every op removal tried lost the failure ({checks} candidates in {seconds} s)"
    else:  # a record written before minimizing recorded why it ended
        return f"Kept all {ops}{shapes} ({checks} candidates, {seconds} s)."
    if accepted:
        plainer = f"shapes minimized from {shapes_before} to {shapes_after}" if shapes else "its inputs made plainer"
        return f"Could not shrink its {ops} because {why}; {plainer}."
    return f"Not minimized: could not shrink its {ops} because {why}."


def namespace(case: Case) -> dict[str, Any]:
    """The reproducer's definitions (graph, make, check, ...) executed in this process, as a module
    registered in ``sys.modules`` (Dynamo before 2.8 imports the module a function's globals name)."""
    import re
    import types

    module = types.ModuleType("precisionkit_repro_" + re.sub(r"\W", "_", case.id))
    module.__dict__["F"] = torch.nn.functional
    exec(compile(render(case), f"<repro {case.id}>", "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    return module.__dict__


def make_inputs(case: Case) -> list[torch.Tensor]:
    """The case's inputs, exactly as its file builds them."""
    inputs: list[torch.Tensor] = namespace(case)["make"]()
    return inputs


def reproduces(case: Case, backend: str | None = None) -> tuple[bool, str]:
    """Run the case's rule in this process (Dynamo reset first); an exception in the graph, its
    inputs or the compiler counts as "does not reproduce" and is named in the message."""
    torch._dynamo.reset()
    try:
        if backend is not None:
            case = for_backend(case, backend)
        scope = namespace(case)
        result: tuple[bool, str] = scope["check"](scope["graph"], scope["make"](), case.backend)
    except Exception as exc:  # noqa: BLE001 - a candidate that does not run does not reproduce
        return False, f"raised {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[
            :300
        ]
    finally:
        torch._dynamo.reset()
    return bool(result[0]), str(result[1])


def write(case: Case, folder: str | os.PathLike[str], note: str = "") -> Path:
    """Write ``repro.py`` (``note`` in its docstring: :func:`render`) and ``case.json`` into ``folder``
    atomically; returns the script's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("case.json", json.dumps(case.to_json(), indent=2) + "\n"), ("repro.py", render(case, note))):
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


def lines_of(case: Case, note: str = "") -> int:
    """Lines of the rendered file."""
    return len(render(case, note).splitlines())
