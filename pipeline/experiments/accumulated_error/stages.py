"""B's chains op by op: each chain of :data:`pipeline.workloads.CHAINS` as its ops in order, each op routed
through a hook, so that B's ablation (§6.1) can keep one op out of the fused region and B's tables can name the
ops of a chain. Only B reads it; S draws the chains' pools from :mod:`pipeline.workloads`."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ...workloads import RMS_EPS

#: Runs op ``index`` of a chain: ``hook(index, fn, *args)``.
OpHook = Callable[..., torch.Tensor]


def _scaled(scores: torch.Tensor, factor: float) -> torch.Tensor:
    return scores * factor


def _staged_mul_add_gelu_mul(op: OpHook) -> Callable[..., torch.Tensor]:
    def chain(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return op(3, torch.mul, op(2, F.gelu, op(1, torch.add, op(0, torch.mul, x, scale), shift)), gate)

    return chain


def _staged_layernorm(op: OpHook) -> Callable[..., torch.Tensor]:
    def chain(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return op(0, F.layer_norm, x, x.shape[-1:], weight, bias)

    return chain


def _staged_softmax(op: OpHook) -> Callable[..., torch.Tensor]:
    def chain(x: torch.Tensor) -> torch.Tensor:
        return op(0, torch.softmax, x, -1)

    return chain


def _staged_matmul_add_layernorm(op: OpHook) -> Callable[..., torch.Tensor]:
    def chain(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = op(1, torch.add, op(0, torch.matmul, x, w), b)
        return op(2, F.layer_norm, y, y.shape[-1:])

    return chain


def _div(t: torch.Tensor, divisor: float) -> torch.Tensor:
    return t.div(divisor)


def _heads_first(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 2, 1, 3)


def _staged_attention_masked(op: OpHook) -> Callable[..., torch.Tensor]:
    def chain(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = (_heads_first(t) for t in (query, key, value))
        scores = op(1, _div, op(0, torch.matmul, q, k.transpose(-2, -1)), math.sqrt(q.shape[-1]))
        return op(4, torch.matmul, op(3, torch.softmax, op(2, torch.add, scores, attn_mask), -1), v)

    return chain


def _rms_scale(x: torch.Tensor) -> torch.Tensor:
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS)).to(x.dtype)


def _staged_rmsnorm(op: OpHook) -> Callable[..., torch.Tensor]:
    def chain(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return op(1, torch.mul, weight, op(0, _rms_scale, x))

    return chain


def _staged_attention(op: OpHook) -> Callable[..., torch.Tensor]:
    def chain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = op(1, _scaled, op(0, torch.matmul, q, k.transpose(-2, -1)), 1.0 / math.sqrt(q.shape[-1]))
        return op(3, torch.matmul, op(2, torch.softmax, scores, -1), v)

    return chain


#: Each chain of task B as its ops in order (names as in the chain's title) and a builder that
#: routes every op through a hook; with the plain hook the result equals the chain's function.
CHAIN_STAGES: dict[str, tuple[tuple[str, ...], Callable[[OpHook], Callable[..., torch.Tensor]]]] = {
    "mul_add_gelu_mul": (("mul", "add", "gelu", "mul"), _staged_mul_add_gelu_mul),
    "layernorm": (("layer_norm",), _staged_layernorm),
    "softmax": (("softmax",), _staged_softmax),
    "matmul_add_layernorm": (("matmul", "add", "layer_norm"), _staged_matmul_add_layernorm),
    "attention": (("matmul", "mul", "softmax", "matmul"), _staged_attention),
    "attention_masked": (("matmul", "div", "add", "softmax", "matmul"), _staged_attention_masked),
    "layernorm_long": (("layer_norm",), _staged_layernorm),
    "rmsnorm_long": (("rms_scale", "mul"), _staged_rmsnorm),
}


def chain_without_fusing(chain: str, index: int) -> Callable[..., torch.Tensor]:
    """The chain with op ``index`` kept out of the fused region: under ``torch.compile`` that op
    runs eagerly (``torch.compiler.disable`` breaks the graph around it) and the rest fuses on
    either side. Used to measure which op is responsible for a fused-path error (§6.1)."""
    ops, build = CHAIN_STAGES[chain]
    if not 0 <= index < len(ops):
        raise ValueError(f"chain {chain!r} has ops 0..{len(ops) - 1} ({', '.join(ops)}), not {index}")

    def hook(i: int, fn: Callable[..., torch.Tensor], *args: object) -> torch.Tensor:
        return torch.compiler.disable(fn)(*args) if i == index else fn(*args)

    return build(hook)
