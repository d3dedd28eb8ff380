"""The ``opinfo`` generator: programs whose vocabulary is PyTorch's own operator database.

``torch.testing._internal.common_methods_invocations.op_db`` lists every public operator with the
dtypes it supports per device, functions that make valid sample arguments for it (shapes, scalars,
keyword arguments), the domain of the unary ones and how they are called. This generator draws
chains of 2 to 8 of those operators, each fed the previous one's result as its first tensor
argument, under one range mode and one compile mode, and writes them as an ordinary program of
:mod:`.program` (a :class:`~precisionkit.repro.Case`), so the ``diff`` rule, the minimizer, bisection
and reproducers apply as to the hand-written generators.

How a program is drawn (all from the program's seed):

* its dtype (:data:`DTYPES`: fp32, fp64, fp16, bf16, int64, int32, bool), its range mode
  (:data:`MODES`) and its compile mode (:data:`~.compile_modes.COMPILE_MODES`);
* its first op: with probability 0.3 a module-level op (convolution, normalization, padding,
  linear, pooling: :data:`MODULE_FAMILY`), otherwise any eligible op (:func:`catalogue`), the op
  being the seed's in a fixed rotation of those ops (:func:`_anchor`), so that consecutive seeds
  start at nearly every op once, where one of its samples can start a program;
* each op's arguments from one of the op's own samples (``sample_inputs``, and ``reference_inputs``
  where the op has them) for the dtype of the value it is fed: the sample's first tensor becomes
  the chain's value (reshaped, cut, repeated or cast where its shape or dtype differ: only casts
  that cannot jump, so no float is truncated to an integer), its other tensors become seeded inputs
  (floats and large integer tensors) or literals (small integer tensors, which are indices whose
  values matter), its scalars, dtypes, lists and keywords are written as they are;
* after the first op, with probability 0.25 a step is a binary pointwise op with a Python scalar
  on its right (the scalar from the range mode: zeros of both signs, inf and NaN as divisors too);
* a unary op with a ``domain`` gets its argument mapped inside the domain (``tanh`` scaled into a
  bounded one, ``abs`` shifted onto a half-line) unless the range mode is ``domain_edge``, where the
  argument is mapped to within a small distance of the domain's lower end, on both sides.

Every step is run eagerly and in fp64 while the program is drawn; a step that raises, returns
something other than tensors, an empty or a complex tensor is drawn again. So every program the
generator returns runs eagerly and in fp64 (a runner's ``invalid`` is the generator's fault).

The op database is imported once per process, on first use (a few seconds), and each op's samples
once per (op, dtype), under a fixed seed: generation is a function of the seed alone. The
vocabulary (dtypes, modes, eligible and excluded ops, families) is :mod:`.opinfo_ops`, the ops'
samples and how a call is written :mod:`.opinfo_samples`; this module composes programs and counts
their coverage.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..repro import _MAKE_SRC, Case, Input
from .compile_modes import COMPILE_MODES, setup_source
from .opinfo_guards import (
    _BITS_OF_OPERAND,
    _PERIODIC,
    _ZERO_SIGN_UNDOCUMENTED,
    _beyond_phase,
    _computed_float,
    _guarded_call,
    _names_in,
    _nan_masked,
    _run,
    _samples,
)
from .opinfo_ops import (
    _CONVERSIONS,
    _DEGREE_OPS_WORD,
    _DTYPE_WEIGHTS,
    _UNDEFINED_CASTS_MODES,
    DTYPES,
    EXCLUDED,
    FAMILIES,
    FLOAT_MODES,
    INT_MODES,
    MAX_OPS,
    MIN_OPS,
    MODES,
    MODULE_FAMILY,
    _callee,
    catalogue,
    dtypes_of,
    exclusions_by_reason,
    family,
    op_db,
)
from .opinfo_samples import Slot, Template, _number, _Unwritable, templates
from .program import Program, _layout

__all__ = [
    "DTYPES",
    "EXCLUDED",
    "FAMILIES",
    "MAX_OPS",
    "MIN_OPS",
    "MODES",
    "Coverage",
    "Slot",
    "Template",
    "catalogue",
    "coverage",
    "dtypes_of",
    "exclusions_by_reason",
    "family",
    "generate_opinfo",
    "op_db",
    "templates",
]


# --------------------------------------------------------------------------------------- programs


@dataclass
class _State:
    p: Program
    dtype: str
    mode: str
    env: dict[str, Any] = field(default_factory=dict)  # name -> eager value
    env64: dict[str, Any] = field(default_factory=dict)  # name -> fp64-run value
    ops: list[dict[str, str]] = field(default_factory=list)
    float_ref: str | None = None  # a float input of the program's dtype (casts are spelled by it)


_MAKER: dict[str, Any] = {}


def _make(inputs: Sequence[Input]) -> list[torch.Tensor]:
    """The tensors of ``inputs``, made as the program's file makes them."""
    if not _MAKER:
        from .. import specials

        _MAKER["torch"] = torch
        exec(compile(specials.SOURCE + "\n" + _MAKE_SRC, "<opinfo make>", "exec"), _MAKER)
    _MAKER["SPECS"] = [(i.shape, getattr(torch, i.dtype), i.seed, i.layout, i.scale, i.values) for i in inputs]
    made: list[torch.Tensor] = _MAKER["make"]()
    return made


def _tiny(dtype: str) -> float:
    return float(torch.finfo(getattr(torch, dtype)).smallest_normal)


def _new_input(st: _State, shape: tuple[int, ...], dtype: str, values: Any = None, first: bool = False) -> str:
    """A seeded input of ``shape`` and ``dtype``, its values from the range mode (the first input,
    and sometimes the others) or plain; made and put in both environments."""
    p, rng = st.p, st.p.rng
    d = getattr(torch, dtype)
    layout = "contiguous"
    if d == torch.bool:
        kind, scale, prefix = "bool", 1.0, "b"
    elif not d.is_floating_point:
        prefix = "i"
        if values is not None:
            kind, scale = values
        elif st.mode == "int_width" and (first or rng.random() < 0.5):
            bits = torch.iinfo(d).bits
            kind, scale = "int", float(2 ** min(bits - 2, 62) * rng.choice((1, 2)) - (rng.random() < 0.5))
        else:
            kind, scale = "int", rng.choice((3.0, 16.0, 100.0))
    else:
        prefix = "f"
        kind, scale = "normal", rng.choice((1.0, 1.0, 4.0, 0.1))
        mode = st.mode if (first or rng.random() < 0.3) else "normal"
        if mode == "tiny":
            scale = _tiny(dtype) * rng.choice((2.0**-6, 1.0, 64.0))
        elif mode == "huge":
            scale = float(torch.finfo(d).max) / rng.choice((4.0, 64.0, 2.0**20))
        elif mode == "signed_zero":
            scale = 0.0
        elif mode == "nonfinite":
            kind = rng.choice(("edge", "specials"))
            scale = 1.0
        elif mode == "domain_edge":
            kind = rng.choice(("normal", "grid"))
    if first and len(shape) >= 1:
        layout = _layout(rng)
        if layout in ("transposed", "broadcast") and len(shape) < 2:
            layout = "contiguous"
    name = f"{prefix}{len(p.inputs)}"
    seed = (p.seed * 1_000_003 + len(p.inputs) * 7919) % 2**31
    inp = Input(name, tuple(shape), dtype, seed, layout, scale, kind)
    p.inputs.append(inp)
    p.kinds[name] = (prefix, tuple(shape))
    t = _make([inp])[0]
    st.env[name] = t
    st.env64[name] = t.double() if t.is_floating_point() else t
    if prefix == "f" and dtype == st.dtype and st.float_ref is None:
        st.float_ref = name
    return name


def _literal(slot: Slot) -> str:
    return f"torch.tensor({slot.values!r}, dtype=torch.{slot.dtype})"


def _cast(st: _State, expr: str, src: torch.dtype, dst: str) -> str | None:
    """``expr`` cast to ``dst``, or None where the cast could jump (a float truncated to an integer
    or tested against zero: a rounding's worth moves the result)."""
    d = getattr(torch, dst)
    if src == d:
        return expr
    if src.is_floating_point and not d.is_floating_point:
        return None
    if d.is_floating_point and dst == st.dtype and st.float_ref is not None:
        return f"{expr}.to({st.float_ref}.dtype)"  # a no-op in the fp64 run, as the program means
    return f"{expr}.to(torch.{dst})"


def _adapt(expr: str, have: tuple[int, ...], want: tuple[int, ...]) -> str:
    """``expr`` of shape ``have`` made to shape ``want``: reshaped, cut or repeated in memory order."""
    if have == want:
        return expr
    n, m = math.prod(want), math.prod(have)
    flat = f"{expr}.reshape({want!r})" if n == m else None
    if flat is None and m > n:
        flat = f"{expr}.flatten()[:{n}].reshape({want!r})"
    if flat is None:
        flat = f"{expr}.flatten().repeat({-(-n // m)})[:{n}].reshape({want!r})"
    return flat


def _domain(op: Any) -> tuple[float | None, float | None]:
    dom = getattr(op, "domain", None) or (None, None)
    lo, hi = dom
    return lo, hi


def _into_domain(st: _State, expr: str, op: Any, dtype: torch.dtype) -> tuple[str, str | None]:
    """``expr`` mapped into the op's domain (or, in ``domain_edge`` mode, to its lower edge)."""
    lo, hi = _domain(op)
    if lo is None and hi is None:
        return expr, None
    if st.mode == "domain_edge":
        edge = float(lo if lo is not None else hi)  # type: ignore[arg-type]
        if dtype.is_floating_point:
            return f"({expr} * {st.p.rng.choice((2.0**-10, 2.0**-4, 0.0))!r} + {_number(edge)})", "edge"
        return f"({expr} + {int(edge)})", "edge"
    if not dtype.is_floating_point:
        if dtype == torch.bool:
            return expr, None
        low = None if lo is None else math.ceil(lo)
        high = None if hi is None else math.floor(hi)
        return f"{expr}.clamp({low!r}, {high!r})", "inside"
    if lo is not None and hi is not None:
        half, mid = (hi - lo) / 2 * 0.99, (hi + lo) / 2
        return f"(torch.tanh({expr}) * {half!r} + {mid!r})", "inside"
    if lo is not None:
        return (f"{expr}.abs()" if lo == 0 else f"({expr}.abs() + {_number(float(lo))})"), "inside"
    return f"({_number(float(hi))} - {expr}.abs())", "inside"  # type: ignore[arg-type]


def _usable(value: Any) -> list[torch.Tensor] | None:
    items = list(value) if isinstance(value, (tuple, list)) else [value]
    if not items or not all(isinstance(t, torch.Tensor) for t in items):
        return None
    if any(t.is_complex() or t.numel() == 0 or t.numel() > 1 << 17 or t.is_sparse for t in items):
        return None
    return items


def _commit(st: _State, expr: str, key: str, dtype: str, how: str) -> str | None:
    """Run the step eagerly and in fp64; on success, write its line(s) and return the chain's new
    value (element 0 of a tuple result; its other elements stay as outputs)."""
    if op_db()[key].name in _PERIODIC and any(_beyond_phase(st.env[n]) for n in _names_in(expr) if n in st.env):
        return None  # its computed argument's last bits decide it whole: any rounding upstream does
    if op_db()[key].name in _BITS_OF_OPERAND and _computed_float(st, expr):
        return None  # it reads the computed float's last bit as data: any rounding upstream moves it
    try:
        raw = _run(expr, st.env)
        eager = _usable(raw)
        ref = _usable(_run(expr, st.env64)) if eager is not None else None
    except Exception:  # noqa: BLE001 - a step the op rejects is drawn again
        return None
    if eager is None or ref is None or len(eager) != len(ref):
        return None
    if any(e.dtype.is_floating_point != r.dtype.is_floating_point for e, r in zip(eager, ref, strict=True)):
        return None
    if op_db()[key].name in _ZERO_SIGN_UNDOCUMENTED and len(eager) == 1 and eager[0].is_floating_point():
        expr = f"{expr} + 0.0"  # both zeros +0.0; every other value as it was
        raw = _run(expr, st.env)
        eager, ref = [raw], [_run(expr, st.env64)]
    converts = st.mode in _UNDEFINED_CASTS_MODES and op_db()[key].name in _CONVERSIONS
    to_int = any(not t.is_floating_point() and t.dtype != torch.bool for t in eager)
    floats = any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in st.env.values())
    if converts and to_int and floats:
        return None  # a NaN, an inf or a huge float converted to an integer: undefined in C++
    if st.mode in _UNDEFINED_CASTS_MODES and _DEGREE_OPS_WORD in op_db()[key].name:
        return None  # a degree that may be huge or not finite, converted to an integer: undefined too
    p = st.p
    name = f"v{len(p.lines)}"
    p.lines.append(f"    {name} = {expr}")
    single = not isinstance(raw, (tuple, list))
    if single:
        st.env[name], st.env64[name] = eager[0], ref[0]
        p.kinds[name] = ("t", tuple(eager[0].shape))
        chain = name
    else:
        p.kinds[name] = ("tuple", ())
        chain = ""
        for k, (e, r) in enumerate(zip(eager[:3], ref[:3], strict=True)):
            part = f"v{len(p.lines)}"
            p.lines.append(f"    {part} = {name}[{k}]")
            st.env[part], st.env64[part] = e, r
            p.kinds[part] = ("t", tuple(e.shape))
            chain = chain or part
    st.ops.append({"op": key, "dtype": dtype, "family": family(key), "how": how})
    fam = family(key)
    if fam not in ("pointwise", "view"):
        p.reduction = max(p.reduction, max(int(t.numel()) for t in st.env.values() if isinstance(t, torch.Tensor)))
    return chain


def _op_step(st: _State, head: str | None, keys: Sequence[str], key: str | None = None) -> str | None:
    """One op of ``keys`` fed ``head`` (None: the chain's first op, fed a new input); ``key``: that
    op rather than one drawn from ``keys``."""
    rng = st.p.rng
    key = key or rng.choice(keys)
    op = op_db()[key]
    dtypes = dtypes_of(op, st.p.device)
    have = st.env[head] if head is not None else None
    if have is not None and str(have.dtype).removeprefix("torch.") in dtypes:
        dtype = str(have.dtype).removeprefix("torch.")
    elif st.dtype in dtypes:
        dtype = st.dtype
    else:
        dtype = rng.choice(dtypes)
    pool = _samples(key, dtype)
    if not pool:
        return None
    if have is not None and rng.random() < 0.7:  # prefer a sample whose first tensor fits as it is
        fits = [t for t in pool if t.head.shape == tuple(have.shape)]
        pool = fits or pool
    t = rng.choice(pool)
    names: list[str] = []
    mark = len(st.p.inputs)
    out = None
    try:
        for k, slot in enumerate(t.slots):
            if k == 0:
                if head is None:
                    expr = _new_input(st, slot.shape, slot.dtype, first=True)
                else:
                    assert have is not None
                    cast = _cast(st, head, have.dtype, slot.dtype)
                    if cast is None:
                        raise _Unwritable
                    expr = _adapt(cast, tuple(have.shape), slot.shape)
                expr, _ = _into_domain(st, expr, op, getattr(torch, slot.dtype))
                names.append(expr)
            elif slot.role == "literal":
                names.append(_literal(slot))
            else:
                names.append(_new_input(st, slot.shape, slot.dtype, slot.values))
        call = _guarded_call(st, op.name, t, names)  # None: not drawn (see .opinfo_guards)
        out = _commit(st, call, key, dtype, "op") if call is not None else None
    except Exception:  # noqa: BLE001 - an input or call this sample cannot have: drawn again
        out = None
    if out is None:  # undo the inputs this step made
        for inp in st.p.inputs[mark:]:
            st.env.pop(inp.name, None)
            st.env64.pop(inp.name, None)
            st.p.kinds.pop(inp.name, None)
        del st.p.inputs[mark:]
        if st.float_ref is not None and st.float_ref not in st.env:
            st.float_ref = None
    return out


def _scalars(st: _State, dtype: torch.dtype) -> tuple[float | int, ...]:
    if not dtype.is_floating_point and dtype != torch.bool:
        if st.mode == "int_width":
            big = 2 ** (torch.iinfo(dtype).bits - 2)
            return (big, -big, big - 1, 2, -1)
        return (2, 3, -1, 7, 16)
    by_mode: dict[str, tuple[float, ...]] = {
        "nonfinite": (0.0, -0.0, math.inf, -math.inf, math.nan, 1.0),
        "signed_zero": (0.0, -0.0, 1.0, -1.0),
        "tiny": (1e-30, -1e-40, 2.0**-24, 0.0),
        "huge": (1e30, 65504.0, 3.0e38, -1e300),
    }
    return by_mode.get(st.mode, (2.0, 0.5, -3.0, 0.1, 7.0, 0.3, 1e-3))


#: the largest degree a special polynomial is given as a scalar: its recurrence takes one step per
#: degree, so int_width's 2**62 held generation (and would hold eager and the fused run) for hours
_DEGREE_LIMIT = 1000


def _scalar_step(st: _State, head: str, binaries: Sequence[str]) -> str | None:
    """A binary pointwise op with ``head`` on its left and a Python scalar on its right."""
    rng = st.p.rng
    have = st.env[head]
    dtype = str(have.dtype).removeprefix("torch.")
    keys = [k for k in binaries if dtype in dtypes_of(op_db()[k], st.p.device)]
    if not keys:
        return None
    key = rng.choice(keys)
    op = op_db()[key]
    value = rng.choice(_scalars(st, have.dtype))
    if _DEGREE_OPS_WORD in op.name and not abs(value) <= _DEGREE_LIMIT:
        return None  # the recurrence runs that many steps per element, eagerly while generating too
    scalar = _number(value)
    kind, name = _callee(op) or ("", "")
    if kind == "func":
        expr = f"{name}({head}, {scalar})"
    elif kind == "method":
        expr = f"{head}.{name}({scalar})"
    else:
        return None
    expr = _nan_masked(op.name, head, expr, have.is_floating_point(), value)
    out = _commit(st, expr, key, dtype, "scalar")
    if out is not None:
        st.p.features.add("python_scalar")
    return out


_KEYS: dict[str, list[str]] = {}


def _keys() -> dict[str, list[str]]:
    """Eligible op keys, all and by role (module ops, binary ops with a scalar right side)."""
    if not _KEYS:
        eligible, _ = catalogue()
        _KEYS["all"] = eligible
        _KEYS["module"] = [k for k in eligible if family(k) == MODULE_FAMILY]
        _KEYS["scalar"] = [
            k
            for k in eligible
            if type(op_db()[k]).__name__ == "BinaryUfuncInfo"
            and getattr(op_db()[k], "supports_rhs_python_scalar", False)
            and (_callee(op_db()[k]) or ("",))[0] in ("func", "method")
        ]
    return _KEYS


#: tries of a program's anchor (its seed's op in :func:`_anchor`'s rotation) before any other first op
_ANCHOR_TRIES = 4
_ORDER: dict[str, int] = {}


def _anchor(seed: int, candidates: Sequence[str]) -> str:
    """The first op of the program of ``seed``, stratified over seeds rather than drawn: the eligible
    ops in a fixed shuffled order, seed ``s`` taking the op at position ``s`` mod their number (or
    the next one there that is among ``candidates``: the ops of the program's dtype and role). So
    any run of consecutive seeds as long as the op list starts a program at nearly every op once,
    where a uniform draw leaves many ops out of even 2000 programs."""
    if not _ORDER:
        order = list(catalogue()[0])
        random.Random("opinfo:anchor-order").shuffle(order)
        _ORDER.update({k: n for n, k in enumerate(order)})
    n = len(_ORDER)
    start = seed % n
    return min(candidates, key=lambda k: (_ORDER.get(k, n) - start) % n if k in _ORDER else n)


def _program(p: Program, dtype: str | None) -> Case:
    rng = p.rng
    dtype = dtype or rng.choices(DTYPES, _DTYPE_WEIGHTS)[0]
    d = getattr(torch, dtype)
    mode = rng.choice(FLOAT_MODES if d.is_floating_point else INT_MODES if d != torch.bool else ("normal",))
    compile_mode = rng.choices(COMPILE_MODES, (2, 1, 1))[0]
    n_ops = rng.randint(MIN_OPS, MAX_OPS)
    keys = _keys()
    for attempt in range(8):
        p.inputs, p.lines, p.kinds, p.features, p.reduction = [], [], {}, set(), 1
        st = _State(p, dtype, mode)
        first = keys["module"] if rng.random() < 0.3 else keys["all"]
        first = [k for k in first if dtype in dtypes_of(op_db()[k], p.device)] or first
        head, anchor = None, _anchor(p.seed + attempt, first)
        for k in range(12):  # the seed's own op first (a few samples of it), then any of ``first``
            head = _op_step(st, None, first, anchor if k < _ANCHOR_TRIES else None)
            if head is not None:
                break
        if head is None:
            continue
        tries = 0
        while len(st.ops) < n_ops and tries < 24:
            tries += 1
            scalar = rng.random() < 0.25
            nxt = _scalar_step(st, head, keys["scalar"]) if scalar else _op_step(st, head, keys["all"])
            head = nxt or head
        if len(st.ops) >= MIN_OPS:
            break
    else:
        raise RuntimeError(f"opinfo: no program of {MIN_OPS} ops for seed {p.seed} ({dtype})")
    p.dtype = dtype
    record: dict[str, Any] = {"mode": compile_mode}
    if compile_mode == "mark_dynamic":
        first_input = p.inputs[0]
        dims = [k for k, s in enumerate(first_input.shape) if s >= 2]
        if dims:
            record.update(input=0, dim=rng.choice(dims))
        else:
            record = {"mode": "dynamic"}
    p.features.update({f"opinfo_{o['family']}" for o in st.ops})
    p.features.update({f"mode_{mode}", f"compile_{record['mode']}"})
    consumed = {m for line in p.lines[1:] for m in _names_in(line.split(" = ", 1)[1])}
    outs = [n for n in p.kinds if n.startswith("v") and p.kinds[n][0] == "t" and n not in consumed][-4:]
    case = p.case(outs, "opinfo")
    extra = {**case.extra, "ops": st.ops, "dtype": dtype, "mode": mode, "compile": record}
    return case.with_(extra=extra, setup=setup_source(record), title=f"difftest opinfo seed {p.seed} ({dtype}, {mode})")


def generate_opinfo(seed: int, dtype: str | None = None, device: str = "cpu") -> Case:
    """The ``opinfo`` program of ``seed`` (in ``dtype`` where given, one of :data:`DTYPES`)."""
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    rng = random.Random(f"opinfo:{seed}")
    p = Program(seed, rng, dtype or "float32", device=device)
    with torch.random.fork_rng(devices=[]):
        case = _program(p, dtype)
    return case.with_(id=f"opinfo-{seed}-{case.extra['dtype']}")


# --------------------------------------------------------------------------------------- coverage


@dataclass
class Coverage:
    """How often each (op, dtype, mode) occurs among generated programs."""

    programs: int
    #: (op, dtype, mode) -> programs holding it
    counts: Counter[tuple[str, str, str]]
    ops: Counter[str]
    dtypes: Counter[str]
    modes: Counter[str]
    compile_modes: Counter[str]
    families: Counter[str]
    eligible: list[str]

    def per_1000(self, key: tuple[str, str, str]) -> float:
        return 1000.0 * self.counts[key] / self.programs if self.programs else 0.0

    @property
    def reached(self) -> float:
        """Share of eligible ops in at least one program."""
        return len(set(self.ops) & set(self.eligible)) / len(self.eligible) if self.eligible else 0.0

    def summary(self) -> str:
        missing = sorted(set(self.eligible) - set(self.ops))
        rows = [
            f"programs: {self.programs}",
            f"eligible ops reached: {len(set(self.ops) & set(self.eligible))} of {len(self.eligible)} ({100 * self.reached:.1f}%)",
            "dtypes (programs): " + ", ".join(f"{k} {v}" for k, v in sorted(self.dtypes.items())),
            "modes (programs): " + ", ".join(f"{k} {v}" for k, v in sorted(self.modes.items())),
            "compile modes (programs): " + ", ".join(f"{k} {v}" for k, v in sorted(self.compile_modes.items())),
            "op families (occurrences): " + ", ".join(f"{k} {v}" for k, v in sorted(self.families.items())),
            f"never drawn ({len(missing)}): " + ", ".join(missing),
        ]
        return "\n".join(rows)

    def table(self) -> str:
        """One line per (op, dtype, mode): programs per 1000."""
        lines = [f"{'op':40} {'dtype':9} {'mode':12} per1000"]
        for (op, dt, mode), _n in sorted(self.counts.items()):
            lines.append(f"{op:40} {dt:9} {mode:12} {self.per_1000((op, dt, mode)):7.1f}")
        return "\n".join(lines)


def coverage(cases: Iterable[Case], eligible: Sequence[str] | None = None) -> Coverage:
    """The coverage of ``cases`` (opinfo programs), counted from their records alone (no running):
    a program counts once per (op, dtype, mode) it holds, whatever the number of occurrences."""
    counts: Counter[tuple[str, str, str]] = Counter()
    ops: Counter[str] = Counter()
    dtypes: Counter[str] = Counter()
    modes: Counter[str] = Counter()
    compiles: Counter[str] = Counter()
    fams: Counter[str] = Counter()
    n = 0
    for case in cases:
        n += 1
        mode = case.extra["mode"]
        seen = {(o["op"], o["dtype"], mode) for o in case.extra["ops"]}
        counts.update(seen)
        ops.update({o["op"] for o in case.extra["ops"]})
        dtypes.update({case.extra["dtype"]} | {o["dtype"] for o in case.extra["ops"]})
        modes[mode] += 1
        compiles[case.extra["compile"]["mode"]] += 1
        fams.update(o.get("family", "other") for o in case.extra["ops"])
    return Coverage(
        n, counts, ops, dtypes, modes, compiles, fams, list(eligible if eligible is not None else catalogue()[0])
    )
