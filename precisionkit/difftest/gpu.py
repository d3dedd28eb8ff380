"""The ``gpu`` generator: the forms where Inductor's Triton code differs most from its C++ code.

Each program chains one or two of these groups (weights in :data:`GROUPS`):

* ``persistent_reduction`` / ``looped_reduction`` / ``split_reduction``: sums, means and amax over
  odd lengths around Triton's reduction strategies: a whole row in one block (up to 1024), rows
  longer than a block looped over (1025 to 8191), and one or two very long rows that Inductor
  splits into partial reductions (2^16 + 1 and longer);
* ``welford``: variance, ``var_mean``, ``std``, layer norm and group norm (Welford's update in
  Triton, two passes on the CPU);
* ``masked_tail``: shapes that are no multiple of a block (the masked loads of a tail);
* ``where_fill_reduction``: ``where`` or ``masked_fill`` with a fill (0, -inf, a finite value)
  feeding amax, sum or softmax: the ``other=`` value of a masked load deciding a reduction;
* ``matmul16_epilogue``: a float16 or bfloat16 matmul with a bias and activation fused after it;
* ``scan``: cumsum, cumprod and logcumsumexp over rows of odd length (Triton's scan);
* ``atomic_scatter``: ``index_put(accumulate=True)``, ``scatter_add`` and ``index_add`` with
  duplicate indices (atomic adds on the GPU, in no fixed order);
* ``channels_last_input`` and ``strided_input``: 4-D inputs stored channels last and inputs that
  are every other element of a wider row, reduced over channels or rows;
* ``large_index`` (only with ``PK_DIFFTEST_LARGE=1`` in the environment and on CUDA: billions of
  elements, too big for a CPU test): a stride-0 view whose flat index passes 2^31, reduced.

Every group is generatable and runs on CPU Inductor too (CPU tests show each one appears and
runs). With the program, Inductor options are drawn (``options`` of the case): on CUDA from
:data:`CUDA_OPTIONS`, elsewhere only from :data:`HOST_OPTIONS` (the others exist for Triton alone).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import torch

from ..repro import Case
from .program import _CONSTS, Program

#: Inductor options a CUDA program may be compiled with (each drawn with probability 1/4)
CUDA_OPTIONS: tuple[tuple[str, object], ...] = (
    ("max_autotune", True),
    ("coordinate_descent_tuning", True),
    ("triton.cudagraphs", True),
    ("split_reductions", False),
    ("emulate_precision_casts", True),
    ("triton.persistent_reductions", False),
)
#: the options that mean something to CPU Inductor
HOST_OPTIONS: tuple[tuple[str, object], ...] = (("split_reductions", False), ("emulate_precision_casts", True))
#: environment variable that lets the generator draw ``large_index`` programs (on CUDA only)
LARGE_ENV = "PK_DIFFTEST_LARGE"
#: odd row lengths per reduction strategy: within one block, looped over blocks, split
_PERSISTENT = (3, 17, 63, 127, 255, 513, 1023)
_LOOPED = (1025, 2049, 3001, 4097, 8191)
_SPLIT = (65537, 131071, 262147)


def _rows(rng: random.Random) -> int:
    return rng.choice((1, 3, 5, 7, 33))


def _reduction(p: Program, rng: random.Random, kind: str) -> None:
    n = {"persistent": _PERSISTENT, "looped": _LOOPED, "split": _SPLIT}[kind]
    cols = rng.choice(n)
    rows = 1 if kind == "split" else _rows(rng)
    x = p.input("f", (rows, cols), values=rng.choice(("normal", "normal", "grid")))
    op = rng.choice(("sum", "mean", "amax", "sum_sq", "sum_exp"))
    expr = {
        "sum": f"{x}.sum(-1)",
        "mean": f"{x}.mean(-1)",
        "amax": f"{x}.amax(-1)",
        "sum_sq": f"({x} * {x}).sum(-1)",
        "sum_exp": f"torch.exp({x} - {x}.amax(-1, keepdim=True)).sum(-1)",
    }[op]
    p.add("f", (rows,), expr, "reduction", f"{kind}_reduction", "long_reduction" if cols > 1024 else "reduction")
    p.reduction = max(p.reduction, cols)


def _welford(p: Program, rng: random.Random) -> None:
    rows, cols = _rows(rng), rng.choice(_PERSISTENT[2:] + _LOOPED[:2])
    x = p.input("f", (rows, cols), values="normal")
    form = rng.choice(("var", "var_mean", "std", "layer_norm", "group_norm"))
    if form == "var":
        p.add("f", (rows, 1), f"torch.var({x}, dim=-1, keepdim=True, correction={rng.choice((0, 1))})", "welford")
    elif form == "var_mean":
        v = p.add("f", (rows, 1), f"torch.var_mean({x}, dim=-1, keepdim=True)[0]", "welford")
        p.add("f", (rows, cols), f"({x} - {x}.mean(-1, keepdim=True)) * torch.rsqrt({v} + 1e-5)", "welford")
    elif form == "std":
        p.add("f", (rows,), f"{x}.std(-1)", "welford")
    elif form == "layer_norm":
        p.add("f", (rows, cols), f"F.layer_norm({x}, ({cols},), eps=1e-5)", "welford", "layer_norm")
    else:
        g = rng.choice((1, 3)) if cols % 3 == 0 else 1
        p.add("f", (rows, cols), f"F.group_norm({x}.view({rows}, {cols}, 1), {g}).view({rows}, {cols})", "welford")
    p.reduction = max(p.reduction, cols)


def _masked_tail(p: Program, rng: random.Random) -> None:
    shape = (rng.choice((3, 7, 129)), rng.choice((1023, 1025, 4099)))
    x = p.input("f", shape, values=rng.choice(("normal", "edge")))
    y = p.input("f", shape)
    p.add("f", shape, f"torch.sigmoid({x}) * {y} + {rng.choice(_CONSTS)!r}", "masked_tail")


def _where_fill(p: Program, rng: random.Random) -> None:
    rows, cols = _rows(rng), rng.choice(_PERSISTENT[1:] + _LOOPED[:1])
    x = p.input("f", (rows, cols), values=rng.choice(("normal", "edge")))
    fill = rng.choice(("0.0", "float('-inf')", "-1e4", "3.0"))
    form = rng.choice(("where", "masked_fill"))
    masked = (
        f"torch.where({x} > {rng.choice((0.0, 0.5, -1.0))!r}, {x}, {fill})"
        if form == "where"
        else f"{x}.masked_fill({x} < 0.0, {fill})"
    )
    red = rng.choice(("amax", "sum", "softmax"))
    expr = {"amax": f"{masked}.amax(-1)", "sum": f"{masked}.sum(-1)", "softmax": f"torch.softmax({masked}, dim=-1)"}
    shape = (rows, cols) if red == "softmax" else (rows,)
    p.add("f", shape, expr[red], "where_fill_reduction", "where_mask", "reduction")
    p.reduction = max(p.reduction, cols)


def _matmul(p: Program, rng: random.Random) -> None:
    m, k, n = rng.choice((16, 33, 128)), rng.choice((64, 127, 512)), rng.choice((16, 64, 65))
    half = rng.choice(("float16", "bfloat16"))
    a, w, b = p.input("f", (m, k)), p.input("f", (k, n), values="normal"), p.input("f", (n,))
    act = rng.choice(("torch.relu({})", "F.gelu({})", "torch.tanh({})", "({}).float()", "({}) * 0.5 + 1.0"))
    mm = f"{a}.to(torch.{half}) @ ({w} / {k**0.5!r}).to(torch.{half}) + {b}.to(torch.{half})"
    p.add("f", (m, n), act.format(mm), "matmul", "matmul16_epilogue", "fp16_bf16")
    p.reduction = max(p.reduction, k)


def _scan(p: Program, rng: random.Random) -> None:
    rows, cols = _rows(rng), rng.choice((17, 255, 1025, 4097))
    x = p.input("f", (rows, cols), values=rng.choice(("normal", "grid")))
    op = rng.choice(("cumsum", "cumprod", "logcumsumexp"))
    src = f"(1.0 + 0.01 * {x})" if op == "cumprod" else x
    p.add("f", (rows, cols), f"torch.{op}({src}, dim=-1)", "scan", "cumulative")
    p.reduction = max(p.reduction, cols)


def _atomic(p: Program, rng: random.Random) -> None:
    rows, cols = rng.choice((4, 33, 257)), rng.choice((8, 65))
    x = p.input("f", (rows, cols), values="normal")
    form = rng.choice(("index_put", "scatter_add", "index_add"))
    if form == "index_put":
        idx = p.input("i", (rows,), values="index")  # values in [0, rows): duplicates at this size
        out = f"torch.zeros_like({x}).index_put_(({idx},), {x}, accumulate=True)"
    elif form == "scatter_add":
        idx = p.input("i", (rows, cols), values="index")
        out = f"torch.zeros_like({x}).scatter_add(1, {idx}, {x})"
    else:
        idx = p.input("i", (rows,), values="index")
        out = f"torch.zeros_like({x}).index_add(0, {idx}, {x})"
    p.add("f", (rows, cols), out, "atomic_scatter", "duplicate_indices", "scatter_gather")
    p.reduction = max(p.reduction, rows)


def _layouts(p: Program, rng: random.Random) -> None:
    if rng.random() < 0.5:
        n, c, h, w = rng.choice((1, 2)), rng.choice((3, 16, 33)), rng.choice((5, 8)), rng.choice((7, 8))
        x = p.input("f", (n, c, h, w), "channels_last")
        y = p.input("f", (1, c, 1, 1))
        p.add("f", (n, 1, h, w), f"({x} * {y}).sum(1, keepdim=True)", "channels_last_input", "reduction")
        p.add("f", (n, c, h, w), f"torch.relu({x} + {y}) * 2.0", "channels_last_input")
        p.reduction = max(p.reduction, c)
    else:
        shape = (_rows(rng), rng.choice((33, 127, 1025)))
        x = p.input("f", shape, "strided")
        p.add("f", (shape[0],), f"({x} * {x}).sum(-1)", "strided_input", "reduction")
        p.reduction = max(p.reduction, shape[1])


def _large(p: Program, rng: random.Random) -> None:
    cols = rng.choice((65537, 131071))
    rows = 2**31 // cols + rng.choice((1, 7))  # rows * cols passes 2^31: an int32 flat index wraps
    x = p.input("f", (1, cols), values="normal")
    p.add("f", (cols,), f"{x}.expand({rows}, {cols}).sum(0) / {rows}.0", "large_index", "reduction")
    p.reduction = max(p.reduction, rows)


#: (group, weight, builder): weights favour the reductions, Triton's largest source of new code
GROUPS: tuple[tuple[str, int, Callable[[Program, random.Random], None]], ...] = (
    ("persistent_reduction", 2, lambda p, r: _reduction(p, r, "persistent")),
    ("looped_reduction", 2, lambda p, r: _reduction(p, r, "looped")),
    ("split_reduction", 1, lambda p, r: _reduction(p, r, "split")),
    ("welford", 2, _welford),
    ("masked_tail", 1, _masked_tail),
    ("where_fill_reduction", 2, _where_fill),
    ("matmul16_epilogue", 2, _matmul),
    ("scan", 1, _scan),
    ("atomic_scatter", 2, _atomic),
    ("layouts", 2, _layouts),
)


def draw_options(rng: random.Random, device: str) -> dict[str, object]:
    """The Inductor options of one program: each of the device's candidates with probability 1/4."""
    pool = CUDA_OPTIONS if torch.device(device).type == "cuda" else HOST_OPTIONS
    return {name: value for name, value in pool if rng.random() < 0.25}


def _gpu(p: Program) -> Case:
    rng = p.rng
    large = os.environ.get(LARGE_ENV) == "1" and torch.device(p.device).type == "cuda"
    if large and rng.random() < 0.1:
        _large(p, rng)
    names = [g for g in GROUPS for _ in range(g[1])]
    for _ in range(rng.choice((1, 1, 2))):
        _name, _w, build = rng.choice(names)
        build(p, rng)
    # options from a stream of their own: the program is the same on every device
    p.options = draw_options(random.Random(f"options:{p.seed}"), p.device)
    p.features.update(f"option:{k}" for k in p.options)
    return p.case(p.sinks() or [p.inputs[0].name], "gpu")
