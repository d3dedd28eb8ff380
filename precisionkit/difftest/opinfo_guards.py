"""Guards of the ``opinfo`` generator's steps (see :mod:`.opinfo`): which steps it does not draw, or
writes another way, because their result would judge a rounding rather than the compiler. Each names
the campaign finding that showed the need."""

from __future__ import annotations

import re
from typing import Any

import torch


def _names_in(text: str) -> set[str]:
    return set(re.findall(r"\bv\d+\b", text))


#: periodic ops: of an argument whose ULP exceeds 1 (|x| beyond 1 / eps of its dtype) no digit of the
#: result is known, so a fused run whose argument differs by a legitimate rounding may return anything
#: (seed 500646: sin of a convolution's 1e301); not drawn on such computed values (inputs keep them)
_PERIODIC = {"sin", "cos", "tan", "sinc"}


def _beyond_phase(t: Any) -> bool:
    if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()):
        return False
    finite = t[torch.isfinite(t)]
    return bool(finite.numel()) and float(finite.abs().max()) * torch.finfo(t.dtype).eps > 1


#: ops whose result is the bit pattern of their float operand (hash_tensor xors the operand's bits): a
#: computed float one legitimate rounding away gives an unrelated result, so they take no computed float
#: (seeds 510036 and 510091: a hash of special functions' values, one last bit apart); inputs are exact
_BITS_OF_OPERAND = {"hash_tensor"}


#: ops whose zero has eager's sign where torch documents another: a float remainder's zero keeps the
#: dividend's sign in eager (-0.0 % 3.0 is -0.0), the divisor's as documented; a compiler that follows the
#: documentation was flagged (seed 510104: -0.0 % conv2d(...)). The step is written ``... + 0.0``, which
#: makes both zeros +0.0 and leaves every other value, NaN included, as it was (fmod documents the
#: dividend's sign, as eager gives: judged as it is)
_ZERO_SIGN_UNDOCUMENTED = {"remainder", "__rmod__"}


def _computed_float(st: Any, expr: str) -> bool:
    """Whether ``expr`` reads a float the program computed (a ``v`` name of ``st.env``; inputs are ``f`` names)."""
    return any(
        isinstance(st.env[n], torch.Tensor) and st.env[n].is_floating_point() for n in _names_in(expr) if n in st.env
    )
