"""B's judging of one batch of input sets against the fp64 reference, set by set (no compiling, no
running): the per-set error rows of every path (:func:`per_set_rows`), the per-element test in its rounding
and absolute forms with the bound it judges by (:func:`batch_bound`), the magnitude bias, and the fully
masked rows. :mod:`.chain_runs` runs the paths and hands each batch's outputs here.
"""

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from precisionkit import ulp_diff
from precisionkit.batched import error_stats_per_set
from precisionkit.stats import round_to_dtype, scaled_spacing, spacing

from .bounds import BOUNDS, decisive, element_bound, reductions_per_set
from .library_bounds import LIBRARY_BOUNDS, absolute_bound, fully_masked_rows, library_reductions_per_set, row_classes
from .rules import PATHS


def magnitude_bias(out: torch.Tensor, ref: torch.Tensor) -> np.ndarray:
    """Per set (leading axis), the mean over finite pairs of ``sign(ref) * (out - ref)`` in
    scale-aware ULPs: positive where the outputs are systematically larger in magnitude than the
    fp64 reference, negative where smaller (a wrong epsilon or variance divisor, flushed small
    values). Unbiased rounding gives a mean near 0. NaN for a set with no finite pair."""
    n = ref.shape[0]
    o = out.to(torch.float64).reshape(n, -1).to(ref.device)
    r = ref.to(torch.float64).reshape(n, -1)
    finite = torch.isfinite(o) & torch.isfinite(r)
    s = scaled_spacing(torch.where(torch.isfinite(ref), ref.to(torch.float64), 0.0), out.dtype).reshape(n, -1)
    signed = torch.where(finite, torch.sign(r) * (o - r) / s.to(ref.device), 0.0)
    m = finite.sum(dim=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m.cpu().numpy() > 0, (signed.sum(dim=1) / m.clamp(min=1)).cpu().numpy(), np.nan)


#: Key of the outputs of the chain computed in fp32 from the same inputs and rounded once to the dtype:
#: what a fused kernel that keeps every intermediate in fp32 should produce, up to fp32 rounding.
SINGLE_ROUNDING = "single_rounding"


def single_rounding(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``fn`` run eagerly on its inputs upcast to fp32, the result rounded once to the inputs' dtype."""

    def run(*args: torch.Tensor) -> torch.Tensor:
        dtype = args[0].dtype
        return fn(*(a.to(torch.float32) if a.is_floating_point() else a for a in args)).to(dtype)

    return run


def element_reference(
    ref: torch.Tensor, bound: torch.Tensor | None, out_dtype: torch.dtype, *, absolute: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per set (leading axis, flattened): the elements the per-element test judges and what it compares
    them with. The rounding form (see :mod:`.bounds`): the decisive elements (every fp32 computation within
    ``bound`` of the fp64 ``ref`` rounds to the same ``out_dtype`` value there) and the correctly rounded
    reference. The ``absolute`` form (a library chain, see :mod:`.library_bounds`): every element with a
    finite reference and bound, and the fp64 reference itself. None judged where ``bound`` is None. Both
    depend on the reference and the inputs alone: computed once per batch for every path."""
    n = ref.shape[0]
    r = ref.to(torch.float64).reshape(n, -1)
    safe = torch.where(torch.isfinite(r), r, 0.0)
    if bound is None:
        return torch.zeros_like(r, dtype=torch.bool), round_to_dtype(safe, out_dtype).to(torch.float64)
    b = bound.to(torch.float64).reshape(n, -1).to(r.device)
    if absolute:
        return torch.isfinite(r) & torch.isfinite(b), safe
    return decisive(r, b, out_dtype), round_to_dtype(safe, out_dtype).to(torch.float64)


def misrounded(
    out: torch.Tensor, judged: torch.Tensor, rounded: torch.Tensor, bound: torch.Tensor | None = None
) -> np.ndarray:
    """Per set, the judged elements ``out`` fails: (rounding form) does not hold as the correctly rounded
    reference, or (``bound`` given: the absolute form) lies farther than ``bound`` from the fp64 reference.
    A non-finite output fails either way."""
    o = out.to(torch.float64).reshape(judged.shape).to(judged.device)
    if bound is None:
        ok = o == rounded
    else:
        ok = (o - rounded).abs() <= bound.to(torch.float64).reshape(judged.shape).to(judged.device)
    return (judged & ~ok).sum(dim=1).cpu().numpy()


def bias_room(ref: torch.Tensor, bound: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    """Per set, the mean over its finite elements of the chain's fp32 error bound in scale-aware ULPs (the
    unit of :func:`magnitude_bias`): the most a computation within the bound can move the set's mean signed
    error before its final rounding. Rounding to nearest of a value moved by ``d`` moves its expected rounded
    value by ``d``, so two such computations' magnitude biases differ on average by at most twice this; B's
    bias test takes that as its margin on a row where no element is decisive (:mod:`.summary`)."""
    n = ref.shape[0]
    r = ref.to(torch.float64)
    finite = torch.isfinite(r)
    safe = torch.where(finite, r, 0.0)
    s = scaled_spacing(safe, dtype).reshape(n, -1)
    b = bound.to(torch.float64).reshape(n, -1).to(s.device)
    ok = finite.reshape(n, -1).to(s.device) & torch.isfinite(b)
    total = torch.where(ok, b / s, 0.0).sum(dim=1)
    m = ok.sum(dim=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m.cpu().numpy() > 0, (total / m.clamp(min=1)).cpu().numpy(), np.nan)


def bound_use(out: torch.Tensor, judged: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor) -> np.ndarray:
    """Per set, the largest ``|out - ref| / bound`` over the judged elements (NaN where none is judged;
    inf for a non-finite output): how much of the bound a path uses."""
    b = bound.to(torch.float64).reshape(judged.shape).to(judged.device)
    o = out.to(torch.float64).reshape(judged.shape).to(judged.device)
    ratio = torch.where(judged, torch.nan_to_num((o - ref).abs() / b, nan=torch.inf), -torch.inf)
    worst = ratio.amax(dim=1)
    return torch.where(judged.any(dim=1), worst, torch.nan).cpu().numpy()


def bound_half_ulps(judged: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    """Per set, the median over the judged elements of the bound in half-ULPs of the output dtype at the
    element's own reference (1 would be the final rounding alone); NaN where none is judged."""
    b = bound.to(torch.float64).reshape(judged.shape).to(judged.device)
    ratio = torch.where(judged, b / (spacing(ref.abs(), dtype) / 2.0), torch.nan)
    return ratio.nanmedian(dim=1).values.cpu().numpy()


def masked_row_failures(
    out: torch.Tensor, ref: torch.Tensor, masked: torch.Tensor | None
) -> tuple[np.ndarray, np.ndarray]:
    """Per set: the fully masked rows (``masked``: per set and output row), and those where ``out``'s answer
    is of another class than the fp64 reference's (finite, all zero, NaN, infinite; see
    :func:`.library_bounds.row_classes`). Zeros where the chain has no mask."""
    n = ref.shape[0]
    if masked is None:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    m = masked.reshape(n, -1).to(ref.device)
    rows = m.shape[1]
    wrong = torch.stack(
        [(row_classes(out[j].to(ref.device), rows) != row_classes(ref[j], rows)) & m[j] for j in range(n)]
    )
    return m.sum(dim=1).cpu().numpy(), wrong.sum(dim=1).cpu().numpy()


def per_set_rows(
    chain: str,
    dist: str,
    dtype: str,
    first_set: int,
    outputs: Mapping[str, torch.Tensor],
    ref: torch.Tensor,
    bound: torch.Tensor | None = None,
    *,
    absolute: bool = False,
    masked: torch.Tensor | None = None,
) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Error rows of a batch of input sets (numbered from ``first_set``), path by path in
    :data:`PATHS` order, each output judged against the fp64 ``ref``; where ``bound`` is given, on the
    elements the per-element test judges (its rounding form, or with ``absolute`` a library chain's
    absolute bound: :func:`element_reference`); where ``masked`` marks the fully masked rows (per set and
    output row), on their answer's class. Also per set the fused path's scale-aware max error minus
    eager's (+inf where fused is non-finite and eager is finite), which picks the reproducer set."""
    n = ref.shape[0]
    eager_finite = torch.isfinite(outputs["eager"]).reshape(n, -1)
    ref_finite = torch.isfinite(ref).reshape(n, -1).to(eager_finite.device)
    ran = [p for p in PATHS if p in outputs]  # a path this torch cannot compile has no outputs
    all_stats = {p: error_stats_per_set(outputs[p], ref, percentiles_of=_RANKED) for p in ran}
    out_dtype = outputs["eager"].dtype
    judged_mask, rounded = element_reference(ref, bound, out_dtype, absolute=absolute)
    element = _ElementTest(chain, ref, bound, absolute, judged_mask, rounded, out_dtype)
    predicted = None
    if SINGLE_ROUNDING in outputs and bound is not None:  # the bound's own check
        predicted = element.failures(outputs[SINGLE_ROUNDING])
    rows: list[dict[str, Any]] = []
    fused_gap = np.full(n, -np.inf)
    for p in ran:
        stats = all_stats[p]
        bias = magnitude_bias(outputs[p], ref)
        vs_eager = ulp_diff(outputs[p], outputs["eager"]).reshape(n, -1).amax(dim=1).cpu().numpy()
        nonfinite = ~torch.isfinite(outputs[p]).reshape(n, -1)
        nonfinite_vs_eager = (nonfinite & eager_finite).sum(dim=1).cpu().numpy()
        nonfinite_vs_ref = (nonfinite & ref_finite).sum(dim=1).cpu().numpy()
        wrong, use = element.failures(outputs[p]), element.use(outputs[p])
        masked_rows, masked_wrong = masked_row_failures(outputs[p], ref, masked)
        if p == "fused":
            gap = np.nan_to_num(stats["sulp_max"] - all_stats["eager"]["sulp_max"], nan=-np.inf)
            fused_gap = np.where(nonfinite_vs_eager > 0, np.inf, gap)
        for j in range(n):
            rows.append(
                {
                    "chain": chain,
                    "distribution": dist,
                    "dtype": dtype,
                    "path": p,
                    "set_index": first_set + j,
                    **{k: float(stats[k][j]) for k in _FLOAT_STATS},
                    "sulp_bias": float(bias[j]),
                    "n_compared": int(stats["n_compared"][j]),
                    "nonfinite_mismatch": int(stats["nan_mismatch"][j] + stats["inf_mismatch"][j]),
                    "nonfinite_vs_eager": int(nonfinite_vs_eager[j]),
                    "nonfinite_vs_ref": int(nonfinite_vs_ref[j]),
                    "max_ulp_vs_eager": int(vs_eager[j]),
                    **element.row(j, wrong, use, predicted),
                    "fully_masked_rows": int(masked_rows[j]),
                    "fully_masked_wrong": int(masked_wrong[j]),
                }
            )
    return rows, fused_gap


@dataclass
class _ElementTest:
    """The per-element test of one batch: which elements it judges and against what (see
    :func:`element_reference`), in its rounding or absolute form."""

    chain: str
    ref: torch.Tensor
    bound: torch.Tensor | None
    absolute: bool
    judged: torch.Tensor
    rounded: torch.Tensor
    dtype: torch.dtype

    def __post_init__(self) -> None:
        shape = tuple(self.ref.shape[1:])
        n = self.ref.shape[0]
        none = self.bound is None
        self.form = None if none else ("absolute" if self.absolute else "rounding")
        # reductions of the set's fp32 computation, each beyond its bound with a known chance
        self.reductions = (
            0 if none else (library_reductions_per_set if self.absolute else reductions_per_set)(self.chain, shape)
        )
        self.width = np.full(n, np.nan)
        # the most the bound lets a legitimate fp32 computation move the set's magnitude bias (see bias_room)
        self.bias_room = np.full(n, np.nan)
        if self.bound is not None and not self.absolute:
            self.bias_room = bias_room(self.ref, self.bound, self.dtype)
        if self.bound is not None and self.absolute:  # the absolute bound's width, in half-ULPs of the output
            self.width = bound_half_ulps(self.judged, self.rounded, self.bound, self.dtype)

    def failures(self, out: torch.Tensor) -> np.ndarray:
        return misrounded(out, self.judged, self.rounded, self.bound if self.absolute else None)

    def use(self, out: torch.Tensor) -> np.ndarray:
        if self.bound is None or not self.absolute:
            return np.full(self.ref.shape[0], np.nan)
        return bound_use(out, self.judged, self.rounded, self.bound)

    def row(self, j: int, wrong: np.ndarray, use: np.ndarray, predicted: np.ndarray | None) -> dict[str, Any]:
        return {
            "element_test": self.form,
            "decisive_elements": int(self.judged[j].sum()),
            "decisive_misrounded": int(wrong[j]),
            "bound_reductions": self.reductions,
            # judged elements the fp32 single rounding fails (the bound's own check: 0 unless the bound
            # is wrong); None where not run
            "single_rounding_misrounded": None if predicted is None else int(predicted[j]),
            "bound_use_max": None if math.isnan(use[j]) else float(use[j]),
            "bound_half_ulps_p50": None if math.isnan(self.width[j]) else float(self.width[j]),
            "bound_bias_sulp": None if math.isnan(self.bias_room[j]) else float(self.bias_room[j]),
        }


#: The error measures whose percentiles the per-set rows store (:data:`_FLOAT_STATS`): the others' would be
#: sorted for nothing, and the sorts are most of a long chain's judging (2000 sets of 16384 elements).
_RANKED = ("ulp", "sulp")
#: Per-set statistics of :func:`precisionkit.batched.error_stats_per_set` stored as floats, in column order.
_FLOAT_STATS = (
    "abs_max",
    "rel_max",
    "ulp_p50",
    "ulp_p99",
    "ulp_max",
    "ulp_mean",
    "sulp_max",
    "sulp_p99",
    "sulp_mean",
    "exact_fraction",
)


def batch_bound(
    chain: str, sets: list[tuple[torch.Tensor, ...]], *, whole_chain: bool = True
) -> tuple[torch.Tensor | None, bool]:
    """The per-element test's bound for each set (stacked, on the sets' device) and whether it is absolute:
    the fp32 rounding bound (:func:`.bounds.element_bound`) where fused code computes the whole chain and the
    chain has one; otherwise a library chain's absolute bound (:func:`.library_bounds.absolute_bound`, which
    admits every legitimate library boundary, so it holds for a whole-chain kernel too); (None, False) for
    a chain with neither."""
    absolute = not (whole_chain and chain in BOUNDS)
    bound_of = absolute_bound if absolute else element_bound
    bounds = [bound_of(chain, one) for one in sets]
    if any(b is None for b in bounds):
        return None, False
    return torch.stack([b for b in bounds if b is not None]), absolute


def has_element_test(chain: str, whole_chain: bool) -> bool:
    """Whether :func:`batch_bound` gives ``chain`` a bound (then the fp32 single rounding runs as its check)."""
    return (whole_chain and chain in BOUNDS) or chain in LIBRARY_BOUNDS


def batch_masked_rows(chain: str, sets: list[tuple[torch.Tensor, ...]]) -> torch.Tensor | None:
    """Per set and output row, whether the chain's mask masks every key (None for a chain without a mask)."""
    rows = [fully_masked_rows(chain, one) for one in sets]
    if any(m is None for m in rows):
        return None
    return torch.stack([m for m in rows if m is not None])
