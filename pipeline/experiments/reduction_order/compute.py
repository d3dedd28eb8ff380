"""C2's run: every version on the seeded rows (row 0 repeatedly, then the pool), and the tables
derived from the results (versions, pairwise ULP matrix, error against fp64, per-row bounds).

Plain functions (no Dagster definitions); the asset in :mod:`.assets` calls :func:`run_c2`.
"""

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import torch

from precisionkit import FusedFunction, bit_equal, error_stats, fp64_reference, ulp_diff
from precisionkit.evidence import evidence_fields

from ...artifacts import kernel_artifacts
from ...progress import track
from ...scalars import as_float
from .bounds import all_row_bounds
from .versions import OUTPUTS, TILES, TILING_SOURCE, Pair, Version, describe_tiling, make_rows


def _run(fn: Callable[[torch.Tensor], Pair], x: torch.Tensor) -> Pair:
    out16, acc32 = fn(x)
    return out16.reshape(-1).cpu(), acc32.reshape(-1).cpu()


def _pair_metrics(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    d = ulp_diff(a, b)
    return {
        "differ_rows": int((d > 0).sum()),
        "differ_fraction": float((d > 0).double().mean()),
        "ulp_max": int(d.max()),
        "ulp_mean": float(d.double().mean()),
    }


@dataclass(frozen=True)
class VersionRun:
    """What one version gave: its ``c2_versions`` row, and its fp16 results and fp32 accumulators
    over every row (row 0 the seed's single input, then the pool)."""

    row: dict[str, Any]
    out16: torch.Tensor
    acc32: torch.Tensor


def check_c2_shape(length: int, runs: int) -> None:
    """C2 needs at least two runs (self-determinism) and a row length every tile divides."""
    if runs < 2:
        raise ValueError(f"c2_runs must be >= 2 to test self-determinism, got {runs}")
    bad_tiles = [t for t in TILES if length % t]
    if bad_tiles:
        raise ValueError(f"c2_length {length} is not a multiple of tiles {bad_tiles}")


def _distinct_runs(fn: Callable[[torch.Tensor], Pair], x: torch.Tensor, runs: int, first: Pair) -> tuple[int, int]:
    """Distinct bit patterns of the fp16 result and the fp32 accumulator over ``runs`` runs on ``x``
    (``first`` the first run's pair)."""
    seen16, seen32 = [first[0]], [first[1]]
    for _ in range(runs - 1):
        o16, o32 = _run(fn, x)
        if not any(bit_equal(o16, s) for s in seen16):
            seen16.append(o16)
        if not any(bit_equal(o32, s) for s in seen32):
            seen32.append(o32)
    return len(seen16), len(seen32)


_EVIDENCE_KEYS = (
    "kernel_count",
    "kernel_names",
    "graph_breaks",
    "recompiles",
    "code_sha256",
    "compile_seconds",
    "precisions",
)


def _evidence(v: Version) -> dict[str, Any]:
    """The fusion evidence columns of a fused version (empty for an eager one)."""
    if not isinstance(v.fn, FusedFunction):
        return {}
    return evidence_fields(v.fn.evidence, _EVIDENCE_KEYS)


def finish_version(
    v: Version, rows: torch.Tensor, ref: torch.Tensor, runs: int, first: Pair, tiling: str, first_seconds: float
) -> VersionRun:
    """After the first call of ``v`` on row 0 (``first``, taking ``first_seconds``): the remaining
    runs on row 0, one run per pool row, and the version's ``c2_versions`` row."""
    start = time.perf_counter()
    unique16, unique32 = _distinct_runs(v.fn, rows[:1], runs, first)
    run_seconds = time.perf_counter() - start
    pool = [_run(v.fn, rows[i : i + 1]) for i in range(1, rows.shape[0])]
    out16 = torch.cat([first[0], *(p[0] for p in pool)])
    acc32 = torch.cat([first[1], *(p[1] for p in pool)])
    ev = _evidence(v)
    hand = f"hand-written: {v.tile}-element tiles, then the sum of the partials" if v.tile else "eager ATen kernel"
    row = {
        "version": v.version,
        "family": v.family,
        "tiling_source": "framework (eager ATen kernel)"
        if v.mode == "eager" and v.family == "compiler"
        else TILING_SOURCE[v.family],
        "framework_tiling": tiling or hand,
        "tile": v.tile,
        "mode": v.mode,
        "options": v.options,
        "runs": runs,
        "unique_out16": unique16,
        "unique_acc32": unique32,
        "self_deterministic": unique16 == 1 and unique32 == 1,
        "nonfinite_outputs": int((~torch.isfinite(out16)).sum() + (~torch.isfinite(acc32)).sum()),
        "out16_value": float(first[0][0]),
        "acc32_value": float(first[1][0]),
        "fp64_value": float(ref[0]),
        "first_call_seconds": round(first_seconds, 4),
        "seconds_per_run": run_seconds / max(runs - 1, 1),
        **{k: ev.get(k) for k in _EVIDENCE_KEYS},
    }
    return VersionRun(row, out16, acc32)


def run_versions(
    versions: list[Version], rows: torch.Tensor, ref: torch.Tensor, runs: int, log: Callable[[str], None] | None
) -> tuple[list[VersionRun], list[str]]:
    """Every version on ``rows`` (on the compute device): ``runs`` runs of row 0, one of each pool
    row. A framework-tiled version whose first call fails (a tiling the backend rejects) is skipped
    with its reason; any other failure propagates."""
    done: list[VersionRun] = []
    skipped: list[str] = []
    for v in track(versions, log, f"summation versions ({runs} runs + {rows.shape[0] - 1} pool rows each)"):
        start = time.perf_counter()
        # The modules holding the compiled kernels, where the compiler exposes them (Inductor's wrapper
        # modules: a Triton launcher's autotuning choice is read from them).
        holder = v.fn.adapter.compiled_modules() if isinstance(v.fn, FusedFunction) else nullcontext(None)
        with holder as modules:
            try:
                first = _run(v.fn, rows[:1])  # compiles fused versions, once, for shape [1, L]
            except Exception as exc:
                if v.family != "framework_tiled":
                    raise
                skipped.append(f"{v.version} ({v.options}): {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                continue
        first_seconds = time.perf_counter() - start
        tiling = ""
        if isinstance(v.fn, FusedFunction):
            tiling = describe_tiling(v.fn.code, kernel_artifacts(modules or [], v.fn.evidence.kernel_names))
        done.append(finish_version(v, rows, ref, runs, first, tiling, first_seconds))
    return done, skipped


def versions_table(ran: list[VersionRun]) -> pl.DataFrame:
    """The ``c2_versions`` table: one row per version that ran, and whether its generated code is
    the fused default's."""
    default_sha = next((r.row["code_sha256"] for r in ran if r.row["version"] == "fused_default"), None)
    return pl.DataFrame([r.row for r in ran]).with_columns(
        (pl.col("code_sha256") == default_sha).alias("same_code_as_fused_default")
    )


def expected_fp16_differences(acc_a: torch.Tensor, acc_b: torch.Tensor) -> float:
    """How many rows' fp16 results two versions that each round their fp32 accumulator once should
    differ on, from the accumulators alone: a row's rounded results differ when an fp16 rounding
    boundary lies between the two accumulators, which, with the accumulator's position on the fp16
    grid uniform, happens with probability |a - b| / (fp16 spacing there), capped at 1.

    >>> a = torch.tensor([1.0, 1.0, 3.0])
    >>> expected_fp16_differences(a, a + torch.tensor([2.0**-12, 0.0, 2.0**-9]))
    1.25
    """
    from precisionkit.ulp import spacing

    a, b = acc_a.to(torch.float64), acc_b.to(torch.float64)
    gap = spacing(torch.maximum(a.abs(), b.abs()), torch.float16)
    return float(torch.clamp((a - b).abs() / gap, max=1.0).sum())


def rounds_accumulator_once(out16: torch.Tensor, acc32: torch.Tensor) -> bool:
    """Whether a version's fp16 results are its fp32 accumulators rounded to fp16 on every row."""
    return bit_equal(out16, acc32.to(torch.float16))


def ulp_matrix(stored: dict[str, torch.Tensor], names: list[str], n_pool: int) -> pl.DataFrame:
    """Pairwise differences between versions, per output: on the seed's single input (row 0) and
    over the pool rows. For fp16 results of two versions that each round their accumulator once,
    ``expected_differ_rows`` is what their accumulators predict (:func:`expected_fp16_differences`)."""
    matrix = []
    once = {n: rounds_accumulator_once(stored[f"{n}/out16"], stored[f"{n}/acc32"]) for n in names}
    scopes = {"seed_input": slice(0, 1), "pool": slice(1, 1 + n_pool)} if n_pool else {"seed_input": slice(0, 1)}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for output in OUTPUTS:
                for scope, sl in scopes.items():
                    m = _pair_metrics(stored[f"{a}/{output}"][sl], stored[f"{b}/{output}"][sl])
                    expected = (
                        expected_fp16_differences(stored[f"{a}/acc32"][sl], stored[f"{b}/acc32"][sl])
                        if output == "out16" and once[a] and once[b]
                        else None
                    )
                    matrix.append(
                        {"version_a": a, "version_b": b, "output": output, "scope": scope, "rows": sl.stop - sl.start}
                        | m
                        | {"expected_differ_rows": expected}
                    )
    return pl.DataFrame(matrix, infer_schema_length=None)


_ERROR_STATS = ("abs_max", "abs_mean", "rel_max", "ulp_max", "ulp_mean", "ulp_p99", "exact_fraction", "error_balance")


def _error_row(
    name: str, output: str, values: torch.Tensor, ref: torch.Tensor, closest: torch.Tensor, bounds: pl.DataFrame
) -> dict[str, Any]:
    """One ``c2_error_vs_fp64`` row: ``closest`` marks the rows where this version's error is
    minimal, ``bounds`` holds this version's ``c2_row_bounds`` rows for ``output``."""
    stats = error_stats(values, ref)
    margin = bounds["margin"].fill_nan(float("inf"))
    worst_index = margin.arg_max()
    if worst_index is None:
        raise ValueError(f"c2_row_bounds has no rows for {name}/{output}")
    worst = bounds.row(worst_index, named=True)
    margin_prob = bounds["margin_prob"].fill_nan(float("inf"))
    return {
        "version": name,
        "family": worst["family"],
        "output": output,
        "rows": int(ref.numel()),
        "closest_rows": int(closest.sum()),
        "closest_fraction": float(closest.double().mean()),
        "bound_kind": "deterministic",
        "bound_formula": worst["bound_formula"],
        "chain": worst["chain"],
        "within_band_fraction": as_float((margin <= 1.0).mean(), "within_band_fraction"),
        "margin_max": as_float(margin.max(), "margin_max"),
        "margin_mean": as_float(bounds["margin"].mean(), "margin_mean"),
        "worst_margin_row": worst["row"],
        "worst_error": worst["error"],
        "worst_bound": worst["bound"],
        "worst_ref": worst["ref"],
        "worst_abs_sum": worst["abs_sum"],
        "margin_prob_max": as_float(margin_prob.max(), "margin_prob_max"),
        "rows_above_prob_bound": int((margin_prob > 1.0).sum()),
        "prob_bound_probability": worst["prob_bound_probability"],
        **{key: val for key, val in stats.items() if key in _ERROR_STATS},
    }


def error_table(
    stored: dict[str, torch.Tensor], ref: torch.Tensor, names: list[str], bounds: pl.DataFrame
) -> pl.DataFrame:
    """Each version's error against fp64 over all rows; "closest" counts the rows where the
    version's error is minimal (ties count for all)."""
    err_rows = []
    for output in OUTPUTS:
        errs = torch.stack([(stored[f"{n}/{output}"].double() - ref).abs() for n in names])
        best = errs.min(dim=0).values
        for k, n in enumerate(names):
            mine = bounds.filter((pl.col("version") == n) & (pl.col("output") == output))
            err_rows.append(_error_row(n, output, stored[f"{n}/{output}"], ref, errs[k] == best, mine))
    return pl.DataFrame(err_rows)


def knob_summary(versions_df: pl.DataFrame, stored: dict[str, torch.Tensor]) -> list[str]:
    """Per fused compiler or framework-tiled version other than the default: whether its generated
    code and its fp32 accumulator differ from the fused default's."""
    lines = []
    for r in versions_df.filter(pl.col("family").is_in(["compiler", "framework_tiled"])).iter_rows(named=True):
        if r["mode"] != "fused" or r["version"] == "fused_default":
            continue
        same_result = bit_equal(stored[f"{r['version']}/acc32"], stored["fused_default/acc32"])
        lines.append(
            f"{r['options']}: code {'unchanged' if r['same_code_as_fused_default'] else 'changed'}, "
            f"fp32 accumulator {'unchanged' if same_result else 'changed'} vs fused_default"
        )
    return lines


@dataclass(frozen=True)
class C2Result:
    """Everything C2 produces: the stored tensors (``rows``, then ``<version>/out16`` and
    ``<version>/acc32``), the four tables, the framework tilings the backend rejected, and the parts of the
    version set the compiler has no way to make (part -> "not applicable to <compiler>: <why>")."""

    stored: dict[str, torch.Tensor]
    versions: pl.DataFrame
    ulp_matrix: pl.DataFrame
    error_vs_fp64: pl.DataFrame
    row_bounds: pl.DataFrame
    skipped: list[str]
    not_applicable: dict[str, str] = field(default_factory=dict)


def run_c2(
    versions: list[Version],
    length: int,
    n_pool: int,
    runs: int,
    seed: int,
    device: torch.device,
    log: Callable[[str], None] | None = None,
    not_applicable: dict[str, str] | None = None,
) -> C2Result:
    """C2 on ``1 + n_pool`` seeded rows of ``length``: every version run (row 0 ``runs`` times), then
    the tables derived from the results; ``not_applicable`` the parts of the version set the compiler has no
    way to make, kept on the result."""
    check_c2_shape(length, runs)
    rows = make_rows(1 + n_pool, length, seed)
    ref = fp64_reference(lambda x: x.sum(-1), rows)  # [1 + n_pool] fp64 (exact: fp16 terms, |s| < 2^15)
    ran, skipped = run_versions(versions, rows.to(device), ref, runs, log)
    stored: dict[str, torch.Tensor] = {"rows": rows}
    for r in ran:
        stored[f"{r.row['version']}/out16"] = r.out16
        stored[f"{r.row['version']}/acc32"] = r.acc32
    versions_df = versions_table(ran)
    names = versions_df["version"].to_list()
    bounds_df = all_row_bounds(rows, ref, stored, [v for v in versions if v.version in set(names)])
    return C2Result(
        stored,
        versions_df,
        ulp_matrix(stored, names, n_pool),
        error_table(stored, ref, names, bounds_df),
        bounds_df,
        skipped,
        dict(not_applicable or {}),
    )
