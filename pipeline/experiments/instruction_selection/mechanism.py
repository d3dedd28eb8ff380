"""C1's runs and the evidence of which instruction or kernel each route ran: the eager dispatch and
profiler traces, the fused kernel's multiply lines and constants, the mechanism evidence table and
the route records (``c1_mechanism_evidence``, ``c1_route_records``).
"""

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from precisionkit import FusedFunction, bit_equal, fused
from precisionkit.evidence import evidence_fields

from .paths import CONTROL_TARGET, CONTROLS, PATHS, ROUTE_AND_VALUE, ROUTE_CONTROLS, path_a_multiplier, rounded_scalar
from .spec import SIZES


class _OpRecorder(TorchDispatchMode):
    """Records each aten overload with its operands (Python scalars stay visible as such)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(f"{func}({', '.join(describe_operand(a) for a in args)})")
        return func(*args, **(kwargs or {}))


def describe_operand(a: Any) -> str:
    """Short operand description: dtype, shape and strides of tensors; type and value of scalars."""
    if isinstance(a, torch.Tensor):
        return f"{str(a.dtype).removeprefix('torch.')}{list(a.shape)} stride{tuple(a.stride())}"
    if isinstance(a, float):
        return f"python float {a!r} (fp64)"
    return repr(a)


def eager_trace_with_kernels(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> tuple[list[str], list[str], list[str]]:
    """(aten overloads with operands, profiler op rows, device kernel names) of one eager call.
    The device kernel names are what the profiler records below the aten op: CUDA kernels on a GPU
    run; on the CPU the profiler records no kernel below the aten op, so the list is empty."""
    from torch.autograd import DeviceType

    recorder = _OpRecorder()
    with recorder:
        fn(x)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if x.device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        fn(x)
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)
    rows, kernels = [], []
    for e in prof.events():
        if e.device_type != DeviceType.CPU:
            kernels.append(e.name)
            continue
        depth, parent = 0, e.cpu_parent
        while parent is not None:
            depth, parent = depth + 1, parent.cpu_parent
        # torch before 2.8 records no input dtypes on profiler events: the trace then says so.
        dtypes = getattr(e, "input_dtypes", "not recorded by this torch")
        rows.append(f"{'  ' * depth}{e.name} shapes={e.input_shapes} dtypes={dtypes}")
    return recorder.calls, rows, kernels


def multiply_lines(code: str) -> list[str]:
    """The generated lines that multiply (the instruction that applies the scalar), constants masked."""
    return [
        re.sub(r"\d+\.\d+(e-?\d+)?", "<const>", line)
        for line in kernel_lines(code)
        if re.search(r"\* |tl\.fma|fma\(", line)
    ]


_MUL_CONST = re.compile(r"(static_cast<float>\(|tl\.full\(|= )(-?\d+\.\d+(e-?\d+)?)")


def kernel_lines(code: str) -> list[str]:
    """The lines of generated code that load the input, hold a constant, multiply and store."""
    keep = re.compile(
        r"(load|convert|Vectorized|static_cast<float>\(\d|\* |tl\.full|\.to\(|= -?\d+\.\d|constant|store)"
    )
    lines = []
    for line in code.splitlines():
        s = line.strip()
        if keep.search(s) and not s.startswith(("#", "from ", "import ", "def ", "async_compile")) and "tmp" in s:
            lines.append(s)
    return lines


def code_constants(code: str) -> list[float]:
    """Floating-point literals in the kernel lines (the multiplier each fused kernel applies)."""
    return sorted({float(m.group(2)) for line in kernel_lines(code) for m in _MUL_CONST.finditer(line)})


def _mask_constants(code: str) -> str:
    return re.sub(r"\d+\.\d+(e-?\d+)?", "<const>", "\n".join(kernel_lines(code)))


#: One eager trace: (aten overloads with operands, profiler op rows, device kernel names).
Trace = tuple[list[str], list[str], list[str]]


@dataclass(frozen=True)
class C1Runs:
    """Every path's and control's outputs (``input``, ``eager_<name>``, ``fused_<name>``), the eager
    traces of the paths and route controls, and their fused functions with first-call seconds."""

    outputs: dict[str, torch.Tensor]
    traces: dict[str, Trace]
    fusion: dict[str, tuple[FusedFunction, float]]


def run_paths(x: torch.Tensor, backend: str, options: dict[str, Any]) -> C1Runs:
    """Paths A and B and the route controls, eager (traced) and fused; the further controls eager."""
    outputs: dict[str, torch.Tensor] = {"input": x}
    traces: dict[str, Trace] = {}
    fusion: dict[str, tuple[FusedFunction, float]] = {}
    for name, fn in {**PATHS, **ROUTE_CONTROLS}.items():
        outputs[f"eager_{name}"] = fn(x)
        traces[name] = eager_trace_with_kernels(fn, x)
        compiled = fused(fn, backend, options)
        start = time.perf_counter()
        outputs[f"fused_{name}"] = compiled(x)
        fusion[name] = (compiled, time.perf_counter() - start)
    for name, fn in CONTROLS.items():
        outputs[f"eager_{name}"] = fn(x)
    return C1Runs(outputs, traces, fusion)


def planned_compiles() -> int:
    """Fused graphs C1 compiles (:func:`run_paths`): paths A and B and the two route controls, once each."""
    return len(PATHS) + len(ROUTE_CONTROLS)


def stored_tensor_bytes(profile: str) -> int:
    """Bytes of the tensors ``c1_path_outputs`` stores at ``profile``'s input shape (:func:`run_paths`'s
    outputs, all fp16): the input, every path and control eager, and the paths and route controls fused."""
    eager = len(PATHS) + len(ROUTE_CONTROLS) + len(CONTROLS)
    return math.prod(SIZES[profile].shape) * 2 * (1 + eager + planned_compiles())


def _doc(name: str) -> str:
    fn = ROUTE_CONTROLS.get(name) or CONTROLS[name]
    if fn.__doc__ is None:
        raise ValueError(f"control {name} has no docstring to describe it in the mechanism evidence")
    return fn.__doc__.strip()


_FUSION_EVIDENCE_KEYS = ("graph_count", "graph_breaks", "kernel_count", "kernel_names", "code_sha256")


def mechanism_evidence(runs: C1Runs) -> tuple[pl.DataFrame, bool]:
    """Why the paths differ: per path the eager op trace, the fused kernel lines, constants and fusion
    evidence; whether each control reproduces its target; and whether A's and B's fused kernels are
    identical once constants are masked (returned as well)."""
    evidence: list[dict[str, Any]] = []
    for name in PATHS:
        ops, prof_rows, _ = runs.traces[name]
        compiled = runs.fusion[name][0]
        evidence += [{"mode": "eager", "path": name, "source": "dispatch", "detail": c} for c in ops]
        evidence += [{"mode": "eager", "path": name, "source": "profiler", "detail": r} for r in prof_rows]
        evidence += [
            {"mode": "fused", "path": name, "source": "generated_code", "detail": line}
            for line in kernel_lines(compiled.code)
        ]
        constants = ", ".join(map(repr, code_constants(compiled.code))) or "none found"
        evidence.append({"mode": "fused", "path": name, "source": "constants", "detail": constants})
        evidence += [
            {"mode": "fused", "path": name, "source": "fusion_evidence", "detail": f"{k}={v}"}
            for k, v in evidence_fields(compiled.evidence, _FUSION_EVIDENCE_KEYS).items()
        ]
    for name, target in CONTROL_TARGET.items():
        reproduces = bit_equal(runs.outputs[f"eager_{name}"], runs.outputs[f"eager_{target}"])
        detail = f"{_doc(name)} bit-equal to eager {target}: {reproduces}"
        evidence.append({"mode": "eager", "path": name, "source": "control", "detail": detail})
    same = _mask_constants(runs.fusion["A"][0].code) == _mask_constants(runs.fusion["B"][0].code)
    detail = f"kernel lines identical once constants are masked: {same}"
    evidence.append({"mode": "fused", "path": "A vs B", "source": "generated_code", "detail": detail})
    return pl.DataFrame(evidence), same


def _multiplier(value: str, dtype: torch.dtype) -> float:
    return path_a_multiplier(dtype) if "compute" in value else rounded_scalar(dtype)


def _eager_route_row(name: str, trace: Trace, a_kernels: list[str], dtype: torch.dtype) -> dict[str, Any]:
    """The eager record of one route: its aten ops and the device kernels the profiler saw."""
    ops, _, kernels = trace
    route, value = ROUTE_AND_VALUE[name]
    if kernels:
        kernel_text = "; ".join(dict.fromkeys(kernels))
        verdict = (
            "same" if name == "A" or list(dict.fromkeys(kernels)) == list(dict.fromkeys(a_kernels)) else "different"
        )
        why = f"profiler device kernels {'equal to' if verdict == 'same' else 'differ from'} path A's"
    else:
        kernel_text = "none recorded below the aten op (the CPU profiler records aten ops only)"
        verdict = "reference" if name == "A" else "not observable"
        why = "the CPU profiler records aten ops only, so the kernel below aten::mul is not observable from the trace"
    return {
        "mode": "eager",
        "path": name,
        "route": route,
        "value": value,
        "multiplier": _multiplier(value, dtype),
        "aten_ops": " ; ".join(ops),
        "multiply_op": " ; ".join(o for o in ops if o.startswith("aten.mul")),
        "kernels": kernel_text,
        "multiply_lines": "",
        "constants": "",
        "instruction_vs_A": "reference" if name == "A" else verdict,
        "instruction_evidence": why,
    }


def _fused_route_row(name: str, compiled: FusedFunction, a_code: str, dtype: torch.dtype) -> dict[str, Any]:
    """The fused record of one route: its kernel's multiply lines and constants, against path A's."""
    route, value = ROUTE_AND_VALUE[name]
    lines = multiply_lines(compiled.code)
    same_code = lines == multiply_lines(a_code) and _mask_constants(compiled.code) == _mask_constants(a_code)
    verdict = "reference" if name == "A" else ("same" if same_code else "different")
    return {
        "mode": "fused",
        "path": name,
        "route": route,
        "value": value,
        "multiplier": _multiplier(value, dtype),
        "aten_ops": "",
        "multiply_op": "",
        "kernels": ", ".join(compiled.evidence.kernel_names),
        "multiply_lines": " | ".join(lines),
        "constants": ", ".join(map(repr, code_constants(compiled.code))) or "none found",
        "instruction_vs_A": verdict,
        "instruction_evidence": "the generated kernel's lines equal path A's once constants are masked"
        if verdict in ("same", "reference")
        else "the generated kernel's lines differ from path A's with constants masked",
    }


def route_records(runs: C1Runs, dtype: torch.dtype) -> pl.DataFrame:
    """Per route and mode: what shows which instruction or kernel ran, and whether it is path A's."""
    a_kernels = runs.traces["A"][2]
    a_code = runs.fusion["A"][0].code
    rows = []
    for name in (*PATHS, *ROUTE_CONTROLS):
        rows.append(_eager_route_row(name, runs.traces[name], a_kernels, dtype))
        rows.append(_fused_route_row(name, runs.fusion[name][0], a_code, dtype))
    return pl.DataFrame(rows)
