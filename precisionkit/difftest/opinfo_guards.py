"""Guards of the ``opinfo`` generator's steps (see :mod:`.opinfo`): which steps it does not draw, or
writes another way, because their result would judge a rounding rather than the compiler. Each names
the campaign finding that showed the need; and the order in which it takes an op's samples, where
torch's own order is not the same in every process."""

from __future__ import annotations

import itertools
import math
import re
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from .opinfo_ops import op_db
from .opinfo_samples import Template, _call, _number, templates


def _names_in(text: str) -> set[str]:
    return set(re.findall(r"\bv\d+\b", text))


def _run(expr: str, env: dict[str, Any], grad: bool = False) -> Any:
    with warnings.catch_warnings(), torch.set_grad_enabled(grad):
        warnings.simplefilter("ignore")
        return eval(expr, {"torch": torch, "F": torch.nn.functional}, env)


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

#: ops that return one of the values they compare, which may be +0.0 and -0.0: the two compare equal, and
#: which of them comes back no documentation fixes (eager's vector loop and its scalar tail may differ).
#: Inductor's choice was flagged in campaign d (seed 540552: fmax of a bicubic interpolation's zeros and an
#: input's -0.0, 116 of 500 elements; 540944: clamp_max of cholesky's zero upper triangle and an input's
#: -0.0). Written ``... + 0.0`` as a remainder is: both zeros +0.0, every other value (NaN included) judged
_ZERO_SIGN_OF_A_CHOICE = {
    "fmax",
    "fmin",
    "maximum",
    "minimum",
    "max.binary",
    "min.binary",
    "clamp",
    "clamp_max",
    "clamp_min",
    "amax",
    "amin",
    "max.reduction_no_dim",
    "min.reduction_no_dim",
    "masked.amax",
    "masked.amin",
    "nn.functional.relu",
    "nn.functional.relu6",
    "nn.functional.hardtanh",
}
_ZERO_SIGN_UNDOCUMENTED |= _ZERO_SIGN_OF_A_CHOICE

#: an internal op whose formula is not fixed to the zero's sign: _softmax_backward_data is out * (grad - sum)
#: in eager's kernel and grad * out - out * sum in the decomposition Inductor compiles, equal everywhere but
#: in a zero's sign (seed 540750: an all-zero gradient, eager -0.0 where out < 0, Inductor +0.0)
_ZERO_SIGN_UNDOCUMENTED |= {"_softmax_backward_data"}

#: softshrink is documented as 0 between -lambda and lambda; eager gives -0.0 for a small negative input,
#: Inductor +0.0 (campaign e's seed 551033, the zero spread by a trunc division to 812 elements)
_ZERO_SIGN_UNDOCUMENTED |= {"nn.functional.softshrink"}

#: cosine_similarity's zero is a sum's: a row of -0.0 gives a dot product of -0.0 values, -0.0 in IEEE
#: arithmetic (Inductor) and +0.0 from eager's reduction, which starts at +0.0; torch documents no sign
#: (campaign f's seed 560576, spread by a scatter_reduce prod to 7 of 50 elements)
_ZERO_SIGN_UNDOCUMENTED |= {"nn.functional.cosine_similarity"}


def _computed_float(st: Any, expr: str) -> bool:
    """Whether ``expr`` reads a float the program computed (a ``v`` name of ``st.env``; inputs are ``f`` names)."""
    return any(
        isinstance(st.env[n], torch.Tensor) and st.env[n].is_floating_point() for n in _names_in(expr) if n in st.env
    )


#: convolutions: each output is a sum of products, accumulated in float32 for 16-bit operands. Where a
#: product or a partial sum overflows the accumulator, which outputs come out +inf, -inf or NaN follows
#: the kernel's order of summation, which follows the memory layout: campaign e's 550077 (a bfloat16
#: conv2d of values near 1e37 and 3e32, products near 1e69) gives an inf in all 27 outputs in eager (8 of
#: them against the sign of the float64 value), NaN in 11 on the channels_last copy Inductor hands the
#: same kernel (eager on that copy too) and NaN in 26 with mkldnn off. Not drawn where the largest output
#: of the convolution of the operands' magnitudes (non-finite values as 0: an inf's own products have a
#: class no order changes) reaches half the accumulator's range; float16 operands never do (65504
#: squared, times any number of terms a sample has, is far inside float32)
_ACCUMULATES = {f"nn.functional.conv{t}{d}d" for t in ("", "_transpose") for d in (1, 2, 3)}


def _may_overflow(st: Any, t: Template, names: Sequence[str]) -> bool:
    """Whether a partial sum of the convolution ``t`` of ``names`` may overflow its accumulator."""
    values = [_run(n, st.env) for n in names]
    if not (isinstance(values[0], torch.Tensor) and values[0].is_floating_point()):
        return False
    acc = torch.float32 if values[0].itemsize < 4 else values[0].dtype
    env = {
        f"_m{k}": torch.where(torch.isfinite(v), v.abs(), 0.0).double()
        if isinstance(v, torch.Tensor) and v.is_floating_point()
        else v
        for k, v in enumerate(values)
    }
    bound = _run(_call(t, list(env), st.p.device), env)
    return not float(bound.max()) < torch.finfo(acc).max / 2


#: solves and inverses by LU of the matrix the chain feeds: of an exactly or nearly singular matrix
#: (the generator's repeat of a short value into a square makes equal rows) which pivot comes out
#: exactly zero, hence inf or NaN and the info code, follows one rounding: campaign e's 551020
#: (solve_ex of matrices of rank 3, eager's own solve_ex of Inductor's matrix, one logaddexp2 a last
#: bit apart, gives Inductor's inf/NaN pattern and info exactly). Where the matrix's condition number
#: (in float64) times its dtype's epsilon exceeds 1e-3, the step adds c times the identity, c the power
#: of two above twice the largest absolute row sum plus 1: the sum is strictly diagonally dominant,
#: its condition number in the row-sum norm below 3, and every value of the solve judged. The condition
#: number of such a matrix too: exactly inf, or one over the rounding noise of its smallest singular value
#: (campaign f's 560002: rank 2 of 5, eager 7.7e33, compiled inf, then NaN through a renorm)
_SOLVES = {"linalg.solve", "linalg.solve_ex", "linalg.inv", "linalg.inv_ex", "linalg.cond"}


def _well_posed(st: Any, a: str) -> str | None:
    """The matrix ``a`` as the solve's step writes it: as it is, shifted, or None (not drawn)."""
    m = _run(a, st.env)
    square = isinstance(m, torch.Tensor) and m.dim() >= 2 and m.shape[-1] == m.shape[-2] > 0
    if not (square and m.is_floating_point() and bool(torch.isfinite(m).all())):
        return a
    if float(torch.linalg.cond(m.double()).max()) * torch.finfo(m.dtype).eps <= 1e-3:
        return a
    c = 2.0 ** math.ceil(math.log2(2 * float(m.double().abs().sum(-1).max()) + 1))
    if c > torch.finfo(m.dtype).max / 4:
        return None
    return f"({a} + {_number(c)} * torch.eye({m.shape[-1]}, device={st.p.device!r}))"


#: special polynomials whose kernel returns an uninitialized value for a NaN argument: ATen's
#: ``*_polynomial_*_forward`` (ATen/native/Math.h, which Inductor's C++ calls as well) declares ``T r;``
#: and runs its recurrence only while ``!isnan(q)``, q being NaN at once for NaN x, so for a degree of 2
#: or more it returns r unset (campaign e: 550382, laguerre_polynomial_l(nan, 2) eager 0.0, Inductor
#: 122.9; 550470, chebyshev_polynomial_w(nan, 7)). chebyshev_polynomial_t sets r = x first and the
#: hermite polynomials run their loop unguarded: NaN, judged. The step is written
#: ``torch.where(torch.isnan(x), x, ...)``: NaN where x is NaN, every other element as it was
_UNSET_AT_NAN = {
    "special.laguerre_polynomial_l",
    "special.legendre_polynomial_p",
    *(f"special.{s}chebyshev_polynomial_{k}" for s in ("", "shifted_") for k in "tuvw"),
} - {"special.chebyshev_polynomial_t"}


def _nan_masked(name: str, x: str, call: str, floating: bool, degree: float | None = None) -> str:
    """``call`` (the op ``name`` of ``x``) with NaN where ``x`` is NaN, where the op leaves it unset
    (``degree``: the degree where it is a scalar; below 2 the kernel returns before its loop)."""
    if name not in _UNSET_AT_NAN or not floating or (degree is not None and int(degree) < 2):
        return call
    return f"torch.where(torch.isnan({x}), {x}, {call})"


#: ops computed from singular values: eager's call asks LAPACK for the values only, which of a matrix
#: holding inf or NaN are NaN, but where its input requires a gradient, or in a compiled graph (whose
#: traced input looks as if it might), it asks for the singular vectors too, and LAPACK then raises
#: "failed to converge" (campaign g's 580334: linalg.cond of a matrix with +inf; eager NaN, the
#: compiled program and aot_eager raise). Of a matrix that is not all finite the step is drawn only
#: where eager's call with the gradient required runs too
_SINGULAR_VALUES = {"linalg.cond", "linalg.svdvals", "linalg.matrix_norm", "linalg.norm", "norm", "linalg.matrix_rank"}


def _singular_vectors_fail(st: Any, t: Template, names: Sequence[str]) -> bool:
    """Whether the call fails once its matrix (a float, not all finite) requires a gradient."""
    m = _run(names[0], st.env)
    if not (isinstance(m, torch.Tensor) and m.is_floating_point()) or bool(torch.isfinite(m).all()):
        return False
    env = {**st.env, "_m": m.detach().clone().requires_grad_()}
    try:
        _run(_call(t, ["_m", *names[1:]], st.p.device), env, grad=True)
    except Exception:  # noqa: BLE001 - whatever it raises, the compiled call may raise it too
        return True
    return False


def _guarded_call(st: Any, name: str, t: Template, names: Sequence[str]) -> str | None:
    """The call of the op ``name`` (sample ``t`` of ``names``) as the step writes it, or None where
    the step is not drawn: a convolution that may overflow, a matrix the shift cannot make well posed,
    singular values of a matrix with inf or NaN whose singular vectors LAPACK cannot compute."""
    if name in _ACCUMULATES and _may_overflow(st, t, names):
        return None
    if name in _SINGULAR_VALUES and _singular_vectors_fail(st, t, names):
        return None
    names = list(names)
    if name in _SOLVES:
        shifted = _well_posed(st, names[0])
        if shifted is None:
            return None
        names[0] = shifted
    floating = getattr(torch, t.slots[0].dtype).is_floating_point
    return _nan_masked(name, names[0], _call(t, names, st.p.device), floating)


#: ops whose sample function iterates a set of strings, so its samples come in the order of the
#: process's string hashes (``PYTHONHASHSEED``, drawn afresh per process): meshgrid's is
#: ``itertools.product(cases, {'xy', 'ij'})``, which gave seed 550045 ``indexing='xy'`` in one
#: interpreter and ``'ij'`` in another, as 7 more of seeds 550000-550999 (the samples of every
#: other op of every dtype came out the same under four hash seeds). Of such an op, each run of
#: consecutive samples that differ only in a string keyword is sorted by its written form, in place:
#: the other samples keep their places (a sort of them all would change which sample each draw
#: takes, and so the program of seeds that drew a meshgrid sample without keeping it), and every
#: other op's samples keep torch's order, so the programs that did not follow the hash are as they were
_ORDER_OF_A_SET = {"meshgrid"}


def _form(t: Template) -> tuple[Any, ...]:
    """Sample ``t`` with its keywords' string values left out: the samples a set of strings varies."""
    kwargs = tuple((k, None if isinstance(v, str) else v) for k, v in t.kwargs)
    return t.input, t.args, kwargs, t.slots


def _samples(key: str, dtype: str) -> list[Template]:
    """The samples of op ``key`` for ``dtype`` in the order the generator draws from: the same in
    every process (see :data:`_ORDER_OF_A_SET`)."""
    pool = templates(key, dtype)
    if op_db()[key].name not in _ORDER_OF_A_SET:
        return pool
    return [t for _, run in itertools.groupby(pool, key=_form) for t in sorted(run, key=repr)]
