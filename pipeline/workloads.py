"""The subgraph catalogue shared by the experiments.

Each :class:`Workload` is a plain PyTorch function of one input set plus what the experiments
need to know about it: its operation class and reduction size (for tolerances), the argument
shapes per profile, and seeded input distributions. Besides the standard normal, every chain has
at least one adversarial distribution (large dynamic range, near-cancellation, large logits), so
counterexamples have a chance to appear.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F


class PoolShapes(Protocol):
    """The input-pool sizes a workload's shapes are built from (S's typed sizes per profile,
    ``experiments/toolkit/spec.py``, have these fields)."""

    @property
    def rows(self) -> int: ...
    @property
    def width(self) -> int: ...
    @property
    def attention(self) -> tuple[int, int, int]: ...
    @property
    def long_width(self) -> int: ...
    @property
    def ffn_shape(self) -> tuple[int, int, int]: ...


DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


# --- the subgraphs -------------------------------------------------------------------------


def ffn_first_half(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """matmul -> add -> layernorm -> gelu (the first half of a transformer FFN: ``w`` projects
    hidden -> 4 * hidden, and the layernorm normalizes the widened activation)."""
    y = x @ w + b
    return F.gelu(F.layer_norm(y, y.shape[-1:]))


def mul_add_gelu_mul(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Pure elementwise chain: mul -> add -> gelu -> mul."""
    return F.gelu(x * scale + shift) * gate


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], weight, bias)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def matmul_add_layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = x @ w + b
    return F.layer_norm(y, y.shape[-1:])


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """qk -> softmax -> pv."""
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    return torch.softmax(scores, dim=-1) @ v


def attention_masked(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor
) -> torch.Tensor:
    """Attention in the form models write it: ``[batch, seq, heads, dim]`` inputs permuted to heads
    first, scores divided by sqrt(dim), an additive padding mask, softmax, the weighted sum. This is
    the form Inductor's attention pattern matcher rewrites into one fused attention kernel."""
    q, k, v = (t.permute(0, 2, 1, 3) for t in (query, key, value))
    scores = torch.matmul(q, k.transpose(-2, -1)).div(math.sqrt(q.shape[-1])) + attn_mask
    return scores.softmax(dim=-1).matmul(v)


#: RMSNorm's epsilon, as LLaMA-style models set it.
RMS_EPS = 1e-6


def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """RMSNorm as LLaMA-style models write it: the row scaled by rsqrt(mean(x^2) + eps) in at least
    fp32, rounded back to the input dtype, times the weight. (fp64 inputs stay fp64: the reference.)"""
    h = x.to(torch.promote_types(x.dtype, torch.float32))
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    return weight * h.to(x.dtype)


# --- input distributions ---------------------------------------------------------------------

#: A distribution: every tensor drawn from ``gen`` on ``gen.device`` (the generator's device is the draw's).
Sampler = Callable[[dict[str, tuple[int, ...]], torch.Generator], dict[str, torch.Tensor]]


def seeded_generator(device: torch.device | str, seed: int) -> torch.Generator:
    """The generator one input draw takes its values from: ``device``'s own, seeded with ``seed``
    (the same device type and seed give the same bits; on the CPU, those of ``torch.Generator()``)."""
    return torch.Generator(device=device).manual_seed(seed)


def _normal(shapes, gen, scale=1.0):
    return {k: torch.randn(s, generator=gen, dtype=torch.float64, device=gen.device) * scale for k, s in shapes.items()}


def _wide_range(shapes, gen):
    """Activation magnitudes spread over four decades (per element, 10**U(-2, 2) times a normal):
    stresses rounding of large/small mixes. Only ``x`` is spread, so every chain's exact result
    stays far inside fp16's finite range (the plan's inputs are finite; overflow is not the point)."""
    out = _normal(shapes, gen)
    out["x"] = out["x"] * torch.pow(
        10.0, torch.rand(shapes["x"], generator=gen, dtype=torch.float64, device=gen.device) * 4 - 2
    )
    return out


#: Spread of the near-cancellation rows in units of the dtype's spacing at the offset: 16 ULPs keeps 16
#: distinct levels per standard deviation after rounding to the dtype (a spread given in absolute terms,
#: 64 + 0.05 N, rounds to a constant row in bf16, where the spacing at 64 is 0.5: zero variance).
NEAR_CANCELLATION_OFFSET = 64.0
NEAR_CANCELLATION_SPREAD_ULPS = 16.0

#: Significand bits (with the implicit one) of the formats a dtype-aware sampler knows.
_SIGNIFICAND_BITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def dtype_spacing(value: float, dtype: str) -> float:
    """The gap between ``dtype`` numbers at ``value`` (a normal number of that format).

    >>> dtype_spacing(64.0, "bfloat16"), dtype_spacing(64.0, "float16")
    (0.5, 0.0625)
    """
    return 2.0 ** (math.floor(math.log2(abs(value))) - _SIGNIFICAND_BITS[dtype] + 1)


class InDtypeUnits:
    """A sampler whose spreads are set in units of the target dtype's spacing: drawn once per dtype."""

    def __init__(self, sample: Callable[[dict, torch.Generator, str], dict[str, torch.Tensor]]) -> None:
        self._sample = sample
        self.__doc__ = sample.__doc__

    def __call__(self, shapes, gen, dtype: str = "float64"):
        return self._sample(shapes, gen, dtype)


@InDtypeUnits
def _near_cancellation(shapes, gen, dtype):
    """A large common offset with a spread of 16 of the dtype's ULPs at the offset: mean subtraction
    cancels most digits, and the rounded rows keep their variance."""
    out = _normal(shapes, gen)
    spread = NEAR_CANCELLATION_SPREAD_ULPS * dtype_spacing(NEAR_CANCELLATION_OFFSET, dtype)
    out["x"] = NEAR_CANCELLATION_OFFSET + spread * out["x"]
    return out


#: Common offset of the offset logits: a softmax without its max subtraction overflows at any scale.
LARGE_OFFSET = 1000.0


def _large_offset(shapes, gen):
    """Logits 1000 + 4 N: every row is far past exp's fp32 range, and softmax is shift-invariant."""
    out = _normal(shapes, gen)
    out["x"] = LARGE_OFFSET + 4.0 * out["x"]
    return out


#: Scale of the subnormal-range inputs: fp16's smallest normal is 2^-14, so about half of the
#: elementwise chain's outputs land among fp16's subnormals (bf16 keeps them normal).
SUBNORMAL_SCALE = 2.0**-14


def _subnormal_range(shapes, gen):
    """``x`` and ``shift`` scaled to 2^-14: the chain's outputs straddle fp16's smallest normal, where
    a kernel that flushes subnormals to zero loses them."""
    out = _normal(shapes, gen)
    out["x"] = out["x"] * SUBNORMAL_SCALE
    out["shift"] = out["shift"] * SUBNORMAL_SCALE
    return out


#: Standard deviation of the large logits: a row of 128 peaks near 2.6 sigma, about 100, where exp
#: overflows fp32 (exp(89) > 3.4e38), so a softmax that skips the max subtraction returns inf or NaN.
LARGE_LOGIT_SCALE = 40.0


def _large_logits(shapes, gen):
    out = _normal(shapes, gen)
    out["x"] = out["x"] * LARGE_LOGIT_SCALE
    return out


def _attention_peaked(shapes, gen):
    """Large q/k: near-one-hot attention rows (softmax of large logits)."""
    out = _normal(shapes, gen)
    out["q"] = out["q"] * 4.0
    out["k"] = out["k"] * 4.0
    return out


#: The additive mask value of BERT-style code for a padded key position.
MASKED = -1.0e4


def _padding_mask(sampler: Sampler) -> Sampler:
    """Each set pads the last p of its keys, p uniform in 1..seq/4: ``attn_mask`` is 0 for a kept key
    and :data:`MASKED` for a padded one (every row keeps at least three quarters of its keys)."""

    def sample(shapes, gen):
        out = sampler(shapes, gen)
        shape = shapes["attn_mask"]
        sets, seq = shape[0], shape[-1]
        pad = torch.randint(1, max(seq // 4, 1) + 1, (sets,), generator=gen, device=gen.device)
        padded = torch.arange(seq, device=gen.device) >= (seq - pad).unsqueeze(-1)
        out["attn_mask"] = torch.where(padded, MASKED, 0.0).to(torch.float64).reshape(shape)
        return out

    return sample


def _fully_masked(shapes, gen):
    """Every key masked: the additive mask shifts every score by the same -1e4, which softmax ignores
    in exact arithmetic (the fp64 reference equals the unmasked one), while scores rounded to a 16-bit
    type next to -1e4 keep almost none of their digits. What a kernel does with a row that masks
    everything: average the values, not return NaN or zeros."""
    out = _normal(shapes, gen)
    out["attn_mask"] = torch.full(shapes["attn_mask"], MASKED, dtype=torch.float64, device=gen.device)
    return out


def _attention_masked_peaked(shapes, gen):
    """Large queries and keys: near-one-hot attention rows."""
    out = _normal(shapes, gen)
    out["query"] = out["query"] * 4.0
    out["key"] = out["key"] * 4.0
    return out


def _affine_near_one(sampler: Sampler) -> Sampler:
    def sample(shapes, gen, *dtype):
        out = sampler(shapes, gen, *dtype)
        for name in ("weight",):
            if name in out:
                out[name] = 1.0 + 0.1 * out[name]
        if "bias" in out:
            out["bias"] = 0.1 * out["bias"]
        return out

    return InDtypeUnits(sample) if isinstance(sampler, InDtypeUnits) else sample


# --- the catalogue ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    fn: Callable[..., torch.Tensor]
    op_class: str  # precisionkit.tolerance op class
    shapes: Callable[[PoolShapes], dict[str, tuple[int, ...]]]
    distributions: dict[str, Sampler]
    reduction: Callable[[PoolShapes], int]  # terms accumulated per output element

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(self.fn.__code__.co_varnames[: self.fn.__code__.co_argcount])

    def in_dtype_units(self, distribution: str) -> bool:
        """Whether ``distribution`` sets its spreads in units of the target dtype's spacing (drawn per dtype)."""
        return isinstance(self.distributions[distribution], InDtypeUnits)

    def sample(
        self,
        profile: PoolShapes,
        distribution: str,
        n_sets: int,
        seed: int,
        dtype: str | None = None,
        *,
        device: torch.device | str = "cpu",
    ) -> dict[str, torch.Tensor]:
        """``n_sets`` input sets drawn in float64 on ``device`` by its own generator
        (:func:`seeded_generator`), stacked on a leading set dimension. A distribution set in units of
        the dtype's spacing (:meth:`in_dtype_units`) needs the ``dtype`` it is drawn for."""
        if distribution not in self.distributions:
            raise ValueError(
                f"workload {self.name!r} has no distribution {distribution!r}; "
                f"expected one of {', '.join(self.distributions)}"
            )
        gen = seeded_generator(device, seed)
        shapes = {k: (n_sets, *s) for k, s in self.shapes(profile).items()}
        sampler = self.distributions[distribution]
        if isinstance(sampler, InDtypeUnits):
            if dtype not in _SIGNIFICAND_BITS:
                raise ValueError(
                    f"distribution {distribution!r} of {self.name!r} is set in units of the dtype's spacing: "
                    f"pass dtype, one of {', '.join(_SIGNIFICAND_BITS)} (got {dtype!r})"
                )
            sampled = sampler(shapes, gen, dtype)
        else:
            sampled = sampler(shapes, gen)
        return {k: sampled[k] for k in self.arg_names}


def _rows(p: PoolShapes) -> dict[str, tuple[int, ...]]:
    return {"x": (p.rows, p.width)}


def _chain_shapes(p: PoolShapes) -> dict[str, tuple[int, ...]]:
    return {"x": (p.rows, p.width), "scale": (p.width,), "shift": (p.width,), "gate": (p.width,)}


def _norm_shapes(p: PoolShapes) -> dict[str, tuple[int, ...]]:
    return {"x": (p.rows, p.width), "weight": (p.width,), "bias": (p.width,)}


def _matmul_shapes(p: PoolShapes) -> dict[str, tuple[int, ...]]:
    return {"x": (p.rows, p.width), "w": (p.width, p.width), "b": (p.width,)}


#: A transformer FFN's first projection widens hidden -> FFN_EXPANSION * hidden.
FFN_EXPANSION = 4


def _ffn_shapes(p: PoolShapes) -> dict[str, tuple[int, ...]]:
    batch, seq, hidden = p.ffn_shape
    return {"x": (batch, seq, hidden), "w": (hidden, FFN_EXPANSION * hidden), "b": (FFN_EXPANSION * hidden,)}


def _attention_shapes(p: PoolShapes) -> dict[str, tuple[int, ...]]:
    heads, seq, dim = p.attention
    return {"q": (heads, seq, dim), "k": (heads, seq, dim), "v": (heads, seq, dim)}


def _attention_masked_shapes(p: PoolShapes) -> dict[str, tuple[int, ...]]:
    heads, seq, dim = p.attention
    qkv = (1, seq, heads, dim)
    return {"query": qkv, "key": qkv, "value": qkv, "attn_mask": (1, 1, 1, seq)}


def _long_norm_shapes(p: PoolShapes) -> dict[str, tuple[int, ...]]:
    return {"x": (1, p.long_width), "weight": (p.long_width,), "bias": (p.long_width,)}


def _long_rms_shapes(p: PoolShapes) -> dict[str, tuple[int, ...]]:
    return {"x": (1, p.long_width), "weight": (p.long_width,)}


def _fan_in_scaled(sampler: Sampler) -> Sampler:
    """Scale ``w`` by 1/sqrt(fan_in) so activations stay O(1); fan_in is w's row count."""

    def sample(shapes, gen):
        out = sampler(shapes, gen)
        out["w"] = out["w"] / math.sqrt(shapes["w"][-2])
        return out

    return sample


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "ffn",
            "matmul -> add -> layernorm -> gelu (FFN first half)",
            ffn_first_half,
            "layernorm",
            _ffn_shapes,
            {"normal": _fan_in_scaled(_normal)},
            lambda p: p.ffn_shape[2],
        ),
        Workload(
            "mul_add_gelu_mul",
            "mul -> add -> gelu -> mul",
            mul_add_gelu_mul,
            "elementwise",
            _chain_shapes,
            {"normal": _normal, "wide_range": _wide_range, "subnormal_range": _subnormal_range},
            lambda p: 1,
        ),
        Workload(
            "layernorm",
            "layernorm",
            layernorm,
            "layernorm",
            _norm_shapes,
            {"normal": _affine_near_one(_normal), "near_cancellation": _affine_near_one(_near_cancellation)},
            lambda p: p.width,
        ),
        Workload(
            "softmax",
            "softmax",
            softmax,
            "softmax",
            _rows,
            {"normal": _normal, "large_logits": _large_logits, "large_offset": _large_offset},
            lambda p: p.width,
        ),
        Workload(
            "matmul_add_layernorm",
            "matmul -> add -> layernorm",
            matmul_add_layernorm,
            "layernorm",
            _matmul_shapes,
            {"normal": _fan_in_scaled(_normal), "wide_range": _fan_in_scaled(_wide_range)},
            lambda p: p.width,
        ),
        Workload(
            "attention",
            "attention: qk -> softmax -> pv",
            attention,
            "softmax",
            _attention_shapes,
            {"normal": _normal, "peaked": _attention_peaked},
            lambda p: p.attention[2],
        ),
        Workload(
            "attention_masked",
            "attention as models write it: permute heads -> qk / sqrt(d) + mask -> softmax -> pv",
            attention_masked,
            "softmax",
            _attention_masked_shapes,
            {
                "normal": _padding_mask(_normal),
                "peaked": _padding_mask(_attention_masked_peaked),
                "fully_masked": _fully_masked,
            },
            lambda p: p.attention[1],
        ),
        Workload(
            "layernorm_long",
            "layernorm over long rows",
            layernorm,
            "layernorm",
            _long_norm_shapes,
            {"normal": _affine_near_one(_normal), "near_cancellation": _affine_near_one(_near_cancellation)},
            lambda p: p.long_width,
        ),
        Workload(
            "rmsnorm_long",
            "RMSNorm over long rows",
            rmsnorm,
            "layernorm",
            _long_rms_shapes,
            {"normal": _affine_near_one(_normal)},
            lambda p: p.long_width,
        ),
    )
}

#: The accumulated-error chains of task B: the seed's five in its order, then the forms real models
#: take (masked attention with heads permuted, normalizations over long rows).
CHAINS = (
    "mul_add_gelu_mul",
    "layernorm",
    "softmax",
    "matmul_add_layernorm",
    "attention",
    "attention_masked",
    "layernorm_long",
    "rmsnorm_long",
)


def set_args(pool: dict[str, torch.Tensor], workload: Workload, index: int) -> tuple[torch.Tensor, ...]:
    """The positional arguments of input set ``index`` from a stacked pool."""
    return tuple(pool[name][index] for name in workload.arg_names)
