"""How far any fp32 computation of a chain can be from its fp64 value, per output element: the bound
that decides which elements a fused kernel must round correctly.

A fused kernel that keeps its intermediates in fp32 and rounds once returns ``round(y32)``, where
``y32`` is its fp32 value of the chain. If ``|y32 - y64| <= beta`` and every value within ``beta`` of
the fp64 value ``y64`` rounds to the same 16-bit number, that number is the correctly rounded
``round(y64)``, whatever order the kernel reduced in. Such an element is *decisive*
(:func:`decisive`): a fused kernel that returns anything else on it computed something other than
the chain, and no margin is needed. Elements near a rounding midpoint, within reach of legitimate fp32
rounding differences (the reduction order of one thread against sixteen lanes, say), are not judged.

The bounds (:func:`element_bound`) follow the first-order analysis of each chain's steps with unit
roundoff ``u = 2^-24``:

- a rounding of an elementwise step adds ``u`` times its result;
- a transcendental (exp, erf, rsqrt) is within :data:`FUNCTION_UNITS` fp32 units of its exact value,
  relative, and carries its argument's error through its derivative;
- a sum of ``n`` terms in any order (sequential, blocked, per lane, Welford's update) is off by
  ``sum_k delta_k * s_k``, the rounding errors ``|delta_k| <= u`` times the partial results ``s_k``,
  with ``|s_k| <= sum |x|``. Modelling the rounding errors as independent with mean zero (Higham and
  Mary, SIAM J. Sci. Comput. 41(5), 2019), the error is a martingale with increments bounded by
  ``u * sum |x|``, and the Azuma–Hoeffding inequality bounds it by ``lambda * u * sqrt(n - 1) * sum |x|``
  except with probability ``2 exp(-lambda^2 / 2)`` (:data:`LAMBDA` = 6: 3.0e-8 per reduction). Where
  the terms cancel (a layer norm's mean of data with a large common offset) ``sum |x|`` is much larger
  than the result, and so is the bound.

A library call (a matmul or attention kernel outside the fused code) rounds its output to the 16-bit
dtype, which no fp32 rounding bound covers: those chains have no bound here (None); they are judged per
element against an absolute bound instead (:mod:`.library_bounds`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from precisionkit.bounds import unit_roundoff
from precisionkit.stats import round_to_dtype

from ...workloads import RMS_EPS

#: Unit roundoff of fp32.
U32 = unit_roundoff(torch.float32)
#: Azuma–Hoeffding's lambda: a reduction's rounding error exceeds its bound with probability at most
#: 2 exp(-lambda^2 / 2) under the independent mean-zero model.
LAMBDA = 6.0
#: A transcendental's own error in fp32 units of its result (relative). Vectorized libraries document
#: 1 to 3.5 units for exp, erf and rsqrt in single precision (SLEEF's u10 and u35 variants; the CUDA C++
#: Programming Guide's table of single-precision functions gives 2 for expf and rsqrtf); 8 keeps room for a fast-math variant without judging an approximation
#: of 2^-12 (4096 units) healthy.
FUNCTION_UNITS = 8.0
#: F.layer_norm's default epsilon.
LAYER_NORM_EPS = 1e-5


def reduction_failure_probability(lam: float = LAMBDA) -> float:
    """The chance, under the independent mean-zero model, that one reduction's rounding error exceeds
    its bound: ``2 exp(-lambda^2 / 2)``.

    >>> f"{reduction_failure_probability():.2e}"
    '3.05e-08'
    """
    return 2.0 * math.exp(-(lam**2) / 2.0)


def _sum_bound(n: int, abs_sum: torch.Tensor) -> torch.Tensor:
    """The probabilistic bound of a sum of ``n`` terms whose magnitudes add up to ``abs_sum``."""
    return LAMBDA * U32 * math.sqrt(max(n - 1, 0)) * abs_sum


def _gelu_bound(
    x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, gate: torch.Tensor, *, dtype: torch.dtype
) -> torch.Tensor:
    t = x * scale
    z = t + shift
    err_z = U32 * (t.abs() + z.abs())
    erf = torch.erf(z / math.sqrt(2.0))
    # gelu(z) = z * Phi(z): its derivative Phi(z) + z * phi(z) carries the argument's error
    phi = torch.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    slope = (0.5 * (1.0 + erf) + z * phi).abs()
    # 0.5 * z * (1 + erf(z / sqrt 2)): the erf's own error, the scaling of z and the sum with 1
    own = (FUNCTION_UNITS + 3.0) * U32 * 0.5 * z.abs() * (1.0 + erf.abs())
    g = 0.5 * z * (1.0 + erf)
    return gate.abs() * (slope * err_z + own) + U32 * (g * gate).abs()


def _softmax_bound(x: torch.Tensor, *, dtype: torch.dtype) -> torch.Tensor:
    n = x.shape[-1]
    z = x - x.amax(-1, keepdim=True)
    y = torch.softmax(x, dim=-1)
    # each exp: its own error plus the subtraction's rounding carried through exp' = exp
    rel_e = (FUNCTION_UNITS + z.abs() + 1.0) * U32
    # the sum of positive terms: its rounding (relative, sum |e| = sum e) and its terms' errors
    rel_s = LAMBDA * U32 * math.sqrt(max(n - 1, 0)) + (y * rel_e).sum(-1, keepdim=True)
    return y.abs() * (rel_e + rel_s + U32)


def _layernorm_bound(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, *, dtype: torch.dtype
) -> torch.Tensor:
    n = x.shape[-1]
    mu = x.mean(-1, keepdim=True)
    err_mu = _sum_bound(n, x.abs().sum(-1, keepdim=True)) / n + U32 * mu.abs()
    d = x - mu
    err_d = err_mu + U32 * d.abs()
    var = (d * d).mean(-1, keepdim=True)
    # two-pass and Welford alike: the mean's error moves the sum of squared deviations only in second
    # order (the deviations sum to zero); each deviation's own rounding and the sum's rounding move it
    # in first order
    err_var = _sum_bound(n, var * n) / n + 3.0 * U32 * var + err_mu**2
    r = torch.rsqrt(var + LAYER_NORM_EPS)
    rel_r = 0.5 * err_var / (var + LAYER_NORM_EPS) + (FUNCTION_UNITS + 1.0) * U32
    w = torch.ones_like(x) if weight is None else weight.expand_as(x)
    y = d * r * w + (0.0 if bias is None else bias)
    return w.abs() * r * (err_d + d.abs() * rel_r) + 2.0 * U32 * ((d * r * w).abs() + y.abs())


def _rmsnorm_bound(x: torch.Tensor, weight: torch.Tensor, *, dtype: torch.dtype) -> torch.Tensor:
    n = x.shape[-1]
    ms = (x * x).mean(-1, keepdim=True)
    rel_ms = LAMBDA * U32 * math.sqrt(max(n - 1, 0)) + 2.0 * U32
    rel = 0.5 * ms / (ms + RMS_EPS) * rel_ms + (FUNCTION_UNITS + 3.0) * U32
    h = x * torch.rsqrt(ms + RMS_EPS)
    y = weight * h
    bound = y.abs() * rel
    # The chain rounds the normalized row to the dtype before the weight (an explicit cast). A fused kernel
    # may honour that cast (as eager does) or keep the fp32 value (Inductor drops a cast whose result is
    # upcast again unless emulate_precision_casts is set): both are the program. The cast rounds the fp32
    # value of h, which lies within |h| * rel of the fp64 one: where h is that close to a midpoint of the
    # dtype, the cast may round it either way (a row whose scale lands many h on midpoints did so for 45
    # elements of one set in 16,384). Where any of these readings rounds to another value than the
    # single rounding, the element is not decisive.
    ry = round_to_dtype(y, dtype)
    differs = torch.zeros_like(ry, dtype=torch.bool)
    for h_cast in (round_to_dtype(h - h.abs() * rel, dtype), round_to_dtype(h + h.abs() * rel, dtype)):
        differs |= round_to_dtype(weight * h_cast.to(torch.float64), dtype) != ry
    return torch.where(differs, torch.inf, bound)


#: Per chain: the bound of one input set's fp32 computation (args in fp64; ``dtype``: the chain's 16-bit
#: dtype, for the explicit casts a chain makes), and how many reductions
#: it makes per output row (each may exceed its bound with :func:`reduction_failure_probability`).
BOUNDS: dict[str, tuple[Callable[..., torch.Tensor], int]] = {
    "mul_add_gelu_mul": (_gelu_bound, 0),
    "softmax": (_softmax_bound, 2),  # the max is exact; the sum of exponentials and its terms
    "layernorm": (_layernorm_bound, 2),  # mean and variance
    "layernorm_long": (_layernorm_bound, 2),
    "rmsnorm_long": (_rmsnorm_bound, 1),
}


def element_bound(chain: str, args: tuple[torch.Tensor, ...]) -> torch.Tensor | None:
    """Per output element of one input set, the bound on ``|y32 - y64|`` for any fp32 computation of
    ``chain`` (fp64, the output's shape); None for a chain with a library call (see the module text)."""
    entry = BOUNDS.get(chain)
    if entry is None:
        return None
    fn, _ = entry
    return fn(*(a.to(torch.float64) for a in args), dtype=args[0].dtype)


def reductions_per_set(chain: str, output_shape: tuple[int, ...]) -> int:
    """How many reductions one set's fp32 computation makes: rows x reductions per row."""
    entry = BOUNDS.get(chain)
    if entry is None or not output_shape:
        return 0
    return entry[1] * math.prod(output_shape[:-1])


def decisive(ref: torch.Tensor, bound: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Which elements every value within ``bound`` of the fp64 ``ref`` rounds to the same ``dtype``
    number (finite references only): there, any computation within the bound rounds correctly."""
    r = ref.to(torch.float64)
    finite = torch.isfinite(r) & torch.isfinite(bound)
    safe = torch.where(finite, r, 0.0)
    b = torch.where(finite, bound, 0.0)
    lo, hi = round_to_dtype(safe - b, dtype), round_to_dtype(safe + b, dtype)
    return finite & (lo == hi)
