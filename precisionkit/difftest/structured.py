"""The structured generators: attention, layer norm and RMSNorm, GELU and long reductions, in the
source forms models write them (see :mod:`precisionkit.difftest`)."""

from __future__ import annotations

import math

from ..repro import Case
from .program import _ROWS, _TAILS, Program, _layout


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
