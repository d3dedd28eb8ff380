"""C3's computation: the bit-trick rsqrt and reciprocal with N Newton steps (path B), the framework
paths (path A: eager, fused and under the approximate-math switches), the search for a framework
switch, and the iteration table and ULP histograms of a set of paths against fp64.

Plain functions (no Dagster definitions); the asset in :mod:`.assets` calls them.
"""

import math
import time
from collections.abc import Callable
from typing import Any

import polars as pl
import torch

from precisionkit import bit_equal, error_stats, fused, round_to_dtype, ulp_diff
from precisionkit.evidence import evidence_fields
from precisionkit.ulp import spacing, ulp_histogram

from ...resources import ExperimentSettings
from .rules import KNOB_PATTERN, METHOD
from .spec import SIZES

MAGIC = 0x5F3759DF
#: Bit-trick estimate of 1/y on the fp32 pattern (the reciprocal's counterpart of MAGIC).
RECIP_MAGIC = 0x7EF311C3
#: Inductor options that switch approximate math, per device type (each runs path A once more).
APPROX_KNOBS: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {"cpp.enable_floating_point_contract_flag=fast": {"cpp.enable_floating_point_contract_flag": "fast"}},
    "cuda": {
        "use_fast_math=True": {"use_fast_math": True},
        "eager_numerics.division_rounding=True": {"eager_numerics.division_rounding": True},
    },
}
ITERATIONS = (0, 1, 2, 3)
LOW, HIGH = 0.01, 100.0
#: Histogram bins of integer ULP distance; the last bin collects everything above.
HIST_MAX = 8


def bit_trick_rsqrt(x: torch.Tensor, iterations: int, compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """1/sqrt(x) from the magic-constant estimate plus ``iterations`` Newton steps in ``compute_dtype``.

    The estimate is always formed on the fp32 bit pattern (the trick is defined for fp32); it is
    then cast to ``compute_dtype`` and refined there. Returns ``compute_dtype`` (not yet rounded
    to the input dtype), so the caller can measure the error before and after that rounding.
    """
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    if not x.is_floating_point():
        raise TypeError(f"bit_trick_rsqrt needs a floating tensor, got {x.dtype}")
    x32 = x.to(torch.float32)
    y = (MAGIC - (x32.view(torch.int32) >> 1)).view(torch.float32).to(compute_dtype)
    xc = x.to(compute_dtype)
    half_x = 0.5 * xc
    for _ in range(iterations):
        y = y * (1.5 - half_x * y * y)
    return y


def bit_trick_reciprocal(y: torch.Tensor, iterations: int, compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """1/y from the magic-constant estimate ``0x7ef311c3 - bits`` plus ``iterations`` Newton steps
    ``r <- r * (2 - y * r)`` in ``compute_dtype`` (each step roughly squares the relative error)."""
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    if not y.is_floating_point():
        raise TypeError(f"bit_trick_reciprocal needs a floating tensor, got {y.dtype}")
    r = (RECIP_MAGIC - y.to(torch.float32).view(torch.int32)).view(torch.float32).to(compute_dtype)
    yc = y.to(compute_dtype)
    for _ in range(iterations):
        r = r * (2.0 - yc * r)
    return r


def framework_knobs() -> pl.DataFrame:
    """Every Inductor config option whose name matches :data:`KNOB_PATTERN`, with its value: the
    search for an iteration-count or approximate-math switch, recorded rather than assumed."""
    import re

    from torch._inductor import config as inductor_config

    names = sorted(k for k in inductor_config.get_config_copy() if re.search(KNOB_PATTERN, k, re.IGNORECASE))
    return pl.DataFrame(
        {
            "option": names,
            "value": [repr(getattr_path(inductor_config, k)) for k in names],
            "names_an_iteration_count": [bool(re.search(r"newton|iteration", k, re.IGNORECASE)) for k in names],
        },
        schema={"option": pl.String, "value": pl.String, "names_an_iteration_count": pl.Boolean},
    )


def getattr_path(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def rsqrt_input(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """fp16 U(0.01, 100), drawn in fp64 on the CPU (device-independent), rounded once."""
    if len(shape) == 0 or any(s <= 0 for s in shape):
        raise ValueError(f"C3 input shape must have positive sizes, got {shape}")
    g = torch.Generator().manual_seed(seed)
    return (LOW + (HIGH - LOW) * torch.rand(shape, generator=g, dtype=torch.float64)).to(torch.float16)


#: Input classes of C3's elements, by code: the U(0.01, 100) body, then what is mixed into it.
INPUT_CLASSES = ("regular", "wide", "subnormal", "zero", "inf", "negative", "nan")
_CLASS = {name: code for code, name in enumerate(INPUT_CLASSES)}
_TINY = 2.0**-24  # smallest fp16 subnormal
_MIN_NORMAL, _MAX16 = 2.0**-14, 65504.0


def special_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The values C3 mixes into its input, as fp16 values and their class codes (:data:`INPUT_CLASSES`):
    +-0, +-inf, NaN; the subnormal extremes and 28 more subnormals (half negative); negative normals
    (rsqrt gives NaN, division a negative quotient); normals log-uniform over the whole fp16 range with
    its extremes (``wide``). Fixed values first, then seeded draws (CPU generator: device-independent)."""
    g = torch.Generator().manual_seed(seed)
    fixed = {
        "zero": [0.0, -0.0],
        "inf": [float("inf"), float("-inf")],
        "nan": [float("nan")],
        "subnormal": [_TINY, _MIN_NORMAL - _TINY, -_TINY, -(_MIN_NORMAL - _TINY)],
        "negative": [-1.0, -0.5, -100.0, -_MIN_NORMAL, -_MAX16],
        "wide": [_MIN_NORMAL, _MAX16],
    }
    subnormal = torch.randint(1, 1024, (28,), generator=g, dtype=torch.int64).double() * _TINY
    subnormal[14:] = -subnormal[14:]
    log_lo, log_hi = math.log(_MIN_NORMAL), math.log(_MAX16)
    wide = torch.exp(log_lo + (log_hi - log_lo) * torch.rand(62, generator=g, dtype=torch.float64))
    negative = -torch.exp(log_lo + (log_hi - log_lo) * torch.rand(11, generator=g, dtype=torch.float64))
    drawn = {"subnormal": subnormal.tolist(), "wide": wide.tolist(), "negative": negative.tolist()}
    values, codes = [], []
    for name in INPUT_CLASSES[1:]:
        for v in fixed.get(name, []) + drawn.get(name, []):
            values.append(v)
            codes.append(_CLASS[name])
    return torch.tensor(values, dtype=torch.float64).to(torch.float16), torch.tensor(codes, dtype=torch.int8)


def with_special_values(x: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (fp16, every element ``regular``) with :func:`special_inputs` written at seeded positions,
    and the class code of every element (int8, ``x``'s shape)."""
    values, codes = special_inputs(seed)
    if x.numel() < values.numel():
        raise ValueError(f"C3 input has {x.numel()} elements, fewer than the {values.numel()} special values")
    g = torch.Generator().manual_seed(seed)
    where = torch.randperm(x.numel(), generator=g)[: values.numel()]
    out, classes = x.clone().reshape(-1), torch.zeros(x.numel(), dtype=torch.int8)
    out[where], classes[where] = values, codes
    return out.reshape(x.shape), classes.reshape(x.shape)


def pair_classes(x_codes: torch.Tensor, y_codes: torch.Tensor) -> tuple[torch.Tensor, dict[int, str]]:
    """One class code per element of a two-operand op, and the names of the codes present
    ("x <class>, y <class>")."""
    k = len(INPUT_CLASSES)
    codes = x_codes.reshape(-1).to(torch.int64) + k * y_codes.reshape(-1).to(torch.int64)
    names = {int(c): f"x {INPUT_CLASSES[int(c) % k]}, y {INPUT_CLASSES[int(c) // k]}" for c in codes.unique()}
    return codes, names


def element_outcomes(out: torch.Tensor, ref: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per element of an fp16 result ``out`` against its fp64 reference ``ref``, as boolean masks:

    * ``special``: the exact result is NaN, +-inf or +-0 (no rounding involved);
    * ``class_mismatch``: a special result whose fp16 bits differ from the exact one's (NaN matches
      any NaN; the sign of an infinity or a zero counts), or NaN where a number is expected;
    * ``not_correctly_rounded``: a numeric result (not ``special``) whose bits differ from the fp64
      value rounded to fp16 (round to nearest, ties to even);
    * ``beyond_one_ulp``: a numeric result more than one fp16 step from that value (a flushed
      subnormal, an infinity for a finite result, an approximation's error)."""
    out = out.reshape(-1).cpu()
    ref = ref.reshape(-1).cpu()
    ref16 = round_to_dtype(ref, torch.float16)
    special = torch.isnan(ref) | torch.isinf(ref) | (ref == 0)
    same = (out.view(torch.int16) == ref16.view(torch.int16)) | (torch.isnan(out) & torch.isnan(ref16))
    numeric = ~special
    return {
        "special": special,
        "class_mismatch": (special & ~same) | (numeric & torch.isnan(out)),
        "not_correctly_rounded": numeric & ~same,
        "beyond_one_ulp": numeric & (ulp_diff(out, ref16) > 1),
    }


def rounding_table(
    op: str, paths: list["PathRow"], ref: torch.Tensor, codes: torch.Tensor, names: dict[int, str]
) -> pl.DataFrame:
    """Per path of ``paths`` and input class (``codes``, one per element; ``names`` by code): elements,
    special results, class mismatches, numeric results not correctly rounded and beyond one fp16 ULP
    (:func:`element_outcomes`). The C3 claims are judged on these counts."""
    codes = codes.reshape(-1).cpu().to(torch.int64)
    rows = []
    for name, _, _, _, out in paths:
        masks = element_outcomes(out, ref)
        for code in codes.unique().tolist():
            sel = codes == code
            rows.append(
                {
                    "op": op,
                    "path": name,
                    "input_class": names[int(code)],
                    "elements": int(sel.sum()),
                    "special_results": int((masks["special"] & sel).sum()),
                    "numeric_results": int((~masks["special"] & sel).sum()),
                    "class_mismatches": int((masks["class_mismatch"] & sel).sum()),
                    "not_correctly_rounded": int((masks["not_correctly_rounded"] & sel).sum()),
                    "beyond_one_ulp": int((masks["beyond_one_ulp"] & sel).sum()),
                }
            )
    return pl.DataFrame(rows)


#: The counts of :func:`rounding_table`, summed per op and path by :func:`rounding_per_path`.
ROUNDING_COUNTS = (
    "elements",
    "special_results",
    "numeric_results",
    "class_mismatches",
    "not_correctly_rounded",
    "beyond_one_ulp",
)


def rounding_per_path(rounding: pl.DataFrame) -> pl.DataFrame:
    """:func:`rounding_table`'s counts summed over the input classes, per op and path, with the share of
    numeric results not correctly rounded (0 where a path has no numeric result)."""
    per = rounding.group_by("op", "path", maintain_order=True).agg(pl.col(*ROUNDING_COUNTS).sum())
    return per.with_columns(
        (pl.col("not_correctly_rounded") / pl.col("numeric_results").clip(1)).alias("not_correctly_rounded_share")
    )


#: (path, iterations, compute dtype, value before the final rounding, fp16 output)
PathRow = tuple[str, int | None, str, torch.Tensor | None, torch.Tensor]


def path_table(
    paths: list[PathRow], ref: torch.Tensor, label: str = "", regular: torch.Tensor | None = None
) -> tuple[pl.DataFrame, list[dict[str, Any]], dict[str, torch.Tensor]]:
    """The iteration table of ``paths`` against the fp64 ``ref`` (first path: A_eager), its
    histogram rows (comparisons prefixed with ``label``) and the fp16 outputs on the CPU (whole).
    The table and histograms cover the elements ``regular`` marks (all when ``None``): the
    iteration study is about the U(0.01, 100) body; special values are judged by
    :func:`rounding_table`."""
    keep = torch.ones(ref.numel(), dtype=torch.bool) if regular is None else regular.reshape(-1).cpu()
    outputs = {name: out.cpu() for name, _, _, _, out in paths}
    ref = ref.reshape(-1).cpu()[keep]
    ref16 = round_to_dtype(ref, torch.float16)  # the correctly rounded fp16 answer
    ref_spacing = spacing(ref, torch.float16)
    rows, hist = [], []
    a_eager = outputs[paths[0][0]].reshape(-1)[keep]
    for name, n, compute, raw, _ in paths:
        out = outputs[name].reshape(-1)[keep]
        stats = error_stats(out, ref)
        d_ref = ulp_diff(out, ref16)
        row = {
            "path": name,
            "method": "framework"
            if name.startswith("A_")
            else METHOD
            if n is not None
            else "framework reciprocal, then multiply",
            "iterations": n,
            "compute_dtype": compute,
            "ulp_max": stats["ulp_max"],
            "ulp_mean": stats["ulp_mean"],
            "ulp_p99": stats["ulp_p99"],
            "rel_max": stats["rel_max"],
            "rel_mean": stats["rel_mean"],
            "correctly_rounded_fraction": stats["exact_fraction"],
            "int_ulp_vs_rounded_ref_max": int(d_ref.max()),
            "vs_A_eager_equal_fraction": float((ulp_diff(out, a_eager) == 0).double().mean()),
            "vs_A_eager_ulp_max": int(ulp_diff(out, a_eager).max()),
        }
        if raw is not None:
            raw64 = raw.cpu().reshape(-1)[keep].to(torch.float64)
            err = (raw64 - ref).abs()
            row.update(
                {
                    "pre_round_rel_max": float((err / ref.abs()).max()),
                    "pre_round_rel_mean": float((err / ref.abs()).mean()),
                    "pre_round_ulp16_max": float((err / ref_spacing).max()),  # in fp16 ULPs, before rounding
                    "pre_round_ulp16_mean": float((err / ref_spacing).mean()),
                }
            )
        else:
            row.update(
                {
                    "pre_round_rel_max": None,
                    "pre_round_rel_mean": None,
                    "pre_round_ulp16_max": None,
                    "pre_round_ulp16_mean": None,
                }
            )
        rows.append(row)
        hist += ulp_histogram(d_ref, HIST_MAX, comparison=f"{label}{name} vs fp64 (rounded)")
        if name != "A_eager":
            hist += ulp_histogram(ulp_diff(out, a_eager), HIST_MAX, comparison=f"{label}{name} vs A_eager")
    return pl.DataFrame(rows, infer_schema_length=None), hist, outputs


def framework_paths(
    fn: Callable[..., torch.Tensor], args: tuple[torch.Tensor, ...], settings: ExperimentSettings, device: torch.device
) -> tuple[list[PathRow], dict[str, dict[str, Any]], float]:
    """Path A eager, fused, and fused under each approximate-math switch of the device; per fused
    path its evidence (kernels, code hash) and whether a switch changed the code or the output."""
    from ...artifacts import capture_modules, combined_sha256, kernel_artifacts

    def run(options: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any], float]:
        compiled = fused(fn, settings.backend, options)
        start = time.perf_counter()
        with capture_modules() as modules:
            out = compiled(*args)
        seconds = time.perf_counter() - start
        meta = evidence_fields(compiled.evidence)
        meta["artifact_sha256"] = combined_sha256(kernel_artifacts(modules, compiled.evidence.kernel_names))
        return out, meta, seconds

    base = settings.options()
    fused_out, meta, first_call = run(base)
    paths: list[PathRow] = [
        ("A_eager", None, "framework", None, fn(*args)),
        ("A_fused", None, "framework", None, fused_out),
    ]
    evidence = {
        "A_fused": {**meta, "knob_code_changed": None, "knob_artifact_changed": None, "knob_output_changed": None}
    }
    for label, opts in APPROX_KNOBS.get(device.type, {}).items():
        out, meta, _ = run({**base, **opts})
        evidence[f"A_fused[{label}]"] = {
            **meta,
            "knob_code_changed": meta["code_sha256"] != evidence["A_fused"]["code_sha256"],
            "knob_artifact_changed": meta["artifact_sha256"] != evidence["A_fused"]["artifact_sha256"],
            "knob_output_changed": not bit_equal(out, fused_out),
        }
        paths.append((f"A_fused[{label}]", None, "framework", None, out))
    return paths, evidence, first_call


def with_evidence(table: pl.DataFrame, evidence: dict[str, dict[str, Any]]) -> pl.DataFrame:
    for key in ("kernel_count", "kernel_names", "graph_breaks", "code_sha256", "artifact_sha256", "compile_seconds"):
        table = table.with_columns(
            pl.col("path")
            .replace_strict({p: str(e[key]) for p, e in evidence.items()}, default=None)
            .alias(f"fused_{key}")
        )
    for key in ("knob_code_changed", "knob_artifact_changed", "knob_output_changed"):
        table = table.with_columns(
            pl.col("path")
            .replace_strict({p: e[key] for p, e in evidence.items()}, default=None, return_dtype=pl.Boolean)
            .alias(key)
        )
    return table


def newton_rsqrt_paths(xd: torch.Tensor) -> list[PathRow]:
    """Path B for rsqrt: the bit-trick estimate and N Newton steps, per compute dtype and count."""
    paths: list[PathRow] = []
    for compute in (torch.float32, torch.float16):
        tag = str(compute).removeprefix("torch.")
        for n in ITERATIONS:
            raw = bit_trick_rsqrt(xd, n, compute)
            paths.append((f"B_newton{n}_{tag}", n, tag, raw, raw.to(torch.float16)))
    return paths


def reciprocal_div_paths(xd: torch.Tensor, yd: torch.Tensor) -> list[PathRow]:
    """Path B for div: x * torch.reciprocal(y), then x * (bit-trick reciprocal + N Newton steps)."""
    paths: list[PathRow] = [("B_torch_reciprocal", None, "framework reciprocal", None, xd * torch.reciprocal(yd))]
    for compute in (torch.float32, torch.float16):
        tag = str(compute).removeprefix("torch.")
        for n in ITERATIONS:
            raw = xd.to(compute) * bit_trick_reciprocal(yd, n, compute)
            paths.append((f"B_newton{n}_{tag}", n, tag, raw, raw.to(torch.float16)))
    return paths


# --- what a run compiles and stores (the cost C3 declares: cost.py) ----------------------------------

#: The ops C3 runs through its paths: torch.rsqrt(x), and x / y.
OPS = ("rsqrt", "div")


def planned_compiles(device_type: str) -> int:
    """Fused graphs C3 compiles on a device of ``device_type``: each op of :data:`OPS` fused with the run's
    options, then once more under each approximate-math switch of the device (:func:`framework_paths`)."""
    return len(OPS) * (1 + len(APPROX_KNOBS.get(device_type, {})))


def stored_tensor_bytes(profile: str, device_type: str) -> int:
    """Bytes of the tensors ``c3_path_outputs`` stores at ``profile``'s input shape on a device of
    ``device_type`` (the five tables beside them hold a few rows per path): per op its fp16 input, the
    int8 class of each element and the fp64 reference, and one fp16 output per path: A eager, A fused,
    A under each switch, the bit trick with each Newton count in fp32 and fp16 (:func:`newton_rsqrt_paths`),
    and for division also x * torch.reciprocal(y) (:func:`reciprocal_div_paths`)."""
    paths = 2 + len(APPROX_KNOBS.get(device_type, {})) + 2 * len(ITERATIONS)
    per_op = 2 + 1 + 8  # input, class, reference
    return math.prod(SIZES[profile].shape) * (len(OPS) * per_op + 2 * (paths + paths + 1))
