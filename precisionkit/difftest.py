"""A typed differential tester for ``torch.compile``: random programs over float, integer and bool
tensors, run eagerly, fused and in fp64, judged by the ``diff`` rule of :mod:`precisionkit.repro`.

Every program is a :class:`~precisionkit.repro.Case`, so a mismatch is already a standalone
reproducer, and :mod:`precisionkit.minimize` and :mod:`precisionkit.bisect` apply to it unchanged.

Generators (``generate(seed, generator)``):

* ``typed``: a random DAG over 2-D values of three kinds (float, int, bool) where real
  wrong-result bugs of compilers live: arg-reductions and min/max (values and indices), cumulative
  ops, explicit casts (float <-> int <-> bool, 16-bit round trips), where / masked_fill / clamp,
  exp/log/pow/rsqrt/reciprocal near their edges, rounding (ceil, floor, round, trunc, frac,
  floor_divide, remainder), integer arithmetic and bit ops, gather / scatter_add / index_select /
  index_add / index_put with duplicate indices, flip, roll, permute and views, in-place ops on
  views of a fresh buffer, constants across many binades. Inputs come in every layout of
  :data:`~precisionkit.repro.LAYOUTS` and with edge values (+-0, +-inf, NaN, subnormals, huge)
  where the program tests their handling; shapes sit around vector widths (tails) and tiles.
* ``attention``: scaled dot-product attention in the forms models write it (heads permuted from
  [B, S, H, D], scores multiplied or divided by the scale, an additive mask, softmax, matmul),
  the forms Inductor's attention pattern matcher rewrites.
* ``norm``: layer norm (``F.layer_norm`` or written out, biased variance, eps inside the root) and
  RMSNorm variants over rows that end in a vector tail.
* ``gelu``: GELU written as ``F.gelu`` (exact or tanh), with ``erf``, or with ``tanh``.
* ``reduction``: long sums and means (up to 2^20 terms in one program) on one thread or many.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from .repro import Case, Input, namespace

GENERATORS = ("typed", "attention", "norm", "gelu", "reduction")
#: ``crash``: the fused run killed the interpreter or never returned (only with :class:`Isolated`)
CLASSES = ("ok", "mismatch", "compile_error", "invalid", "crash")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
#: row lengths around the 8/16/32-lane vector widths and 16/32/64 tiles
_TAILS = (1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65)
_ROWS = (1, 2, 3, 4, 5, 8, 16)
#: constants across binades (also the values a bug's scalar must hit)
_CONSTS = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, 1e-3, 1e3, 2.0**-20, 2.0**20, 0.1, 7.0)
#: divisors not exact in binary, whose quotients round onto integers
_DIVISORS = (0.1, -0.1, 0.2, 0.3, 0.7, 3.0, 7.0)


@dataclass
class Program:
    """A program under construction: inputs, source lines, and the kind and shape of each value."""

    seed: int
    rng: random.Random
    dtype: str
    inputs: list[Input] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    kinds: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    reduction: int = 1
    features: set[str] = field(default_factory=set)

    def input(self, kind: str, shape: tuple[int, ...], layout: str = "contiguous", values: str | None = None) -> str:
        name = f"{kind[0]}{len(self.inputs)}"
        dtype = {"f": self.dtype, "i": "int64", "b": "bool"}[kind[0]]
        values = values or {"f": "normal", "i": "int", "b": "bool"}[kind[0]]
        scale = {
            "normal": self.rng.choice((1.0, 1.0, 4.0, 1e-3, 300.0)),
            "edge": 1.0,
            "grid": self.rng.choice((1.0, 4.0)),
        }.get(values, 16.0)
        if values == "index":
            scale = float(shape[-1])
        seed = (self.seed * 1_000_003 + len(self.inputs) * 7919) % 2**31
        self.inputs.append(Input(name, tuple(shape), dtype, seed, layout, scale, values))
        self.kinds[name] = (kind[0], tuple(shape))
        if layout != "contiguous":
            self.features.add(f"{layout}_input")
        if values == "edge":
            self.features.add("special_values")
        if values == "grid":
            self.features.add("grid_values")
        return name

    def add(self, kind: str, shape: tuple[int, ...], expr: str, *features: str) -> str:
        name = f"v{len(self.lines)}"
        self.lines.append(f"    {name} = {expr}")
        self.kinds[name] = (kind, tuple(shape))
        self.features.update(features)
        return name

    def values(self, kind: str, shape: tuple[int, ...] | None = None) -> list[str]:
        return [n for n, (k, s) in self.kinds.items() if k == kind and (shape is None or s == shape)]

    def sinks(self, limit: int = 4) -> list[str]:
        """The latest ``limit`` values no later line reads: every result the program computed and
        did not consume, so a wrong dtype or a wrong value cannot be hidden by a later cast."""
        import re

        # a read is a later line defining a new value from it; an in-place write is not a read.
        # An input written in place is a result too (its new contents are what the program made).
        written = {
            i.name for i in self.inputs if re.search(rf"^\s+{i.name}(?:\[|\.\w+_\()", "\n".join(self.lines), re.M)
        }
        out = []
        for name in (n for n in self.kinds if n.startswith("v") or n in written):
            at = int(name[1:]) if name.startswith("v") else -1
            later = [m.group(1) for m in (re.match(r"\s+v\d+ = (.*)", line) for line in self.lines[at + 1 :]) if m]
            if not any(re.search(rf"\b{name}\b", rhs) for rhs in later):
                out.append(name)
        return out[-limit:]

    def case(self, output: list[str], generator: str) -> Case:
        args = ", ".join(i.name for i in self.inputs)
        outs = ", ".join(output)
        body = "\n".join(self.lines) if self.lines else "    pass"
        source = f"def graph({args}):\n{body}\n    return {outs}\n"
        return Case(
            f"{generator}-{self.seed}",
            source,
            tuple(self.inputs),
            rule="diff",
            title=f"difftest {generator} seed {self.seed} ({self.dtype})",
            origin=f"differential tester, generator {generator!r}",
            extra={"reduction": self.reduction, "features": sorted(self.features), "generator": generator},
        )


def _layout(rng: random.Random) -> str:
    return rng.choice(("contiguous", "contiguous", "contiguous", "transposed", "broadcast", "offset", "strided"))


def _typed(p: Program) -> Case:
    rng = p.rng
    shape = (rng.choice(_ROWS), rng.choice(_TAILS))
    values = rng.choice(("edge", "edge", "grid", "grid", "normal", "normal", "normal"))
    p.input("f", shape, _layout(rng), values)
    if rng.random() < 0.5:
        p.input("i", shape, _layout(rng))
    if rng.random() < 0.3:
        p.input("b", shape)
    for _ in range(rng.randint(2, 7)):
        at = shape if rng.random() < 0.7 else p.kinds[rng.choice(p.values("f"))][1]
        if len(at) != 2:
            at = shape
        floats, ints, bools = p.values("f", at), p.values("i", at), p.values("b", at)
        op = rng.choice(_TYPED_OPS)
        op(p, rng, at, floats, ints, bools)
    return p.case(p.sinks() or [p.inputs[0].name], "typed")


# --- typed ops: each appends one or a few lines; (p, rng, shape, floats, ints, bools) -------------


def _pick(rng: random.Random, values: list[str]) -> str:
    """The latest value half of the time (chains of ops), else any."""
    return values[-1] if rng.random() < 0.5 else rng.choice(values)


def _unary(p: Program, rng: random.Random, shape: tuple[int, ...], f: list[str], i: list[str], b: list[str]) -> None:
    x = _pick(rng, f)
    _name, expr, feats = rng.choice(
        (
            ("exp", "torch.exp({x})", ("pow_exp_log",)),
            ("log", "torch.log({x})", ("pow_exp_log", "nan_inf")),
            ("sqrt", "torch.sqrt({x})", ("pow_exp_log", "nan_inf")),
            ("rsqrt", "torch.rsqrt({x})", ("pow_exp_log", "nan_inf")),
            ("reciprocal", "torch.reciprocal({x})", ("nan_inf",)),
            ("tanh", "torch.tanh({x})", ()),
            ("sigmoid", "torch.sigmoid({x})", ()),
            ("erf", "torch.erf({x})", ()),
            ("ceil", "torch.ceil({x})", ("rounding",)),
            ("floor", "torch.floor({x})", ("rounding",)),
            ("round", "torch.round({x})", ("rounding",)),
            ("trunc", "torch.trunc({x})", ("rounding",)),
            ("frac", "torch.frac({x})", ("rounding",)),
            ("abs", "torch.abs({x})", ()),
            ("neg", "-{x}", ()),
            ("sign", "torch.sign({x})", ()),
            ("nan_to_num", "torch.nan_to_num({x}, nan=0.0, posinf=1e4, neginf=-1e4)", ("nan_inf",)),
        )
    )
    p.add("f", shape, expr.format(x=x), *feats)


def _binary(p: Program, rng: random.Random, shape: tuple[int, ...], f: list[str], i: list[str], b: list[str]) -> None:
    x = _pick(rng, f)
    roll = rng.random()
    if roll < 0.5:
        y = rng.choice(f)
    elif roll < 0.65:
        # an identity operand (x + 0 is not x for x = -0.0; x * 1 is x): where simplifiers go wrong
        y = rng.choice(("torch.zeros_like({x})", "torch.ones_like({x})")).format(x=x)
    else:
        y = repr(rng.choice(_CONSTS))
    expr, feats = rng.choice(
        (
            ("{x} + {y}", ()),
            ("{x} - {y}", ()),
            ("{x} * {y}", ()),
            ("{x} / {y}", ("nan_inf",)),
            ("torch.minimum({x}, torch.as_tensor({y}, dtype={x}.dtype))", ("min_max_signed_zero",)),
            ("torch.minimum({x}, -{x})", ("min_max_signed_zero",)),
            ("torch.maximum(-{x}, {x})", ("min_max_signed_zero",)),
            ("torch.maximum({x}, torch.as_tensor({y}, dtype={x}.dtype))", ("min_max_signed_zero",)),
            ("torch.floor_divide({x}, {y})", ("floor_divide", "rounding")),
            ("torch.remainder({x}, {y})", ("rounding",)),
            ("torch.fmod({x}, {y})", ("rounding",)),
            ("torch.pow(torch.abs({x}), {y})", ("pow_exp_log",)),
            ("torch.atan2({x}, torch.as_tensor({y}, dtype={x}.dtype))", ()),
            ("torch.clamp({x}, min=-abs({c}), max=abs({c}) + 1.0)", ("clamp",)),
        )
    )
    if "torch.pow" in expr and not y.startswith(("f", "v")):
        y = repr(rng.choice((0.5, 2.0, 3.0, -1.0, 0.0)))  # a 16-bit dtype cannot hold an exponent of 2**20
    if "clamp" in expr:
        expr = expr.replace("{c}", repr(rng.choice(_CONSTS)))
    if any(k in expr for k in ("floor_divide", "remainder", "fmod")) and rng.random() < 0.6:
        y = repr(rng.choice(_DIVISORS))  # inexact divisors: the quotient of 1.0 / 0.1 rounds up to an integer
    p.add("f", shape, expr.format(x=x, y=y), *feats)


def _compare(p: Program, rng: random.Random, shape: tuple[int, ...], f: list[str], i: list[str], b: list[str]) -> None:
    x = rng.choice(f)
    y = rng.choice(f) if rng.random() < 0.5 else repr(rng.choice(_CONSTS))
    op = rng.choice(("<", "<=", ">", "==", "!="))
    mask = p.add("b", shape, f"{x} {op} {y}", "bool_dtype")
    kind = rng.choice(("where", "masked_fill", "cast"))
    if kind == "where":
        other = rng.choice(f)
        p.add("f", shape, f"torch.where({mask}, {x}, {other})", "where_mask")
    elif kind == "masked_fill":
        p.add("f", shape, f"{x}.masked_fill({mask}, {rng.choice(_CONSTS)!r})", "where_mask")
    else:
        p.add("f", shape, f"{mask}.to({x}.dtype) * {x}", "cast", "bool_dtype")


def _cast(p: Program, rng: random.Random, shape: tuple[int, ...], f: list[str], i: list[str], b: list[str]) -> None:
    x = rng.choice(f)
    kind = rng.choice(("to_int", "round_trip", "from_int", "to_bool"))
    if kind == "to_int":
        # a finite, in-range value first: the cast of NaN, inf or out-of-range values is undefined
        to = rng.choice(("int64", "int32", "int16", "uint8"))
        low = 0.0 if to == "uint8" else -100.0  # a negative float to uint8 is undefined in C++
        safe = f"torch.nan_to_num({x}, nan=0.0, posinf=100.0, neginf=-100.0).clamp({low}, 100.0)"
        iv = p.add("i", shape, f"{safe}.to(torch.{to})", "cast", "integer_dtype")
        p.add("f", shape, f"{iv}.to({x}.dtype)", "cast")
    elif kind == "round_trip":
        narrow = rng.choice([d for d in ("float16", "bfloat16") if d != p.dtype])  # a rounding round trip
        p.add("f", shape, f"{x}.to(torch.{narrow}).to({x}.dtype) - {x}", "cast", "fp16_bf16")
    elif kind == "from_int" and i:
        p.add("f", shape, f"{rng.choice(i)}.to({x}.dtype) * {x}", "cast", "integer_dtype")
    else:
        p.add("f", shape, f"{x}.to(torch.bool).to({x}.dtype)", "cast", "bool_dtype")


def _integer(p: Program, rng: random.Random, shape: tuple[int, ...], f: list[str], i: list[str], b: list[str]) -> None:
    if not i:
        i = [p.input("i", shape)]
    x = rng.choice(i)
    y = rng.choice(i) if rng.random() < 0.5 else str(rng.choice((1, 2, 3, 7, -3)))
    expr, feats = rng.choice(
        (
            ("{x} + {y}", ("integer_dtype",)),
            ("{x} * {y}", ("integer_dtype",)),
            ("torch.floor_divide({x}, torch.as_tensor({y}).clamp(min=1))", ("integer_dtype", "floor_divide")),
            ("torch.remainder({x}, 5)", ("integer_dtype",)),
            ("{x} & {y}", ("integer_dtype", "shift_bitwise")),
            ("{x} ^ {y}", ("integer_dtype", "shift_bitwise")),
            ("{x} >> 1", ("integer_dtype", "shift_bitwise")),
            (
                "torch.nan_to_num({x}.to(torch.float32) / 0.0, posinf=7.0, neginf=-7.0).to(torch.int64)",
                ("nan_inf", "integer_dtype"),
            ),
            ("torch.nan_to_num({x}, nan=1.0, posinf=9.0, neginf=-9.0)", ("nan_inf", "integer_dtype")),
            ("torch.minimum({x}, torch.as_tensor({y}))", ("integer_dtype",)),
        )
    )
    iv = p.add("i", shape, expr.format(x=x, y=y), *feats)
    if f and rng.random() < 0.5:
        p.add("f", shape, f"{iv}.to({rng.choice(f)}.dtype)", "cast")


def _reduce(p: Program, rng: random.Random, shape: tuple[int, ...], f: list[str], i: list[str], b: list[str]) -> None:
    # half the time an input itself: a reduction that reads a transposed, strided or offset input
    # directly is where index arithmetic goes wrong
    inputs = [n for n in f if not n.startswith("v")]
    x = rng.choice(inputs) if inputs and rng.random() < 0.5 else rng.choice(f)
    dim = rng.choice((0, 1, -1))
    n = shape[dim]
    kind = rng.choice(
        (
            "argmin",
            "argmax",
            "argmin_all",
            "min",
            "max",
            "amax",
            "sum",
            "mean",
            "cumsum",
            "cumprod",
            "logsumexp",
            "int_cumsum",
            "cumsum_dtype",
        )
    )
    if kind == "argmin_all":
        op = rng.choice(("argmin", "argmax"))
        idx = p.add("i", (), f"({x} + {rng.choice(_CONSTS)!r}).{op}()", "argmin_argmax", "reduction")
        p.add("f", shape, f"{x} + {idx}.to({x}.dtype)", "cast")
    elif kind == "cumsum_dtype":
        src = rng.choice((f"torch.ones({shape[0]}, {shape[1]}, dtype=torch.bool)", rng.choice(b) if b else f"{x} > 0"))
        out = rng.choice(("torch.float16", "torch.bfloat16", "torch.float32"))
        p.reduction = max(p.reduction, n)
        # the raw result is a value of its own: a wrong output dtype must be seen, not cast away
        p.add("f", shape, f"torch.cumsum({src}, dim={dim}, dtype={out})", "cumulative", "output_dtype")
    elif kind in ("argmin", "argmax"):
        idx = p.add(
            "i",
            (*shape[: dim % 2], 1, *shape[dim % 2 + 1 :]),
            f"torch.{kind}({x}, dim={dim}, keepdim=True)",
            "argmin_argmax",
        )
        p.add("f", shape, f"{x} + {idx}.to({x}.dtype)", "cast")
    elif kind in ("min", "max"):
        p.add(
            "f",
            shape,
            f"torch.{kind}({x}, dim={dim}, keepdim=True).values + {x}",
            "argmin_argmax",
            "min_max_signed_zero",
        )
    elif kind in ("amax", "sum", "mean", "logsumexp"):
        p.reduction = max(p.reduction, n)
        p.add("f", shape, f"torch.{kind}({x}, dim={dim}, keepdim=True) - {x}", "reduction")
    elif kind in ("cumsum", "cumprod"):
        p.reduction = max(p.reduction, n)
        p.add("f", shape, f"torch.{kind}({x}, dim={dim})", "cumulative")
    elif i:
        p.add("i", shape, f"torch.cumsum({rng.choice(i)}, dim={dim}, dtype=torch.int64)", "cumulative", "integer_dtype")


def _index(p: Program, rng: random.Random, shape: tuple[int, ...], f: list[str], i: list[str], b: list[str]) -> None:
    r, c = shape
    x = rng.choice(f)
    kind = rng.choice(
        (
            "gather",
            "scatter_add",
            "index_select",
            "index_add",
            "index_add_rows",
            "index_put",
            "index_put_flip",
            "arange_mod",
            "arange_mod_rmw",
        )
    )
    if kind == "gather":
        idx = p.input("i", shape, values="index")
        p.add("f", shape, f"torch.gather({x}, 1, {idx})", "scatter_gather")
    elif kind == "scatter_add":
        idx = p.input("i", shape, values="index")
        p.add("f", shape, f"torch.zeros_like({x}).scatter_add(1, {idx}, {x})", "scatter_gather")
    elif kind == "index_select":
        idx = p.input("i", (c,), values="index")
        p.add("f", shape, f"torch.index_select({x}, 1, {idx})", "scatter_gather")
    elif kind == "index_add":
        idx = p.input("i", (c,), values="index")
        base = rng.choice(("torch.zeros_like({x})", "torch.zeros({c}, dtype={x}.dtype).expand({r}, {c})"))
        p.add("f", shape, f"{base.format(x=x, r=r, c=c)}.index_add(1, {idx}, {x})", "index_add", "expanded_view")
    elif kind == "index_add_rows":
        idx = p.input("i", (r,), values="index")
        p.features.add("duplicate_indices")
        p.add(
            "f",
            shape,
            f"torch.zeros(1, {c}, dtype={x}.dtype).expand({r}, {c}).index_add(0, {idx}, {x})",
            "index_add",
            "expanded_view",
        )
    elif kind == "index_put_flip":
        buf = p.input("f", shape) if rng.random() < 0.5 else p.add("f", shape, f"{x}.clone()")
        p.lines.append(f"    {buf}.index_put_((torch.arange({r}),), {buf} * {rng.choice(_CONSTS)!r})")
        p.lines.append(f"    {buf}.add_({buf}.flip(0))")
        p.features.update(("index_put", "in_place_view", "flip_roll"))
    elif kind == "arange_mod_rmw":
        buf = p.add("f", shape, f"{x}.clone(memory_format=torch.contiguous_format)")
        p.lines.append(f"    flat = {buf}.view(-1)")
        p.lines.append(f"    at = torch.arange({r * c}) % {rng.choice((2, 3, max(1, c)))}")
        p.lines.append(f"    flat[at] = flat[at] + {rng.choice(_CONSTS)!r}")
        p.features.update(("index_put", "duplicate_indices", "in_place_view"))
    elif kind == "index_put":
        idx = p.input("i", (c,), values="index")
        buf = p.add("f", shape, f"{x}.clone()")
        p.lines.append(f"    {buf}[:, {idx}] = {rng.choice(_CONSTS)!r}")  # duplicates write one value: deterministic
        p.add("f", shape, f"{buf} + {buf}.flip(1)", "index_put", "flip_roll")
    else:
        buf = p.add("f", shape, f"{x}.clone()")
        p.lines.append(f"    {buf}[:, torch.arange({c}) % {max(1, c // 2)}] = {rng.choice(_CONSTS)!r}")
        p.features.update(("index_put",))


def _view(p: Program, rng: random.Random, shape: tuple[int, ...], f: list[str], i: list[str], b: list[str]) -> None:
    r, c = shape
    x = rng.choice(f)
    kind = rng.choice(
        (
            "flip",
            "roll",
            "t_then",
            "transpose",
            "inplace_t",
            "fill_expanded",
            "fill_expanded_input",
            "as_strided",
            "as_strided_slice",
            "expand_add",
        )
    )
    if kind == "flip":
        p.add("f", shape, f"torch.flip({x}, dims=({rng.choice((0, 1))},))", "flip_roll")
    elif kind == "roll":
        p.add("f", shape, f"torch.roll({x}, shifts={rng.randint(-3, 3)}, dims={rng.choice((0, 1))})", "flip_roll")
    elif kind == "t_then" and r == c:
        p.add("f", shape, f"{x}.t() + {rng.choice(_CONSTS)!r}", "transpose_input")
    elif kind == "transpose":
        p.add("f", (c, r), f"{x}.t() + {rng.choice(_CONSTS)!r}", "transpose_input")
    elif kind == "fill_expanded_input":
        base = p.input("f", (1, c))
        p.lines.append(f"    {base}.expand({r}, {c}).fill_({rng.choice(_CONSTS)!r})")
        p.add("f", shape, f"{x} + {base}", "expanded_view", "in_place_view")
    elif kind == "as_strided_slice" and c >= 2:
        full = p.add("f", (2 * r, 2 * c), f"{x}.repeat(2, 2)")
        p.add("f", (r, c // 2), f"torch.as_strided({full}[:, ::2], ({r}, {c // 2}), {full}.stride())", "as_strided")
    elif kind == "inplace_t":
        buf = p.add("f", shape, f"{x}.clone()")
        p.lines.append(f"    {buf}.t().mul_({rng.choice(_CONSTS)!r}).add_(1.0)")
        p.features.add("in_place_view")
    elif kind == "fill_expanded":
        buf = p.add("f", (1, c), f"torch.zeros(1, {c}, dtype={x}.dtype)")
        p.lines.append(f"    {buf}.expand({r}, {c}).fill_({rng.choice(_CONSTS)!r})")
        p.add("f", shape, f"{x} + {buf}", "expanded_view", "in_place_view")
    elif kind == "as_strided" and r * c >= 2:
        p.add(
            "f",
            (r, c // 2 or 1),
            f"torch.as_strided({x}.contiguous(), ({r}, {c // 2 or 1}), ({c}, 2 if {c} > 1 else 1))",
            "as_strided",
        )
    else:
        row = p.add("f", (1, c), f"{x}[:1]")
        p.add("f", shape, f"{row}.expand({r}, {c}) * {x}", "expanded_view")


_TYPED_OPS: tuple[Callable[..., None], ...] = (
    _unary,
    _unary,
    _binary,
    _binary,
    _compare,
    _cast,
    _integer,
    _reduce,
    _reduce,
    _index,
    _view,
)


# --- structured generators ------------------------------------------------------------------------


def _attention(p: Program) -> Case:
    rng = p.rng
    b, s, h, d = rng.choice((1, 2)), rng.choice((7, 16, 33)), rng.choice((1, 2, 4)), rng.choice((8, 16, 32))
    q, k, v = (p.input("f", (b, s, h * d)) for _ in range(3))
    scale = 1.0 / math.sqrt(d)
    lines = [f"    q, k, v = (t.view({b}, {s}, {h}, {d}).permute(0, 2, 1, 3) for t in ({q}, {k}, {v}))"]
    form = rng.choice(("mul", "div"))
    scores = f"q @ k.transpose(-2, -1) * {scale!r}" if form == "mul" else f"q @ k.transpose(-2, -1) / {math.sqrt(d)!r}"
    lines.append(f"    scores = {scores}")
    if rng.random() < 0.6:
        mask = p.input("f", (s, s))
        lines.append(f"    scores = scores + torch.where({mask} > 1.0, float('-inf'), 0.0).to(scores.dtype)")
        lines.append("    scores = torch.where(torch.isinf(scores).all(-1, keepdim=True), 0.0, scores)")
        p.features.add("attention_mask")
    lines.append("    out = torch.softmax(scores, dim=-1) @ v")
    lines.append(f"    v0 = out.permute(0, 2, 1, 3).reshape({b}, {s}, {h * d})")
    p.lines.extend(lines)
    p.kinds["v0"] = ("f", (b, s, h * d))
    p.reduction = max(s, d)
    p.features.update(("attention", f"attention_{form}"))
    return p.case(["v0"], "attention")


def _norm(p: Program) -> Case:
    rng = p.rng
    n = rng.choice((17, 33, 127, 513, 1031))
    x = p.input("f", (rng.choice((2, 4)), n), values=rng.choice(("normal", "normal", "edge")))
    w = p.input("f", (n,))
    form = rng.choice(("F.layer_norm", "written", "rms", "rms_mean"))
    eps = rng.choice((1e-5, 1e-6))
    if form == "F.layer_norm":
        p.add("f", (1, n), f"F.layer_norm({x}, ({n},), {w}, None, {eps!r})", "layer_norm")
    elif form == "written":
        mu = p.add("f", (1, 1), f"{x}.mean(-1, keepdim=True)")
        var = p.add("f", (1, 1), f"(({x} - {mu}) ** 2).mean(-1, keepdim=True)")
        p.add("f", (1, n), f"({x} - {mu}) * torch.rsqrt({var} + {eps!r}) * {w}", "layer_norm")
    elif form == "rms":
        p.add("f", (1, n), f"{x} * torch.rsqrt({x}.pow(2).mean(-1, keepdim=True) + {eps!r}) * {w}", "rms_norm")
    else:
        p.add("f", (1, n), f"{x} / torch.sqrt(torch.mean({x} * {x}, dim=-1, keepdim=True) + {eps!r}) * {w}", "rms_norm")
    p.reduction = n
    return p.case([f"v{len(p.lines) - 1}"], "norm")


def _gelu(p: Program) -> Case:
    rng = p.rng
    x = p.input("f", (rng.choice(_ROWS), rng.choice(_TAILS)), _layout(rng), rng.choice(("normal", "edge")))
    form = rng.choice(("exact", "tanh", "erf", "written_tanh"))
    expr = {
        "exact": f"F.gelu({x})",
        "tanh": f"F.gelu({x}, approximate='tanh')",
        "erf": f"0.5 * {x} * (1.0 + torch.erf({x} / {math.sqrt(2.0)!r}))",
        "written_tanh": f"0.5 * {x} * (1.0 + torch.tanh({math.sqrt(2.0 / math.pi)!r} * ({x} + 0.044715 * {x} ** 3)))",
    }[form]
    p.add("f", (1, 1), expr, "gelu")
    return p.case(["v0"], "gelu")


def _reduction(p: Program) -> Case:
    rng = p.rng
    n = 2 ** rng.choice((12, 14, 16, 18, 20))
    rows = rng.choice((1, 4))
    x = p.input("f", (rows, n), values="normal")
    kind = rng.choice(("sum", "mean", "sum_sq"))
    expr = {"sum": f"{x}.sum(-1)", "mean": f"{x}.mean(-1)", "sum_sq": f"({x} * {x}).sum(-1)"}[kind]
    p.add("f", (rows,), expr, "reduction", "long_reduction")
    p.reduction = n
    return p.case(["v0"], "reduction")


_BUILD = {"typed": _typed, "attention": _attention, "norm": _norm, "gelu": _gelu, "reduction": _reduction}


def generate(seed: int, generator: str = "typed", dtype: str | None = None) -> Case:
    """The program of ``seed`` from ``generator``: the same arguments always give the same case."""
    if generator not in _BUILD:
        raise ValueError(f"generator must be one of {', '.join(GENERATORS)}, got {generator!r}")
    rng = random.Random(f"{generator}:{seed}")
    dtype = dtype or rng.choice(FLOAT_DTYPES)
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(FLOAT_DTYPES)}, got {dtype!r}")
    case = _BUILD[generator](Program(seed, rng, dtype))
    return case.with_(id=f"{generator}-{seed}-{dtype}")


@dataclass
class Outcome:
    """One program's class and what the rule printed."""

    case: Case
    klass: str
    message: str
    seconds: float
    threads: int = 0

    def row(self) -> dict[str, Any]:
        return {
            "id": self.case.id,
            "generator": self.case.extra.get("generator", ""),
            "dtype": next((i.dtype for i in self.case.inputs if i.values in ("normal", "edge")), ""),
            "class": self.klass,
            "message": self.message,
            "features": ", ".join(self.case.extra.get("features", [])),
            "n_lines": self.case.source.count("\n") - 1,
            "seconds": self.seconds,
            "threads": self.threads,
        }


def run(
    case: Case,
    backend: str = "inductor",
    threads: int | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> Outcome:
    """Run one program: ``invalid`` when eager or the fp64 reference raises (the generator's fault),
    ``compile_error`` when only the fused path raises, else the ``diff`` rule's ok / mismatch.
    ``on_stage("fused")`` is called once eager and fp64 have run, before compiling."""
    start = time.perf_counter()
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    torch._dynamo.reset()
    try:
        scope = namespace(case)
        graph, make = scope["graph"], scope["make"]
        try:
            with torch.no_grad():
                graph(*make())
                graph(*[a.double() if a.is_floating_point() else a for a in make()])
        except Exception as exc:  # noqa: BLE001
            return Outcome(case, "invalid", f"eager: {type(exc).__name__}: {_first(exc)}", time.perf_counter() - start)
        if on_stage is not None:
            on_stage("fused")
        try:
            hit, message = scope["check"](graph, make(), backend)
        except Exception as exc:  # noqa: BLE001
            return Outcome(case, "compile_error", f"{type(exc).__name__}: {_first(exc)}", time.perf_counter() - start)
        return Outcome(case, "mismatch" if hit else "ok", message, time.perf_counter() - start, threads or old)
    finally:
        torch.set_num_threads(old)
        torch._dynamo.reset()


def _first(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else "")[:240]


def plan(programs: int, start: int = 0) -> list[tuple[str, int]]:
    """(generator, seed) of a campaign of ``programs``: an eighth for each structured generator,
    the rest typed, seeds counting from ``start``."""
    structured = programs // 8
    out = [("typed", s) for s in range(start, start + programs - 4 * structured)]
    for gen in GENERATORS[1:]:
        out += [(gen, s) for s in range(start, start + structured)]
    return out


def threads_for(generator: str, seed: int) -> int | None:
    """Long reductions run on one thread for odd seeds and on all of them for even ones (partial
    sums per thread are where accumulation defects differ); other programs use the default."""
    return (1 if seed % 2 else None) if generator == "reduction" else None


def fuzz(
    todo: Iterable[tuple[str, int]],
    *,
    backend: str = "inductor",
    log: Callable[[Outcome], None] | None = None,
    isolated: bool = False,
    setup: str = "",
) -> list[Outcome]:
    """Run every (generator, seed) of ``todo`` (see :func:`plan`) once; ``log`` sees each outcome.
    ``isolated``: in a worker interpreter (:class:`Isolated`, started with ``setup``), so a program
    whose compiled code crashes or hangs is a ``crash`` outcome, not the end of the campaign."""
    out = []
    worker = Isolated(setup) if isolated else None
    try:
        for gen, seed in todo:
            case, threads = generate(seed, gen), threads_for(gen, seed)
            o = worker.run(case, backend, threads) if worker is not None else run(case, backend, threads)
            if log:
                log(o)
            out.append(o)
    finally:
        if worker is not None:
            worker.close()
    return out


class Isolated:
    """A worker interpreter (``python -m precisionkit._isolated``) that runs programs and minimizes
    mismatches on request: generated programs reach compiled code that reads out of bounds (a real
    defect class), and a crash or hang there must cost one program, not the process that runs the
    campaign. The worker is restarted after each crash; ``setup`` (Python source) runs first in
    every worker, e.g. to register a backend this process registered."""

    def __init__(self, setup: str = "", timeout: float = 600.0) -> None:
        self.setup, self.timeout = setup, timeout
        self.proc: Any = None
        self.conn: Any = None
        self.crashes = 0

    def _start(self) -> None:
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        here, there = socket.socketpair()
        cmd = [sys.executable, "-m", "precisionkit._isolated", "--fd", str(there.fileno())]
        self.proc = subprocess.Popen(cmd, pass_fds=(there.fileno(),))
        there.close()
        self.conn = Connection(here.detach())
        kind, payload = self._call(("setup", self.setup))[:2]
        if kind != "ok":
            self.close()
            raise RuntimeError(f"the difftest worker could not start: {payload}")

    def _call(self, request: tuple[Any, ...]) -> tuple[str, Any, str]:
        """Send ``request``; the reply's kind and payload and the last stage the worker reported.
        Kind ``died`` (payload: how) when the worker exited or ran past the timeout."""
        stage = ""
        try:
            self.conn.send(request)
            while True:
                if not self.conn.poll(self.timeout):
                    self.proc.kill()
                    self.proc.wait()
                    return "died", f"no result within {self.timeout:g} s (killed)", stage
                kind, payload = self.conn.recv()
                if kind == "stage":
                    stage = payload
                    continue
                return kind, payload, stage
        except (EOFError, OSError):
            import signal

            code = self.proc.wait()
            known = code < 0 and -code in signal.Signals._value2member_map_
            how = signal.Signals(-code).name if known else f"exit status {code}"
            return "died", f"the interpreter died ({how})", stage

    def _request(self, request: tuple[Any, ...]) -> tuple[str, Any, str]:
        if self.proc is None:
            self._start()
        kind, payload, stage = self._call(request)
        if kind == "died":
            self.crashes += 1
            self.close()  # the next request starts a fresh worker
        return kind, payload, stage

    def run(self, case: Case, backend: str = "inductor", threads: int | None = None) -> Outcome:
        """:func:`run` in the worker; a worker that dies or hangs gives ``crash`` (in the fused run)
        or ``invalid`` (before it: eager or the fp64 reference)."""
        start = time.perf_counter()
        kind, payload, stage = self._request(("run", case, backend, threads))
        if kind == "ok":
            return payload  # type: ignore[no-any-return]
        if kind == "died":
            klass = "crash" if stage == "fused" else "invalid"
            where = "fused run" if stage == "fused" else "eager or fp64 run"
            return Outcome(case, klass, f"{where}: {payload}", time.perf_counter() - start, threads or 0)
        raise RuntimeError(f"difftest worker failed on {case.id}: {payload}")

    def minimize(self, case: Case, max_checks: int = 60) -> tuple[Case, str] | None:
        """The minimized case and what the rule says about it; None when a candidate crashed the
        worker (the case is then kept as found)."""
        kind, payload, _ = self._request(("minimize", case, max_checks))
        if kind == "ok":
            return payload  # type: ignore[no-any-return]
        if kind == "died":
            return None
        raise RuntimeError(f"difftest worker failed minimizing {case.id}: {payload}")

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.conn.close()
            self.conn = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except Exception:  # noqa: BLE001 - a worker that does not exit is killed
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def __enter__(self) -> Isolated:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: What a program's source (and its inputs) show, in the vocabulary of the bug corpus: the
#: features of a *minimized* mismatch say which class of defect it is.
_FEATURE_PATTERNS = {
    "argmin_argmax": r"\.arg(?:min|max)\(|torch\.arg(?:min|max)\(|\.indices\b",
    "min_max_signed_zero": r"torch\.(?:minimum|maximum|clamp)\(|torch\.(?:min|max)\([^)]*dim=",
    "cast": r"\.to\(",
    "floor_divide": r"floor_divide|//",
    "rounding": r"torch\.(?:ceil|floor|round|trunc|frac|remainder|fmod|floor_divide)\(",
    "pow_exp_log": r"torch\.(?:exp|log|sqrt|rsqrt|pow)\(|\*\* ",
    "nan_inf": r"nan_to_num|reciprocal|torch\.(?:log|sqrt|rsqrt)\(| / ",
    "index_put": r"\]\s*=\s|index_put",
    "index_add": r"index_add",
    "scatter_gather": r"gather|scatter",
    "cumulative": r"cumsum|cumprod",
    "output_dtype": r"cum(?:sum|prod)\([^)]*dtype=",
    "reduction": r"\.(?:sum|mean|amax|amin|logsumexp|arg(?:min|max))\(|torch\.(?:sum|mean|amax|logsumexp|arg(?:min|max))\(",
    "flip_roll": r"flip|roll",
    "as_strided": r"as_strided",
    "shift_bitwise": r"<<|>>| \^ | & ",
    "in_place_view": r"\.\w+_\(|\]\s*=\s",
    "expanded_view": r"\.expand\(",
    "transpose_input": r"\.t\(\)|transpose|permute",
    "duplicate_indices": r"% \d|index_add\(0",
    "add_zero": r"\+ torch\.zeros_like\(|torch\.zeros_like\([^)]*\) \+ |\+ -?0\.0\b",  # x + 0 is not x at -0.0
    "signed_zero": r"^$",  # from the rule's message, not the source (see features_of)
}


def features_of(case: Case, message: str = "") -> set[str]:
    """The corpus vocabulary features of a program: from its source, from the dtypes, layouts and
    values of the inputs it reads as data (a ``transposed`` input counts as ``transpose_input``;
    an input read only for its ``.dtype`` counts for nothing) and, given the ``diff`` rule's
    ``message`` about it, from what went wrong: ``signed_zero`` when eager and fused are zeros of
    opposite sign, ``nan_inf`` when either is NaN or infinite."""
    import re

    from .minimize import single_output

    wrong = re.match(r"output (\d+):", message)
    if wrong:  # only the lines the wrong output depends on say what the defect is
        case = single_output(case, int(wrong.group(1))) or case
    src = case.source
    found = {name for name, pat in _FEATURE_PATTERNS.items() if re.search(pat, src)}
    found.discard("signed_zero")
    body = src.split("\n", 1)[1] if "\n" in src else ""
    for i in case.inputs:
        if not re.search(rf"\b{re.escape(i.name)}\b(?!\.dtype)", body):
            continue  # read for its dtype only: its layout and values do not reach the result
        if i.dtype in ("float16", "bfloat16") or re.search(r"float16|bfloat16", src):
            found.add("fp16_bf16")
        if i.values in ("int", "index") or re.search(r"int(?:8|16|32|64)\b|torch\.long", src):
            found.add("integer_dtype")
        if i.values == "bool" or re.search(r"torch\.bool| (?:[<>]=?|[=!]=) ", src):
            found.add("bool_dtype")
        if i.values == "edge":
            found.add("special_values")
        if i.layout == "transposed":
            found.add("transpose_input")
        if i.layout == "broadcast":
            found.add("expanded_view")
        if i.values == "index":
            found.add("duplicate_indices")
    got = re.search(r"eager (\S+), fused \([^)]*\) (\S+),", message)
    if got:
        e, f = got.groups()
        if {e.strip("-"), f.strip("-")} == {"0.0"} and e != f:
            found.add("signed_zero")
        if any(v.strip("-") in ("nan", "inf") for v in (e, f)):
            found.add("nan_inf")
    return found
