"""Task E's model: a GPT-2-style byte-level decoder (:class:`GPT`), and the one-ULP nudge of its
initial weights (:func:`nudge_one_ulp`).

``init_ulp_nudge`` (a :class:`.config.TrainConfig` field) is the numerics-only control of task E: it
moves every initial weight by exactly one ULP (direction drawn from a generator seeded by the init
seed), so a run keeps the fused run's data order and initialization and differs from eager only by
rounding-sized state. The training loop is :func:`.loop.train`.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 256  # byte-level: every byte value is a token


class CausalSelfAttention(nn.Module):
    """Multi-head causal attention written out (matmul, mask, softmax, matmul) as in GPT-2, so the
    fused path has the softmax chain to fuse rather than one opaque attention kernel."""

    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not divisible by heads {heads}")
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.mask: torch.Tensor
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x)) with tanh-GELU."""

    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, context)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2 architecture over bytes: learned positions, tied input/output embedding, no dropout
    (dropout would add random draws that differ between paths and hide the numerics)."""

    def __init__(self, layers: int, heads: int, width: int, context: int) -> None:
        super().__init__()
        self.context = context
        self.wte = nn.Embedding(VOCAB, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, context) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight
        # GPT-2 initialization: N(0, 0.02), residual projections scaled by 1/sqrt(2 * layers).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        if t > self.context:
            raise ValueError(f"sequence length {t} exceeds the model context {self.context}")
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def nudge_one_ulp(model: nn.Module, seed: int) -> int:
    """Move every parameter element one ULP up or down (signs from a generator seeded by ``seed``,
    so the control is reproducible and unbiased); returns how many elements changed (all of them).

    The smallest possible change of the state: whatever the run does differently afterwards is
    rounding amplified by training, the size a pure numerics difference can reach.
    """
    g = torch.Generator().manual_seed(seed)
    changed = 0
    with torch.no_grad():
        for p in model.parameters():  # tied weights appear once
            up = torch.randint(0, 2, p.shape, generator=g).bool().to(p.device)
            target = torch.where(up, torch.full_like(p, math.inf), torch.full_like(p, -math.inf))
            moved = torch.nextafter(p, target)
            changed += int((moved != p).sum())
            p.copy_(moved)
    return changed
