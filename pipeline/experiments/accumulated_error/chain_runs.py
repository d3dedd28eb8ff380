"""B's runs: every operator chain on each stored input set, eager, fused and fused with faithful casts
(the compiler's answer to the intent ``faithful_casts``: Inductor's ``emulate_precision_casts``), each
output judged against the stored fp64 reference (:mod:`.per_set`), a batch of sets at a time. Computation
only; the asset that stores the results is :func:`.assets.accumulated_error_runs`.
"""

import io
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import torch

from precisionkit import FusedFunction, FusionError, fused
from precisionkit.backends import FAITHFUL_CASTS

from ...compile_pool import device_lanes, run_tasks
from ...devices import synchronize
from ...intents import adapter_of, declined, intent_options, options_text, whole_graph_options
from ...progress import Progress
from ...resources import ExperimentSettings
from ...workloads import WORKLOADS, Workload
from .per_set import SINGLE_ROUNDING, batch_bound, batch_masked_rows, has_element_test, per_set_rows, single_rounding
from .rules import DTYPES_B, FUSED_PATHS, PATHS
from .stages import CHAIN_STAGES

#: Elements of one path's outputs held at once: batches keep memory flat whatever the set count.
BATCH_ELEMENTS = 1 << 20

_MATMUL_EXTERNS = ("mm", "bmm", "addmm", "baddbmm")


def _path_not_applicable(settings: ExperimentSettings, path: str) -> str | None:
    """Why ``path`` does not apply to the run's compiler ("not applicable to <compiler>: <why>"), or None:
    ``fused_emulate`` is the fused path with faithful casts (intent ``faithful_casts``), which a compiler
    that elides a cast pair with no option to keep it has not."""
    if path != "fused_emulate":
        return None
    options, why = intent_options(settings.backend, settings.options(), FAITHFUL_CASTS, settings.torch_device())
    return why if options is None else None


def _path_options(settings: ExperimentSettings, path: str) -> dict[str, Any]:
    """The compiler options of a fused path: the run's, with the compiler told to compile a chain of one
    operation too (intent ``whole_graph``: a layer norm alone is one), and for ``fused_emulate`` the
    compiler's faithful casts over them (Inductor: ``emulate_precision_casts=True``)."""
    options = whole_graph_options(settings.backend, settings.options(), settings.torch_device())
    if path == "fused_emulate":
        options = intent_options(settings.backend, options, FAITHFUL_CASTS, settings.torch_device())[0] or options
    return options


def faithful_casts_label(backend: str, device: Any = "cpu") -> str:
    """What the fused path with faithful casts sets, in words: Inductor's ``emulate_precision_casts``, another
    compiler's options, or that it keeps casts by default; "" where it has none."""
    adapter = adapter_of(backend)
    options = adapter.intent(FAITHFUL_CASTS, str(device))
    if options is None:
        return ""
    return options_text(options) or f"{adapter.title or adapter.name}'s default (it keeps casts)"


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
    "compiler",
    "compiler_version",
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


def _unavailable_reason(settings: ExperimentSettings, path: str, exc: BaseException) -> str:
    """Why ``path`` could not run with this compiler: the options it needs and the innermost error."""
    cause: BaseException = exc
    seen = {id(cause)}
    # Dynamo wraps the backend's error (BackendCompilerFailed): report the innermost one
    while (inner := getattr(cause, "inner_exception", None) or cause.__cause__ or cause.__context__) is not None:
        if id(inner) in seen:
            break
        seen.add(id(inner))
        cause = inner
    text = (str(cause).strip().splitlines() or [""])[0][:200]
    need = (
        (faithful_casts_label(settings.backend, settings.torch_device()) or path) if path == "fused_emulate" else path
    )
    adapter = adapter_of(settings.backend)
    who = f"torch {torch.__version__}"
    if adapter.name != "inductor":
        who = f"{adapter.title or adapter.name} (torch {torch.__version__})"
    return f"{who} cannot compile with {need}: {type(cause).__name__}: {text}"


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
        if (why := _path_not_applicable(settings, p)) is not None:
            unavailable[p] = why
            if log:
                log(f"{workload.name}/{dtype}: {p} not run: {why}")
            continue
        try:
            paths[p] = fused(workload.fn, backend=settings.backend, options=_path_options(settings, p))
            paths[p](*first)
        except Exception as exc:
            # The compiler ran part of the chain in torch after failing it, or fused none of it: a finding
            # about the compiler on this chain, kept as a path not run (never judged as fused).
            why = declined(paths.get(p)) if isinstance(exc, FusionError) else None
            if why is None and p == "fused":
                raise  # plain fusion failing otherwise is the experiment failing, not a missing option
            unavailable[p] = why or _unavailable_reason(settings, p, exc)  # else: a torch that cannot compile it
            paths.pop(p, None)
            if log:
                log(f"{workload.name}/{dtype}: {p} not run: {unavailable[p]}")
    # Where fused's own code computes the whole chain (no library call rounds an intermediate to the
    # dtype), its outputs should be the fp32 computation rounded once; a library chain's are within its
    # absolute bound. The fp32 single rounding runs as the bound's own check wherever there is a bound.
    compiled = paths.get("fused", paths.get("fused_emulate"))
    ev = compiled.evidence if isinstance(compiled, FusedFunction) else None
    whole = ev is None or not (ev.extern_calls or ev.fused_library_calls)
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
    "compiler": pl.String,  # the adapter that compiled the path (its name); null for eager and paths not run
    "compiler_version": pl.String,
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
