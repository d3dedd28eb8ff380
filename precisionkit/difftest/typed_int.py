"""The ``typed`` generator's integer and bool results: min / max / amin / amax / argmin / argmax
with and without ``dim`` over bool, int8, uint8, int32 and int64 values with many ties, and the
class tests ``isinf`` / ``isnan`` / ``isfinite`` (alone and as ``torch.where`` masks) over values
that hold infinities and NaN in the program's dtype or in float16.

Both are drawn after the rest of a typed program (see :func:`int_stage`), from a stream of their
own, so the float DAG of every seed stays what it was and its outputs keep their positions; the raw
integer and bool results are returned as outputs of their own, for the ``diff`` rule to judge
against eager and fp64 (ties included: integer inputs reach fp64 unchanged, so the reference picks
eager's first index among equal values)."""

from __future__ import annotations

import random
from dataclasses import replace

from .program import _CONSTS, Program, _layout

#: dtypes of the integer and bool operands of a reduction: the small ones are where vectorized
#: loads, sign extension and index tie-breaking differ from the 64-bit path
INT_DTYPES = ("bool", "int8", "uint8", "int32", "int64")
#: ``int`` values are drawn in [-scale, scale]: a scale of 1 to 3 gives 3 to 7 distinct values, so
#: most rows hold several elements equal to their optimum (ties decide which index is first); 100
#: spreads int8 nearly over its range without overflow (uint8 wraps the negatives to 156..255)
_TIE_SCALES = (1.0, 1.0, 2.0, 3.0, 100.0)
#: factors that overflow float16 (largest finite 65504) for inputs of magnitude above 0.65, 0.06
#: and 2**-9 (``normal`` inputs have scale 1e-3 to 300)
_OVERFLOW = (1e5, 2.0**20, 2.0**25)
#: chance of each kind of op after a typed program: each new feature's share of a campaign's plan
#: must stay above 1 % on the GPU plan too, where typed programs are a third of the plan; with
#: these, the rarest new feature (amin, one reduction kind in six) is in 61 per 1000 programs of the
#: CPU plan and 38 of the GPU plan (benchmarks/difftest_features.py), about 12 % of typed programs
P_REDUCE, P_CLASS = 0.55, 0.45


def int_stage(p: Program, shape: tuple[int, ...]) -> list[str]:
    """Append integer/bool reductions and class tests to ``p`` from a stream of the program's seed;
    the raw results to return as outputs (integer and bool values, and the floats ``where`` made)."""
    rng = random.Random(f"typed-int:{p.seed}")
    out: list[str] = []
    if rng.random() < P_REDUCE:
        for _ in range(rng.randint(1, 2)):
            out += _int_reduce(p, rng, shape)
    if rng.random() < P_CLASS:
        out += _class_test(p, rng, shape)
    return out


def _tied_operand(p: Program, rng: random.Random, shape: tuple[int, ...]) -> tuple[str, str]:
    """An integer or bool value of ``shape`` and whether it is ``bool`` or an integer: mostly a
    fresh input with few distinct values in any layout (a broadcast one ties its whole rows),
    else a mask or integer the program already made (comparisons, casts to int16 / uint8 / int32)."""
    made = [(n, "bool") for n in p.values("b", shape)] + [(n, "int") for n in p.values("i", shape)]
    if made and rng.random() < 0.25:
        return rng.choice(made)
    dtype = rng.choice(INT_DTYPES)
    if dtype == "bool":
        return p.input("b", shape, _layout(rng)), "bool"
    name = p.input("i", shape, _layout(rng), "int")
    p.inputs[-1] = replace(p.inputs[-1], dtype=dtype, scale=rng.choice(_TIE_SCALES))
    return name, "int"


def _reduced(shape: tuple[int, ...], dim: int | tuple[int, ...], keep: bool) -> tuple[int, ...]:
    dims = {d % len(shape) for d in (dim if isinstance(dim, tuple) else (dim,))}
    return tuple(1 if k in dims else n for k, n in enumerate(shape) if keep or k not in dims)


def _int_reduce(p: Program, rng: random.Random, shape: tuple[int, ...]) -> list[str]:
    """One reduction of an integer or bool value, over one dim, both dims or all elements."""
    x, kind = _tied_operand(p, rng, shape)
    op = rng.choice(("argmin", "argmax", "min", "max", "amin", "amax"))
    dim, keep, full = rng.choice((0, 1, -1)), rng.random() < 0.5, rng.random() < 0.35
    feats = ("integer_dtype", "bool_dtype" if kind == "bool" else "integer_dtype")
    if op in ("argmin", "argmax"):
        # eager has no argmin / argmax of bool: the mask as 0 / 1 bytes (the indices of its
        # first True or False), as models write it
        src = f"{x}.to(torch.uint8)" if kind == "bool" else x
        if full:
            return [p.add("n", (), f"{src}.{op}()", "argmin_argmax", *feats)]
        at = _reduced(shape, dim, keep)
        return [p.add("n", at, f"torch.{op}({src}, dim={dim}, keepdim={keep})", "argmin_argmax", *feats)]
    if op in ("min", "max"):
        if full:
            return [p.add("n", (), f"torch.{op}({x})", "reduction", *feats)]
        at = _reduced(shape, dim, keep)
        parts = rng.choice((("values",), ("indices",), ("values", "indices")))
        # the values keep the input's dtype; the indices (int64) are where tie-breaking shows
        return [
            p.add("n", at, f"torch.{op}({x}, dim={dim}, keepdim={keep}).{part}", "argmin_argmax", *feats)
            for part in parts
        ]
    if full:
        return [p.add("n", (), f"torch.{op}({x})", "reduction", *feats)]
    dims = rng.choice((dim, dim, (0, 1)))
    return [
        p.add("n", _reduced(shape, dims, keep), f"torch.{op}({x}, dim={dims}, keepdim={keep})", "reduction", *feats)
    ]


def _class_source(p: Program, rng: random.Random, shape: tuple[int, ...], test: str) -> str:
    """A float value of ``shape`` that holds infinities or NaN: an input salted with specials, a
    value scaled past float16's range and cast to float16 (NaN from its infinities times 0), or a
    float the program made (which ``edge`` inputs, log, reciprocal and division fill with them)."""
    floats = p.values("f", shape)
    how = rng.choice(("specials", "overflow", "overflow", "made")) if floats else "specials"
    if how == "specials":
        return p.input("f", shape, _layout(rng), "specials")
    if how == "made":
        return rng.choice(floats)
    x = rng.choice(floats)
    h = p.add("h", shape, f"({x} * {rng.choice(_OVERFLOW)!r}).to(torch.float16)", "cast", "fp16_bf16", "nan_inf")
    return f"({h} * 0.0)" if test != "isinf" and rng.random() < 0.4 else h


def _class_test(p: Program, rng: random.Random, shape: tuple[int, ...]) -> list[str]:
    """A class test of a value with specials (the bool mask is an output), and ``torch.where``
    choosing by the same test (a float output), or a count of the matches per row or column."""
    test = rng.choice(("isinf", "isnan", "isfinite"))
    a = _class_source(p, rng, shape, test)
    mask = f"torch.{test}({a})"
    if rng.random() < 0.25:  # two tests combined, as code that screens for any special writes it
        other = rng.choice([t for t in ("isinf", "isnan", "isfinite") if t != test])
        mask = f"{mask} | ~torch.{other}({a})" if other == "isfinite" else f"{mask} | torch.{other}({a})"
    out = [p.add("b", shape, mask, "isinf_isnan", "nan_inf", "bool_dtype")]
    floats = p.values("f", shape)
    use = rng.choice(("where", "where", "count"))
    if use == "count":
        dim = rng.choice((0, 1))
        out.append(p.add("n", _reduced(shape, dim, False), f"torch.{test}({a}).sum(dim={dim})", "reduction"))
        return out
    fill = rng.choice(floats) if floats and rng.random() < 0.5 else repr(rng.choice(_CONSTS))
    # keep the value where the test says finite, the fill where it says special
    keep, drop = (a, fill) if test == "isfinite" else (fill, a)
    out.append(p.add("w", shape, f"torch.where(torch.{test}({a}), {keep}, {drop})", "isinf_isnan", "where_mask"))
    return out
