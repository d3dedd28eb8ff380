"""The ``typed`` generator's wide stage: softmax / log_softmax over any dim, sin / cos / tan, exp and
log at the ends of the exponent range, inputs and constants far beyond 2^20 (up to 1e30) and down
to subnormals, strided views (transpose of a reshape, step slices, overlapping ``as_strided``
windows), cat / stack, rows of a few hundred elements with odd lengths, and values made only of
+-0, only of ties or only of huge numbers.

Drawn after the integer stage (:mod:`.typed_int`) from a stream of its own
(``typed-wide:<seed>``), so every seed's earlier program and outputs stay a prefix of the new one;
the new results are returned as outputs of their own. The program's longest reduction (which
widens the ``diff`` rule's tolerance for every output) is left as it was.

:data:`~precisionkit.repro.VALUES` has no kind for "only zeros", "only ties" or "only huge": those
are made inside the program from an existing float value (``copysign`` of zeros, ``round`` then a
clamp to [-1, 1], ``sign`` + 2 times a constant near the dtype's largest finite value)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from .program import Program, _layout

#: scales of fresh float inputs beyond the typed generator's 1e-3 .. 300: past 2^20, up to 1e30
#: (float16 makes them inf), and down to float16 (1e-7) and float32 (1e-40) subnormals
WIDE_SCALES = (1e7, 2.0**40, 1e30, 1e-7, 1e-30, 1e-40)
#: odd row lengths of a few hundred elements: past 4 to 16 vectors of 8 / 16 / 32 lanes, with tails
LONG_ROWS = (127, 129, 191, 255, 257, 333, 383)
#: offsets added to exp's argument per dtype: float32 / bfloat16 overflow past 88.72, go subnormal
#: below -87.3 and to zero below -103.3; float16 overflows past 11.09, goes subnormal below -9.70
#: and to zero below -17.3
EXP_OFFSETS = {
    "float32": (80.0, 88.5, 89.0, -87.5, -100.0, -104.0),
    "bfloat16": (80.0, 88.5, 89.0, -87.5, -100.0, -104.0),
    "float16": (10.0, 11.0, 11.5, -9.5, -15.0, -17.5),
}
#: factors of |x| whose log reads a subnormal (or zero) product, or a product near the largest finite
LOG_FACTORS = {
    "float32": (1e-30, 1e-40, 1e-44, 1e30),
    "bfloat16": (1e-30, 1e-40, 1e-44, 1e30),
    "float16": (1e-5, 1e-7, 6e-8, 1e4),
}
#: the "only huge" values are (sign(x) + 2) * BIG: 1, 2 or 3 times a quarter of the largest
#: finite value (3.4e38 for float32 / bfloat16, 65504 for float16), all positive so a sum
#: overflows in every order alike (a sum of signed huge values overflows or not by its order,
#: which the rule, judging against eager's order, cannot tell from a defect)
BIG = {"float32": 8e37, "bfloat16": 8e37, "float16": 16384.0}
#: chance that an op reads a fresh wide-scale input, a fresh long odd row, a value of only +-0 /
#: ties / huge, else a float value the program made; with 1 to 3 ops per program every new
#: feature is in 14 to 47 % of typed programs (benchmarks/difftest_features.py: the rarest new one,
#: log_softmax, is in 73 per 1000 programs of the CPU plan and 49 of the GPU plan, where typed
#: programs are a third; the budget is 10)
P_WIDE, P_LONG, P_PATTERN = 0.2, 0.2, 0.3
#: chance that a long odd row holds ``tail`` values (:data:`precisionkit.repro.VALUES`)
P_TAIL = 0.4


def wide_stage(p: Program, shape: tuple[int, ...]) -> list[str]:
    """Append 1 to 3 wide ops to ``p`` from a stream of the program's seed; their results to
    return as outputs (floats, and the indices an argmax of ties gives)."""
    rng = random.Random(f"typed-wide:{p.seed}")
    out: list[str] = []
    for _ in range(rng.randint(1, 3)):
        x, at, how = _operand(p, rng, shape)
        op = _tail_use if how == "tail" else rng.choice(_WIDE_OPS)
        out += op(p, rng, x, at, "input" if how == "tail" else how)
    return out


def _fresh(p: Program, rng: random.Random, shape: tuple[int, ...], scale: float) -> str:
    """A fresh ``normal`` float input of ``shape`` at ``scale``, in any layout."""
    name = p.input("f", shape, _layout(rng))
    p.inputs[-1] = replace(p.inputs[-1], scale=scale)
    return name


def _operand(p: Program, rng: random.Random, shape: tuple[int, ...]) -> tuple[str, tuple[int, ...], str]:
    """A 2-D float value, its shape and how it was made: ``input`` (a fresh input at a wide scale
    or a fresh long odd row: every path reads the same value), ``pattern`` (only +-0, ties or
    huge numbers, which eager and fused make exactly alike) or ``made`` (a float the program made,
    with its paths' rounding differences)."""
    roll = rng.random()
    if roll < P_WIDE:
        return _fresh(p, rng, shape, rng.choice(WIDE_SCALES)), shape, "input"
    if roll < P_WIDE + P_LONG:
        long = (rng.choice((1, 2, 3, 4, 5)), rng.choice(LONG_ROWS))
        x = _fresh(p, rng, long, rng.choice((1.0, 4.0, 300.0, *WIDE_SCALES)))
        if rng.random() < P_TAIL:  # the row's extreme last in memory, in a vector loop's remainder
            p.inputs[-1] = replace(p.inputs[-1], values="tail")
            return x, long, "tail"
        return x, long, "input"
    floats = [n for n in p.values("f") if len(p.kinds[n][1]) == 2]
    if roll >= P_WIDE + P_LONG + P_PATTERN:
        x = rng.choice(floats) if floats else _fresh(p, rng, shape, 1.0)
        return x, p.kinds[x][1], "made" if x.startswith("v") else "input"
    # a pattern is made from an input: sign, round and copysign are discontinuous, and of a value
    # the program made they would turn a rounding difference the rule accepts (a remainder of 0
    # against one of an ULP) into a different zero, tie or huge value
    inputs = [n for n in floats if not n.startswith("v")]
    x = rng.choice(inputs) if inputs else _fresh(p, rng, shape, 1.0)
    at = p.kinds[x][1]
    pattern = rng.choice(("zero", "tie", "huge"))
    if pattern == "zero":  # +0 where x is positive, -0 where negative (NaN's sign bit too)
        return p.add("f", at, f"torch.copysign(torch.zeros_like({x}), {x})", "zero_only_values"), at, "pattern"
    if pattern == "tie":  # -1, -0, +0, 1 (NaN stays NaN): every row full of equal values
        return p.add("f", at, f"torch.round({x}).clamp(-1.0, 1.0)", "tie_only_values"), at, "pattern"
    # exact in eager and fused; fp64 multiplies by the unrounded constant, and eager's error
    # against it is the rule's noise at that row
    big = repr(BIG[p.dtype])
    expr = f"(torch.sign({x}) + 2.0) * {big}"
    return p.add("f", at, expr, "huge_only_values", "extreme_magnitude"), at, "pattern"


# --- wide ops: (p, rng, x, shape of x, how x was made) -> the outputs they add ----------------


def _softmax(p: Program, rng: random.Random, x: str, at: tuple[int, ...], how: str) -> list[str]:
    fn = rng.choice(("softmax", "log_softmax"))
    dim = rng.choice((0, 1, -1))
    return [p.add("f", at, f"torch.{fn}({x}, dim={dim})", fn)]


def _trig(p: Program, rng: random.Random, x: str, at: tuple[int, ...], how: str) -> list[str]:
    """sin / cos / tan: of any argument where every path reads the same value (an input: at 1e30
    too, where only argument reduction keeps the result right), else of the value clamped to
    [-1.5, 1.5]. A value the program made carries its paths' rounding differences (float16
    intermediates, reordered sums), which tan near its poles (and sin / cos of large arguments)
    multiply past any tolerance; within 1.5 (tan(1.5) = 14.1) the factor is at most 21."""
    fn = rng.choice(("sin", "cos", "tan"))
    arg = f"{x}.clamp(-1.5, 1.5)" if how == "made" else x
    return [p.add("f", at, f"torch.{fn}({arg})", "trig")]


def _exp_log(p: Program, rng: random.Random, x: str, at: tuple[int, ...], how: str) -> list[str]:
    """exp of the value shifted to the dtype's overflow / subnormal / underflow thresholds, or log
    of |x| scaled to subnormal, zero or near-largest products. Sound for the rule: where float32
    overflows and fp64 does not, fp64 rounded to the dtype is inf as well (the class eager has);
    a path with float32 intermediates in a 16-bit program is nearer fp64 than eager, not farther."""
    if rng.random() < 0.5:
        off = rng.choice(EXP_OFFSETS[p.dtype])
        expr = f"torch.exp({x} + {off!r})" if off > 0 else f"torch.exp({x} - {-off!r})"
        return [p.add("f", at, expr, "exp_log_extreme")]
    factor = rng.choice(LOG_FACTORS[p.dtype])
    return [p.add("f", at, f"torch.log({x}.abs() * {factor!r})", "exp_log_extreme", "extreme_magnitude")]


def _strided(p: Program, rng: random.Random, x: str, at: tuple[int, ...], how: str) -> list[str]:
    """The value through a transpose of a reshape, step slices, or overlapping windows."""
    r, c = at
    kind = rng.choice(("reshape_t", "step", "windows"))
    if kind == "reshape_t":  # the same elements, read in another order
        return [p.add("f", at, f"{x}.reshape({c}, {r}).t() + {x}", "strided_view", "transpose_input")]
    if kind == "step":
        s0, s1 = rng.choice((1, 2, 3)), rng.choice((2, 3, 5))
        o = rng.randint(0, min(c - 1, s1 - 1))
        shape = (-(-r // s0), -(-(c - o) // s1))
        return [p.add("f", shape, f"{x}[::{s0}, {o}::{s1}] * {rng.choice((2.0, -0.5, 3.0))!r}", "strided_view")]
    n = r * c
    w = min(rng.choice((2, 3, 4)), n)
    step = rng.randint(1, w)  # below the window's width: the windows overlap
    rows = (n - w) // step + 1
    view = f"torch.as_strided({x}.reshape(-1), ({rows}, {w}), ({step}, 1))"
    # the windows themselves, scaled exactly: a max over a window would be a max of +0 and -0
    # where the pattern values hold both, whose sign depends on the order it is taken in
    return [p.add("f", (rows, w), f"{view} * {rng.choice((2.0, -0.5, 3.0))!r}", "strided_view", "as_strided")]


def _cat_stack(p: Program, rng: random.Random, x: str, at: tuple[int, ...], how: str) -> list[str]:
    """cat along either dim (with a value of its shape, or a fresh long odd row / extra rows so
    the pieces differ in length), or stack along any dim."""
    r, c = at
    same = [n for n in p.values("f", at) if n != x]
    y = rng.choice(same) if same else _fresh(p, rng, at, 1.0)
    kind = rng.choice(("cat0", "cat1", "cat_long", "stack"))
    if kind == "cat0":
        return [p.add("f", (2 * r, c), f"torch.cat([{x}, {y}], dim=0)", "cat_stack")]
    if kind == "cat1":
        return [p.add("f", (r, 2 * c), f"torch.cat([{x}, {y}], dim=1)", "cat_stack")]
    if kind == "cat_long":
        z = _fresh(p, rng, (r, rng.choice(LONG_ROWS)), 1.0)
        width = c + p.kinds[z][1][1]
        return [p.add("f", (r, width), f"torch.cat([{x}, {z}], dim=-1)", "cat_stack")]
    dim = rng.choice((0, 1, 2, -1))
    shape = [r, c]
    shape.insert(dim % 3, 2)
    return [p.add("s", tuple(shape), f"torch.stack([{x}, {y}], dim={dim})", "cat_stack")]


def _pattern_use(p: Program, rng: random.Random, x: str, at: tuple[int, ...], how: str) -> list[str]:
    """What only zeros, ties or huge values test: first index among ties, a sum or running sum,
    the reciprocal (+-inf by the zero's sign), the root (-0 stays -0); of any other value also the
    smallest element along a dim (over a long odd row, one whose minimum may sit in a vector loop's
    remainder)."""
    kind = rng.choice(("argmax", "argmin", "sum", "cumsum", "reciprocal", "sqrt", "amin"))
    dim = rng.choice((0, 1))
    if kind == "amin" and how == "pattern":
        kind = "argmin"  # the smallest of +0 and -0 depends on the order they are taken in
    if kind in ("sum", "cumsum") and how != "pattern" and at[dim] > 16:
        # the program's longest reduction (the rule's tolerance for every output) stays as it
        # was: a long sum of signed values is left to the patterns (exact, or huge and positive);
        # not amax either, whose result over +0 and -0 depends on the order it is taken in
        kind = "argmax"
    if kind in ("argmax", "argmin"):
        red = (1, at[1]) if dim == 0 else (at[0], 1)
        return [p.add("n", red, f"torch.{kind}({x}, dim={dim}, keepdim=True)", "argmin_argmax")]
    if kind == "amin":
        red = (1, at[1]) if dim == 0 else (at[0], 1)
        return [p.add("f", red, f"torch.amin({x}, dim={dim}, keepdim=True)", "reduction")]
    if kind == "sum":
        red = (1, at[1]) if dim == 0 else (at[0], 1)
        return [p.add("f", red, f"{x}.sum(dim={dim}, keepdim=True)", "reduction")]
    if kind == "cumsum":
        return [p.add("f", at, f"torch.cumsum({x}, dim={dim})", "cumulative")]
    return [p.add("f", at, f"torch.{kind}({x})", "nan_inf")]


def _tail_use(p: Program, rng: random.Random, x: str, at: tuple[int, ...], how: str) -> list[str]:
    """A reduction along a long odd row whose extreme is its last element: the smallest or largest
    value, or its index, which only a loop that reads its remainder gets right."""
    kind = rng.choice(("amin", "amax", "min", "max", "argmin", "argmax"))
    if kind in ("argmin", "argmax"):
        return [p.add("n", (at[0], 1), f"torch.{kind}({x}, dim=-1, keepdim=True)", "argmin_argmax")]
    if kind in ("min", "max"):
        return [p.add("f", (at[0],), f"torch.{kind}({x}, dim=-1).values", "reduction")]
    return [p.add("f", (at[0], 1), f"torch.{kind}({x}, dim=-1, keepdim=True)", "reduction")]


_WIDE_OPS: tuple[Callable[..., list[str]], ...] = (_softmax, _trig, _exp_log, _strided, _cat_stack, _pattern_use)
