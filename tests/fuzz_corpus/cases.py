"""Real silent wrong-result bugs of PyTorch Inductor (CPU backend), one fixture per report.

Each case rebuilds the minimal graph of a pytorch/pytorch issue in its own code: ``fn`` is the
program, ``make_inputs`` builds fresh deterministic inputs (call it once per run: several graphs
mutate their inputs), ``compare`` says how eager and compiled results are to be compared.
``reported_on`` is the torch version the report names; where the report names none, the filing
date is given instead. ``fixed_in`` is "" while the issue is open or the fix is unknown; for a closed
issue that no longer reproduces on 2.13.0 it reads "<=2.13.0", and "post-2.13 (issue closed)" where
the issue is closed but the graph still reproduces on 2.13.0.

Run them with ``python -m tests.fuzz_corpus.check``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

FEATURES: frozenset[str] = frozenset(
    {
        "argmin_argmax",  # argmin/argmax or the index output of min/max
        "min_max_signed_zero",  # minimum/maximum deciding between -0.0 and +0.0
        "signed_zero",  # the sign of a zero decides the result (1/x, signbit, ...)
        "integer_dtype",  # signed or unsigned integer tensors (wrap-around, overflow)
        "bool_dtype",  # boolean tensors
        "cast",  # explicit dtype conversion or type promotion
        "output_dtype",  # the compiled result has another dtype than eager
        "floor_divide",  # // and div(rounding_mode="floor")
        "nan_inf",  # NaN or infinity in inputs or intermediates
        "special_values",  # edge values: extremes of a dtype, exact ties, halfway cases
        "in_place_view",  # in-place ops on inputs or on views of them
        "expanded_view",  # tensors with a stride-0 dimension from expand()
        "index_put",  # advanced-index assignment / index_put
        "index_add",  # index_add / index_copy / index_fill
        "duplicate_indices",  # an index tensor that names the same position twice
        "scatter_gather",  # scatter / gather
        "cumulative",  # cumsum / cumprod / cummax
        "transpose_input",  # transposed or permuted (non-contiguous) tensors
        "reduction",  # sum / min / max / argmin over a dimension
        "fp16_bf16",  # float16 or bfloat16
        "rounding",  # floor / ceil / round / rounding of a division
        "pow_exp_log",  # pow, exp, log, sqrt, rsqrt, trigonometric libm calls
        "shift_bitwise",  # bit shifts and bitwise ops
        "flip_roll",  # flip / roll
        "as_strided",  # as_strided and other explicit-stride views
        "matmul",  # matrix multiplication in the graph
    }
)

COMPARE_RULES = ("bitwise", "allclose")


@dataclass(frozen=True)
class CorpusCase:
    id: str
    issue: int
    url: str
    title: str
    reported_on: str
    fixed_in: str
    features: tuple[str, ...]
    fn: Callable[..., Any]
    make_inputs: Callable[[], list[torch.Tensor]]
    compare: str
    trigger: str
    rtol: float = 1e-5
    atol: float = 1e-6
    heavy: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.features) - FEATURES
        if unknown:
            raise ValueError(f"{self.id}: features outside FEATURES: {sorted(unknown)}")
        if self.compare not in COMPARE_RULES:
            raise ValueError(f"{self.id}: compare must be one of {COMPARE_RULES}, got {self.compare!r}")
        if self.url != f"https://github.com/pytorch/pytorch/issues/{self.issue}":
            raise ValueError(f"{self.id}: url does not match issue {self.issue}")


def _url(issue: int) -> str:
    return f"https://github.com/pytorch/pytorch/issues/{issue}"


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


_I64 = torch.iinfo(torch.int64)


# --- argmin / argmax -------------------------------------------------------------------------------


def _argmin_of_shifted_transpose(x):
    return (x.t() + 0.5).argmin()


def _argmin_after_tan_inplace(x):
    x.tan_()
    return x.t().argmin()


def _argmax_after_sin_on_clone(x):
    y = x.clone()
    y.sin_()
    return y.t().argmax()


def _argmin_after_sin_inplace(x):
    x.sin_()
    return x.t().argmin()


def _max_dim_of_sum_with_transposed(a, b):
    return (a + b).max(dim=1)


def _bool_min_over_rows(a, b, c, d):
    return a.min(0), b.min(0), c.min(0), d.min(0)


def _inputs_argmax_sin_5x7() -> list[torch.Tensor]:
    rows = [
        [-1.5256, -0.7502, -0.6540, -1.6095, -0.1002, -0.6092, -0.9798],
        [-1.6091, -0.7121, 0.3037, -0.7773, -0.2515, -0.2223, 1.6871],
        [0.2284, 0.4676, -0.6970, -1.1608, 0.6995, 0.1991, 0.8657],
        [0.2444, -0.6629, 0.8073, 1.1017, -0.1759, -2.2456, -1.4465],
        [0.0612, -0.6177, -0.7981, -0.1316, -0.7984, 0.3357, 0.2753],
    ]
    return [torch.tensor(rows, dtype=torch.float32)]


def _inputs_max_dim_transposed() -> list[torch.Tensor]:
    g = _gen(0)
    a = torch.randn(8, 8, generator=g).transpose(0, 1)
    b = torch.randn(8, 8, generator=g)
    return [a, b]


def _inputs_bool_rows() -> list[torch.Tensor]:
    g = _gen(0)
    return [torch.randint(0, 2, (n, 32), generator=g).bool() for n in (2, 3, 5, 7)]


# --- casts, integer and special values -------------------------------------------------------------


def _nan_to_num_then_long(x):
    return torch.nan_to_num(x, nan=0, posinf=_I64.max, neginf=_I64.min).long()


def _uint8_double_then_int16(x):
    return (x + x).to(torch.int16)


def _right_shift(a, b):
    return torch.bitwise_right_shift(a, b)


def _left_shift(a, b):
    return torch.bitwise_left_shift(a, b)


def _uint8_pow_then_cos(x):
    return torch.cos(x.pow(5))


def _uint8_constant_negated_plus_float(x):
    c = torch.tensor(7, dtype=torch.uint8)
    return c + x, torch.neg(c), torch.neg(c) + x


def _mul_by_nonneg_mask(x):
    return x * (x >= 0).to(torch.float32)


def _fp16_round_trip(x):
    y = x.to(torch.float16).to(torch.float32)
    return y, y.sum(dim=1)


def _inputs_fp16_round_trip() -> list[torch.Tensor]:
    return [torch.arange(20, dtype=torch.float32).reshape(5, 4).t() / 7.0]


# --- floating-point edge cases ---------------------------------------------------------------------


def _floor_divide_pairs(a32, b32, a64, b64):
    return a32 // b32, a64 // b64


def _inputs_floor_divide() -> list[torch.Tensor]:
    out = []
    for dtype in (torch.float32, torch.float64):
        out.append(torch.tensor([1.0, 0.5, 6.0, 1.0], dtype=dtype))
        out.append(torch.tensor([0.1, 0.1, 0.2, 1.0 / 3.0], dtype=dtype))
    return out


def _minimum_per_dtype(a16, b16, abf, bbf, a32, b32, a64, b64):
    return (
        torch.minimum(a16, b16),
        torch.minimum(abf, bbf),
        torch.minimum(a32, b32),
        torch.minimum(a64, b64),
    )


def _inputs_minimum_signed_zero() -> list[torch.Tensor]:
    out = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        out.append(torch.tensor([-0.0], dtype=dtype))
        out.append(torch.tensor([0.0], dtype=dtype))
    return out


def _ceil_plus_zeros_reciprocal(x):
    v = torch.ceil(x)
    v = v + torch.zeros_like(v)
    return torch.reciprocal(v)


def _sqrt_sign_bit(x):
    return torch.signbit(torch.sqrt(x))


def _rsqrt_angle_atan_sin(x):
    return torch.sin(torch.positive(torch.atan(torch.angle(torch.rsqrt(x)))))


def _inputs_rsqrt_chain() -> list[torch.Tensor]:
    values = [0.78867584, -1.17969215, 0.51524401, 1.41069138, 1.38129663]
    values += [0.57206213, 1.72868884, -2.29483771, -0.32015932, 1.36863112]
    return [torch.tensor(values, dtype=torch.float32)]


# --- views, aliasing and indexed writes ------------------------------------------------------------


def _index_add_into_expanded_zeros(src, idx):
    x = torch.zeros(1, 8).expand(4, -1)
    return x.index_add(0, idx, src)


def _fill_through_expanded_view(base):
    v = base.expand(3, -1)
    v.fill_(2.0)
    return base


def _increment_with_arange_mod_index(x):
    v = x.view(-1)
    idx = torch.arange(v.numel()) % 2
    v[idx] = v[idx] + 1.0
    return x


def _index_put_then_add_flipped(x):
    x.index_put_((torch.arange(x.size(0)),), x * 2.0)
    x.add_(x.flip(0))
    return x


def _duplicate_index_self_add(x):
    x[[0, 0]] += x[[0, 0]]
    return x


def _matmul_then_broadcast_write_on_expand(x, y):
    z = x @ y
    view = x.expand(1, 2, 4)
    view[0, 1] = 1
    return z


def _as_strided_over_strided_slice(x):
    full = x.repeat((3, 2))
    return torch.as_strided(full[:, ::2], (3, 2), full.stride())


def _index_add_into_permuted_input(x, a, index):
    y = x.permute(1, 0)
    y.index_add_(0, index, a)
    return y


def _inputs_index_add_permuted() -> list[torch.Tensor]:
    a = torch.arange(1, 10, dtype=torch.float32).reshape(3, 3)
    return [torch.ones(3, 5), a, torch.tensor([0, 4, 2])]


# --- cumulative ops --------------------------------------------------------------------------------


def _cumsum_of_bool_ones_as_bf16():
    ones = torch.ones((2, 4, 4), dtype=torch.bool)
    return ones.cumsum(1, dtype=torch.bfloat16)


def _cumsum_of_full_cast_to_bool():
    t = torch.full([2, 4], 1).to(torch.bool)
    return torch.cumsum(t, 1)


CASES: tuple[CorpusCase, ...] = (
    CorpusCase(
        id="argmin_transposed_plus_scalar",
        issue=197739,
        url=_url(197739),
        title="argmin of a transposed 2x2 tensor plus a scalar returns the physical, not the logical, index",
        reported_on="2.14.0",
        fixed_in="",
        features=("argmin_argmax", "transpose_input", "reduction"),
        fn=_argmin_of_shifted_transpose,
        make_inputs=lambda: [torch.tensor([[1.5410, -0.2934], [-2.1788, 0.5684]])],
        compare="bitwise",
        trigger="A pointwise op between x.t() and a full argmin makes the CPU kernel count positions in memory order.",
    ),
    CorpusCase(
        id="argmin_after_tan_inplace_transpose",
        issue=163929,
        url=_url(163929),
        title="argmin over the transpose of an input mutated by tan_ picks the wrong element",
        reported_on="nightly 2.10",
        fixed_in="<=2.13.0",
        features=("argmin_argmax", "transpose_input", "in_place_view", "reduction"),
        fn=_argmin_after_tan_inplace,
        make_inputs=lambda: [torch.randn(4, 6, generator=_gen(0))],
        compare="bitwise",
        trigger="An in-place unary op on the input followed by a full argmin of its transpose (regressed again as #174073).",
    ),
    CorpusCase(
        id="argmax_after_sin_transpose",
        issue=183082,
        url=_url(183082),
        title="argmax of the transpose of a sin_-updated clone differs on the CPU backend",
        reported_on="2.10.0",
        fixed_in="<=2.13.0",
        features=("argmin_argmax", "transpose_input", "in_place_view", "reduction"),
        fn=_argmax_after_sin_on_clone,
        make_inputs=_inputs_argmax_sin_5x7,
        compare="bitwise",
        trigger="A full argmax over a transposed view of a freshly computed buffer reports the memory-order index.",
    ),
    CorpusCase(
        id="argmin_after_sin_inplace_transpose",
        issue=183894,
        url=_url(183894),
        title="argmin after an in-place sin_ and a transpose returns another index than eager",
        reported_on="not stated (filed 2026-05)",
        fixed_in="<=2.13.0",
        features=("argmin_argmax", "transpose_input", "in_place_view", "reduction"),
        fn=_argmin_after_sin_inplace,
        make_inputs=lambda: [torch.randn(5, 7, generator=_gen(21))],
        compare="bitwise",
        trigger="Mutating the input with sin_ and then taking a full argmin of x.t() on CPU.",
    ),
    CorpusCase(
        id="max_dim_indices_of_transposed_sum",
        issue=178964,
        url=_url(178964),
        title="indices of (a + b).max(dim=1) come back all zero when a is transposed",
        reported_on="not stated (filed 2026-04)",
        fixed_in="",
        features=("argmin_argmax", "transpose_input", "reduction"),
        fn=_max_dim_of_sum_with_transposed,
        make_inputs=_inputs_max_dim_transposed,
        compare="bitwise",
        trigger="A max-with-indices reduction fused with an add whose first operand is an 8x8 transposed view.",
    ),
    CorpusCase(
        id="bool_min_dim_indices",
        issue=184893,
        url=_url(184893),
        title="min(dim) on boolean tensors returns indices of the wrong element on CPU",
        reported_on="not stated (filed 2026-05)",
        fixed_in="<=2.13.0",
        features=("argmin_argmax", "bool_dtype", "reduction"),
        fn=_bool_min_over_rows,
        make_inputs=_inputs_bool_rows,
        compare="bitwise",
        trigger="Vectorized CPU arg-reductions compare boolean mask payloads instead of 0/1 values.",
    ),
    CorpusCase(
        id="nan_to_num_inf_then_long",
        issue=151510,
        url=_url(151510),
        title="nan_to_num of +inf with int64 bounds then .long() yields the opposite int64 extreme",
        reported_on="not stated (filed 2025-04)",
        fixed_in="",
        features=("nan_inf", "cast", "integer_dtype", "special_values"),
        fn=_nan_to_num_then_long,
        make_inputs=lambda: [torch.tensor([[float("inf")]])],
        compare="bitwise",
        trigger="Replacing inf by int64 max in float32 and converting the out-of-range float to int64 in C++.",
    ),
    CorpusCase(
        id="float_floor_divide_near_integer",
        issue=197895,
        url=_url(197895),
        title="float floor division rounds a quotient just below an integer up (1.0 // 0.1 gives 10)",
        reported_on="2.14.0",
        fixed_in="",
        features=("floor_divide", "rounding", "special_values"),
        fn=_floor_divide_pairs,
        make_inputs=_inputs_floor_divide,
        compare="bitwise",
        trigger="Inductor lowers float a // b to floor(a / b) instead of eager's fmod-based floor division.",
    ),
    CorpusCase(
        id="minimum_negative_zero",
        issue=194347,
        url=_url(194347),
        title="torch.minimum(-0.0, +0.0) returns +0.0 under compile on CPU for every float dtype",
        reported_on="2.13.0",
        fixed_in="",
        features=("min_max_signed_zero", "signed_zero", "fp16_bf16"),
        fn=_minimum_per_dtype,
        make_inputs=_inputs_minimum_signed_zero,
        compare="bitwise",
        trigger="The CPU minimum helper breaks the -0.0 == +0.0 tie towards the second operand.",
    ),
    CorpusCase(
        id="ceil_add_zero_reciprocal_sign",
        issue=189799,
        url=_url(189799),
        title="adding zeros to a ceil result keeps -0.0, so the reciprocal becomes -inf instead of +inf",
        reported_on="not stated (filed 2026-07)",
        fixed_in="",
        features=("signed_zero", "nan_inf", "rounding"),
        fn=_ceil_plus_zeros_reciprocal,
        make_inputs=lambda: [torch.tensor([-0.5, -0.1, -0.9])],
        compare="bitwise",
        trigger="x + zeros_like(x) is simplified to x although -0.0 + 0.0 is +0.0.",
    ),
    CorpusCase(
        id="sqrt_negative_nan_sign",
        issue=189808,
        url=_url(189808),
        title="sqrt of negative inputs gives a NaN with the sign bit set, unlike eager",
        reported_on="not stated (filed 2026-07)",
        fixed_in="",
        features=("nan_inf", "pow_exp_log", "signed_zero"),
        fn=_sqrt_sign_bit,
        make_inputs=lambda: [torch.linspace(-3.0, 3.0, 13)],
        compare="bitwise",
        trigger="The generated sqrt returns the x86 default NaN (sign bit set); signbit makes the difference visible.",
    ),
    CorpusCase(
        id="rsqrt_angle_atan_sin_nan",
        issue=143978,
        url=_url(143978),
        title="a rsqrt/angle/atan/sin chain turns NaN into 1 under compile",
        reported_on="nightly 2.6",
        fixed_in="",
        features=("nan_inf", "pow_exp_log"),
        fn=_rsqrt_angle_atan_sin,
        make_inputs=_inputs_rsqrt_chain,
        compare="allclose",
        trigger="Kernels built without errno-preserving math let the C++ compiler fold sin(atan(NaN)) to 1.",
    ),
    CorpusCase(
        id="fp16_round_trip_elided",
        issue=185337,
        url=_url(185337),
        title="an explicit float32 -> float16 -> float32 round trip is dropped by CPU codegen",
        reported_on="not stated (filed 2026-05)",
        fixed_in="",
        features=("fp16_bf16", "cast", "transpose_input", "reduction"),
        fn=_fp16_round_trip,
        make_inputs=_inputs_fp16_round_trip,
        compare="bitwise",
        trigger="The CPU kernel reuses the float32 value instead of the float16-rounded one (only emulate_precision_casts was fixed).",
    ),
    CorpusCase(
        id="index_add_into_expanded",
        issue=183986,
        url=_url(183986),
        title="index_add into a zeros tensor expanded along dim 0 accumulates into shared storage",
        reported_on="not stated (filed 2026-05)",
        fixed_in="post-2.13 (issue closed)",
        features=("expanded_view", "index_add", "duplicate_indices"),
        fn=_index_add_into_expanded_zeros,
        make_inputs=lambda: [torch.ones(3, 8), torch.tensor([0, 1, 0])],
        compare="bitwise",
        trigger="The reinplace pass turns index_add on a stride-0 tensor into an in-place write to the aliased row.",
    ),
    CorpusCase(
        id="fill_on_expanded_view",
        issue=197448,
        url=_url(197448),
        title="fill_ through an expand() view of the input leaves the input with other values than eager",
        reported_on="not stated (filed 2026-09)",
        fixed_in="",
        features=("expanded_view", "in_place_view"),
        fn=_fill_through_expanded_view,
        make_inputs=lambda: [torch.tensor([-1.0, -0.5, 0.0, 0.5])],
        compare="bitwise",
        trigger="An in-place fill_ on an expanded (stride-0) view of a graph input.",
    ),
    CorpusCase(
        id="index_assign_arange_mod_duplicates",
        issue=197582,
        url=_url(197582),
        title="v[idx] = v[idx] + 1 with idx = arange(n) % 2 adds twice under compile",
        reported_on="not stated (filed 2026-09)",
        fixed_in="",
        features=("index_put", "duplicate_indices", "in_place_view"),
        fn=_increment_with_arange_mod_index,
        make_inputs=lambda: [torch.tensor([[1.0, 2.0], [3.0, 4.0]])],
        compare="bitwise",
        trigger="An index computed in the graph with duplicates lets the gather read values the scatter already wrote.",
    ),
    CorpusCase(
        id="index_put_then_add_flip",
        issue=198270,
        url=_url(198270),
        title="index_put_ followed by x.add_(x.flip(0)) reads already-updated rows",
        reported_on="2.14.0 (CUDA), nightly 2.15 (CPU)",
        fixed_in="",
        features=("index_put", "in_place_view", "flip_roll"),
        fn=_index_put_then_add_flipped,
        make_inputs=lambda: [torch.rand(4, 8, generator=_gen(0))],
        compare="bitwise",
        trigger="The copy back into x is fused with a read of x at mirrored positions after an indexed write.",
    ),
    CorpusCase(
        id="duplicate_index_self_add",
        issue=174074,
        url=_url(174074),
        title="x[[0, 0]] += x[[0, 0]] doubles the row twice under compile",
        reported_on="not stated (filed 2026-02)",
        fixed_in="<=2.13.0",
        features=("index_put", "duplicate_indices", "in_place_view"),
        fn=_duplicate_index_self_add,
        make_inputs=lambda: [torch.tensor([[-0.8716, 0.1114]], dtype=torch.float64)],
        compare="bitwise",
        trigger="An augmented assignment through an advanced index that repeats a row.",
    ),
    CorpusCase(
        id="broadcast_write_on_expand_after_matmul",
        issue=175791,
        url=_url(175791),
        title="a broadcast write into an expand() view of x corrupts an earlier x @ y result",
        reported_on="not stated (filed 2026-02)",
        fixed_in="<=2.13.0",
        features=("expanded_view", "index_put", "in_place_view", "matmul"),
        fn=_matmul_then_broadcast_write_on_expand,
        make_inputs=lambda: [torch.randn(1, 2, 4, generator=_gen(0)), torch.randn(1, 4, 4, generator=_gen(1))],
        compare="bitwise",
        trigger="A broadcasted index assignment (view[0, 1] = 1) into an expand of an input used by a preceding matmul.",
    ),
    CorpusCase(
        id="as_strided_of_strided_slice",
        issue=197431,
        url=_url(197431),
        title="as_strided over a step-2 slice of a repeat() result reads the wrong storage",
        reported_on="not stated (filed 2026-09)",
        fixed_in="",
        features=("as_strided", "expanded_view"),
        fn=_as_strided_over_strided_slice,
        make_inputs=lambda: [torch.randn(1, 1, generator=_gen(0))],
        compare="bitwise",
        trigger="as_strided with the parent's strides on a slice that Inductor materializes into a smaller buffer.",
    ),
    CorpusCase(
        id="index_add_into_permuted_input",
        issue=111133,
        url=_url(111133),
        title="in-place index_add_ on a permuted view of an input writes to the wrong positions",
        reported_on="not stated (filed 2023-10)",
        fixed_in="<=2.13.0",
        features=("index_add", "transpose_input", "in_place_view"),
        fn=_index_add_into_permuted_input,
        make_inputs=_inputs_index_add_permuted,
        compare="bitwise",
        trigger="index_add_ along dim 0 of x.permute(1, 0) where x is a graph input.",
    ),
    CorpusCase(
        id="cumsum_dtype_kwarg_dropped",
        issue=189518,
        url=_url(189518),
        title="cumsum(dtype=bfloat16) of a constant bool tensor returns int64 under compile",
        reported_on="not stated (filed 2026-07)",
        fixed_in="post-2.13 (issue closed)",
        features=("cumulative", "bool_dtype", "cast", "output_dtype", "fp16_bf16"),
        fn=_cumsum_of_bool_ones_as_bf16,
        make_inputs=list,
        compare="bitwise",
        trigger="The pointless_cumsum pattern rewrites cumsum(full(...)) with full's dtype and ignores dtype=.",
    ),
    CorpusCase(
        id="cumsum_of_full_cast_to_bool",
        issue=109925,
        url=_url(109925),
        title="cumsum over full(1).to(bool) returns a bool tensor instead of int64 counts",
        reported_on="nightly 2.1",
        fixed_in="<=2.13.0",
        features=("cumulative", "bool_dtype", "cast", "output_dtype"),
        fn=_cumsum_of_full_cast_to_bool,
        make_inputs=list,
        compare="bitwise",
        trigger="A cumsum over a constant tensor made boolean by an explicit cast.",
    ),
    CorpusCase(
        id="uint8_add_wrap_then_int16",
        issue=105264,
        url=_url(105264),
        title="uint8 x + x cast to int16 keeps the carry (256) instead of wrapping to 0",
        reported_on="nightly 2.1",
        fixed_in="<=2.13.0",
        features=("integer_dtype", "cast", "special_values"),
        fn=_uint8_double_then_int16,
        make_inputs=lambda: [torch.tensor([128, 200, 255, 7], dtype=torch.uint8)],
        compare="bitwise",
        trigger="C++ integer promotion evaluates the uint8 sum in int before the cast to int16.",
    ),
    CorpusCase(
        id="right_shift_by_64",
        issue=143555,
        url=_url(143555),
        title="int64 right shift by 64 returns the input instead of 0",
        reported_on="nightly 2.6",
        fixed_in="<=2.13.0",
        features=("shift_bitwise", "integer_dtype", "special_values"),
        fn=_right_shift,
        make_inputs=lambda: [torch.tensor(1000, dtype=torch.int64), torch.tensor(64, dtype=torch.int64)],
        compare="bitwise",
        trigger="A shift count equal to the bit width is undefined in C++ and wraps around on x86.",
    ),
    CorpusCase(
        id="left_shift_by_64",
        issue=143566,
        url=_url(143566),
        title="int64 left shift by 64 returns the input instead of 0",
        reported_on="nightly 2.6",
        fixed_in="<=2.13.0",
        features=("shift_bitwise", "integer_dtype", "special_values"),
        fn=_left_shift,
        make_inputs=lambda: [torch.tensor(1000, dtype=torch.int64), torch.tensor(64, dtype=torch.int64)],
        compare="bitwise",
        trigger="A shift count equal to the bit width is undefined in C++ and wraps around on x86.",
    ),
    CorpusCase(
        id="uint8_pow_then_cos",
        issue=98149,
        url=_url(98149),
        title="cos of a uint8 pow(5) uses the unwrapped power (1024) instead of 0",
        reported_on="nightly 2.1",
        fixed_in="<=2.13.0",
        features=("integer_dtype", "pow_exp_log", "cast"),
        fn=_uint8_pow_then_cos,
        make_inputs=lambda: [torch.tensor([4], dtype=torch.uint8)],
        compare="allclose",
        trigger="The uint8 power is fused with a float op and never truncated to 8 bits.",
    ),
    CorpusCase(
        id="uint8_constant_neg_plus_float",
        issue=161763,
        url=_url(161763),
        title="neg of a uint8 constant added to a float tensor gives -7 + x instead of 249 + x",
        reported_on="nightly 2.9",
        fixed_in="<=2.13.0",
        features=("integer_dtype", "cast"),
        fn=_uint8_constant_negated_plus_float,
        make_inputs=lambda: [torch.randn(2, 2, generator=_gen(0))],
        compare="allclose",
        trigger="Negating a uint8 scalar and promoting it to float in one fused expression skips the wrap-around.",
    ),
    CorpusCase(
        id="mul_by_nonneg_mask_nan",
        issue=100466,
        url=_url(100466),
        title="x * (x >= 0) as float returns NaN for finite inputs",
        reported_on="nightly 2.1",
        fixed_in="<=2.13.0",
        features=("bool_dtype", "cast", "nan_inf"),
        fn=_mul_by_nonneg_mask,
        make_inputs=lambda: [torch.rand(3, 3, generator=_gen(420))],
        compare="allclose",
        trigger="A vectorized bool mask converted to float keeps its all-ones bit pattern (a NaN) instead of 1.0.",
    ),
)

BY_ID: dict[str, CorpusCase] = {case.id: case for case in CASES}

if len(BY_ID) != len(CASES):
    raise ValueError("duplicate case ids in CASES")
