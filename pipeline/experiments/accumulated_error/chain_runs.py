"""B's runs: every operator chain on each stored input set, eager, fused and fused with
``emulate_precision_casts``, each output judged against the stored fp64 reference, a batch of sets
at a time. Computation only; the asset that stores the results is
:func:`.assets.accumulated_error_runs`.
"""

import io
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import torch

from precisionkit import FusedFunction, fused, ulp_diff
from precisionkit.batched import error_stats_per_set
from precisionkit.stats import round_to_dtype, scaled_spacing, spacing

from ...compile_pool import device_lanes, run_tasks
from ...devices import synchronize
from ...progress import Progress
from ...resources import ExperimentSettings
from ...workloads import WORKLOADS, Workload
from .bounds import BOUNDS, decisive, element_bound, reductions_per_set
from .library_bounds import LIBRARY_BOUNDS, absolute_bound, fully_masked_rows, library_reductions_per_set, row_classes
from .rules import DTYPES_B, FUSED_PATHS, PATHS
from .stages import CHAIN_STAGES

#: Elements of one path's outputs held at once: batches keep memory flat whatever the set count.
BATCH_ELEMENTS = 1 << 20

_MATMUL_EXTERNS = ("mm", "bmm", "addmm", "baddbmm")


def _path_options(settings: ExperimentSettings, path: str) -> dict[str, Any]:
    options = settings.options()
    if path == "fused_emulate":
        options = {**options, "emulate_precision_casts": True}
    return options


def fused_ops(chain: str, extern_calls: str, library_calls: str = "") -> list[str]:
    """The chain's op types that the fused path generated code for (not left to a library call).
    A chain rewritten into one fused library kernel (attention) generated code for none of them."""
    if library_calls.strip():
        return []
    externs = {e.strip() for e in extern_calls.split(",") if e.strip()}
    matmul_extern = bool(externs & set(_MATMUL_EXTERNS))
    ops = [op for op in CHAIN_STAGES[chain][0] if not (op == "matmul" and matmul_extern)]
    if "addmm" in externs:  # the bias add went into the library call as well
        ops = [op for op in ops if op != "add"]
    return list(dict.fromkeys(ops))


@dataclass
class ChainRun:
    """What running one chain produced: per-set error rows, per (dtype, path) evidence rows, and the
    tensors of each distribution's worst set (keyed ``<chain>/<distribution>/<dtype>/...``)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    worst: dict[str, torch.Tensor] = field(default_factory=dict)


#: Fused-path evidence fields copied into an evidence row.
_EVIDENCE_FIELDS = (
    "backend",
    "options",
    "graph_count",
    "graph_breaks",
    "recompiles",
    "kernel_count",
    "kernel_names",
    "extern_calls",
    "fused_library_calls",
    "code_sha256",
    "compile_seconds",
    "precisions",
)


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


def _run_distribution(
    workload: Workload,
    dist: str,
    dtype: str,
    paths: Mapping[str, Callable[..., torch.Tensor]],
    stacked: Mapping[str, torch.Tensor],
    ref: torch.Tensor,
    device: torch.device,
    progress: Progress,
    predict: Callable[..., torch.Tensor] | None = None,
    whole_chain: bool = True,
) -> tuple[list[dict[str, Any]], np.ndarray, dict[str, float]]:
    """Every path on every set of one distribution, a batch of sets at a time: the error rows, the
    per-set fused-minus-eager gap and the seconds each path spent executing."""
    n_sets = ref.shape[0]
    batch = max(1, min(n_sets, BATCH_ELEMENTS // max(1, ref[0].numel())))
    rows: list[dict[str, Any]] = []
    fused_gap = np.full(n_sets, -np.inf)
    seconds = dict.fromkeys(paths, 0.0)
    for start in range(0, n_sets, batch):
        stop = min(n_sets, start + batch)
        args = [t[start:stop].to(device) for t in stacked.values()]
        sets = [tuple(t[i] for t in args) for i in range(stop - start)]
        outputs: dict[str, torch.Tensor] = {}
        for p in paths:
            t0 = time.perf_counter()
            outputs[p] = torch.stack([paths[p](*one) for one in sets])
            synchronize(device)
            seconds[p] += time.perf_counter() - t0
        bound, absolute = None, False
        if predict is not None:
            outputs[SINGLE_ROUNDING] = torch.stack([predict(*one) for one in sets])
            bound, absolute = batch_bound(workload.name, sets, whole_chain=whole_chain)
        batch_rows, fused_gap[start:stop] = per_set_rows(
            workload.name,
            dist,
            dtype,
            start,
            outputs,
            ref[start:stop],
            bound,
            absolute=absolute,
            masked=batch_masked_rows(workload.name, sets),
        )
        rows.extend(batch_rows)
        progress.advance(stop - start)
    return rows, fused_gap, seconds


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


def _worst_set(
    workload: Workload,
    prefix: str,
    idx: int,
    paths: Mapping[str, Callable[..., torch.Tensor]],
    stacked: Mapping[str, torch.Tensor],
    ref: torch.Tensor,
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """Set ``idx``'s inputs, every path's output and the fp64 reference, keyed under ``prefix``."""
    one = tuple(stacked[a][idx].to(device) for a in workload.arg_names)
    worst = {f"{prefix}/input/{a}": stacked[a][idx].clone() for a in workload.arg_names}
    worst.update({f"{prefix}/output/{p}": paths[p](*one).cpu() for p in paths})
    worst[f"{prefix}/fp64_reference"] = ref[idx].clone()
    worst[f"{prefix}/set_index"] = torch.tensor([idx], dtype=torch.int64)
    return worst


def _unavailable_reason(path: str, exc: BaseException) -> str:
    """Why ``path`` could not run under this torch: the option it needs and the innermost error."""
    cause: BaseException = exc
    seen = {id(cause)}
    # Dynamo wraps the backend's error (BackendCompilerFailed): report the innermost one
    while (inner := getattr(cause, "inner_exception", None) or cause.__cause__ or cause.__context__) is not None:
        if id(inner) in seen:
            break
        seen.add(id(inner))
        cause = inner
    text = (str(cause).strip().splitlines() or [""])[0][:200]
    need = "emulate_precision_casts" if path == "fused_emulate" else path
    return f"torch {torch.__version__} cannot compile with {need}: {type(cause).__name__}: {text}"


def _unavailable_row(chain: str, dtype: str, path: str, why: str) -> dict[str, Any]:
    """The evidence row of a path this torch could not compile: no sets, and the reason."""
    return {"chain": chain, "dtype": dtype, "path": path, "sets": 0, "path_seconds": 0.0, "unavailable": why}


def _evidence_row(
    chain: str, dtype: str, path: str, fn: Callable[..., Any], sets: int, seconds: float
) -> dict[str, Any]:
    """Throughput of one (chain, dtype, path) and, for a fused path, its fusion evidence (which must
    show a single compile over all the sets)."""
    row: dict[str, Any] = {
        "chain": chain,
        "dtype": dtype,
        "path": path,
        "sets": sets,
        "path_seconds": seconds,
        "sets_per_second": sets / seconds if seconds > 0 else None,
    }
    if path in FUSED_PATHS:
        if not isinstance(fn, FusedFunction):
            raise TypeError(f"{chain}/{dtype}/{path} is a {type(fn).__name__}, not a FusedFunction")
        ev = fn.evidence
        if ev.recompiles != 0:
            raise RuntimeError(
                f"{chain}/{dtype}/{path} recompiled {ev.recompiles} time(s) over the input sets: "
                "each (chain, dtype, path) must compile once"
            )
        meta = ev.as_metadata()
        row.update({k: meta[k] for k in _EVIDENCE_FIELDS})
    return row


def _run_dtype(
    settings: ExperimentSettings,
    workload: Workload,
    dtype: str,
    pool: Mapping[str, Any],
    refs: Mapping[str, Any],
    log: Callable[[str], None] | None,
    progress_log: bool = True,
) -> ChainRun:
    """One chain at one dtype: every distribution's sets through eager, fused and fused_emulate
    (``progress_log`` False: ``log`` gets the outcome lines, not the sets' progress)."""
    device = settings.torch_device()
    distributions = list(workload.distributions)
    keys = [f"{d}/{dtype}/{workload.arg_names[0]}" for d in distributions]
    missing = [k for k in keys if k not in pool] + [f"{d}/{dtype}" for d in distributions if f"{d}/{dtype}" not in refs]
    if missing:
        raise ValueError(f"input_pool/fp64_reference of {workload.name!r} lack entries {missing}: rematerialize S")
    paths: dict[str, Callable[..., torch.Tensor]] = {"eager": workload.fn}
    # The first call compiles; do it up front so the timed loop measures execution only.
    first = tuple(pool[f"{distributions[0]}/{dtype}/{a}"][0].to(device) for a in workload.arg_names)
    unavailable: dict[str, str] = {}
    for p in FUSED_PATHS:
        try:
            paths[p] = fused(workload.fn, backend=settings.backend, options=_path_options(settings, p))
            paths[p](*first)
        except Exception as exc:  # a torch that cannot compile this path's options
            if p == "fused":
                raise  # plain fusion failing is the experiment failing, not a missing option
            unavailable[p] = _unavailable_reason(p, exc)
            paths.pop(p, None)
            if log:
                log(f"{workload.name}/{dtype}: {p} not run: {unavailable[p]}")
    # Where fused's own code computes the whole chain (no library call rounds an intermediate to the
    # dtype), its outputs should be the fp32 computation rounded once; a library chain's are within its
    # absolute bound. The fp32 single rounding runs as the bound's own check wherever there is a bound.
    ev = paths["fused"].evidence  # type: ignore[attr-defined]
    whole = not (ev.extern_calls or ev.fused_library_calls)
    predict = single_rounding(workload.fn) if has_element_test(workload.name, whole) else None
    total = sum(refs[f"{d}/{dtype}"].shape[0] for d in distributions)
    progress = Progress(log if progress_log else None, f"{workload.name} {dtype} input sets", total)
    out, seconds = ChainRun(), dict.fromkeys(paths, 0.0)
    for dist in distributions:
        stacked = {a: pool[f"{dist}/{dtype}/{a}"] for a in workload.arg_names}
        ref = refs[f"{dist}/{dtype}"]
        rows, fused_gap, spent = _run_distribution(
            workload, dist, dtype, paths, stacked, ref, device, progress, predict, whole
        )
        out.rows.extend(rows)
        seconds = {p: seconds[p] + spent[p] for p in paths}
        # Keep the set where fused is worst relative to eager, with every path's output, for a reproducer.
        prefix = f"{workload.name}/{dist}/{dtype}"
        out.worst.update(_worst_set(workload, prefix, int(np.argmax(fused_gap)), paths, stacked, ref, device))
    out.evidence = [
        _evidence_row(workload.name, dtype, p, paths[p], total, seconds[p])
        if p in paths
        else _unavailable_row(workload.name, dtype, p, unavailable[p])
        for p in PATHS
    ]
    if log:
        log(f"{workload.name}/{dtype}: " + ", ".join(f"{p} {total / max(seconds[p], 1e-9):.0f} sets/s" for p in paths))
    return out


def run_chain(
    settings: ExperimentSettings,
    workload: Workload,
    pool: Mapping[str, Any],  # a lazy SetTensors: sets are read a batch at a time
    refs: Mapping[str, Any],
    log: Callable[[str], None] | None = None,
) -> ChainRun:
    """Every input set of ``workload`` at each dtype of :data:`DTYPES_B` through each path of
    :data:`PATHS` (each fused path compiled once per dtype), judged against the fp64 references."""
    out = ChainRun()
    for dtype in DTYPES_B:
        part = _run_dtype(settings, workload, dtype, pool, refs, log)
        out.rows.extend(part.rows)
        out.evidence.extend(part.evidence)
        out.worst.update(part.worst)
    return out


@dataclass
class LaneResult:
    """One (chain, dtype) run in a lane (:func:`chain_lane`): its rows and evidence, its worst sets saved
    as bytes (a worker's pipe carries no tensor objects) and the lines it logged."""

    rows: list[dict[str, Any]]
    evidence: list[dict[str, Any]]
    worst: bytes
    lines: list[str]

    def chain_run(self) -> ChainRun:
        worst = torch.load(io.BytesIO(self.worst), weights_only=True)
        return ChainRun(self.rows, self.evidence, worst)


def chain_lane(
    settings: dict[str, Any], chain: str, dtype: str, pool: Mapping[str, Any], refs: Mapping[str, Any]
) -> LaneResult:
    """One chain at one dtype (``settings``: :meth:`ExperimentSettings.fields`), a task for
    :func:`pipeline.compile_pool.run_tasks`: on an accelerator the (chain, dtype) pairs run in lanes side
    by side (a pair's loop is bound by its host side, Python and kernel launches). Its rows are those
    :func:`run_chain` gives for the pair; which process ran it changes no bit."""
    lines: list[str] = []
    part = _run_dtype(
        ExperimentSettings(**settings), WORKLOADS[chain], dtype, pool, refs, lines.append, progress_log=False
    )
    buf = io.BytesIO()
    torch.save(part.worst, buf)
    return LaneResult(part.rows, part.evidence, buf.getvalue(), lines)


#: The most device memory one lane's (chain, dtype) holds, an upper estimate: a batch of sets is at most
#: 2^20 elements per path (BATCH_ELEMENTS), held with its inputs, the fp64 reference, the fp32 prediction
#: and the judging's float64 and sorted copies: well under 1 GiB, which is taken.
LANE_BYTES = 1 << 30


def chain_lanes(device: torch.device, pairs: int, device_bytes: int | None = None, cores: int | None = None) -> int:
    """The lanes ``pairs`` (chain, dtype) pairs run on (:func:`pipeline.compile_pool.device_lanes`, each
    holding :data:`LANE_BYTES`); a run asks about its device, the cost model about a GPU's host (B's cost)."""
    return device_lanes(device, pairs, task_bytes=LANE_BYTES, device_bytes=device_bytes, cores=cores)


def run_chains(
    settings: ExperimentSettings,
    pools: Mapping[str, Mapping[str, Any]],
    refs: Mapping[str, Mapping[str, Any]],
    log: Callable[[str], None] | None = None,
) -> tuple[list[ChainRun], int]:
    """Every chain of ``pools`` (chain name to its pool; ``refs`` likewise) and the lanes it ran on: one
    chain after another here on a CPU (:func:`run_chain`); on an accelerator its (chain, dtype) pairs on
    the device's lanes (:func:`chain_lane`), one run per pair, in the same order, with the same rows."""
    pairs = [(chain, dtype) for chain in pools for dtype in DTYPES_B]
    device = settings.torch_device()
    lanes = chain_lanes(device, len(pairs))
    if lanes == 1:
        return [run_chain(settings, WORKLOADS[c], pools[c], refs[c], log) for c in pools], 1
    if log:
        log(f"{len(pairs)} chain x dtype pairs on {lanes} lanes")
    tasks = [(settings.fields(), c, d, pools[c], refs[c]) for c, d in pairs]

    say = log or (lambda _line: None)

    def logged(_: int, lane: LaneResult) -> None:
        for line in lane.lines:
            say(line)

    done = run_tasks(chain_lane, tasks, device, lanes, on_result=logged)
    return [r.chain_run() for r in done], lanes


EVIDENCE_SCHEMA = {
    "chain": pl.String,
    "dtype": pl.String,
    "path": pl.String,
    "sets": pl.Int64,
    "path_seconds": pl.Float64,
    "sets_per_second": pl.Float64,
    "backend": pl.String,
    "options": pl.String,
    "graph_count": pl.Int64,
    "graph_breaks": pl.Int64,
    "recompiles": pl.Int64,
    "kernel_count": pl.Int64,
    "kernel_names": pl.String,
    "extern_calls": pl.String,
    "fused_library_calls": pl.String,  # an attention kernel the pattern matcher put in; "" when none
    "code_sha256": pl.String,
    "compile_seconds": pl.Float64,
    "precisions": pl.String,  # what the compiler's units ran in ("" where it does not say)
    "unavailable": pl.String,  # why this path did not run (a torch without its option); null when it ran
}
