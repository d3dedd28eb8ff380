"""The ``typed`` generator: a random DAG over 2-D float, integer and bool values (see
:mod:`precisionkit.difftest`)."""

from __future__ import annotations

import random
from collections.abc import Callable

from ..repro import Case
from .program import _CONSTS, _DIVISORS, _ROWS, _TAILS, Program, _layout
from .typed_int import int_stage
from .typed_range import range_stage
from .typed_wide import wide_stage


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
    outputs = p.sinks() or [p.inputs[0].name]
    # integer / bool reductions and class tests come after, from a stream of their own: the ops
    # above and their outputs stay those of the seed, and the new raw results are outputs too
    staged = int_stage(p, shape) + wide_stage(p, shape) + range_stage(p, shape)
    return p.case(outputs + [n for n in staged if n not in outputs], "typed")


# --- typed ops: each appends one or a few lines; (p, rng, shape, floats, ints, bools) -------------


def _fill(p: Program, value: float) -> float:
    """A fill constant the program's float dtype holds: torch refuses to fill a float16 tensor with a
    number past its largest finite value (65504), so such a constant becomes that value, signed."""
    top = 65504.0
    return max(-top, min(top, value)) if p.dtype == "float16" else value


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
            # + 0.0 where minimum / maximum / clamp may meet +0 and -0 (below): which zero they return
            # then no rule fixes (eager's minimum differs between its vector loop and its scalar tail),
            # so that sign is not judged; -0 against a nonzero bound, and every nonzero value, are
            # (campaign finding typed-908094-float16)
            ("torch.minimum({x}, torch.as_tensor({y}, dtype={x}.dtype))", ("min_max_signed_zero",)),
            ("torch.minimum({x}, -{x}) + 0.0", ("min_max_signed_zero",)),
            ("torch.maximum(-{x}, {x}) + 0.0", ("min_max_signed_zero",)),
            ("torch.maximum({x}, torch.as_tensor({y}, dtype={x}.dtype))", ("min_max_signed_zero",)),
            ("torch.floor_divide({x}, {y})", ("floor_divide", "rounding")),
            # + 0.0: a zero remainder's sign is not judged. Eager returns the dividend's (-0.0 % 3.0
            # is -0.0), torch documents the divisor's (a - floor(a / b) * b: +0.0), and a compiler
            # that follows the documentation is not wrong (fmod's zero, the dividend's sign, stays)
            ("torch.remainder({x}, {y}) + 0.0", ("rounding",)),
            ("torch.fmod({x}, {y})", ("rounding",)),
            ("torch.pow(torch.abs({x}), {y})", ("pow_exp_log",)),
            ("torch.atan2({x}, torch.as_tensor({y}, dtype={x}.dtype))", ()),
            ("torch.clamp({x}, min=-abs({c}), max=abs({c}) + 1.0)", ("clamp",)),
        )
    )
    if "torch.pow" in expr and not y.startswith(("f", "v")):
        y = repr(rng.choice((0.5, 2.0, 3.0, -1.0, 0.0)))  # a 16-bit dtype cannot hold an exponent of 2**20
    if "clamp" in expr:
        c = rng.choice(_CONSTS)
        expr = expr.replace("{c}", repr(c)) + (" + 0.0" if c == 0 else "")  # a bound of -0.0 meets +0
    if expr.startswith(("torch.minimum({x}, torch.as_tensor", "torch.maximum({x}, torch.as_tensor")) and (
        y.startswith(("f", "v", "torch.zeros")) or y in ("0.0", "-0.0")
    ):
        expr += " + 0.0"  # a value or zero operand: +0 may meet -0 (atan2's zeros IEEE 754 fixes, and are judged)
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
        p.add("f", shape, f"{x}.masked_fill({mask}, {_fill(p, rng.choice(_CONSTS))!r})", "where_mask")
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
        p.lines.append(f"    {base}.expand({r}, {c}).fill_({_fill(p, rng.choice(_CONSTS))!r})")
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
        p.lines.append(f"    {buf}.expand({r}, {c}).fill_({_fill(p, rng.choice(_CONSTS))!r})")
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
