"""Forward error bounds of floating-point arithmetic: the unit roundoff of each format, Higham's
``gamma_k``, and the summation and library-matmul bounds built from them. Plain functions of torch
and math; every other module takes these numbers from here.

The facts used (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., ch. 2-4; Higham
& Mary, SIAM J. Sci. Comput. 41(5), 2019), restated:

* Unit roundoff: a format with ``p`` significand bits (the implicit bit included) rounds to nearest
  within ``u = 2^-p`` relative, half its machine epsilon: fp16 ``2^-11``, bf16 ``2^-8``, fp32
  ``2^-24``, fp64 ``2^-53`` (:func:`unit_roundoff`).
* Standard model: one rounding turns an exact ``y`` into ``y(1 + d)`` with ``|d| <= u`` while ``y``
  stays in the normal range. In the gradual-underflow range the error is at most half the smallest
  subnormal spacing ``tau`` (:func:`underflow_error`), so ``|fl(y) - y| <= u|y| + tau`` holds
  everywhere below overflow (:func:`rounding_error`).
* A product of ``k`` factors ``(1 + d_j)``, ``|d_j| <= u``, differs from 1 by at most
  ``gamma_k = k u / (1 - k u)``, defined while ``k u < 1`` (Higham, Lemma 3.1; :func:`gamma`).
* Any summation order is a binary tree of additions. An input term that passes through ``k``
  additions is multiplied by ``k`` such factors, hence ``|s_hat - s| <= gamma_c * sum|x_i|`` with
  ``c`` the depth of the deepest leaf (:func:`chain_length`): ``n - 1`` for recursive
  (left-to-right) summation, which is also the worst case over *every* order, ``ceil(log2 n)`` for
  pairwise summation, and the sum of the stage depths for a blocked sum. The bound scales with
  ``sum|x_i|``, not with ``|s|``: a cancelling row keeps an ordinary absolute error and a large
  relative one.
* A matrix product ``C = A B`` of ``K`` terms per element, with products exact in the accumulation
  format (16-bit inputs in fp32), is a sum of ``K`` terms in some order: ``|c_hat_ij - c_ij| <=
  gamma_K sum_k |a_ik| |b_kj|`` whatever blocking, split or lane order a library uses
  (:func:`matmul_error_bound`).
* Probabilistic variant (rounding errors independent, mean zero, bounded by ``u``): a product of
  ``k`` factors differs from 1 by at most ``gamma~_k(lam) = exp(lam sqrt(k) u + k u^2/(1-u)) - 1``
  (:func:`gamma_tilde`) except with probability at most ``2 exp(-lam^2 (1-u)^2 / 2)``
  (:func:`p_lambda`); a union over the ``N`` products of one computation gives the bound with
  probability at least ``1 - 2 N exp(-lam^2 (1-u)^2 / 2)``.

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
from typing import TypeVar

import torch

#: Unit roundoff u = 2^-p (p significand bits, implicit bit included), round to nearest.
UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24, torch.float64: 2.0**-53}
#: Largest rounding error in the subnormal range: half the smallest subnormal spacing.
UNDERFLOW_ERROR = {
    torch.float16: 2.0**-25,
    torch.bfloat16: 2.0**-134,
    torch.float32: 2.0**-150,
    torch.float64: 2.0**-1075,
}
_BY_NAME = {str(d).removeprefix("torch."): d for d in UNIT_ROUNDOFF}

#: The summation orders :func:`chain_length` knows.
ORDERS = ("any", "recursive", "pairwise")

_Magnitude = TypeVar("_Magnitude", torch.Tensor, float)


def _dtype(dtype: torch.dtype | str) -> torch.dtype:
    """The torch dtype of ``dtype`` or of its name (``"float16"`` or ``"torch.float16"``), one of the
    four formats this module knows; ValueError for any other."""
    found = _BY_NAME.get(dtype.removeprefix("torch.")) if isinstance(dtype, str) else dtype
    if found not in UNIT_ROUNDOFF:
        raise ValueError(
            f"no unit roundoff for {dtype!r}: expected one of {', '.join(_BY_NAME)} (a torch dtype or its name)"
        )
    return found


def unit_roundoff(dtype: torch.dtype | str) -> float:
    """``u`` of a floating format, a torch dtype or its name: half the spacing of the format at 1.0.

    >>> unit_roundoff("float16") == 2**-11, unit_roundoff("bfloat16") == 2**-8
    (True, True)
    >>> unit_roundoff(torch.float32) == 2**-24, unit_roundoff("torch.float64") == 2**-53
    (True, True)
    >>> unit_roundoff(torch.int32)
    Traceback (most recent call last):
    ...
    ValueError: no unit roundoff for torch.int32: expected one of float16, bfloat16, float32, float64 (a torch dtype or its name)
    """
    return UNIT_ROUNDOFF[_dtype(dtype)]


def underflow_error(dtype: torch.dtype | str) -> float:
    """``tau``: the largest error of one rounding to ``dtype`` in its subnormal range, half the
    smallest subnormal spacing.

    >>> underflow_error("float16") == 2**-25, underflow_error(torch.bfloat16) == 2**-134
    (True, True)
    """
    return UNDERFLOW_ERROR[_dtype(dtype)]


def rounding_error(magnitude: _Magnitude, dtype: torch.dtype | str) -> _Magnitude:
    """Bound on ``|fl(y) - y|`` for every ``|y| <= magnitude`` when rounding to ``dtype``:
    ``u |y| + tau``, which holds in the normal and the subnormal range alike.

    >>> rounding_error(1.0, "float16") == 2**-11 + 2**-25
    True
    """
    d = _dtype(dtype)
    return UNIT_ROUNDOFF[d] * magnitude + UNDERFLOW_ERROR[d]


def _unit(u_or_dtype: float | torch.dtype | str) -> float:
    if isinstance(u_or_dtype, (torch.dtype, str)):
        return unit_roundoff(u_or_dtype)
    return float(u_or_dtype)


def gamma(k: int, u_or_dtype: float | torch.dtype | str) -> float:
    """``gamma_k = k u / (1 - k u)``: the largest relative deviation of a product of ``k`` rounding
    factors ``(1 + d_j)``, ``|d_j| <= u`` (Higham, Lemma 3.1), with ``u`` given or the unit roundoff
    of a dtype. Defined only while ``k u < 1``: ValueError otherwise.

    >>> gamma(0, "float32"), gamma(1, 0.25), gamma(2, 0.25)
    (0.0, 0.3333333333333333, 1.0)
    >>> f"{gamma(128, torch.float32):.3g}"
    '7.63e-06'
    >>> gamma(2048, "float16")
    Traceback (most recent call last):
    ...
    ValueError: gamma_k undefined: k*u = 1.0 >= 1 (k = 2048, u = 0.00048828125)
    """
    u = _unit(u_or_dtype)
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k * u >= 1:
        raise ValueError(f"gamma_k undefined: k*u = {k * u} >= 1 (k = {k}, u = {u})")
    return k * u / (1 - k * u)


def gamma_tilde(k: int, u_or_dtype: float | torch.dtype | str, lam: float) -> float:
    """Higham & Mary (2019): ``exp(lam sqrt(k) u + k u^2 / (1 - u)) - 1``, a bound on the same
    product's deviation as :func:`gamma` that holds with probability at least :func:`p_lambda`
    when the rounding errors are independent with mean zero; defined for every ``k``.

    >>> gamma_tilde(0, "float32", 6.0)
    0.0
    >>> gamma_tilde(4, 0.5, 1.0) == math.expm1(1.0 + 2.0)
    True
    """
    u = _unit(u_or_dtype)
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    return math.expm1(lam * math.sqrt(k) * u + k * u * u / (1 - u))


def p_lambda(lam: float, u_or_dtype: float | torch.dtype | str) -> float:
    """Probability that one product of rounding factors stays within :func:`gamma_tilde`:
    ``1 - 2 exp(-lam^2 (1 - u)^2 / 2)``.

    >>> p_lambda(2.0, 0.0) == 1 - 2 * math.exp(-2.0)
    True
    """
    u = _unit(u_or_dtype)
    return 1 - 2 * math.exp(-(lam**2) * (1 - u) ** 2 / 2)


def chain_length(n: int, order: str) -> int:
    """Depth of the deepest leaf (additions an input term passes through) when ``n`` terms are
    summed in ``order``: ``any``/``recursive`` n - 1 (every order is at most this deep),
    ``pairwise`` ceil(log2 n).

    >>> chain_length(16384, "any"), chain_length(16384, "pairwise"), chain_length(1000, "pairwise")
    (16383, 14, 10)
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if order == "pairwise":
        return math.ceil(math.log2(n)) if n > 1 else 0
    return n - 1


def matmul_error_bound(
    a: torch.Tensor, b: torch.Tensor, u_or_dtype: float | torch.dtype | str = torch.float32
) -> torch.Tensor:
    """Bound on ``|C_hat - A B|`` per element for a matrix product of ``K = a.shape[-1]`` terms whose
    products are exact and whose sums are carried out in the format of ``u_or_dtype`` (fp32 by
    default) in any order: ``gamma_K sum_k |a_ik| |b_kj|``. Batched like ``a @ b``; the arguments
    are exact values (fp64).

    >>> a = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    >>> b = torch.tensor([[3.0], [4.0]], dtype=torch.float64)
    >>> matmul_error_bound(a, b, 0.25).item()  # gamma_2(1/4) = 1, times 1*3 + 2*4
    11.0
    """
    return gamma(a.shape[-1], u_or_dtype) * (a.abs() @ b.abs())


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
    tau_p = underflow_error(partials.stored_dtype)
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
    the last dim), ``s`` the exact sum, for the version described by the keywords (the data model is
    in the module's docstring).

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

    >>> x = torch.tensor([[1.0, -2.0, 3.0, 0.5]], dtype=torch.float64)  # s = 2.5, sum|x| = 6.5
    >>> b = summation_error_bound(x, output_dtype=torch.float32)
    >>> b.chains, b.deterministic.item() == gamma(3, 2**-24) * 6.5
    ((3,), True)
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
        return e_acc if output_dtype == accumulate_dtype else e_acc + rounding_error(s_abs + e_acc, output_dtype)

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
    """The deterministic bound of :func:`summation_error_bound` in symbols, for metadata and the report.

    >>> bound_formula(output_dtype=torch.float32)
    'gamma_{c(n)}(u32)*sum|x|; c(k) = k-1 (any order)'
    """
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
