"""Divergence locator: which layer of a model makes the fused path worse than eager?

Method (why it is built this way):

1. The caller's model is never touched. Two private copies are made with ``copy.deepcopy``: a
   *working* copy in the requested dtype on the run's device, and an *fp64* copy of the working
   copy on the same device where it has fp64 (on the CPU otherwise) (its
   parameters are the working ones upcast exactly, so weight rounding is not counted as error).
   Nothing is monkey-patched; forward pre-hooks and forward hooks are registered on the copies
   and removed in ``try/finally``.
2. One eager pass of the working copy records, for every call of every selected submodule, its
   inputs (args and kwargs, cloned with their strides) and its outputs. One pass of the fp64 copy
   on the upcast inputs records the fp64 outputs of the same calls: the *propagated* reference,
   i.e. what an exact model produces at that point.
3. Each selected submodule is compiled separately with :func:`precisionkit.paths.fused` (through a
   closure of its own, so the compile cache is per submodule) and re-run on the inputs captured
   in the eager pass. Its fp64 twin is re-run on the same inputs upcast to fp64: the *local*
   reference, i.e. what this layer alone should produce from what it was given.

Per row (one row per call; a module called twice gives ``name#0`` and ``name#1``; rows are in
order of call *completion*, so children precede the parent that contains them):

* ``eager_err`` / ``fused_err``: normwise relative error ``||out - ref|| / ||ref||`` against the
  propagated fp64 reference (``*_abs_max``: largest absolute error, the figure seed 002 had);
* ``eager_local_err`` / ``fused_local_err``: the same against the local reference;
* ``excess = fused_local_err - eager_local_err``: what the fused layer adds beyond eager;
* ``ulp_eager_vs_fused_max`` / ``_mean`` and ``bit_equal_fraction``: eager vs fused directly;
* fusion evidence of the compiled submodule (kernel count, extern calls, graph breaks).

Divergence rule. Rounding alone makes ``excess`` scatter around zero. The noise is measured over
all rows as ``noise = max(u, 3 * 1.4826 * median(|excess|))`` (a 3-sigma band, sigma estimated by
the median absolute excess, floored at the unit roundoff ``u = 2**-(p+1)`` of the dtype, since a
legitimately re-rounded output differs from eager by up to about one rounding). A float given as
``noise=`` replaces the measured value. A row is *divergent* when ``excess > noise``;
``first_divergent_layer`` is the first divergent row in completion order. The rule uses the local
errors because the propagated error of upstream layers is common to both paths: deep in a model it
dominates both numbers and would hide (or, compared by ratio, exaggerate) the layer's own part.

Limits: per-submodule compilation is not whole-model compilation. Fusion across submodule
boundaries (e.g. a residual add fused into the next layernorm) happens only in the row of the
enclosing module, so a divergence created by such a cross-boundary fusion shows at the smallest
enclosing module, not at a leaf. Fused rows get eager inputs, so fused errors do not propagate
downstream (by design: each row isolates one layer). Models that cannot be deep-copied, or whose
forward depends on global state that hooks cannot see, are out of scope; the copies run in
``eval()`` mode under ``torch.no_grad()``.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .bits import ulp_diff
from .bounds import unit_roundoff
from .paths import fused
from .reference import _float64_defaults

#: Sigmas of the measured noise band, and the factor turning a median absolute value into sigma.
NOISE_SIGMAS = 3.0
_HOST = torch.device("cpu")
MAD_TO_SIGMA = 1.4826


@dataclass
class DivergenceResult:
    """Per-call table (``table``: list of dict rows, in completion order) and the verdict."""

    table: list[dict[str, Any]]
    first_divergent_layer: str | None
    noise: float
    noise_rule: str
    dtype: str
    backend: str
    meta: dict[str, Any] = field(default_factory=dict)

    def columns(self) -> dict[str, list[Any]]:
        """The table column-wise (``{name: values}``), e.g. for ``polars.DataFrame(...)``."""
        keys = list(self.table[0]) if self.table else []
        return {k: [row[k] for row in self.table] for k in keys}


def _leaves(value: Any) -> list[Any]:
    """Flatten tensors/tuples/lists/dicts/namedtuples into leaves, in a stable order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [leaf for k in value for leaf in _leaves(value[k])]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _map(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_map(v, fn) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return value


def _snapshot(value: Any) -> Any:
    # clone() keeps the strides of dense tensors, so re-runs see the layout eager saw; a later
    # in-place op in the model cannot change what was captured.
    return _map(value, lambda t: t.detach().clone())


def _to64(value: Any, device: str | torch.device = "cpu") -> Any:
    return _map(value, lambda t: t.detach().to(device, torch.float64 if t.is_floating_point() else t.dtype, copy=True))


def _to_device(value: Any, device: torch.device) -> Any:
    return _map(value, lambda t: t.to(device))


def reference_device(device: torch.device) -> torch.device:
    """Where the fp64 copies run: on ``device`` itself where it computes in fp64 (CPU, CUDA, XPU),
    on the host where it has no fp64 (MPS)."""
    return torch.device("cpu") if device.type in ("mps", "meta") else device


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (the host for a model without either)."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return _HOST


def _cast_inputs(value: Any, dtype: torch.dtype | None) -> Any:
    if dtype is None:
        return value
    return _map(value, lambda t: t.to(dtype) if t.is_floating_point() else t)


def _float_leaves(value: Any) -> list[torch.Tensor]:
    return [t for t in _leaves(value) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _flat64(tensors: list[torch.Tensor]) -> torch.Tensor:
    if not tensors:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat([t.detach().reshape(-1).to("cpu", torch.float64) for t in tensors])


def _rel_norm(a: torch.Tensor, ref: torch.Tensor) -> float:
    """Normwise relative error over finite pairs (nan when nothing finite is left)."""
    keep = torch.isfinite(a) & torch.isfinite(ref)
    if not bool(keep.any()):
        return math.nan
    diff = float(torch.linalg.vector_norm(a[keep] - ref[keep]))
    scale = float(torch.linalg.vector_norm(ref[keep]))
    return diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)


def _abs_max(a: torch.Tensor, ref: torch.Tensor) -> float:
    keep = torch.isfinite(a) & torch.isfinite(ref)
    return float((a[keep] - ref[keep]).abs().max()) if bool(keep.any()) else math.nan


def _nonfinite_mismatch(a: torch.Tensor, ref: torch.Tensor) -> int:
    same = (torch.isnan(a) & torch.isnan(ref)) | (torch.isinf(a) & (a == ref))
    return int(((~torch.isfinite(a) | ~torch.isfinite(ref)) & ~same).sum())


def _structure(value: Any) -> str:
    """Shapes/strides summary of an output, for the table."""
    parts = []
    for t in _leaves(value):
        if isinstance(t, torch.Tensor):
            tag = "" if t.is_contiguous() else " noncontig"
            parts.append(f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}{tag}")
        else:
            parts.append(type(t).__name__)
    return "; ".join(parts)


def _select(model: nn.Module, modules: Any) -> list[tuple[str, nn.Module]]:
    named = list(model.named_modules())
    if modules is None or modules == "all":
        return named
    if modules == "leaves":
        return [(n, m) for n, m in named if not any(True for _ in m.children())]
    if callable(modules):
        return [(n, m) for n, m in named if modules(n, m)]
    wanted = list(modules)
    index = dict(named)
    missing = [n for n in wanted if n not in index]
    if missing:
        raise ValueError(
            f"modules not found in the model: {', '.join(map(repr, missing))}; have {', '.join(repr(n) for n, _ in named)}"
        )
    return [(n, index[n]) for n in wanted]


class _Recorder:
    """Forward (pre-)hooks on the selected submodules of one copy; removed by :meth:`remove`."""

    def __init__(self, selected: list[tuple[str, nn.Module]], keep_inputs: bool) -> None:
        self.calls: list[dict[str, Any]] = []
        self._pending: dict[str, list[dict[str, Any]]] = {}
        self._counts: dict[str, int] = {}
        self._handles: list[Any] = []
        self.keep_inputs = keep_inputs
        for name, module in selected:
            self._handles.append(module.register_forward_pre_hook(self._pre(name), with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post(name), with_kwargs=True))

    def _pre(self, name: str) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any]], None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            call = self._counts.get(name, 0)
            self._counts[name] = call + 1
            entry = {"name": name, "call": call, "module": module}
            if self.keep_inputs:
                entry["args"], entry["kwargs"] = _snapshot(args), _snapshot(kwargs)
            self._pending.setdefault(name, []).append(entry)

        return hook

    def _post(self, name: str) -> Callable[[nn.Module, tuple[Any, ...], dict[str, Any], Any], None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            entry = self._pending[name].pop()  # innermost open call of this module (recursion-safe)
            entry["output"] = _snapshot(output)
            self.calls.append(entry)

        return hook

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


def _run_recorded(
    model: nn.Module, selected: list[tuple[str, nn.Module]], inputs: tuple[Any, ...], keep_inputs: bool, fp64: bool
) -> tuple[list[dict[str, Any]], Any]:
    recorder = _Recorder(selected, keep_inputs)
    try:
        with torch.no_grad():
            if fp64:
                with _float64_defaults():
                    out = model(*inputs)
            else:
                out = model(*inputs)
    finally:
        recorder.remove()
    return recorder.calls, out


def _measure_noise(excesses: list[float], dtype: torch.dtype) -> float:
    finite = [abs(e) for e in excesses if math.isfinite(e)]
    spread = NOISE_SIGMAS * MAD_TO_SIGMA * statistics.median(finite) if finite else 0.0
    return max(unit_roundoff(dtype), spread)


def _check_arguments(model: Any, noise: Any, dtype: Any) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"locate_divergence expects an nn.Module, got {type(model).__name__}")
    if not (noise == "auto" or (isinstance(noise, (int, float)) and noise >= 0)):
        raise ValueError(f"noise must be 'auto' or a non-negative float, got {noise!r}")
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype or None, got {dtype!r}")


@dataclass
class _Recorded:
    """The paired calls of the working copy (with inputs) and of its fp64 copy, and the fp64 copy's modules."""

    calls: list[dict[str, Any]]
    ref_calls: list[dict[str, Any]]
    ref_index: dict[str, nn.Module]
    seconds: float


def _record(
    model: nn.Module,
    args: tuple[Any, ...],
    dtype: torch.dtype | None,
    modules: Any,
    devices: tuple[torch.device, torch.device] = (_HOST, _HOST),
) -> _Recorded:
    """Copy ``model`` (working dtype on ``devices[0]``, fp64 on ``devices[1]``), run both once with
    hooks on the selected submodules, and pair their calls (steps 1 and 2 of the method)."""
    work = copy.deepcopy(model).to(devices[0])
    if dtype is not None:
        work = work.to(dtype)
    work.eval()
    # The reference upcasts the *working* copy's parameters (exactly), so it computes with the
    # very weights eager and fused use: errors are arithmetic, not the rounding of the weights.
    ref = copy.deepcopy(work).to(devices[1], torch.float64).eval()
    work_names = _select(work, modules)
    ref_index = dict(ref.named_modules())
    ref_names = [(n, ref_index[n]) for n, _ in work_names]

    start = time.perf_counter()
    calls, _ = _run_recorded(work, work_names, args, keep_inputs=True, fp64=False)
    ref_calls, _ = _run_recorded(
        ref, ref_names, tuple(_to64(a, devices[1]) for a in args), keep_inputs=False, fp64=True
    )
    if [(c["name"], c["call"]) for c in calls] != [(c["name"], c["call"]) for c in ref_calls]:
        raise RuntimeError(
            "the fp64 copy called the submodules in a different order than the working copy; "
            "the model's control flow depends on its dtype, so calls cannot be paired"
        )
    if not calls:
        raise ValueError("none of the selected submodules was called by the model's forward")
    return _Recorded(calls, ref_calls, ref_index, time.perf_counter() - start)


def _run_fused(fn: Callable[..., Any], call: dict[str, Any], eager_leaves: list[torch.Tensor]) -> tuple[Any, str]:
    """The fused submodule on the captured inputs: its output, or None and why (a failed compile or
    run, or an output whose floating leaves are shaped unlike eager's)."""
    try:
        with torch.no_grad():
            fused_out = fn(*call["args"], **call["kwargs"])
    except Exception as exc:  # noqa: BLE001 - a compile/run failure is a row, not the end
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    if [tuple(t.shape) for t in _float_leaves(fused_out)] != [tuple(t.shape) for t in eager_leaves]:
        return (
            None,
            f"fused output structure {_structure(fused_out)!r} differs from eager {_structure(call['output'])!r}",
        )
    return fused_out, ""


def _evidence_columns(fn: Any) -> dict[str, Any]:
    """Fusion evidence of a compiled submodule (None/empty when its first call failed)."""
    try:
        ev = fn.evidence
        return {
            "kernel_count": ev.kernel_count,
            "extern_calls": ", ".join(ev.extern_calls),
            "graph_count": ev.graph_count,
            "graph_breaks": ev.graph_breaks,
            "recompiles": ev.recompiles,
            "compile_seconds": ev.compile_seconds,
        }
    except Exception:  # noqa: BLE001 - no evidence when the first call failed
        return {
            "kernel_count": None,
            "extern_calls": "",
            "graph_count": None,
            "graph_breaks": None,
            "recompiles": None,
            "compile_seconds": None,
        }


def _call_row(
    index: int,
    call: dict[str, Any],
    ref_call: dict[str, Any],
    local_module: nn.Module,
    fn: Callable[..., Any],
    ref_device: torch.device = _HOST,
) -> dict[str, Any]:
    """The table row of one call: what was called, its errors against the propagated and local fp64
    references on both paths (step 3 of the method) and the fused submodule's evidence."""
    name, module = call["name"], call["module"]
    eager_leaves = _float_leaves(call["output"])
    row: dict[str, Any] = {
        "index": index,
        "layer": f"{name or '<root>'}#{call['call']}",
        "module": name or "<root>",
        "call": call["call"],
        "module_type": type(module).__name__,
        "depth": 0 if not name else name.count(".") + 1,
        "output": _structure(call["output"]),
        "n_outputs": len(eager_leaves),
    }
    fused_out, error = _run_fused(fn, call, eager_leaves)
    with torch.no_grad(), _float64_defaults():
        local_ref = local_module(*_to64(call["args"], ref_device), **_to64(call["kwargs"], ref_device))
    row.update(
        _compare(
            eager_leaves,
            _float_leaves(fused_out) if fused_out is not None else None,
            _float_leaves(ref_call["output"]),
            _float_leaves(local_ref),
        )
    )
    row["fused_error"] = error
    row.update(_evidence_columns(fn))
    return row


def _threshold(rows: list[dict[str, Any]], noise: float | str, work_dtype: torch.dtype) -> tuple[float, str]:
    """The divergence threshold on ``excess`` (measured when ``noise`` is "auto") and its rule as text."""
    if noise == "auto":
        threshold = _measure_noise([r["excess"] for r in rows], work_dtype)
        rule = (
            f"excess > max(u={unit_roundoff(work_dtype):.3g}, {NOISE_SIGMAS:g} * {MAD_TO_SIGMA} * median|excess| "
            f"over {len(rows)} rows) = {threshold:.3g}"
        )
        return threshold, rule
    threshold = float(noise)
    return threshold, f"excess > {threshold:.3g} (given)"


def _mark_divergent(rows: list[dict[str, Any]], threshold: float) -> str | None:
    """Add ``divergent`` and ``noise`` to every row; returns the first divergent layer."""
    first = None
    for row in rows:
        # A failed fused run or a NaN/inf where eager had none diverges by definition.
        row["divergent"] = (
            bool(row["fused_error"])
            or row["fused_nonfinite_mismatch"] > row["eager_nonfinite_mismatch"]
            or (math.isfinite(row["excess"]) and row["excess"] > threshold)
        )
        row["noise"] = threshold
        if row["divergent"] and first is None:
            first = row["layer"]
    return first


def locate_divergence(
    model: nn.Module,
    inputs: Any,
    *,
    dtype: torch.dtype | None = None,
    backend: str = "inductor",
    options: dict[str, Any] | None = None,
    noise: float | str = "auto",
    modules: Any = None,
    device: str | torch.device | None = None,
) -> DivergenceResult:
    """Run ``model`` eager, fused (per submodule) and in fp64 side by side and tabulate the error
    of every submodule call; see the module docstring for the method, the noise rule and limits.

    ``inputs``: one tensor or a tuple of positional arguments. ``dtype``: working dtype the copy of
    the model and its floating inputs are cast to (``None`` keeps them as they are). ``backend`` /
    ``options``: the fused path, as in :func:`precisionkit.fused`. ``noise``: ``"auto"`` (measured)
    or a float threshold on ``excess``. ``modules``: ``None``/``"all"`` (every submodule and the
    root), ``"leaves"``, a list of qualified names, or a predicate ``(name, module) -> bool``.
    ``device``: where the working copy, its inputs and the fused path run (default: where the
    model's parameters are); the fp64 copies run there too where it has fp64
    (:func:`reference_device`), and ``meta`` records both.
    The caller's model, its parameters, buffers and hooks are left exactly as they were.
    """
    _check_arguments(model, noise, dtype)
    run_on = torch.device(device) if device is not None else model_device(model)
    ref_on = reference_device(run_on)
    args = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    # Own copies: a model that writes into its inputs must not change the caller's tensors.
    args = tuple(_snapshot(_to_device(_cast_inputs(a, dtype), run_on)) for a in args)
    recorded = _record(model, args, dtype, modules, (run_on, ref_on))

    compiled: dict[str, Callable[..., Any]] = {}
    rows: list[dict[str, Any]] = []
    for index, (call, ref_call) in enumerate(zip(recorded.calls, recorded.ref_calls, strict=True)):
        name = call["name"]
        if name not in compiled:
            target = call["module"]
            compiled[name] = fused(lambda *a, _m=target, **k: _m(*a, **k), backend, options, require_fusion=False)
        rows.append(_call_row(index, call, ref_call, recorded.ref_index[name], compiled[name], ref_on))

    out_dtype = next((leaves[0].dtype for c in recorded.calls if (leaves := _float_leaves(c["output"]))), None)
    work_dtype = out_dtype or dtype or torch.float32
    threshold, rule = _threshold(rows, noise, work_dtype)
    return DivergenceResult(
        table=rows,
        first_divergent_layer=_mark_divergent(rows, threshold),
        noise=threshold,
        noise_rule=rule,
        dtype=str(work_dtype).replace("torch.", ""),
        backend=backend,
        meta={
            "calls": len(rows),
            "compiled_submodules": len(compiled),
            "recorded_pass_seconds": recorded.seconds,
            "device": str(run_on),
            "reference_device": str(ref_on),
        },
    )


def _compare(
    eager: list[torch.Tensor],
    fused_leaves: list[torch.Tensor] | None,
    ref: list[torch.Tensor],
    local: list[torch.Tensor],
) -> dict[str, Any]:
    e, r, lr = _flat64(eager), _flat64(ref), _flat64(local)
    out: dict[str, Any] = {
        "eager_err": _rel_norm(e, r),
        "eager_abs_max": _abs_max(e, r),
        "eager_local_err": _rel_norm(e, lr),
        "eager_nonfinite_mismatch": _nonfinite_mismatch(e, r),
    }
    if fused_leaves is not None and [t.shape for t in fused_leaves] == [t.shape for t in eager]:
        f = _flat64(fused_leaves)
        ulps = (
            torch.cat(
                [
                    ulp_diff(a.contiguous(), b.to(a.dtype).contiguous()).reshape(-1)
                    for a, b in zip(eager, fused_leaves, strict=True)
                ]
            )
            if eager
            else torch.zeros(0, dtype=torch.int64)
        )
        out.update(
            {
                "fused_err": _rel_norm(f, r),
                "fused_abs_max": _abs_max(f, r),
                "fused_local_err": _rel_norm(f, lr),
                "fused_nonfinite_mismatch": _nonfinite_mismatch(f, r),
                "ulp_eager_vs_fused_max": int(ulps.max()) if ulps.numel() else 0,
                "ulp_eager_vs_fused_mean": float(ulps.to(torch.float64).mean()) if ulps.numel() else 0.0,
                "bit_equal_fraction": float((ulps == 0).to(torch.float64).mean()) if ulps.numel() else 1.0,
            }
        )
    else:
        out.update(
            {
                "fused_err": math.nan,
                "fused_abs_max": math.nan,
                "fused_local_err": math.nan,
                "fused_nonfinite_mismatch": 0,
                "ulp_eager_vs_fused_max": None,
                "ulp_eager_vs_fused_mean": math.nan,
                "bit_equal_fraction": math.nan,
            }
        )
    out["excess"] = out["fused_local_err"] - out["eager_local_err"]
    return out
