"""Running one model in one dtype: eager, fused and fp64 on the same batches, and the per-unit errors.

The fp64 reference is the same module with its parameters and buffers upcast exactly from the
working dtype (so weight rounding is not counted as error), fed the working inputs upcast exactly.
A workload's plain callable is compiled and run as it is (no module around it, nothing to cast);
a native run (an integer or bool dtype name, :mod:`.workloads`) casts nothing.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from precisionkit import FusionError, fused
from precisionkit.evidence import NO_GRAPH, NO_KERNEL, fusion_defects
from precisionkit.stats import spacing

from ...compiler_text import error_line, error_origin
from ...intents import compiler_title
from .exact import Judged, class_changes, diff_rule, faithful_runs, inconsistent_output, judge_exact
from .rules import MAX_UNITS_PER_OUTPUT, MIN_ROWS_AS_UNITS, SAME_TOL

#: The float dtypes a run casts to; a native run's name (:data:`.workloads.NATIVE_DTYPES`) is not here.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: What a workload builds: a module, or a plain callable compiled as it is.
Model = nn.Module | Callable[..., Any]


def tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of a model's output (tuples, lists, dicts and HF output objects), in a stable order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict) or hasattr(value, "to_tuple"):
        value = value.to_tuple() if hasattr(value, "to_tuple") else tuple(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    return []


def cast_inputs(inputs: tuple[torch.Tensor, ...], dtype: torch.dtype | None) -> tuple[torch.Tensor, ...]:
    """Floating inputs to ``dtype`` (exactly, when upcasting); integer and bool inputs as they are;
    everything as it is when ``dtype`` is None (a native run)."""
    return tuple(t.to(dtype) if dtype is not None and t.is_floating_point() else t for t in inputs)


def unit_errors(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> tuple[np.ndarray, float | None]:
    """Per unit (row of the last dim, or element when there are few rows), the max |out - ref| in
    ULPs of ``dtype`` at the row's largest |ref|; non-finite entries give inf (counted separately).

    Returns the units kept for the paired test (every one, or a deterministic stride sample of
    :data:`MAX_UNITS_PER_OUTPUT`, the same positions for eager and fused) and the largest finite
    error over every unit (None when none is finite)."""
    o = out.detach().to(torch.float64).reshape(-1, out.shape[-1] if out.dim() else 1)
    r = ref.detach().to(torch.float64).reshape(o.shape)
    finite_ref = torch.where(torch.isfinite(r), r, torch.zeros_like(r))
    scale = spacing(finite_ref.abs().amax(dim=1, keepdim=True), dtype)
    err = ((o - r).abs() / scale).nan_to_num(nan=float("inf"))
    units = err.reshape(-1) if o.shape[0] < MIN_ROWS_AS_UNITS else err.amax(dim=1)
    values = units.cpu().numpy()
    finite = values[np.isfinite(values)]
    largest = float(finite.max()) if finite.size else None
    if values.size > MAX_UNITS_PER_OUTPUT:
        values = values[:: int(np.ceil(values.size / MAX_UNITS_PER_OUTPUT))]
    return values, largest


def unit_clusters(out: torch.Tensor) -> np.ndarray:
    """Per unit :func:`unit_errors` keeps (the same stride sample), the index along the output's leading dim it
    belongs to: the image or sequence of the batch. Units of one image or sequence share its inputs and are not
    independent, so M's bootstrap resamples these, not the units. A 0-d output is one unit of index 0."""
    if out.dim() == 0:
        return np.zeros(1, dtype=np.int64)
    rows = out.numel() // max(out.shape[-1], 1) if out.numel() else 0
    per_lead = out.numel() // max(out.shape[0], 1)
    if rows < MIN_ROWS_AS_UNITS:  # every element a unit
        lead = np.arange(out.numel(), dtype=np.int64) // max(per_lead, 1)
    else:  # every row a unit
        lead = np.arange(rows, dtype=np.int64) * out.shape[-1] // max(per_lead, 1)
    if lead.size > MAX_UNITS_PER_OUTPUT:
        lead = lead[:: int(np.ceil(lead.size / MAX_UNITS_PER_OUTPUT))]
    return lead


@dataclass
class OutputRecord:
    """One output of one batch: how eager and fused compare with fp64 and with each other."""

    batch: int
    output: int
    shape: str
    kind: str  # float | integer (integer and bool outputs)
    units: int  # float: units kept for the paired test; integer: elements judged exactly
    eager_units: np.ndarray  # the units kept for the paired test
    fused_units: np.ndarray
    eager_max: float | None  # largest finite unit error over every unit (not only those kept)
    fused_max: float | None
    eager_nonfinite: int  # non-finite where the fp64 reference is finite
    fused_nonfinite: int
    fused_nonfinite_where_eager_finite: int
    mismatched: int  # integer outputs: elements wrong under the rule (differ from eager, fp64 not with fused)
    eager_rmse: float
    fused_rmse: float
    bit_equal: bool
    class_wrong: int = 0  # float outputs: elements whose class differs from eager's where eager has fp64's
    fp64_sided: int = 0  # differ from eager (integer: value; float: class) where fused has fp64's
    example: str = ""  # the first element the rule calls wrong
    #: elements whose class (a bool's value) fused changed against the dtype-faithful re-execution
    #: where eager has its class (:func:`.exact.class_changes`)
    faithful_class: int = 0
    #: elements that disagree with this output recomputed in eager from the fused output it is
    #: computed from (:func:`.exact.inconsistent_output`)
    inconsistent: int = 0
    #: per unit kept, the image or sequence of the batch it belongs to (:func:`unit_clusters`); empty: each
    #: unit its own
    unit_clusters: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclass
class ModelRun:
    """Everything measured for one model in one dtype."""

    model: str
    source: str
    dtype: str
    outputs: list[OutputRecord] = field(default_factory=list)
    same_passed: list[bool] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    error: str = ""  # why the run is invalid ("" when it ran)
    seconds: float = 0.0
    parameters: int = 0


def _rmse(a: torch.Tensor, ref: torch.Tensor) -> float:
    d = (a.detach().to(torch.float64) - ref.detach().to(torch.float64)).pow(2).mean().sqrt()
    return float(d)


def _same(eager_out: list[torch.Tensor], fused_out: list[torch.Tensor], ref_out: list[torch.Tensor]) -> bool:
    from torch._dynamo.utils import same

    return bool(same(eager_out, fused_out, fp64_ref=ref_out, tol=SAME_TOL, log_error=lambda *a, **k: None))


def _unpaired(batch: int, index: int, e: torch.Tensor, exact: Judged, bit_equal: bool) -> OutputRecord:
    """An output without units to pair: an integer or bool output, or a float one whose shape differs
    from eager's (wrong in every element, :func:`.exact.judge_exact`)."""
    integer = not e.is_floating_point()
    empty = np.zeros(0)
    return OutputRecord(
        batch,
        index,
        str(tuple(e.shape)),
        "integer" if integer else "float",
        e.numel() if integer else 0,  # an integer output's units: its elements, each judged exactly
        empty,
        empty,
        None,
        None,
        0,
        0,
        0,
        exact.wrong if integer else 0,
        0.0,
        0.0,
        bit_equal,
        class_wrong=0 if integer else exact.wrong,
        fp64_sided=exact.fp64_sided,
        example=exact.example,
    )


def compare_output(
    batch: int, index: int, e: torch.Tensor, f: torch.Tensor, r: torch.Tensor, dtype: torch.dtype | None
) -> OutputRecord:
    """Eager ``e`` and fused ``f`` against the fp64 ``r``: floating outputs by their scale-aware ULP
    error (in ULPs of ``dtype``, or of the output's own dtype when None) and by class, integer and
    bool outputs element by element (:func:`.exact.judge_exact`)."""
    bit_equal = bool(e.shape == f.shape and e.dtype == f.dtype and torch.equal(e, f))
    exact = judge_exact(e, f, r, index)
    if not e.is_floating_point() or e.shape != f.shape:  # no units to pair: judged element by element
        return _unpaired(batch, index, e, exact, bit_equal)
    dtype = dtype if dtype is not None else e.dtype
    ref_finite = torch.isfinite(r)
    e_bad = ~torch.isfinite(e) & ref_finite
    f_bad = ~torch.isfinite(f) & ref_finite
    (eu, e_max), (fu, f_max) = unit_errors(e, r, dtype), unit_errors(f, r, dtype)
    return OutputRecord(
        batch,
        index,
        str(tuple(e.shape)),
        "float",
        int(eu.size),
        eu,
        fu,
        e_max,
        f_max,
        int(e_bad.sum()),
        int(f_bad.sum()),
        int((f_bad & torch.isfinite(e)).sum()),
        0,
        _rmse(e, r),
        _rmse(f, r),
        bit_equal,
        class_wrong=exact.wrong,
        fp64_sided=exact.fp64_sided,
        example=exact.example,
        unit_clusters=unit_clusters(e),
    )


def judge_own_dtype(
    working: Any,
    inputs: tuple[torch.Tensor, ...],
    eager_out: list[torch.Tensor],
    fused_out: list[torch.Tensor],
    records: list[OutputRecord],
) -> None:
    """The rule's parts in the program's own dtypes, into ``records`` (one per output): class changes
    against the dtype-faithful re-execution (run only where fused's class differs from eager's
    somewhere, so a healthy model pays nothing), and outputs inconsistent with the output they are
    computed from (only with two or more outputs). The first wrong element becomes the record's
    example where it has none."""
    rule = diff_rule()
    candidates = [
        bool(rule["class_changed"](e, f, [e]).any())
        for e, f in zip(eager_out, fused_out, strict=True)
        if e.shape == f.shape and e.dtype == f.dtype
    ]
    if any(candidates):
        runs = faithful_runs(working, inputs)
        for k, (e, f, rec) in enumerate(zip(eager_out, fused_out, records, strict=True)):
            judged = class_changes(e, f, runs[k] if k < len(runs) else [], rec.output)
            rec.faithful_class = judged.wrong
            rec.example = rec.example or judged.example
    if len(fused_out) >= 2:
        j, n, shown = inconsistent_output(working, inputs, fused_out)
        if j >= 0:
            records[j].inconsistent = n
            records[j].example = records[j].example or shown


class Seeds(dict[tuple[object, ...], int]):
    """Seeds by their parts, computed by the run beforehand: a picklable stand-in for the run's
    ``derived_seed`` that a compile worker can call (see :func:`model_seeds`)."""

    def __call__(self, *parts: object) -> int:
        try:
            return self[parts]
        except KeyError:
            raise LookupError(f"no seed computed for {parts}; known: {sorted(map(str, self))}") from None


def model_seeds(name: str, batches: int, seed_of: Any) -> Seeds:
    """Every seed one model's runs read: its weights and each input batch."""
    parts = [("M", name, "weights"), *(("M", name, "batch", b) for b in range(batches))]
    return Seeds({p: seed_of(*p) for p in parts})


def master_module(workload: Any, device: torch.device, seed_of: Any) -> Model:
    """The workload's module as built (fp32 for the zoo), its weights drawn from the run's seed on
    ``device`` itself (built there, not on the host and moved), once per architecture: each dtype's
    module is a cast copy (:func:`cast_module`). A plain callable is returned as built."""
    accelerator = device.type != "cpu"
    forked = [device.index if device.index is not None else 0] if accelerator else []
    with torch.random.fork_rng(devices=forked, device_type=device.type if accelerator else "cuda"):
        torch.manual_seed(seed_of("M", workload.name, "weights"))
        with torch.device(device) if accelerator else contextlib.nullcontext():
            built = workload.build()
    return built.eval().to(device=device) if isinstance(built, nn.Module) else built


def cast_module(master: Model, dtype_name: str) -> Model:
    """A copy of ``master`` with its floating parameters and buffers in ``dtype_name`` (a plain
    copy in a native run; a plain callable as it is: it has nothing to cast)."""
    if not isinstance(master, nn.Module):
        return master
    dtype = DTYPES.get(dtype_name)
    return copy.deepcopy(master) if dtype is None else copy.deepcopy(master).to(dtype=dtype)


def fp64_copy(working: Model) -> Model:
    """The fp64 re-execution's model: a module's copy with its floating parameters and buffers upcast
    exactly; a plain callable as it is (its inputs are upcast)."""
    return copy.deepcopy(working).to(dtype=torch.float64) if isinstance(working, nn.Module) else working


def working_module(workload: Any, dtype_name: str, device: torch.device, seed_of: Any) -> Model:
    """The workload's module in ``dtype_name`` on ``device``, the same weights the run used (so the
    same module can be built again, e.g. for the divergence locator, instead of being kept)."""
    return cast_module(master_module(workload, device, seed_of), dtype_name)


def batch_inputs(
    workload: Any, batch: int, dtype_name: str, device: torch.device, batch_size: int, seed_of: Any
) -> tuple[torch.Tensor, ...]:
    """Input batch number ``batch``, from its own seed, floating inputs in ``dtype_name``."""
    generator = torch.Generator(device=device).manual_seed(seed_of("M", workload.name, "batch", batch))
    return cast_inputs(tuple(workload.inputs(generator, batch_size)), DTYPES.get(dtype_name))


def run_model(
    workload: Any,
    dtype_name: str,
    *,
    device: torch.device,
    batches: int,
    batch_size: int,
    backend: str,
    options: dict[str, Any],
    seed_of: Any,
    working: Model | None = None,
) -> ModelRun:
    """Eager, fused and fp64 runs of ``workload`` in ``dtype_name`` over ``batches`` batches, on
    ``working`` (the module in that dtype; built from the seed when not given)."""
    dtype = DTYPES.get(dtype_name)  # None: a native run, nothing cast
    # Every model runs behind the same adapter code, and Dynamo compiles one frame at most
    # ``recompile_limit`` times before it silently runs it eager: start each model afresh.
    torch._dynamo.reset()
    run = ModelRun(workload.name, getattr(workload, "source", "user"), dtype_name)
    start = time.perf_counter()
    if working is None:
        working = working_module(workload, dtype_name, device, seed_of)
    run.parameters = sum(p.numel() for p in working.parameters()) if isinstance(working, nn.Module) else 0
    reference = fp64_copy(working)
    compiled = fused(working, backend=backend, options=options, require_fusion=False)
    with torch.no_grad():
        for b in range(batches):
            inputs = batch_inputs(workload, b, dtype_name, device, batch_size, seed_of)
            eager_out = tensors(working(*inputs))
            try:
                fused_out = tensors(compiled(*inputs))
            except FusionError as exc:
                run.error = str(exc)
                break
            except Exception as exc:  # noqa: BLE001 - a model that cannot compile is an invalid run, with its reason
                where = error_origin(exc)
                run.error = f"{compiler_title(backend)}: compile or fused run failed: {error_line(exc)}" + (
                    f" (raised at {where})" if where else ""
                )
                break
            ref_out = tensors(reference(*cast_inputs(inputs, torch.float64)))
            if not (len(eager_out) == len(fused_out) == len(ref_out)):
                run.error = f"eager, fused and fp64 return {len(eager_out)}, {len(fused_out)}, {len(ref_out)} tensors"
                break
            for k, (e, f, r) in enumerate(zip(eager_out, fused_out, ref_out, strict=True)):
                run.outputs.append(compare_output(b, k, e, f, r, dtype))
            judge_own_dtype(working, inputs, eager_out, fused_out, run.outputs[-len(eager_out) :])
            run.same_passed.append(_same(eager_out, fused_out, ref_out))
    if not run.error:
        ev = compiled.evidence
        run.evidence = {
            "graph_count": ev.graph_count,
            "graph_breaks": ev.graph_breaks,
            "break_reasons": "; ".join(ev.break_reasons),
            "recompiles": ev.recompiles,
            "kernel_count": ev.kernel_count,
            "extern_calls": len(ev.extern_calls),
            "compile_seconds": ev.compile_seconds,
            "code_sha256": ev.code_sha256,
        }
        defects = fusion_defects(ev)
        if NO_GRAPH in defects:
            run.error = "compiled no graph: the fused path fell back to eager"
        elif NO_KERNEL in defects:
            run.error = "generated no fused kernel"
    run.seconds = time.perf_counter() - start
    return run


def run_architecture(
    workload: Any,
    dtypes: tuple[str, ...],
    device: str,
    batches: int,
    batch_size: int,
    backend: str,
    options: dict[str, Any],
    seeds: Seeds,
) -> list[ModelRun]:
    """:func:`run_model` in every dtype of ``dtypes``, the module initialised once and cast per dtype (a
    compile-pool task: plain arguments in, picklable runs out)."""
    where = torch.device(device)
    master = master_module(workload, where, seeds)
    runs = []
    for dtype_name in dtypes:
        runs.append(
            run_model(
                workload,
                dtype_name,
                device=where,
                batches=batches,
                batch_size=batch_size,
                backend=backend,
                options=options,
                seed_of=seeds,
                working=cast_module(master, dtype_name),
            )
        )
    return runs
