"""Task C1 (main document §1.2 (2)): tensor x scalar versus tensor x broadcast tensor.

Path A multiplies an fp16 tensor by the Python scalar 0.7; path B first materializes 0.7 as an
fp16 0-dim tensor and broadcasts it (``expand_as``). The two paths differ in two ways at once: the
*route* (a scalar operand vs a broadcast tensor operand, i.e. possibly another instruction) and
the *value* (path A multiplies by 0.7 in its compute dtype, fp32 opmath for fp16; path B by 0.7
rounded to fp16, 0.7001953125). Two controls separate them:

* ``control_route_only``: path B's route with path A's value: a broadcast tensor holding the
  multiplier path A uses, in the compute dtype (fp32 for fp16 inputs), the product rounded back
  to the input dtype;
* ``control_value_only``: path A's route with path B's value: the Python scalar 0.7001953125.

Every path and control runs eager and fused. Per route, ``c1_route_records`` keeps what shows
which instruction or kernel ran: the aten ops with their operand kinds (dispatch trace), the
profiler's kernel rows (device kernel names on CUDA) and the fused kernel's multiply lines and
constant. Where the routes lower to the same instruction, the table says so, under the plan's
fallback ("observe instruction changes in one path and disclose honestly").
"""

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg
import polars as pl
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from precisionkit import FusedFunction, bit_equal, error_stats, fp64_reference, fused, ulp_diff

from ...resources import ExperimentSettings
from ...tables import markdown_table
from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    Rule,
    claim_check,
    claim_result,
    combine,
    finding_check,
    finding_result,
)
from .spec import GROUP

SCALAR = 0.7
#: Histogram bins of the ULP distance between two paths; the last bin collects everything above.
HIST_MAX = 4
#: The seed's "very few higher than 1 ULP", as a share of elements.
MAX_FRACTION_ABOVE_1ULP = 0.01

RULE = Rule(
    claim="§1.2 (2): tensor x scalar (path A) and tensor x broadcast scalar tensor (path B) are not completely "
    "consistent; most elements differ by at most 1 ULP, very few by more",
    metric="per mode (eager, fused): whether A and B are bit-identical, and the share of elements whose ULP "
    "distance between A and B is >= 2",
    decision=f"contradicted when, in either mode, more than {100 * MAX_FRACTION_ABOVE_1ULP:g}% of elements differ "
    "by >= 2 ULP; inconclusive when A and B are bit-identical in a mode (nothing differs, so the data says nothing "
    "about instruction selection: the plan's feasibility risk that both spellings lower to one instruction); "
    "supported when both modes differ and stay within the share",
    threshold=100 * MAX_FRACTION_ABOVE_1ULP,
    unit="% of elements with ULP distance >= 2",
    confidence=None,
    sample_size="one seeded fp16 U(-1, 1) input of the profile's c1_shape ([1024, 1024] in the seed profile), "
    "every element, eager and fused",
    derivation="the plan states 'very few' without a number; 1% is this harness's reading, fixed before the data. "
    "Two correctly rounded products of x with multipliers 0.7 and fp16(0.7) (relative gap 2.8e-4, under 0.6 fp16 "
    "ULP of the product) cannot be 2 ULP apart away from binade edges, so the share is about a clear margin, not "
    "a tight bound",
)


def path_a(x: torch.Tensor) -> torch.Tensor:
    """Tensor x Python scalar: the framework picks its scalar route (``muls`` on an NPU)."""
    return x * SCALAR


def path_b(x: torch.Tensor) -> torch.Tensor:
    """Tensor x broadcast tensor: 0.7 becomes an fp16 tensor first, then a full-size view."""
    return x * torch.tensor(SCALAR, dtype=x.dtype, device=x.device).expand_as(x)


#: 0.7 stored in each float dtype, computed once on the host (a Python float, device-independent;
#: a constant for torch.compile, where a tensor's .item() would break the graph).
_ROUNDED = {
    dt: float(torch.tensor(SCALAR, dtype=dt, device="cpu"))
    for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
}


def rounded_scalar(dtype: torch.dtype) -> float:
    """The value the scalar takes once stored in ``dtype`` (0.7 -> 0.7001953125 in fp16)."""
    return _ROUNDED[dtype]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype path A's multiply runs in: fp32 opmath for fp16/bf16 (eager CPU and CUDA kernels
    and Inductor's generated code upcast), the dtype itself otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def path_a_multiplier(dtype: torch.dtype) -> float:
    """The value path A multiplies by: 0.7 rounded to the compute dtype (fp32: 0.699999988079071)."""
    return rounded_scalar(compute_dtype(dtype))


def control_route_only(x: torch.Tensor) -> torch.Tensor:
    """Path B's route (a broadcast tensor operand) with path A's value (0.7 in the compute dtype)."""
    scalar = torch.tensor(SCALAR, dtype=compute_dtype(x.dtype), device=x.device)
    return (x * scalar.expand_as(x)).to(x.dtype)


def control_value_only(x: torch.Tensor) -> torch.Tensor:
    """Path A's route (a Python scalar) with path B's value (0.7 rounded to the input dtype)."""
    return x * rounded_scalar(x.dtype)


def control_0dim_tensor(x: torch.Tensor) -> torch.Tensor:
    """Path B's rounded fp16 value without the broadcast (a 0-dim tensor takes the scalar route)."""
    return x * torch.tensor(SCALAR, dtype=x.dtype, device=x.device)


def control_fp32_opmath(x: torch.Tensor) -> torch.Tensor:
    """Path A spelled out: upcast to fp32, multiply by fp32(0.7), round once to the input dtype."""
    return (x.float() * torch.tensor(SCALAR, dtype=torch.float32, device=x.device)).to(x.dtype)


PATHS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"A": path_a, "B": path_b}
#: The two controls of the route/value decomposition; they run eager and fused like the paths.
ROUTE_CONTROLS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "control_route_only": control_route_only,
    "control_value_only": control_value_only,
}
#: Further eager controls of the mechanism.
CONTROLS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "control_0dim_tensor": control_0dim_tensor,
    "control_fp32_opmath": control_fp32_opmath,
}
#: Which path each control is meant to reproduce if the route does not matter.
CONTROL_TARGET = {
    "control_route_only": "A",
    "control_value_only": "B",
    "control_0dim_tensor": "B",
    "control_fp32_opmath": "A",
}
#: (route, value) of each path and control, for the route records.
ROUTE_AND_VALUE = {
    "A": ("Python scalar", "0.7 in the compute dtype"),
    "B": ("broadcast tensor", "0.7 rounded to the input dtype"),
    "control_route_only": ("broadcast tensor", "0.7 in the compute dtype"),
    "control_value_only": ("Python scalar", "0.7 rounded to the input dtype"),
}


def make_input(shape: tuple[int, ...], seed: int, device: torch.device) -> torch.Tensor:
    """fp16 U(-1, 1): drawn in fp64 on the CPU (device-independent), then rounded once."""
    if len(shape) == 0 or any(s <= 0 for s in shape):
        raise ValueError(f"C1 input shape must have positive sizes, got {shape}")
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
    return x.to(torch.float16).to(device)


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


def eager_trace(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> tuple[list[str], list[str]]:
    """(aten overloads with operands, profiler op rows) of one eager call of ``fn``."""
    ops, rows, _ = eager_trace_with_kernels(fn, x)
    return ops, rows


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
        rows.append(f"{'  ' * depth}{e.name} shapes={e.input_shapes} dtypes={e.input_dtypes}")
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


def ulp_row(name: str, a: torch.Tensor, b: torch.Tensor) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """ULP = 0 / = 1 / >= 2 shares of one comparison, and its histogram rows."""
    d = ulp_diff(a, b).reshape(-1).cpu()
    n = d.numel()
    counts = torch.bincount(torch.clamp(d, max=HIST_MAX), minlength=HIST_MAX + 1)
    row = {
        "comparison": name,
        "n": n,
        "bit_equal": bool(bit_equal(a, b)),
        "ulp0_pct": 100.0 * int(counts[0]) / n,
        "ulp1_pct": 100.0 * int(counts[1]) / n,
        "ulp_ge2_pct": 100.0 * int(counts[2:].sum()) / n,
        "ulp_max": int(d.max()),
    }
    hist = [
        {
            "comparison": name,
            "ulp": (str(k) if k < HIST_MAX else f">={HIST_MAX}"),
            "count": int(counts[k]),
            "fraction": int(counts[k]) / n,
        }
        for k in range(HIST_MAX + 1)
    ]
    return row, hist


OUTS = {
    "c1_path_outputs": dg.AssetOut(
        description="C1 (§1.2 (2)): the fp16 input and every path's and control's output, eager and fused.",
        kinds={"pytorch", "safetensors"},
    ),
    "c1_ulp_distribution": dg.AssetOut(
        description="C1 (§1.2 (2)): ULP = 0 / = 1 / >= 2 percentages per comparison: A vs B per mode, the route-only and value-only controls against A, eager vs fused, further controls.",
        kinds={"polars"},
    ),
    "c1_ulp_histogram": dg.AssetOut(
        description="C1 (§1.2 (2)): ULP-distance histogram per comparison (long format).", kinds={"polars"}
    ),
    "c1_error_vs_fp64": dg.AssetOut(
        description="C1 (§1.2 (2)): each path's and control's error against the fp64 reference (precisionkit.error_stats).",
        kinds={"polars"},
    ),
    "c1_mechanism_evidence": dg.AssetOut(
        description="C1 (§1.2 (2)): why the paths differ: eager op trace, fused kernel lines and constants, control runs.",
        kinds={"polars"},
    ),
    "c1_route_records": dg.AssetOut(
        description="C1 (§1.2 (2)): per mode and route (A, B and the two controls): the operand route and value, the aten ops, the kernels the profiler saw, the fused kernel's multiply lines and constant, and whether the instruction differs from path A's.",
        kinds={"polars"},
    ),
}


#: The comparisons of the distribution table, per mode: (label, output a, output b).
def _comparisons(mode: str) -> list[tuple[str, str, str]]:
    return [
        (f"{mode} A vs B", f"{mode}_A", f"{mode}_B"),
        (f"{mode} route only: control_route_only vs A", f"{mode}_control_route_only", f"{mode}_A"),
        (f"{mode} value only: control_value_only vs A", f"{mode}_control_value_only", f"{mode}_A"),
        (f"{mode} route at B's value: B vs control_value_only", f"{mode}_B", f"{mode}_control_value_only"),
    ]


def route_statement(records: pl.DataFrame, distribution: pl.DataFrame) -> str:
    """The route/value decomposition and the instruction evidence in words, filled from the tables."""
    rows = {r["comparison"]: r for r in distribution.iter_rows(named=True)}
    parts = []
    for mode in ("eager", "fused"):
        ab, route, value = (
            rows[f"{mode} A vs B"],
            rows[f"{mode} route only: control_route_only vs A"],
            rows[f"{mode} value only: control_value_only vs A"],
        )
        rec = records.filter(pl.col("mode") == mode)
        other = rec.filter(pl.col("path").is_in(["B", "control_route_only"]))
        same = other.filter(pl.col("instruction_vs_A") == "same")
        unseen = other.filter(pl.col("instruction_vs_A") == "not observable")
        parts.append(
            f"{mode}: A and B differ in {100 - ab['ulp0_pct']:.2f}% of elements (max {ab['ulp_max']} ULP); changing only the route "
            f"(control_route_only vs A) changes {100 - route['ulp0_pct']:.2f}% (max {route['ulp_max']} ULP); changing only the value "
            f"(control_value_only vs A) changes {100 - value['ulp0_pct']:.2f}% (max {value['ulp_max']} ULP)"
            + (
                "; control_value_only reproduces B bit for bit"
                if rows[f"{mode} route at B's value: B vs control_value_only"]["bit_equal"]
                else ""
            )
            + (
                f"; the broadcast-tensor route{'s' if same.height > 1 else ''} ({', '.join(same['path'].to_list())}) lower to the same "
                "instruction as path A (" + same["instruction_evidence"][0] + ")"
                if same.height
                else ""
            )
            + (
                f"; the instruction of {', '.join(unseen['path'].to_list())} is not observable here ({unseen['instruction_evidence'][0]})"
                if unseen.height
                else ""
            )
        )
    same_everywhere = records.filter(pl.col("path").is_in(["B", "control_route_only"]))["instruction_vs_A"].to_list()
    if same_everywhere and all(v != "different" for v in same_everywhere):
        parts.append(
            "No run here shows the two routes executing different instructions, so under the plan's fallback this experiment "
            "observes the instruction of each route separately and discloses that the A/B difference it measures is "
            "explained by the controls above, not by an observed instruction change"
        )
    elif "different" in same_everywhere:
        diff = records.filter(pl.col("instruction_vs_A") == "different")
        parts.append(
            "Instruction changes observed in: "
            + ", ".join(f"{r['mode']} {r['path']}" for r in diff.iter_rows(named=True))
        )
    return ". ".join(parts) + "."


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


def _doc(name: str) -> str:
    fn = ROUTE_CONTROLS.get(name) or CONTROLS[name]
    if fn.__doc__ is None:
        raise ValueError(f"control {name} has no docstring to describe it in the mechanism evidence")
    return fn.__doc__.strip()


_FUSION_EVIDENCE_KEYS = ("kernel_count", "kernel_names", "graph_count", "graph_breaks", "code_sha256")


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
            for k, v in compiled.evidence.as_metadata().items()
            if k in _FUSION_EVIDENCE_KEYS
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


def all_comparisons() -> dict[str, tuple[str, str]]:
    """Every comparison of the distribution table: label -> (output a, output b)."""
    comparisons = {label: (a, b) for mode in ("eager", "fused") for label, a, b in _comparisons(mode)}
    comparisons.update(
        {
            "A eager vs fused": ("eager_A", "fused_A"),
            "B eager vs fused": ("eager_B", "fused_B"),
            "eager control_0dim_tensor vs B": ("eager_control_0dim_tensor", "eager_B"),
            "eager control_fp32_opmath vs A": ("eager_control_fp32_opmath", "eager_A"),
        }
    )
    return comparisons


def ulp_tables(outputs: dict[str, torch.Tensor]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The ULP distribution (one row per comparison) and the long-format histogram."""
    rows, hist = [], []
    for label, (a, b) in all_comparisons().items():
        row, h = ulp_row(label, outputs[a], outputs[b])
        rows.append(row)
        hist += h
    return pl.DataFrame(rows), pl.DataFrame(hist)


#: The outputs judged against fp64 in ``c1_error_vs_fp64``, in table order.
ERROR_KEYS = (
    "eager_A",
    "eager_B",
    "fused_A",
    "fused_B",
    "eager_control_route_only",
    "eager_control_value_only",
    "fused_control_route_only",
    "fused_control_value_only",
)


def error_table(outputs: dict[str, torch.Tensor], ref: torch.Tensor) -> pl.DataFrame:
    """Each path's and route control's error against the fp64 reference (``None`` statistics dropped)."""
    rows = []
    for key in ERROR_KEYS:
        stats = error_stats(outputs[key], ref)
        rows.append({"path": key, **{k: v for k, v in stats.items() if v is not None}})
    return pl.DataFrame(rows)


def c1_notes(dtype: torch.dtype, statement: str) -> str:
    """The multipliers of both paths in words, followed by the route statement."""
    fp16_value = rounded_scalar(dtype)
    return (
        f"Path A multiplies by 0.7 in its compute dtype ({str(compute_dtype(dtype)).removeprefix('torch.')}: "
        f"{path_a_multiplier(dtype)!r}); path B by 0.7 stored in {str(dtype).removeprefix('torch.')} ({fp16_value!r}), "
        f"a relative change of {fp16_value / SCALAR - 1:.3e}. " + statement
    )


def distribution_metadata(distribution: pl.DataFrame, notes: str) -> dict[str, Any]:
    """Metadata of ``c1_ulp_distribution``: A vs B shares per mode, the table and the notes."""
    head = {r["comparison"]: r for r in distribution.iter_rows(named=True)}
    shares = {
        f"{mode}_AB_{col}": head[f"{mode} A vs B"][col]
        for mode in ("eager", "fused")
        for col in ("ulp0_pct", "ulp1_pct", "ulp_ge2_pct")
    }
    return shares | {"table": dg.MetadataValue.md(markdown_table(distribution)), "notes": dg.MetadataValue.md(notes)}


def errors_metadata(errors: pl.DataFrame) -> dict[str, Any]:
    """Metadata of ``c1_error_vs_fp64``: max and mean ULP error per path, and the table."""
    rows = list(errors.iter_rows(named=True))
    columns = ("path", "ulp_max", "ulp_mean", "rel_max", "exact_fraction", "error_balance")
    return (
        {f"{r['path']}.ulp_max": r["ulp_max"] for r in rows}
        | {f"{r['path']}.ulp_mean": r["ulp_mean"] for r in rows}
        | {"table": dg.MetadataValue.md(markdown_table(errors.select(*columns)))}
    )


def evidence_metadata(runs: C1Runs, evidence: pl.DataFrame, same_instructions: bool, notes: str) -> dict[str, Any]:
    """Metadata of ``c1_mechanism_evidence``: the constants, the evidence by source, and every fused
    function's fusion evidence and first-call seconds."""
    fusion_meta: dict[str, Any] = {}
    for name, (compiled, seconds) in runs.fusion.items():
        fusion_meta.update(
            {
                f"fused_{name}.{k}": v
                for k, v in compiled.evidence.as_metadata().items()
                if isinstance(v, (int, float, str))
            }
        )
        fusion_meta[f"fused_{name}.first_call_seconds"] = round(seconds, 3)
    return {
        "fused_kernels_identical_but_constants": same_instructions,
        "constants_A": ", ".join(map(repr, code_constants(runs.fusion["A"][0].code))),
        "constants_B": ", ".join(map(repr, code_constants(runs.fusion["B"][0].code))),
        "evidence": dg.MetadataValue.md(_evidence_md(evidence)),
        "notes": dg.MetadataValue.md(notes),
        **fusion_meta,
    }


@dg.multi_asset(outs=OUTS, group_name=GROUP, pool="compute_device")
def c1_instruction_selection(context: dg.AssetExecutionContext, settings: ExperimentSettings):
    """Runs paths A and B and the route/value controls eager and fused on one seeded fp16 input."""
    seed = settings.derived_seed("c1", "input")
    x = make_input(tuple(settings.get_profile().c1_shape), seed, settings.torch_device())
    ref = fp64_reference(path_a, x)  # fp64: both paths compute x * 0.7 exactly
    runs = run_paths(x, settings.backend, settings.options())
    evidence, same_instructions = mechanism_evidence(runs)
    records = route_records(runs, x.dtype)
    distribution, histogram = ulp_tables(runs.outputs)
    errors = error_table(runs.outputs, ref)
    statement = route_statement(records, distribution)
    notes = c1_notes(x.dtype, statement)
    inputs_meta: dict[str, Any] = {
        "shape": str(list(x.shape)),
        "seed": seed,
        "scalar": SCALAR,
        "scalar_in_fp16": rounded_scalar(x.dtype),
        "path_a_multiplier": path_a_multiplier(x.dtype),
    }
    yield dg.Output({k: v.contiguous() for k, v in runs.outputs.items()}, "c1_path_outputs", metadata=inputs_meta)
    yield dg.Output(distribution, "c1_ulp_distribution", metadata=distribution_metadata(distribution, notes))
    yield dg.Output(histogram, "c1_ulp_histogram", metadata={"table": dg.MetadataValue.md(markdown_table(histogram))})
    yield dg.Output(errors, "c1_error_vs_fp64", metadata=errors_metadata(errors))
    yield dg.Output(
        evidence, "c1_mechanism_evidence", metadata=evidence_metadata(runs, evidence, same_instructions, notes)
    )
    yield dg.Output(
        records,
        "c1_route_records",
        metadata={
            "statement": dg.MetadataValue.md(statement),
            "table": dg.MetadataValue.md(markdown_table(records.drop("aten_ops"))),
        },
    )


def _evidence_md(df: pl.DataFrame) -> str:
    parts = []
    for (mode, path, source), group in df.group_by(["mode", "path", "source"], maintain_order=True):
        parts.append(f"**{mode} / {path} / {source}**\n```\n" + "\n".join(group["detail"].to_list()) + "\n```")
    return "\n\n".join(parts)


def _row(df: pl.DataFrame, comparison: str) -> dict[str, Any]:
    match = df.filter(pl.col("comparison") == comparison)
    if match.height != 1:
        raise ValueError(f"c1_ulp_distribution has no single row {comparison!r}")
    return match.row(0, named=True)


@claim_check(
    rule=RULE,
    asset="c1_ulp_distribution",
    description="Claim (§1.2 (2)): paths A and B are not bit-identical, most elements within 1 ULP (judged per mode, eager and fused).",
)
def c1_paths_differ_mostly_within_1ulp(c1_ulp_distribution: pl.DataFrame) -> dg.AssetCheckResult:
    meta, verdicts, reasons = {}, [], []
    for mode in ("eager", "fused"):
        r = _row(c1_ulp_distribution, f"{mode} A vs B")
        meta.update(
            {
                f"{mode}.ulp0_pct": r["ulp0_pct"],
                f"{mode}.ulp1_pct": r["ulp1_pct"],
                f"{mode}.ulp_ge2_pct": r["ulp_ge2_pct"],
                f"{mode}.ulp_max": r["ulp_max"],
            }
        )
        if r["ulp_ge2_pct"] > 100 * MAX_FRACTION_ABOVE_1ULP:
            verdicts.append(CONTRADICTED)
            reasons.append(
                f"{mode}: {r['ulp_ge2_pct']:.3f}% of elements differ by >= 2 ULP (rule: at most {100 * MAX_FRACTION_ABOVE_1ULP:g}%)"
            )
        elif r["bit_equal"]:
            verdicts.append(INCONCLUSIVE)
            reasons.append(f"{mode}: A and B are bit-identical on this backend (no difference to explain)")
        else:
            verdicts.append(SUPPORTED)
            reasons.append(
                f"{mode}: {100 - r['ulp0_pct']:.2f}% of elements differ, {r['ulp_ge2_pct']:.3f}% by >= 2 ULP"
            )
    return claim_result(combine(verdicts), RULE, "; ".join(reasons), meta)


@finding_check(
    asset="c1_mechanism_evidence",
    additional_ins={"outputs": dg.AssetIn("c1_path_outputs")},
    description="Finding about the mechanism: the plan attributes the A/B difference to instruction selection. The two "
    "controls separate route from value: WARN when changing only the value (path A's route fed B's fp16 value) "
    "reproduces B bit for bit while changing only the route (B's broadcast route fed A's value) reproduces A, i.e. the "
    "operand's value, not the route, explains the difference. Judged per mode (eager, fused). Not a verdict on the "
    "claim (the ULP distribution is).",
)
def c1_difference_is_instruction_selection(
    c1_mechanism_evidence: pl.DataFrame, outputs: dict[str, torch.Tensor]
) -> dg.AssetCheckResult:
    meta: dict[str, Any] = {}
    findings = []
    code_rows = c1_mechanism_evidence.filter((pl.col("source") == "generated_code") & (pl.col("path") == "A vs B"))
    same_code = bool(code_rows.height) and code_rows["detail"][0].endswith("True")
    for mode in ("eager", "fused"):
        value_is_b = bit_equal(outputs[f"{mode}_control_value_only"], outputs[f"{mode}_B"])
        route_is_a = bit_equal(outputs[f"{mode}_control_route_only"], outputs[f"{mode}_A"])
        meta[f"{mode}.control_value_only_equals_B"] = value_is_b
        meta[f"{mode}.control_route_only_equals_A"] = route_is_a
        if value_is_b and route_is_a and not bit_equal(outputs[f"{mode}_A"], outputs[f"{mode}_B"]):
            findings.append(
                f"{mode}: the A/B difference is the scalar's value, not the route: path A's route fed B's value "
                f"({rounded_scalar(outputs['input'].dtype)!r}) reproduces B bit for bit, and B's broadcast route fed A's value "
                f"({path_a_multiplier(outputs['input'].dtype)!r}) reproduces A bit for bit"
                + (
                    "; the fused kernels of A and B are identical except for that constant"
                    if mode == "fused" and same_code
                    else ""
                )
            )
    meta["control_0dim_tensor_equals_B"] = bit_equal(outputs["eager_control_0dim_tensor"], outputs["eager_B"])
    meta["fused_kernels_identical_but_constants"] = same_code
    meta["finding"] = "; ".join(findings) or "none"
    return finding_result(findings, meta)


@finding_check(
    asset="c1_error_vs_fp64",
    description="Finding: error against fp64 with the route held fixed and the value changed (A vs control_value_only: "
    "does the higher-precision multiplier give the smaller error?) and with the value held fixed and the route changed "
    "(A vs control_route_only: does the route alone change the error?), in each mode; WARN when the higher-precision "
    "value is farther from fp64, or when the route alone changes the mean error.",
)
def c1_higher_precision_scalar_is_closer(c1_error_vs_fp64: pl.DataFrame) -> dg.AssetCheckResult:
    err = {r["path"]: r for r in c1_error_vs_fp64.iter_rows(named=True)}
    meta, findings = {}, []
    for mode in ("eager", "fused"):
        a, b = err[f"{mode}_A"]["ulp_mean"], err[f"{mode}_B"]["ulp_mean"]
        meta[f"{mode}.A_ulp_mean"], meta[f"{mode}.B_ulp_mean"] = a, b
        value = err.get(f"{mode}_control_value_only")
        route = err.get(f"{mode}_control_route_only")
        if value is not None:
            meta[f"{mode}.control_value_only_ulp_mean"] = value["ulp_mean"]
            if a > value["ulp_mean"]:
                findings.append(
                    f"{mode}: with the route fixed, A's value gives mean ULP error {a:.4f} > {value['ulp_mean']:.4f} with B's value"
                )
        elif a > b:
            findings.append(f"{mode}: A mean ULP error {a:.4f} > B {b:.4f}")
        if route is not None:
            meta[f"{mode}.control_route_only_ulp_mean"] = route["ulp_mean"]
            if route["ulp_mean"] != a:
                findings.append(
                    f"{mode}: with the value fixed, the broadcast route's mean ULP error {route['ulp_mean']:.4f} differs from A's {a:.4f}"
                )
    meta["finding"] = "; ".join(findings) or "none"
    return finding_result(findings, meta)
