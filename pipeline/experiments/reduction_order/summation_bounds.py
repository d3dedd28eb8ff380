"""Forward error bounds for floating-point summation, per row, from the row's own data.

Plain functions (no Dagster): experiment C2 derives its acceptance band from these instead of a
tolerance matrix entry. The facts used (Higham, *Accuracy and Stability of Numerical Algorithms*,
2nd ed., ch. 2-4; Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019), restated:

* Standard model: one rounding to a format with unit roundoff ``u`` turns an exact ``y`` into
  ``y(1 + d)`` with ``|d| <= u`` while ``y`` stays in the normal range. For the gradual-underflow
  range the error is at most half the smallest subnormal spacing, so ``|fl(y) - y| <= u|y| + tau``
  holds everywhere below overflow (``tau = 2^-25`` for fp16).
* Any summation order is a binary tree of additions. An input term that passes through ``k``
  additions is multiplied by ``k`` factors ``(1 + d)``, and a product of ``k`` such factors differs
  from 1 by at most ``gamma_k = k u / (1 - k u)``. Hence ``|s_hat - s| <= gamma_c * sum|x_i|``
  with ``c`` the depth of the deepest leaf (the longest accumulation chain): ``n - 1`` for
  recursive (left-to-right) summation, which is also the worst case over *every* order,
  ``ceil(log2 n)`` for pairwise summation, and the sum of the stage depths for a blocked sum.
* The bound scales with ``sum|x_i|``, not with ``|s|``: a cancelling row keeps an ordinary absolute
  error and a large relative one.
* Probabilistic variant (rounding errors independent, mean zero, bounded by ``u``): a product of
  ``k`` factors differs from 1 by at most ``gamma~_k(lam) = exp(lam sqrt(k) u + k u^2/(1-u)) - 1``
  except with probability at most ``2 exp(-lam^2 (1-u)^2 / 2)``; a union over the ``N`` products of
  one computation gives the bound with probability at least ``1 - 2 N exp(-lam^2 (1-u)^2 / 2)``.

Data model of :func:`summation_error_bound`: the inputs ``x_i`` are exact (fp16 values held in
fp64), the additions are carried out in ``accumulate_dtype``; a tiled sum forms ``m = n / tile``
partials of ``tile`` terms each, optionally stores every partial in ``partial_dtype`` (one extra
rounding per partial), then adds the partials in ``accumulate_dtype``; the result is finally
rounded once to ``output_dtype`` (no rounding when it equals ``accumulate_dtype``). Overflow is
out of scope (callers check finiteness separately).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

ORDERS = ("any", "recursive", "pairwise")

#: Unit roundoff u = 2^-p (p significand bits, implicit bit included), round to nearest.
UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24, torch.float64: 2.0**-53}
#: Largest rounding error in the subnormal range: half the smallest subnormal spacing.
UNDERFLOW_ERROR = {
    torch.float16: 2.0**-25,
    torch.bfloat16: 2.0**-134,
    torch.float32: 2.0**-150,
    torch.float64: 2.0**-1075,
}


def unit_roundoff(dtype: torch.dtype) -> float:
    """``u`` of a floating dtype (fp16 2^-11, bf16 2^-8, fp32 2^-24, fp64 2^-53)."""
    try:
        return UNIT_ROUNDOFF[dtype]
    except KeyError:
        raise ValueError(f"no unit roundoff for {dtype}") from None


def gamma(k: int, u: float) -> float:
    """``gamma_k = k u / (1 - k u)``: the largest relative deviation of a product of ``k`` rounding
    factors ``(1 + d_j)``, ``|d_j| <= u`` (Higham, Lemma 3.1). Requires ``k u < 1``."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k * u >= 1:
        raise ValueError(f"gamma_k undefined: k*u = {k * u} >= 1")
    return k * u / (1 - k * u)


def gamma_tilde(k: int, u: float, lam: float) -> float:
    """Higham & Mary (2019): ``exp(lam sqrt(k) u + k u^2 / (1 - u)) - 1``, a bound on the same
    product's deviation that holds with probability at least :func:`p_lambda` under their model."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    return math.expm1(lam * math.sqrt(k) * u + k * u * u / (1 - u))


def p_lambda(lam: float, u: float) -> float:
    """Probability that one product of rounding factors stays within :func:`gamma_tilde`:
    ``1 - 2 exp(-lam^2 (1 - u)^2 / 2)``."""
    return 1 - 2 * math.exp(-(lam**2) * (1 - u) ** 2 / 2)


def chain_length(n: int, order: str) -> int:
    """Depth of the deepest leaf (additions an input term passes through) when ``n`` terms are
    summed in ``order``: ``any``/``recursive`` n - 1 (every order is at most this deep),
    ``pairwise`` ceil(log2 n)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if order == "pairwise":
        return math.ceil(math.log2(n)) if n > 1 else 0
    return n - 1


@dataclass(frozen=True)
class SummationBound:
    """Per-row bounds of one summation version.

    ``deterministic``: the worst-case bound (always holds). ``probabilistic``: the Higham-Mary
    variant (``None`` unless ``lam`` was given), holding per row with probability at least
    ``probability``. ``abs_sum`` = sum|x_i|, ``partial_abs_sum`` = sum_j |p_j| of the exact tile
    partials (``None`` untiled), ``chains`` the accumulation chain of each stage, ``formula`` the
    bound in symbols."""

    deterministic: torch.Tensor
    probabilistic: torch.Tensor | None
    probability: float | None
    abs_sum: torch.Tensor
    partial_abs_sum: torch.Tensor | None
    chains: tuple[int, ...]
    formula: str


def _round_term(y_abs: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bound on |fl(y) - y| for |y| <= y_abs when rounding to ``dtype``."""
    return unit_roundoff(dtype) * y_abs + UNDERFLOW_ERROR[dtype]


@dataclass(frozen=True)
class _Partials:
    """The partials of a tiled sum: how many, ``sum_j |p_j|`` over the exact partials, and the dtype
    each is stored in (``None``: kept in the accumulation dtype)."""

    count: int
    abs_sum: torch.Tensor
    stored_dtype: torch.dtype | None


def _accumulated_error(
    g: Callable[[int], float], abs_sum: torch.Tensor, chains: tuple[int, ...], partials: _Partials | None
) -> torch.Tensor:
    """The accumulation error bound before the final rounding, with ``g(k)`` the bound on a product
    of ``k`` rounding factors of the accumulation dtype (``gamma_k`` or its probabilistic variant)."""
    if partials is None or partials.stored_dtype is None:
        return g(sum(chains)) * abs_sum  # one chain: untiled, or tiled with partials kept in place
    u_p = unit_roundoff(partials.stored_dtype)
    tau_p = UNDERFLOW_ERROR[partials.stored_dtype]
    e_p = (1 + u_p) * g(chains[0]) * abs_sum + u_p * partials.abs_sum + partials.count * tau_p
    return e_p + g(chains[1]) * (partials.abs_sum + e_p)


def summation_error_bound(
    x: torch.Tensor,
    *,
    order: str = "any",
    tile: int | None = None,
    accumulate_dtype: torch.dtype = torch.float32,
    partial_dtype: torch.dtype | None = None,
    output_dtype: torch.dtype = torch.float16,
    lam: float | None = None,
) -> SummationBound:
    """Bound on ``|s_hat - s|`` for every row of ``x`` (``[..., n]``, exact input values, summed over
    the last dim), ``s`` the exact sum, for the version described by the keywords.

    Untiled, with chain ``c`` = :func:`chain_length` ``(n, order)``, ``u_a`` / ``u_o`` the units of
    ``accumulate_dtype`` / ``output_dtype``, ``A = sum|x_i|``::

        E_acc = gamma_c(u_a) * A
        E     = E_acc + u_o * (|s| + E_acc) + tau_o      (only the first term if output == accumulate)

    Tiled (``tile`` = b, ``m = n / b`` partials, ``c1`` / ``c2`` the chains of the two stages):

    * partials kept in ``accumulate_dtype`` (``partial_dtype`` None or equal): one chain of
      ``c1 + c2`` additions, ``E_acc = gamma_(c1+c2)(u_a) * A``;
    * partials stored in ``partial_dtype`` (unit ``u_p``), ``P = sum_j |p_j|`` over the exact partials::

        E_p   = (1 + u_p) * gamma_c1(u_a) * A + u_p * P + m * tau_p      (all stored partials together)
        E_acc = E_p + gamma_c2(u_a) * (P + E_p)

    then the final rounding as above. With ``lam``, the probabilistic bound replaces every
    ``gamma_k(u_a)`` by ``min(gamma_k, gamma~_k(lam))`` (u_a; the storage and output roundings stay worst case)
    and holds with probability at least ``1 - N * 2 exp(-lam^2 (1-u_a)^2 / 2)``, ``N`` the number of
    rounding-factor products: ``n`` (one per input term), plus ``m`` for fp16-stored partials.
    """
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError("x must have a non-empty last dimension")
    n = int(x.shape[-1])
    x = x.to(torch.float64)
    u_a = unit_roundoff(accumulate_dtype)
    abs_sum = x.abs().sum(-1)
    s_abs = x.sum(-1).abs()
    if partial_dtype is not None and tile is None:
        raise ValueError("partial_dtype needs a tile")
    stored = partial_dtype if partial_dtype != accumulate_dtype else None
    partials = None
    chains: tuple[int, ...] = (chain_length(n, order),)
    if tile is not None:
        if tile < 1 or n % tile:
            raise ValueError(f"row length {n} is not a multiple of tile {tile}")
        m = n // tile
        chains = (chain_length(tile, order), chain_length(m, order))
        partials = _Partials(m, x.reshape(*x.shape[:-1], m, tile).sum(-1).abs().sum(-1), stored)

    def finish(e_acc: torch.Tensor) -> torch.Tensor:  # the final rounding, if any
        return e_acc if output_dtype == accumulate_dtype else e_acc + _round_term(s_abs + e_acc, output_dtype)

    det = finish(_accumulated_error(lambda k: gamma(k, u_a), abs_sum, chains, partials))
    prob, probability = None, None
    if lam is not None:
        # The worst-case gamma_k always holds, so the smaller of the two is the probabilistic bound.
        prob = finish(
            _accumulated_error(lambda k: min(gamma(k, u_a), gamma_tilde(k, u_a, lam)), abs_sum, chains, partials)
        )
        products = n + (partials.count if partials is not None and partials.stored_dtype is not None else 0)
        probability = max(0.0, 1 - products * (1 - p_lambda(lam, u_a)))
    return SummationBound(
        det,
        prob,
        probability,
        abs_sum,
        None if partials is None else partials.abs_sum,
        chains,
        bound_formula(
            order=order,
            tile=tile,
            accumulate_dtype=accumulate_dtype,
            partial_dtype=partial_dtype,
            output_dtype=output_dtype,
        ),
    )


_SHORT = {torch.float16: "16", torch.bfloat16: "bf16", torch.float32: "32", torch.float64: "64"}


def bound_formula(
    *,
    order: str = "any",
    tile: int | None = None,
    accumulate_dtype: torch.dtype = torch.float32,
    partial_dtype: torch.dtype | None = None,
    output_dtype: torch.dtype = torch.float16,
) -> str:
    """The deterministic bound of :func:`summation_error_bound` in symbols, for metadata and the report."""
    a, o = _SHORT[accumulate_dtype], _SHORT[output_dtype]
    c = "c(n)" if tile is None else "c(b)+c(n/b)"
    cdesc = {"any": "c(k) = k-1 (any order)", "recursive": "c(k) = k-1", "pairwise": "c(k) = ceil(log2 k)"}[order]
    if tile is None or partial_dtype is None or partial_dtype == accumulate_dtype:
        acc = f"gamma_{{{c}}}(u{a})*sum|x|"
        body = acc if output_dtype == accumulate_dtype else f"u{o}*|s| + (1+u{o})*{acc} + tau{o}"
        return f"{body}; {cdesc}" + (f", b = {tile}" if tile else "")
    p = _SHORT[partial_dtype]
    e_p = f"E_p = (1+u{p})*gamma_{{c(b)}}(u{a})*sum|x| + u{p}*sum|p_j| + (n/b)*tau{p}"
    e_acc = f"E_acc = E_p + gamma_{{c(n/b)}}(u{a})*(sum|p_j| + E_p)"
    tail = "E_acc" if output_dtype == accumulate_dtype else f"E_acc + u{o}*(|s| + E_acc) + tau{o}"
    return f"{tail}; {e_acc}; {e_p}; {cdesc}, b = {tile}"
