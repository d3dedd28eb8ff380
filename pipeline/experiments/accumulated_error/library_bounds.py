"""How far a fused path of a *library chain* (a matmul or attention left to a library kernel) can be from
the fp64 value, per output element: an absolute bound that any legitimate fp32-accumulating library and
fp32 epilogue stays within, whatever order they reduce in.

Why not the rounding test of :mod:`.bounds`: a library call returns its result in the graph's 16-bit
dtype (Inductor's CPU path runs ``addmm`` and ``bmm`` externs that round their outputs; a fused attention
kernel rounds the probabilities to 16 bits before its second matmul), so the fused output is not
``round(y32)`` and no element has to be correctly rounded. What does hold is an absolute bound, built from
the steps of the chain with ``u = 2^-24`` (fp32) and ``u16`` (the dtype's unit roundoff: 2^-11 for fp16,
2^-8 for bf16):

- **Library matmul** of ``K`` terms, ``C = A B`` with fp32 accumulation: the products of 16-bit numbers are
  exact in fp32, and any summation order (blocked, split, per lane) is within the deterministic
  ``gamma_K = K u / (1 - K u)`` times ``sum_k |a_ik| |b_kj|`` (Higham, *Accuracy and Stability of Numerical
  Algorithms*, 2nd ed., chapter 3; :func:`precisionkit.bounds.matmul_error_bound`). The deterministic form
  is used rather than the probabilistic ``lambda u sqrt(K)`` of :mod:`.bounds`: a library's blocking and
  split-K are not the independent roundings that form assumes, and at these sizes it costs nothing
  (``gamma_128 = 7.6e-6``, against ``u16`` of 4.9e-4 or 3.9e-3). A library may round its output to the dtype once: ``u16 |c|`` more.
- **Elementwise fp32 steps** (a bias add, the 1/sqrt(d) scale, an additive mask) add ``u`` times their result.
  An additive mask of -1e4 matters: the score then lives next to 1e4, where fp32 keeps only 2^-11 absolute,
  so a fully masked row's weights carry a relative error of about 6e-4 that no library can avoid.
- **Layer norm** of a row ``y`` with error ``dy``: to first order ``|d out_i| <= r (|dy_i| + mean |dy| +
  |z_i| rms(dy))`` with ``r = 1 / sqrt(var + eps)`` and ``z = (y - mean) r`` (the mean moves by at most
  mean |dy|; the variance term is ``z_i r mean(z dy)``, bounded by Cauchy-Schwarz since ``mean z^2 <= 1``);
  its own fp32 computation is :func:`.bounds._layernorm_bound` (probabilistic, lambda 6).
- **Softmax** of scores ``t`` with error ``dt``: ``dp_k = p_k (dt_k - sum_j p_j dt_j)``, so ``|dp_k| <= p_k
  (|dt_k| + sum_j p_j |dt_j|)``, times ``1 + 2 max |dt|`` for exp's second-order terms (``|e^x - 1| <= |x|
  (1 + 2|x|)`` for ``|x| <= 1``); its own fp32 computation is :func:`.bounds._softmax_bound`. The
  probabilities may be rounded to the dtype once, as the second matmul's 16-bit input: ``u16 p_k`` more.
  A flash kernel's online rescaling multiplies numerator and denominator by the same rounded factor (its
  exp error cancels); each rescale rounds each of them once: at most ``2 u`` per key block, and there are
  at most as many blocks as keys.
- **The final rounding** to the dtype: half a ULP of the output at ``|y64| + beta``.

Where a 16-bit rounding meets a subnormal, half the dtype's smallest subnormal is added absolutely. The
bound is first order in ``u16`` with the second-order terms given a factor ``1 + 8 u16``.

Any element beyond its bound is something no fp32-accumulating library and fp32 epilogue produces: a
contradiction, up to the probabilistic reductions of the epilogue (each beyond its bound with probability
:func:`.bounds.reduction_failure_probability`; the library matmuls' bound is deterministic). The price of
admitting every legitimate 16-bit boundary is slack: the bound is several half-ULPs wide where ``u16`` terms
add up, and a fault smaller than those terms (an exp error below ``u16``) is indistinguishable from a
legitimate library and is declared harmless with its numbers (:mod:`.library_faults`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from precisionkit.bounds import gamma, matmul_error_bound, rounding_error, unit_roundoff
from precisionkit.stats import spacing

from ...workloads import MASKED
from .bounds import LAYER_NORM_EPS, U32, _layernorm_bound, _softmax_bound


def _final(beta: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``beta`` plus the final rounding: half the dtype's spacing at ``|ref| + beta``."""
    return beta + spacing(ref.abs() + beta, dtype) / 2.0


def _second_order(dtype: torch.dtype) -> float:
    return 1.0 + 8.0 * unit_roundoff(dtype)


def matmul_add_layernorm_bound(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *, dtype: torch.dtype
) -> torch.Tensor:
    """The absolute bound of ``layer_norm(x @ w + b)`` per output element (fp64 args): the library
    matmul (bias inside or after it) rounded to the dtype, then the fp32 layer norm, then the final rounding."""
    xw = x @ w
    y = xw + b
    err_y = matmul_error_bound(x, w) + U32 * y.abs() + rounding_error(torch.maximum(xw.abs(), y.abs()), dtype)
    mu = y.mean(-1, keepdim=True)
    d = y - mu
    r = torch.rsqrt((d * d).mean(-1, keepdim=True) + LAYER_NORM_EPS)
    z = d * r
    prop = r * (err_y + err_y.mean(-1, keepdim=True) + z.abs() * err_y.pow(2).mean(-1, keepdim=True).sqrt())
    beta = prop * _second_order(dtype) + _layernorm_bound(y, None, None, dtype=dtype)
    return _final(beta, z, dtype)


def _attention_bound(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dtype: torch.dtype
) -> torch.Tensor:
    """The absolute bound of ``softmax(q k^T / sqrt(d) [+ mask]) v`` per output element (fp64, heads
    leading): the scores from a library matmul rounded to the dtype, the fp32 scale, mask and softmax, the
    probabilities rounded to the dtype, the second library matmul, the final rounding."""
    d_head, keys = q.shape[-1], k.shape[-2]
    s = q @ k.transpose(-2, -1)
    err_s = matmul_error_bound(q, k.transpose(-2, -1)) + rounding_error(s.abs(), dtype)
    scaled = s / math.sqrt(d_head)
    t = scaled if mask is None else scaled + mask
    err_t = err_s / math.sqrt(d_head) + U32 * scaled.abs() + (0.0 if mask is None else U32 * t.abs())
    p = torch.softmax(t, dim=-1)
    spread = err_t.amax(-1, keepdim=True)
    dp = p * (err_t + (p * err_t).sum(-1, keepdim=True)) * (1.0 + 2.0 * spread) + _softmax_bound(t, dtype=dtype)
    dp = dp * _second_order(dtype) + rounding_error((p + dp).abs(), dtype)
    out = p @ v
    weighted = (p + dp) @ v.abs()
    beta = dp @ v.abs() + (gamma(keys, torch.float32) + 2.0 * keys * U32) * weighted + U32 * out.abs()
    return _final(beta, out, dtype)


def attention_bound(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, dtype: torch.dtype) -> torch.Tensor:
    return _attention_bound(q, k, v, None, dtype)


def attention_masked_bound(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor, *, dtype: torch.dtype
) -> torch.Tensor:
    q, k, v = (t.permute(0, 2, 1, 3) for t in (query, key, value))
    return _attention_bound(q, k, v, attn_mask, dtype)


#: Per library chain: the absolute bound of one input set (fp64 args, ``dtype`` the chain's 16-bit dtype)
#: and how many probabilistic reductions its fp32 epilogue makes per output row (a layer norm's mean and
#: variance; a softmax's sum). The library matmuls' bound is deterministic and adds none.
LIBRARY_BOUNDS: dict[str, tuple[Callable[..., torch.Tensor], int]] = {
    "matmul_add_layernorm": (matmul_add_layernorm_bound, 2),
    "attention": (attention_bound, 1),
    "attention_masked": (attention_masked_bound, 1),
}


def absolute_bound(chain: str, args: tuple[torch.Tensor, ...]) -> torch.Tensor | None:
    """Per output element of one input set, the bound on ``|fused - y64|`` for any legitimate library
    computation of ``chain`` followed by its final rounding (fp64, the output's shape); None for a chain
    whose fused code computes every op (see :func:`.bounds.element_bound`)."""
    entry = LIBRARY_BOUNDS.get(chain)
    if entry is None:
        return None
    fn, _ = entry
    return fn(*(a.to(torch.float64) for a in args), dtype=args[0].dtype)


def library_reductions_per_set(chain: str, output_shape: tuple[int, ...]) -> int:
    """How many probabilistic reductions one set's library computation makes: rows x reductions per row."""
    entry = LIBRARY_BOUNDS.get(chain)
    if entry is None or not output_shape:
        return 0
    return entry[1] * math.prod(output_shape[:-1])


#: A mask entry at most this is a masked key: half the chain's additive mask value (robust to the mask's
#: rounding to the dtype; -inf counts too).
MASKED_BELOW = MASKED / 2


def fully_masked_rows(chain: str, args: tuple[torch.Tensor, ...]) -> torch.Tensor | None:
    """Per output row of one set (flattened, bool), whether the chain's mask masks every key of that row;
    None for a chain without a mask."""
    if chain != "attention_masked":
        return None
    query, _, _, attn_mask = args
    batch, seq, heads, _ = query.shape
    masked = (attn_mask.to(torch.float64) <= MASKED_BELOW).expand(batch, heads, seq, attn_mask.shape[-1])
    return masked.all(dim=-1).reshape(-1)


def row_classes(out: torch.Tensor, rows: int) -> torch.Tensor:
    """Per output row (``out`` reshaped to ``rows`` rows): 0 finite and not all zero, 1 all zero, 2 any
    NaN, 3 any infinity (and no NaN): the answer's class, whatever its rounding."""
    o = out.to(torch.float64).reshape(rows, -1)
    cls = torch.zeros(rows, dtype=torch.int64, device=o.device)
    cls = torch.where((o == 0).all(dim=1), 1, cls)
    cls = torch.where(torch.isinf(o).any(dim=1), 3, cls)
    return torch.where(torch.isnan(o).any(dim=1), 2, cls)
