"""The ``typed`` generator's range stage: the four patterns an independent check found the tester
short of, each drawn on its own so that its budget (programs per pattern per 1000 of the CPU plan,
``benchmarks/difftest_features.py --range``) can be measured:

* ``large_into_normalizer``: a large-magnitude value the program computes (a product of two views
  of an input, or the sine / cosine of a transposed view, scaled by a scalar up to 1e4 or by a
  tensor of such scales) flowing into softmax, log_softmax, logsumexp, layer norm or RMS norm,
  where a fused path that keeps it in a wider dtype (or subtracts the row's maximum after
  rounding instead of before) changes the result's class or value;
* ``signed_zero_select``: values of only +-0 (``copysign`` of zeros), contiguous, through
  ``where`` and min / max over a dim, whose choice of zero vectorized code can lose (minimum /
  maximum / clamp of +0 and -0 are not drawn: no rule fixes which zero they return);
* ``arg_reduce_layout``: argmin / argmax over a transposed or strided input with ties (values
  rounded to a grid), over either dim;
* ``int_bool_reduce_dims``: sum, prod, amax / amin, any / all of integer and bool inputs over the
  inner and the outer dim (an outer-dim reduction of a row-major tensor is a strided loop).

Drawn after the wide stage from a stream of its own (``typed-range:<seed>``), so every seed's
earlier program stays a prefix of the new one; the results are returned as outputs of their own.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from .program import Program

#: the chance that a typed program gets the stage, and then each pattern's chance to be drawn
#: (one at least): every pattern is in about 150 of 1000 programs of the CPU plan
#: (``benchmarks/difftest_features.py --range`` measures it)
P_STAGE = 0.7
P_PATTERN = 0.3
#: scalar scales of the large value: float16 overflows past 65504, so 1e3 x a product of two
#: unit normals already reaches it in a few elements of a row; float32 keeps them finite
SCALES = (30.0, 300.0, 1e3, 1e4)
ROW_LENGTHS = (7, 16, 33, 65, 129)


def range_stage(p: Program, shape: tuple[int, ...]) -> list[str]:
    """Append one or more of the four patterns to ``p`` (none for 30 % of programs); their results to
    return as outputs."""
    rng = random.Random(f"typed-range:{p.seed}")
    if rng.random() >= P_STAGE:
        return []
    chosen = [f for f in _PATTERNS if rng.random() < P_PATTERN] or [rng.choice(_PATTERNS)]
    out: list[str] = []
    for pattern in chosen:
        out += pattern(p, rng, shape)
    return out


def _fresh(p: Program, rng: random.Random, kind: str, shape: tuple[int, ...], layout: str, **change: object) -> str:
    name = p.input(kind, shape, layout)
    if change:
        p.inputs[-1] = replace(p.inputs[-1], **change)  # type: ignore[arg-type]
    return name


def _large_into_normalizer(p: Program, rng: random.Random, shape: tuple[int, ...]) -> list[str]:
    rows, n = rng.choice((1, 2, 4, 8)), rng.choice(ROW_LENGTHS)
    if rng.random() < 0.5:  # a product of two views of one input: its even and odd columns
        x = _fresh(p, rng, "f", (rows, 2 * n), "contiguous")
        big = p.add("f", (rows, n), f"{x}[:, ::2] * {x}[:, 1::2]", "large_into_normalizer")
    else:  # the sine or cosine of a transposed view (|value| <= 1 until scaled)
        x = _fresh(p, rng, "f", (n, rows), "contiguous", scale=rng.choice((1.0, 4.0, 300.0)))
        big = p.add("f", (rows, n), f"torch.{rng.choice(('sin', 'cos'))}({x}.t())", "large_into_normalizer")
    scale = rng.choice(SCALES)
    if rng.random() < 0.5:
        scaled = p.add("f", (rows, n), f"{big} * {scale!r}")
    else:  # a tensor of scales, broadcast over the row
        s = _fresh(p, rng, "f", (rows, 1), "contiguous", scale=scale)
        scaled = p.add("f", (rows, n), f"{big} * {s}.abs()")
    use = rng.choice(("softmax", "log_softmax", "logsumexp", "layer_norm", "rms_norm"))
    if use == "softmax":
        return [p.add("f", (rows, n), f"torch.softmax({scaled}, dim=-1)", "softmax")]
    if use == "log_softmax":
        return [p.add("f", (rows, n), f"torch.log_softmax({scaled}, dim=-1)", "softmax")]
    if use == "logsumexp":
        return [p.add("f", (rows,), f"torch.logsumexp({scaled}, dim=-1)", "reduction")]
    if use == "layer_norm":
        return [p.add("f", (rows, n), f"torch.nn.functional.layer_norm({scaled}, ({n},), eps=1e-5)", "norm")]
    ms = p.add("f", (rows, 1), f"{scaled}.pow(2).mean(-1, keepdim=True)", "norm")
    return [p.add("f", (rows, n), f"{scaled} * torch.rsqrt({ms} + 1e-6)")]


def _signed_zero_select(p: Program, rng: random.Random, shape: tuple[int, ...]) -> list[str]:
    x = _fresh(p, rng, "f", shape, "contiguous")
    y = _fresh(p, rng, "f", shape, "contiguous")
    z = p.add("f", shape, f"torch.copysign(torch.zeros_like({x}), {x})", "signed_zero_select")
    w = p.add("f", shape, f"torch.copysign(torch.zeros_like({y}), {y})")
    # selections whose zero is the one selected. minimum / maximum / clamp of +0 and -0 are not
    # drawn: no rule fixes which zero they return (eager's minimum gives -0 in its vector loop and +0
    # in its scalar tail, Inductor's clamp(+0, max=-0.0) gives -0 where eager gives +0), so OpenVINO's
    # -0 there was a false alarm (campaign findings typed-907079-float32, typed-907115-float32).
    # Seven choices as before: the stage's stream, and every later draw of the seed, stay the same
    expr = rng.choice(
        (
            f"torch.where({x} > {y}, {z}, {w})",
            f"torch.where({x} <= {y}, {z}, {w})",
            f"torch.where({z} == 0, {w}, {z})",
            f"torch.where({x} > {y}, {w}, -{z})",
            f"torch.where({x} > {y}, {z}, {w})",
            f"torch.where({x} > {y}, {z}, {w})",
            f"torch.where({z} == 0, {w}, {z})",
        )
    )
    out = [p.add("f", shape, expr, "where_mask")]
    if rng.random() < 0.5:
        op, dim = rng.choice(("min", "max")), rng.choice((0, 1))
        out.append(p.add("f", shape, f"torch.{op}({z}, dim={dim}).values"))
    return out


def _arg_reduce_layout(p: Program, rng: random.Random, shape: tuple[int, ...]) -> list[str]:
    layout = rng.choice(("transposed", "strided"))
    rows, n = max(shape[0], 2), rng.choice(ROW_LENGTHS)
    x = _fresh(p, rng, "f", (rows, n), layout, values="grid", scale=rng.choice((1.0, 4.0)))
    op, dim = rng.choice(("argmin", "argmax")), rng.choice((0, 1, -1))
    return [p.add("i", (rows, n), f"torch.{op}({x}, dim={dim})", "arg_reduce_layout", "argmin_argmax")]


def _int_bool_reduce_dims(p: Program, rng: random.Random, shape: tuple[int, ...]) -> list[str]:
    rows, n = rng.choice((2, 3, 5, 8)), rng.choice(ROW_LENGTHS)
    dim = rng.choice((0, 1))
    if rng.random() < 0.5:
        i = _fresh(p, rng, "i", (rows, n), rng.choice(("contiguous", "transposed")), scale=rng.choice((3.0, 100.0)))
        dtype = rng.choice(("", "torch.int32", "torch.int8", "torch.uint8"))
        src = f"{i}.to({dtype})" if dtype else i
        expr = rng.choice((f"{src}.sum(dim={dim})", f"{src}.amax(dim={dim})", f"{src}.amin(dim={dim})"))
        if not dtype and (dim == 0 or n <= 33) and rng.random() < 0.3:  # 3^33 < 2^63: no overflow
            expr = f"({i} % 3 + 1).prod(dim={dim})"
    else:
        b = _fresh(p, rng, "b", (rows, n), rng.choice(("contiguous", "transposed")))
        expr = rng.choice(
            (
                f"{b}.any(dim={dim})",
                f"{b}.all(dim={dim})",
                f"{b}.sum(dim={dim})",
                f"{b}.to(torch.uint8).amax(dim={dim})",
            )
        )
    return [p.add("i", (rows, n), expr, "int_bool_reduce_dims", "integer_reduction")]


_PATTERNS: tuple[Callable[[Program, random.Random, tuple[int, ...]], list[str]], ...] = (
    _large_into_normalizer,
    _signed_zero_select,
    _arg_reduce_layout,
    _int_bool_reduce_dims,
)
#: the feature each pattern tags its programs with (its budget is counted by it)
RANGE_FEATURES = ("large_into_normalizer", "signed_zero_select", "arg_reduce_layout", "int_bool_reduce_dims")
