"""Real silent wrong-result bugs of PyTorch Inductor on CUDA (its Triton code), one case per report.

The format of :mod:`tests.fuzz_corpus.cases` (``device="cuda"``): each case rebuilds the trigger of a
pytorch/pytorch issue in its own code, with inputs made on the GPU. ``reported_on`` is the torch
version the report names, or its filing date where it names none; ``fixed_in`` is "" where the fix
is unknown here (no GPU ran these cases when they were written: run them with
``python -m tests.fuzz_corpus.check --cuda`` on a GPU to see which reproduce on the torch in use).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tests.fuzz_corpus.cases import FEATURES, CorpusCase, _url

CUDA = "cuda"

#: What Triton code generation does differently, beside the CPU corpus's vocabulary.
GPU_FEATURES: frozenset[str] = frozenset(
    {
        "scan",  # cumsum / cumprod / logcumsumexp lowered to a scan
        "atomic_scatter",  # scatter_add / index_put(accumulate=True): atomic adds on the GPU
        "masked_tail",  # a size that is no multiple of the block: masked loads and stores
        "welford",  # variance / norms (Welford's update)
        "multi_output",  # several outputs of one fused kernel; their order changes the code
        "resample",  # interpolation and grid generation: indices computed from float coordinates
    }
)


@dataclass(frozen=True)
class CudaCase(CorpusCase):
    """A corpus case that runs on the GPU (``device``); its features may name :data:`GPU_FEATURES`."""

    device: str = CUDA

    def __post_init__(self) -> None:
        unknown = set(self.features) - FEATURES - GPU_FEATURES
        if unknown:
            raise ValueError(f"{self.id}: features outside FEATURES and GPU_FEATURES: {sorted(unknown)}")
        if self.device != CUDA:
            raise ValueError(f"{self.id}: a CUDA corpus case runs on {CUDA!r}, not {self.device!r}")
        CorpusCase.__post_init__(self.with_cpu_features())

    def with_cpu_features(self) -> CorpusCase:
        """The case as a plain corpus case (GPU features dropped), for the base class's checks."""
        keep = tuple(f for f in self.features if f in FEATURES)
        return CorpusCase(**{**{k: getattr(self, k) for k in CorpusCase.__dataclass_fields__}, "features": keep})


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(CUDA).manual_seed(seed)


def _randn(seed: int, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed), device=CUDA).to(dtype)


# --- the graphs (each written from the report's description of its trigger) -----------------------


def _mean_of_floored_transpose_beside_cat(p, x):
    d = x / p.abs()
    f = torch.floor(torch.floor(d.transpose(2, 4)))
    return torch.cat((d,), dim=2), f.mean(4)


def _argmax_of_zero_difference_with_product_out(p0, p1, x):
    m = (p1 / torch.atan(p0)) * torch.tan(x)
    return m, (m - m).argmax(3)


def _row_sum_plus_padded_tan_beside_matmul(a, b):
    s = b.sum(2)
    pad = F.pad(torch.tan(torch.ceil(a)), (0, 0), "constant", 0.5)
    return torch.matmul(pad, s.clip(-1.5, 1.5).transpose(-1, -2)), s + pad


def _lt_against_expand_beside_matmul(a, b):
    s = torch.sin(torch.round(b * torch.floor(a)))
    e = s.expand(33, 33)
    return torch.matmul(s, e), torch.lt(s, e)


def _argmax_int16_columns(x):
    return x.argmax(0)


def _cumsum_down_columns(x):
    return x.cumsum(0)


def _scatter_sum_of_biased_rows(x, bias, idx):
    src = x + bias
    return torch.zeros(1, 1, device=x.device, dtype=x.dtype).scatter_reduce(
        0, idx.unsqueeze(-1).expand_as(src), src, "sum", include_self=True
    )


def _gather_after_scatter_add_into_one_row(x, idx):
    acc = torch.zeros(1, x.shape[1], device=x.device, dtype=x.dtype)
    acc.scatter_add_(0, idx.unsqueeze(-1).expand(-1, x.shape[1]), x)
    return torch.index_select(acc, 0, idx)


def _bf16_plus_double_scalar_tensor(x, s):
    return torch.add(x, s)


def _ties_with_row_max_of_bf16_quotient(x):
    q = x / 3.0
    return (q == q.amax(-1, keepdim=True)).sum(-1)


def _affine_grid_half(theta):
    return torch.ops.aten.affine_grid_generator(theta, [3, 1, 8, 8, 8], True)


def _nearest_upsample_bf16(x):
    return F.interpolate(x, scale_factor=2, mode="nearest")


CUDA_CASES: tuple[CudaCase, ...] = (
    CudaCase(
        id="cuda_mean_floored_transpose_output_order",
        issue=114223,
        url=_url(114223),
        title="fp16 mean over a transposed, floored quotient changes when the graph's outputs are reordered",
        reported_on="2023-11-21",
        fixed_in="",
        features=("reduction", "transpose_input", "fp16_bf16", "rounding", "multi_output"),
        fn=_mean_of_floored_transpose_beside_cat,
        make_inputs=lambda: [
            _randn(1, 57, 1, 10, 1, 40, dtype=torch.float16),
            _randn(2, 57, 1, 10, 1, 40, dtype=torch.float16),
        ],
        compare="allclose",
        rtol=1e-3,
        atol=1e-3,
        trigger="A mean reduction over a transposed view shares a kernel with another output; output order changes it.",
    ),
    CudaCase(
        id="cuda_argmax_with_intermediate_output",
        issue=114229,
        url=_url(114229),
        title="argmax of a difference changes when an intermediate product is also returned (CUDA only)",
        reported_on="2023-11-21",
        fixed_in="",
        features=("argmin_argmax", "nan_inf", "pow_exp_log", "multi_output"),
        fn=_argmax_of_zero_difference_with_product_out,
        make_inputs=lambda: [_randn(3, 1, 11, 1, 53), _randn(4, 2, 11, 41, 53), _randn(5, 2, 11, 41, 53)],
        compare="bitwise",
        trigger="An argmax reduction fused with a pointwise output that is stored as well.",
    ),
    CudaCase(
        id="cuda_add_of_row_sum_beside_matmul",
        issue=114224,
        url=_url(114224),
        title="the sum of a row reduction and a padded tan changes when a matmul output is returned first",
        reported_on="2023-11-21",
        fixed_in="",
        features=("reduction", "matmul", "fp16_bf16", "multi_output"),
        fn=_row_sum_plus_padded_tan_beside_matmul,
        make_inputs=lambda: [_randn(6, 1, 51, dtype=torch.float16), _randn(7, 1, 51, 9, dtype=torch.float16)],
        compare="allclose",
        rtol=1e-3,
        atol=1e-3,
        trigger="A row sum feeds both an add output and a matmul; the order of the outputs changes the add.",
    ),
    CudaCase(
        id="cuda_lt_against_expanded_beside_matmul",
        issue=114222,
        url=_url(114222),
        title="a comparison against an expanded view flips when a matmul of the same values is returned first",
        reported_on="2023-11-21",
        fixed_in="",
        features=("expanded_view", "matmul", "bool_dtype", "rounding", "multi_output"),
        fn=_lt_against_expand_beside_matmul,
        make_inputs=lambda: [_randn(8, 1, 33), _randn(9, 1, 33)],
        compare="bitwise",
        trigger="A comparison with a stride-0 expand of the same tensor, beside a matmul reading the expand.",
    ),
    CudaCase(
        id="cuda_argmax_int16_ties",
        issue=93815,
        url=_url(93815),
        title="compiled argmax over dim 0 of an int16 CUDA tensor sometimes picks another index",
        reported_on="2.0.0.dev20230131",
        fixed_in="",
        features=("argmin_argmax", "integer_dtype", "reduction"),
        fn=_argmax_int16_columns,
        make_inputs=lambda: [torch.randint(-100, 100, (20, 20), generator=_gen(10), device=CUDA, dtype=torch.int16)],
        compare="bitwise",
        trigger="argmax over columns of small integers with ties: the tie-break of the Triton reduction.",
    ),
    CudaCase(
        id="cuda_cumsum_down_long_rows",
        issue=139348,
        url=_url(139348),
        title="cumsum along dim 0 of a 100 x 4000 tensor fails accuracy (and asserts) with an upstream Triton",
        reported_on="2024-10-31",
        fixed_in="",
        features=("scan", "cumulative", "reduction"),
        fn=_cumsum_down_columns,
        make_inputs=lambda: [torch.rand(100, 4000, generator=_gen(11), device=CUDA)],
        compare="allclose",
        rtol=1e-4,
        atol=1e-4,
        trigger="A scan over the outer dimension of a wide tensor (a looped Triton scan).",
    ),
    CudaCase(
        id="cuda_scatter_sum_unmasked_atomic",
        issue=178871,
        url=_url(178871),
        title="scatter_reduce sum fused with a scalar broadcast adds the scalar once per padding lane",
        reported_on="2026-03-31",
        fixed_in="",
        features=("atomic_scatter", "duplicate_indices", "masked_tail", "scatter_gather"),
        fn=_scatter_sum_of_biased_rows,
        make_inputs=lambda: [
            _randn(12, 37, 1),
            torch.tensor([0.020368], device=CUDA),
            torch.zeros(37, dtype=torch.long, device=CUDA),
        ],
        compare="allclose",
        rtol=1e-4,
        atol=1e-5,
        trigger="An atomic add without the tail mask: sizes that are not a power of two add out-of-range lanes.",
    ),
    CudaCase(
        id="cuda_gather_reads_before_scatter_add",
        issue=191571,
        url=_url(191571),
        title="index_select of a one-row scatter_add_ target in the same graph returns the zeros before the adds",
        reported_on="2026-07-30",
        fixed_in="",
        features=("atomic_scatter", "scatter_gather", "duplicate_indices", "in_place_view"),
        fn=_gather_after_scatter_add_into_one_row,
        make_inputs=lambda: [_randn(13, 8, 4), torch.zeros(8, dtype=torch.long, device=CUDA)],
        compare="allclose",
        rtol=1e-4,
        atol=1e-5,
        trigger="The gather's load is emitted before the scatter's atomic adds in one fused kernel.",
    ),
    CudaCase(
        id="cuda_bf16_plus_0dim_double",
        issue=185605,
        url=_url(185605),
        title="bf16 tensor plus a 0-dim float64 tensor is nonzero where eager gives exactly zero",
        reported_on="2026-05-29",
        fixed_in="",
        features=("fp16_bf16", "cast", "signed_zero"),
        fn=_bf16_plus_double_scalar_tensor,
        make_inputs=lambda: [
            torch.tensor([[0.0, 0.0, 0.1], [-0.2, 1.0, -1.0]], device=CUDA, dtype=torch.bfloat16),
            torch.tensor(-0.1, device=CUDA, dtype=torch.float64),
        ],
        compare="bitwise",
        trigger="The 0-dim double operand is not rounded to bf16 as eager's type promotion does.",
    ),
    CudaCase(
        id="cuda_bf16_quotient_ties_with_max",
        issue=195214,
        url=_url(195214),
        title="bf16 division fused into an equality with the row max skips rounding: no ties are counted",
        reported_on="2026-08-28",
        fixed_in="",
        features=("fp16_bf16", "cast", "bool_dtype", "reduction"),
        fn=_ties_with_row_max_of_bf16_quotient,
        make_inputs=lambda: [_randn(14, 4, 33, dtype=torch.bfloat16)],
        compare="bitwise",
        trigger="The quotient is compared in fp32 against a max stored in bf16: equality never holds.",
    ),
    CudaCase(
        id="cuda_affine_grid_half",
        issue=172061,
        url=_url(172061),
        title="affine_grid_generator in fp16 / bf16 on CUDA is far from eager",
        reported_on="2026-01-09",
        fixed_in="",
        features=("fp16_bf16", "resample", "matmul"),
        fn=_affine_grid_half,
        make_inputs=lambda: [_randn(15, 3, 3, 4, dtype=torch.float16)],
        compare="allclose",
        rtol=1e-3,
        atol=1e-3,
        trigger="The decomposed grid generation accumulates in half precision where eager does not.",
    ),
    CudaCase(
        id="cuda_nearest_upsample_bf16",
        issue=170682,
        url=_url(170682),
        title="nearest upsampling by 2 of a bf16 tensor differs from eager beyond noise",
        reported_on="2025-12-17",
        fixed_in="",
        features=("fp16_bf16", "resample"),
        fn=_nearest_upsample_bf16,
        make_inputs=lambda: [_randn(16, 2, 1, 100, 150, dtype=torch.bfloat16) * 0.1],
        compare="bitwise",
        trigger="Source indices computed from a float scale factor in the fused kernel.",
    ),
)

CUDA_BY_ID: dict[str, CudaCase] = {case.id: case for case in CUDA_CASES}

if len(CUDA_BY_ID) != len(CUDA_CASES):
    raise ValueError("duplicate case ids in CUDA_CASES")
