"""The ``opinfo`` generator's vocabulary: the dtypes and range modes it draws, the op database
by key, which ops are eligible and which are left out (each with its reason), and each op's
family and call form (see :mod:`.opinfo` for how programs are drawn)."""

from __future__ import annotations

import warnings
from collections import defaultdict
from typing import Any

import torch

#: the dtypes a program is drawn in (the op's own sample dtype per step; these with their weights)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "bool")
_DTYPE_WEIGHTS = (4, 3, 2, 2, 2, 1, 1)
#: range modes: which values the program's first input (and, for some, its other inputs) holds
MODES = ("normal", "tiny", "huge", "domain_edge", "signed_zero", "nonfinite", "int_width")
#: the modes of float programs and of integer ones (bool programs are ``normal``)
FLOAT_MODES = ("normal", "normal", "tiny", "huge", "domain_edge", "signed_zero", "nonfinite")
INT_MODES = ("normal", "int_width")
#: module-level families, one of which may feed the rest of a chain
MODULE_FAMILY = "module"
FAMILIES = ("pointwise", "reduction", "scan", "view", "indexing", "module", "linalg", "spectral", "other")
#: longest chain, shortest chain
MIN_OPS, MAX_OPS = 2, 8
#: samples read per (op, dtype): from reference_inputs where the op has them, else sample_inputs
_SAMPLES = 24
#: largest tensor a sample may hold, and largest integer tensor written as a literal
_MAX_NUMEL, _MAX_LITERAL = 4096, 256

#: Ops left out by name, with the reason. Rules in :func:`_rule_reason` add those with no dtype in
#: :data:`DTYPES` on the CPU, in-place-only ops and ops called through a test wrapper that
#: reorders their arguments.
EXCLUDED: dict[str, str] = {
    **dict.fromkeys(
        (
            "bernoulli",
            "cauchy",
            "exponential",
            "geometric",
            "log_normal",
            "multinomial",
            "normal",
            "normal.in_place",
            "normal.number_mean",
            "uniform",
            "rand_like",
            "randn",
            "randn_like",
            "randint",
            "randint_like",
            "nn.functional.dropout",
            "nn.functional.dropout2d",
            "nn.functional.dropout3d",
            "nn.functional.alpha_dropout",
            "nn.functional.feature_alpha_dropout.with_train",
            "nn.functional.feature_alpha_dropout.without_train",
            "nn.functional.rrelu",
            "nn.functional.fractional_max_pool2d",
            "nn.functional.fractional_max_pool3d",
            "svd_lowrank",
            "pca_lowrank",
            "lobpcg",
        ),
        "random: draws from the global generator, so eager and fused draw different values",
    ),
    **dict.fromkeys(
        ("empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"),
        "uninitialized memory: its values are undefined",
    ),
    **dict.fromkeys(
        (
            "nonzero",
            "masked_select",
            "unique",
            "unique_consecutive",
            "argwhere",
            "bincount",
            "repeat_interleave",
            "histogram",
            "histogramdd",
            "nn.functional.ctc_loss",
            "combinations",
        ),
        "data-dependent output shape",
    ),
    **dict.fromkeys(
        ("item", "tolist", "equal", "is_nonzero", "allclose"),
        "returns a Python value, not a tensor",
    ),
    **dict.fromkeys(
        (
            "linalg.eig",
            "linalg.eigh",
            "linalg.eigvals",
            "linalg.eigvalsh",
            "svd",
            "linalg.svd",
            "linalg.qr",
            "qr",
            "geqrf",
            "linalg.householder_product",
            "ormqr",
            "linalg.lstsq",
            "linalg.lstsq.grad_oriented",
        ),
        "factorization defined only up to signs or a driver's choice: fp64 and fp32 may pick different ones",
    ),
    **dict.fromkeys(
        ("scatter", "index_put", "index_copy", "put", "_unsafe_masked_index_put_accumulate", "masked_scatter"),
        "writes through duplicate indices (or masks) in an order the op leaves undefined",
    ),
    **dict.fromkeys(
        ("searchsorted", "bucketize"),
        "needs sorted boundaries: a seeded input is not sorted, and the result on unsorted ones is undefined",
    ),
    **dict.fromkeys(
        ("to_sparse", "sparse.sampled_addmm", "sparse.mm.reduce", "to_dense"),
        "sparse layouts",
    ),
    **dict.fromkeys(
        ("nn.functional.scaled_dot_product_attention", "nn.functional.multi_head_attention_forward"),
        "called through a test wrapper (dropout and head projections); the attention generator writes it",
    ),
    **dict.fromkeys(
        ("max_pool2d_with_indices_backward", "nn.functional.embedding_bag", "nn.functional.embedding"),
        "called through a test wrapper that reorders its arguments",
    ),
    **dict.fromkeys(
        (
            "view_as_complex",
            "complex",
            "polar",
            "cdouble",
            "cfloat",
            "chalf",
            "fft.fft",
            "fft.fft2",
            "fft.fftn",
            "fft.rfft",
            "fft.rfft2",
            "fft.rfftn",
            "fft.ifft",
            "fft.ifft2",
            "fft.ifftn",
            "fft.ihfft",
            "fft.ihfft2",
            "fft.ihfftn",
        ),
        "complex output: the diff rule judges real tensors",
    ),
    **dict.fromkeys(
        (
            "broadcast_shapes",
            "eye",
            "scalar_tensor",
            "triu_indices",
            "tril_indices",
            "signal.windows.hamming",
            "signal.windows.hann",
            "signal.windows.bartlett",
            "signal.windows.blackman",
            "signal.windows.cosine",
            "signal.windows.exponential",
            "signal.windows.gaussian",
            "signal.windows.kaiser",
            "signal.windows.general_cosine",
            "signal.windows.general_hamming",
            "signal.windows.nuttall",
        ),
        "a factory: no tensor argument to feed the chain through",
    ),
    **dict.fromkeys(
        (
            "nn.functional.linear_cross_entropy.chunked",
            "nn.functional.linear_cross_entropy.chunked_none",
            "nn.functional.unfold",
            "nn.functional.triplet_margin_with_distance_loss",
            "slice_scatter",
            "nn.functional.grid_sample",
        ),
        "no sample a program can write (a callable argument, a tensor over 4096 elements, or a list as receiver)",
    ),
    **dict.fromkeys(
        (
            "cholesky",
            "linalg.cholesky",
            "nn.functional.prelu",
            "nn.functional.binary_cross_entropy",
            "nn.functional.gaussian_nll_loss",
            "nn.functional.one_hot",
        ),
        "needs values a seeded input does not have (a positive-definite matrix, probabilities, "
        "positive variances, class indices, a weight per channel)",
    ),
    **dict.fromkeys(
        ("linalg.pinv.singular",),
        "a test wrapper that builds a singular matrix from its inputs",
    ),
}

_POINTWISE_INFOS = ("UnaryUfuncInfo", "BinaryUfuncInfo")
_SCANS = {"cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "cumulative_trapezoid"}
_VIEWS = {
    "view",
    "reshape",
    "view_as",
    "reshape_as",
    "transpose",
    "permute",
    "squeeze",
    "unsqueeze",
    "flatten",
    "unflatten",
    "expand",
    "expand_as",
    "narrow",
    "narrow_copy",
    "select",
    "movedim",
    "moveaxis",
    "swapaxes",
    "swapdims",
    "T",
    "H",
    "mT",
    "mH",
    "t",
    "chunk",
    "split",
    "split_with_sizes",
    "unbind",
    "diagonal",
    "as_strided",
    "flip",
    "fliplr",
    "flipud",
    "roll",
    "rot90",
    "tile",
    "repeat",
    "ravel",
    "contiguous",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "broadcast_to",
    "broadcast_tensors",
    "tensor_split",
    "hsplit",
    "vsplit",
    "dsplit",
    "unfold",
    "unfold_copy",
    "view_copy",
    "squeeze_copy",
    "permute_copy",
    "alias_copy",
    "cat",
    "stack",
    "hstack",
    "vstack",
    "dstack",
    "column_stack",
    "row_stack",
    "concat",
    "concatenate",
    "diag",
    "diag_embed",
    "diagflat",
    "tril",
    "triu",
    "clone",
    "sum_to_size",
    "as_strided_copy",
    "expand_copy",
    "t_copy",
    "transpose_copy",
    "unbind_copy",
    "view_as_real",
    "resolve_conj",
    "resolve_neg",
    "conj",
    "conj_physical",
    "positive",
    "block_diag",
    "kron",
    "trace",
}
_INDEXING = {
    "gather",
    "scatter_add",
    "scatter_reduce",
    "index_select",
    "index_add",
    "index_fill",
    "index_reduce",
    "take",
    "take_along_dim",
    "__getitem__",
    "masked_fill",
    "where",
    "select_scatter",
    "slice_scatter",
    "diagonal_scatter",
    "as_strided_scatter",
    "nonzero_static",
    "argsort",
    "sort",
    "topk",
    "kthvalue",
    "msort",
    "nn.functional.embedding",
}
#: conversions of a float to an integer (and frexp's exponent): undefined for NaN, inf and values
#: out of the integer's range (C++ leaves them so, and eager and compiled code differ there), so
#: they are not drawn in the modes that make such values
_CONVERSIONS = {"to", "long", "int", "short", "byte", "char", "type_as", "frexp", "nn.functional.one_hot"}
_UNDEFINED_CASTS_MODES = ("huge", "nonfinite")
#: ops whose second argument is a degree converted to an integer (the special polynomials): a huge
#: or non-finite degree is as undefined as any such conversion (eager may read 3e38 as a negative
#: degree and return at once where a fused kernel loops 3e38 times), so not drawn in those modes
_DEGREE_OPS_WORD = "_polynomial_"
_MODULE_WORDS = ("conv", "norm", "pad", "linear", "pool", "interpolate", "upsample", "pixel_shuffle")


def _op_key(op: Any) -> str:
    return str(op.name) + (f".{op.variant_test_name}" if op.variant_test_name else "")


_DB: dict[str, Any] = {}


def op_db() -> dict[str, Any]:
    """The op database by key (``name`` or ``name.variant``), imported once per process."""
    if not _DB:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db as ops
        for op in ops:
            _DB.setdefault(_op_key(op), op)
    return _DB


def _is_wrapper(fn: Any) -> bool:
    return getattr(fn, "__name__", "") == "<lambda>" or "torch.testing" in (getattr(fn, "__module__", "") or "")


def _callee(op: Any) -> tuple[str, str] | None:
    """How the program calls ``op``: ``("func", "torch.linalg.norm")``, ``("method", "view")`` (on its
    first tensor) or ``("attr", "mT")``; None when only a test wrapper calls it."""
    name = op.name
    if name in ("T", "H", "mT", "mH"):
        return ("attr", name)
    if not _is_wrapper(op.op):
        path = ("F." + name[len("nn.functional.") :]) if name.startswith("nn.functional.") else f"torch.{name}"
        obj: Any = {"torch": torch, "F": torch.nn.functional}
        parts = path.split(".")
        found: Any = obj[parts[0]]
        for part in parts[1:]:
            found = getattr(found, part, None)
            if found is None:
                break
        if found is not None and callable(found):
            return ("func", path)
        if name.startswith("__") or hasattr(torch.Tensor, name):
            return ("method", name)
        return None
    method = getattr(op, "method_variant", None)
    if method is not None and hasattr(torch.Tensor, getattr(method, "__name__", "")):
        return ("method", method.__name__)
    return None


def dtypes_of(op: Any, device: str = "cpu") -> tuple[str, ...]:
    """The dtypes of :data:`DTYPES` that OpInfo lists for ``op`` on ``device``'s kind (CUDA's
    lists leave out, e.g., integer ``addmm`` and ``int64`` convolutions, which its kernels lack)."""
    supported = op.supported_dtypes(torch.device(device).type)
    return tuple(d for d in DTYPES if getattr(torch, d) in supported)


def _rule_reason(op: Any) -> str | None:
    key = _op_key(op)
    if key in EXCLUDED:
        return EXCLUDED[key]
    if op.name in EXCLUDED:
        return EXCLUDED[op.name]
    if not dtypes_of(op):
        return "no CPU dtype among fp32, fp64, fp16, bf16, int64, int32, bool (complex-only or CUDA-only)"
    if op.name.endswith("_") and not op.name.endswith("__"):
        return "in-place only"
    if op.name.startswith("sparse.") or "sparse" in (op.variant_test_name or ""):
        return "sparse layouts"
    if getattr(op, "is_factory_function", False):
        return "a factory: no tensor argument to feed the chain through"
    if _callee(op) is None:
        return "called through a test wrapper that reorders its arguments"
    return None


def catalogue() -> tuple[list[str], dict[str, str]]:
    """The eligible ops (keys of :func:`op_db`) and the excluded ones with the reason for each."""
    eligible, excluded = [], {}
    for key, op in op_db().items():
        reason = _rule_reason(op)
        if reason is None:
            eligible.append(key)
        else:
            excluded[key] = reason
    return eligible, excluded


def family(key: str) -> str:
    """The family of an op (:data:`FAMILIES`), from its kind of OpInfo and its name."""
    op = op_db()[key]
    name, kind = op.name, type(op).__name__
    if name in _SCANS:
        return "scan"
    if name in _INDEXING:
        return "indexing"
    if name in _VIEWS or kind == "ShapeFuncInfo":
        return "view"
    if name.startswith("nn.functional.") and any(w in name for w in _MODULE_WORDS):
        return "module"
    if kind in _POINTWISE_INFOS:
        return "pointwise"
    if kind == "ReductionOpInfo" or name in {"max.reduction_with_dim", "min.reduction_with_dim", "logsumexp"}:
        return "reduction"
    if kind == "SpectralFuncInfo" or name.startswith("fft."):
        return "spectral"
    if name.startswith("linalg.") or name in {"mm", "bmm", "matmul", "addmm", "addbmm", "baddbmm", "addmv", "mv"}:
        return "linalg"
    return "other"


def exclusions_by_reason(excluded: dict[str, str]) -> dict[str, list[str]]:
    """The excluded ops grouped by reason."""
    out: dict[str, list[str]] = defaultdict(list)
    for key, reason in sorted(excluded.items()):
        out[reason].append(key)
    return dict(out)
