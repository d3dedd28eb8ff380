"""Task C2 (main document §1.2 (3)): reduction accumulation order.

``sum(dim=-1)`` of an fp16 row is computed by several *versions* that differ only in the order of
the additions:

* compiler versions: eager, the fused default, and the fused path under Inductor's own knobs that
  touch the reduction loop (CPU: ``cpp.threads``, ``cpp.simdlen``, ``split_reductions``; CUDA:
  ``split_reductions``, ``triton.persistent_reductions``). Whether a knob changed the generated
  code (hash) and the result is recorded per version;
* framework-tiled versions (family ``framework_tiled``): the fused sum under the settings with which
  Inductor itself tiles the reduction. On the CPU the generated kernel splits the row into one
  range per thread (``cpp.threads``), walks each range in vector steps of ``cpp.simdlen`` bits
  (0: scalar) and accumulates each lane with a cascade (CascadeSumHelper) of fixed-size chunks; the
  grid threads x simdlen gives the versions, and ``framework_tiling`` states the tiling read back
  from the generated code. On CUDA: split reductions on/off, persistent / non-persistent and
  cooperative reductions, and the Triton block sizes the autotuner chose (from the kernel's
  launcher). These are *the framework's* tilings, labelled apart (``tiling_source``) from
* the hand-written tilings built from framework ops: per-tile partial sums ``reshape(-1, tile).sum(-1)``
  then a sum of the partials, for tiles 512 / 1024 / 2048, with the partials kept in fp32 or
  stored in fp16. These are controllable on every backend.

Every version yields the fp16 result of the operation and its fp32 accumulator (the value before
the final rounding): with fp32 accumulation, an order effect shows in the fp16 result only near an
fp16 rounding boundary, while the accumulator shows it directly.

The band each result is judged against is derived per row and per version from the row's own
data (:mod:`pipeline.experiments.reduction_order.summation_bounds`): a deterministic forward error bound for the version's
summation order, accumulation precision, partial storage and final rounding (no tolerance-matrix
entry). ``c2_row_bounds`` holds error, bound and margin = error / bound for every row, version and
output; the checks are declared with the three outcomes of :mod:`pipeline.verdicts`.
"""

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dagster as dg
import polars as pl
import torch

from precisionkit import FusedFunction, bit_equal, error_stats, fp64_reference, fused, ulp_diff

from ...artifacts import capture_modules, kernel_artifacts
from ...progress import track
from ...resources import ExperimentSettings
from ...scalars import as_float, as_int
from ...tables import markdown_table
from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    Rule,
    claim_check,
    claim_result,
    finding_check,
    finding_result,
    validity_check,
    validity_result,
)
from .spec import GROUP
from .summation_bounds import summation_error_bound

TILES = (512, 1024, 2048)
PARTIALS = ("fp32", "fp16")
OUTPUTS = {"out16": torch.float16, "acc32": torch.float32}
#: Family-wise confidence of the probabilistic ("random error range") part of C2's claims.
PROB_CONFIDENCE = 0.99
#: Reference lambda for the text of the band (the run chooses its own, see :func:`family_lambda`).
LAMBDA = 6.0


def family_lambda(rows: int, terms: int, confidence: float = PROB_CONFIDENCE) -> float:
    """Higham & Mary's lambda for which ``rows`` probabilistic bounds of sums of ``terms`` terms all
    hold with probability at least ``confidence`` under their model (independent, mean-zero
    rounding errors): by a union bound, rows * terms * 2 exp(-lambda^2 (1-u32)^2 / 2) <= 1 - confidence.

    >>> (
    ...     round(family_lambda(9 * 11 * 2, 4096 + 8), 3),
    ...     round(family_lambda(257 * 11 * 2, 16384 + 32), 3),
    ... )  # smoke, default
    (6.149, 6.877)
    """
    u32 = 2.0**-24
    return math.sqrt(2.0 * math.log(2.0 * rows * terms / (1.0 - confidence))) / (1.0 - u32)


#: Families judged by the seed's claim (fp32 accumulation throughout) and the fp16-partials family.
SEED_FAMILIES = ("compiler", "framework_tiled", "tiled_fp32_partials")
#: The settings with which Inductor tiles a reduction, per device type: each is one framework-tiled
#: version. CPU: threads x vector width (simdlen 0 = scalar loop); CUDA: Triton reduction strategies.
FRAMEWORK_TILINGS: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {f"t{t}_simd{w}": {"cpp.threads": t, "cpp.simdlen": w} for t in (1, 2) for w in (0, 256, 512)},
    "cuda": {
        "split": {"split_reductions": True, "triton.persistent_reductions": True},
        "nosplit_persistent": {"split_reductions": False, "triton.persistent_reductions": True},
        "nosplit_looped": {"split_reductions": False, "triton.persistent_reductions": False},
        "cooperative": {
            "split_reductions": False,
            "triton.cooperative_reductions": True,
            "triton.force_cooperative_reductions": True,
        },
        "min_num_split_64": {"split_reductions": True, "min_num_split": 64},
    },
}
#: tiling_source per family: which versions the framework tiles, and which are tiled by hand.
TILING_SOURCE = {
    "compiler": "framework (default or knob)",
    "framework_tiled": "framework (tiling configuration)",
    "tiled_fp32_partials": "hand-written",
    "tiled_fp16_partials": "hand-written",
}
FP16_PARTIALS_FAMILY = "tiled_fp16_partials"
#: Inductor options per device type that change how the reduction loop is split or vectorized.
KNOBS: dict[str, dict[str, dict[str, Any]]] = {
    "cpu": {
        "cpp.threads=1": {"cpp.threads": 1},
        "cpp.simdlen=0": {"cpp.simdlen": 0},
        "split_reductions=False": {"split_reductions": False},
    },
    "cuda": {
        "split_reductions=False": {"split_reductions": False},
        "triton.persistent_reductions=False": {"triton.persistent_reductions": False},
    },
}

Pair = tuple[torch.Tensor, torch.Tensor]


def plain_sum(x: torch.Tensor) -> Pair:
    """The seed's operation: fp16 ``sum(dim=-1)``, and the same sum accumulated into fp32."""
    return x.sum(-1), x.sum(-1, dtype=torch.float32)


def tiled_sum(tile: int, partials: str) -> Callable[[torch.Tensor], Pair]:
    """Explicit tiling: per-tile partial sums, then the sum of the partials (fp32 or fp16 partials)."""
    if partials not in PARTIALS:
        raise ValueError(f"partials must be one of {PARTIALS}, got {partials!r}")

    def fn(x: torch.Tensor) -> Pair:
        if x.shape[-1] % tile:
            raise ValueError(f"row length {x.shape[-1]} is not a multiple of tile {tile}")
        tiles = x.reshape(*x.shape[:-1], -1, tile)
        if partials == "fp32":
            acc = tiles.sum(-1, dtype=torch.float32).sum(-1)
            return acc.to(x.dtype), acc
        part = tiles.sum(-1)  # each partial rounded to fp16 when stored
        return part.sum(-1), part.sum(-1, dtype=torch.float32)

    fn.__name__ = f"tiled_sum_{tile}_{partials}"
    return fn


def make_rows(rows: int, length: int, seed: int) -> torch.Tensor:
    """fp16 rows from U(-1, 1), drawn in fp64 on the CPU (device-independent), rounded once."""
    if rows < 1 or length < 1:
        raise ValueError(f"C2 needs rows >= 1 and length >= 1, got rows={rows}, length={length}")
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(rows, length, generator=g, dtype=torch.float64) * 2 - 1).to(torch.float16)


def bound_spec(family: str, tile: int | None) -> dict[str, Any]:
    """The summation model of a version, as keywords of :func:`summation_error_bound`.

    Compiler versions (eager and Inductor) accumulate fp16 sums in fp32 in an order the framework
    chooses, so their chain is the worst case over every order (n - 1). Tiled versions: any order
    inside a tile and among the partials (two separate framework sums), partials kept in fp32 or
    stored in fp16."""
    if family in ("compiler", "framework_tiled"):
        # The framework's tiling (threads, vector lanes, cascade chunks, Triton blocks) is one order
        # among all; with fp32 accumulation the any-order chain bounds every one of them.
        return {"order": "any", "tile": None, "accumulate_dtype": torch.float32, "partial_dtype": None}
    partial = {"tiled_fp32_partials": torch.float32, "tiled_fp16_partials": torch.float16}.get(family)
    if partial is None or tile is None:
        raise ValueError(f"no summation model for family {family!r} with tile {tile}")
    return {"order": "any", "tile": tile, "accumulate_dtype": torch.float32, "partial_dtype": partial}


@dataclass(frozen=True)
class Version:
    """One summation version: its name, family, hand-written tile (``None`` where the framework
    tiles), the Inductor options it sets (as text) and its callable (a fused one compiles at its
    first call)."""

    version: str
    family: str
    tile: int | None
    options: str
    fn: Callable[[torch.Tensor], Pair]

    @property
    def mode(self) -> str:
        """``fused`` for a compiled version, ``eager`` otherwise."""
        return "fused" if isinstance(self.fn, FusedFunction) else "eager"


def _options_text(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items())


def build_versions(settings: ExperimentSettings, device: torch.device) -> list[Version]:
    """Every version: eager, the fused default, the device's Inductor knobs, its framework tilings,
    then the hand-written tilings (fused ones not yet compiled)."""
    base = settings.options()
    versions = [
        Version("eager", "compiler", None, "", plain_sum),
        Version("fused_default", "compiler", None, _options_text(base), fused(plain_sum, settings.backend, base)),
    ]
    for label, opts in KNOBS.get(device.type, {}).items():
        versions.append(
            Version(f"fused_{label}", "compiler", None, label, fused(plain_sum, settings.backend, {**base, **opts}))
        )
    for label, opts in FRAMEWORK_TILINGS.get(device.type, {}).items():
        fn = fused(plain_sum, settings.backend, {**base, **opts})
        versions.append(Version(f"framework_tiled_{label}", "framework_tiled", None, _options_text(opts), fn))
    for partials in PARTIALS:
        for tile in TILES:
            versions.append(
                Version(
                    f"tile{tile}_{partials}_partials", f"tiled_{partials}_partials", tile, "", tiled_sum(tile, partials)
                )
            )
    return versions


_CASCADE = re.compile(r"CascadeSumHelper<[^>]*?, (\d+)>")
_STEP = re.compile(
    r"for\(int64_t x0=static_cast<int64_t>\(0L\); x0<static_cast<int64_t>\((\d+)L\); x0\+=static_cast<int64_t>\((\d+)L\)\)"
)
_OMP = re.compile(r"#pragma omp parallel(?: num_threads\((\d+)\))?")


def describe_tiling(code: str, artifacts: list[Any] | None = None) -> str:
    """How the generated kernel tiles the reduction, read back from its code (CPU: thread ranges,
    vector step, cascade or running sum per lane) or from the Triton launcher the autotuner chose
    (CUDA: block sizes, warps, stages)."""
    parts = []
    step = _STEP.search(code)
    if step:
        length, stride = int(step.group(1)), int(step.group(2))
        omp = _OMP.search(code)
        threads = (
            "1 thread" if omp is None else (f"{omp.group(1)} thread ranges" if omp.group(1) else "OpenMP thread ranges")
        )
        cascade = _CASCADE.search(code)
        lanes = f"vector steps of {stride} lanes" if stride > 1 else "a scalar loop"
        acc = f"each lane a cascade sum of {cascade.group(1)}-addition chunks" if cascade else "each lane a running sum"
        parts.append(f"{length} elements in {threads}, {lanes}, {acc}")
    choices = [f"{a.kernel}: {a.autotune_choice}" for a in (artifacts or []) if getattr(a, "autotune_choice", "")]
    if choices:
        parts.append("Triton launcher " + "; ".join(choices))
    return "; ".join(parts) or "not read back (no reduction loop or launcher config recognised in the generated kernel)"


def row_bounds(
    rows: torch.Tensor,
    ref: torch.Tensor,
    results: dict[str, torch.Tensor],
    version: str,
    family: str,
    tile: int | None,
    output: str,
    lam: float = LAMBDA,
) -> pl.DataFrame:
    """One row per input row: the version's error against fp64 and its derived bounds.

    ``rows`` the fp16 inputs, ``ref`` their fp64 sums, ``results[output]`` the version's values.
    margin = error / deterministic bound; margin_prob = error / probabilistic bound."""
    spec = bound_spec(family, tile)
    b = summation_error_bound(rows.double(), output_dtype=OUTPUTS[output], lam=lam, **spec)
    if b.probabilistic is None:
        raise RuntimeError(f"no probabilistic bound for {version}/{output} although lambda {lam} was given")
    result = results[output].double()
    err = (result - ref).abs()
    nan = torch.full_like(err, float("nan"))
    err = torch.where(torch.isfinite(result), err, nan)  # a non-finite result has no finite margin
    return pl.DataFrame(
        {
            "version": [version] * len(ref),
            "family": [family] * len(ref),
            "output": [output] * len(ref),
            "row": list(range(len(ref))),
            "ref": ref.tolist(),
            "abs_ref": ref.abs().tolist(),
            "abs_sum": b.abs_sum.tolist(),
            "partial_abs_sum": b.partial_abs_sum.tolist() if b.partial_abs_sum is not None else [None] * len(ref),
            "result": result.tolist(),
            "error": err.tolist(),
            "bound": b.deterministic.tolist(),
            "bound_kind": ["deterministic"] * len(ref),
            "margin": (err / b.deterministic).tolist(),
            "bound_prob": b.probabilistic.tolist(),
            "margin_prob": (err / b.probabilistic).tolist(),
            "prob_bound_probability": [b.probability] * len(ref),
            "lambda": [lam] * len(ref),
            "chain": ["+".join(str(c) for c in b.chains)] * len(ref),
            "bound_formula": [b.formula] * len(ref),
        },
        schema_overrides={"partial_abs_sum": pl.Float64},
    )


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


BAND_WORDS = (
    "Per row and per version, the band is a deterministic forward error bound of that version's summation, "
    "computed from the row's own data: u16*|s| + (1+u16)*gamma_c(u32)*sum|x| + tau16 for fp32 accumulation with "
    "a final fp16 rounding, c the longest accumulation chain (n-1 for an order the framework chooses, "
    "c(b)+c(n/b) for tile b with fp32 partials); fp16-stored partials add E_p = (1+u16)*gamma_c(b)(u32)*sum|x| "
    "+ u16*sum|p_j| + (n/b)*tau16, then gamma_c(n/b)(u32)*(sum|p_j| + E_p) for the sum of the partials. "
    "gamma_k(u) = k*u/(1-k*u), u16 = 2^-11, u32 = 2^-24, tau16 = 2^-25 (underflow). The fp32 accumulator "
    "(acc32) has the same bound without the final rounding terms. Higham, Accuracy and Stability of Numerical "
    f"Algorithms, ch. 3-4. Probabilistic bound: gamma_k replaced by min(gamma_k, exp(lambda*sqrt(k)*u + k*u^2/(1-u)) - 1), "
    f"lambda = sqrt(2 ln(2 R N / (1 - {PROB_CONFIDENCE:g}))) for the R rows judged of N terms each, so that every "
    "row's probabilistic bound holds together with that confidence (Higham & Mary 2019; about 6.9 in the default "
    "profile)."
)

OUTS = {
    "c2_version_outputs": dg.AssetOut(
        description="C2 (§1.2 (3)): input rows (row 0 = the seed's single input, then the pool) and every version's fp16 result and fp32 accumulator.",
        kinds={"pytorch", "safetensors"},
    ),
    "c2_versions": dg.AssetOut(
        description="C2 (§1.2 (3)): every version (compiler knob or explicit tiling), its self-determinism over the profile's runs, its fusion evidence and its non-finite outputs.",
        kinds={"polars"},
    ),
    "c2_ulp_matrix": dg.AssetOut(
        description="C2 (§1.2 (3)): pairwise ULP differences between versions (long format: version_a, version_b, output, scope, metrics).",
        kinds={"polars"},
    ),
    "c2_error_vs_fp64": dg.AssetOut(
        description="C2 (§1.2 (3)): each version's error against fp64 over all rows, how often it is the closest, and its margin against its derived error bound (within_band_fraction = rows with margin <= 1).",
        kinds={"polars"},
    ),
    "c2_row_bounds": dg.AssetOut(
        description="C2 (§1.2 (3)): per row, version and output: error against fp64, the derived deterministic (and probabilistic) bound of the version's summation order, margin = error / bound.",
        kinds={"polars"},
    ),
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


_EVIDENCE_KEYS = ("kernel_count", "kernel_names", "graph_breaks", "recompiles", "code_sha256", "compile_seconds")


def _evidence(v: Version) -> dict[str, Any]:
    """The fusion evidence columns of a fused version (empty for an eager one)."""
    if not isinstance(v.fn, FusedFunction):
        return {}
    meta = v.fn.evidence.as_metadata()
    return {k: meta[k] for k in _EVIDENCE_KEYS}


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
        with capture_modules() as modules:
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
            tiling = describe_tiling(v.fn.code, kernel_artifacts(modules, v.fn.evidence.kernel_names))
        done.append(finish_version(v, rows, ref, runs, first, tiling, first_seconds))
    return done, skipped


def versions_table(ran: list[VersionRun]) -> pl.DataFrame:
    """The ``c2_versions`` table: one row per version that ran, and whether its generated code is
    the fused default's."""
    default_sha = next((r.row["code_sha256"] for r in ran if r.row["version"] == "fused_default"), None)
    return pl.DataFrame([r.row for r in ran]).with_columns(
        (pl.col("code_sha256") == default_sha).alias("same_code_as_fused_default")
    )


def ulp_matrix(stored: dict[str, torch.Tensor], names: list[str], n_pool: int) -> pl.DataFrame:
    """Pairwise differences between versions, per output: on the seed's single input (row 0) and
    over the pool rows."""
    matrix = []
    scopes = {"seed_input": slice(0, 1), "pool": slice(1, 1 + n_pool)} if n_pool else {"seed_input": slice(0, 1)}
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for output in OUTPUTS:
                for scope, sl in scopes.items():
                    m = _pair_metrics(stored[f"{a}/{output}"][sl], stored[f"{b}/{output}"][sl])
                    matrix.append(
                        {"version_a": a, "version_b": b, "output": output, "scope": scope, "rows": sl.stop - sl.start}
                        | m
                    )
    return pl.DataFrame(matrix)


def all_row_bounds(
    rows: torch.Tensor, ref: torch.Tensor, stored: dict[str, torch.Tensor], versions: list[Version]
) -> pl.DataFrame:
    """:func:`row_bounds` of every version and output, with one lambda for every row judged, so that
    all probabilistic bounds hold together at :data:`PROB_CONFIDENCE`."""
    lam = family_lambda(len(ref) * len(versions) * len(OUTPUTS), rows.shape[-1] + rows.shape[-1] // min(TILES))
    return pl.concat(
        [
            row_bounds(
                rows,
                ref,
                {o: stored[f"{v.version}/{o}"] for o in OUTPUTS},
                v.version,
                v.family,
                v.tile,
                output,
                lam,
            )
            for output in OUTPUTS
            for v in versions
        ]
    )


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
    ``<version>/acc32``), the four tables, and the framework tilings the backend rejected."""

    stored: dict[str, torch.Tensor]
    versions: pl.DataFrame
    ulp_matrix: pl.DataFrame
    error_vs_fp64: pl.DataFrame
    row_bounds: pl.DataFrame
    skipped: list[str]


def run_c2(
    versions: list[Version],
    length: int,
    n_pool: int,
    runs: int,
    seed: int,
    device: torch.device,
    log: Callable[[str], None] | None = None,
) -> C2Result:
    """C2 on ``1 + n_pool`` seeded rows of ``length``: every version run (row 0 ``runs`` times), then
    the tables derived from the results."""
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
    )


def versions_metadata(result: C2Result, runs: int) -> dict[str, Any]:
    """Metadata of ``c2_versions``: counts, the Inductor knobs' effect and the table."""
    versions_df = result.versions
    knobs = knob_summary(versions_df, result.stored)
    columns = ("version", "tiling_source", "framework_tiling", "options", "unique_out16", "unique_acc32")
    values = ("out16_value", "acc32_value", "fp64_value", "kernel_count", "same_code_as_fused_default")
    return {
        "versions": versions_df.height,
        "all_self_deterministic": bool(versions_df["self_deterministic"].all()),
        "runs_per_version": runs,
        "inductor_knobs": dg.MetadataValue.md("\n".join(f"- {s}" for s in knobs) or "none for this device"),
        "framework_tiled_versions": int((versions_df["family"] == "framework_tiled").sum()),
        "hand_tiled_versions": int(versions_df["tiling_source"].str.starts_with("hand").sum()),
        "framework_tilings_rejected": dg.MetadataValue.md("\n".join(f"- {s}" for s in result.skipped) or "none"),
        "table": dg.MetadataValue.md(markdown_table(versions_df.select(*columns, *values))),
    }


def matrix_metadata(matrix_df: pl.DataFrame, n_versions: int, n_pool: int) -> dict[str, Any]:
    """Metadata of ``c2_ulp_matrix``: pairs, how many differ in the fp16 result, the pool table."""
    out16 = matrix_df.filter(pl.col("output") == "out16")
    shown = out16.filter(pl.col("scope") == ("pool" if n_pool else "seed_input")).drop("output", "scope")
    return {
        "pairs": n_versions * (n_versions - 1) // 2,
        "out16_pairs_differing": out16.filter(pl.col("differ_rows") > 0)
        .select(["version_a", "version_b"])
        .unique()
        .height,
        "out16_ulp_max": as_int(out16["ulp_max"].max(), "c2_ulp_matrix out16 ulp_max"),
        "table_out16_pool": dg.MetadataValue.md(markdown_table(shown)),
    }


def error_metadata(err_df: pl.DataFrame) -> dict[str, Any]:
    """Metadata of ``c2_error_vs_fp64``: the band, the fp16 results' worst margins, the table."""
    o16 = err_df.filter(pl.col("output") == "out16")
    columns = ("version", "chain", "ulp_mean", "ulp_max", "abs_max", "closest_fraction", "margin_max")
    worst = ("worst_margin_row", "worst_error", "worst_bound", "margin_prob_max")
    return {
        "band": BAND_WORDS,
        "min_within_band_fraction": as_float(o16["within_band_fraction"].min(), "min within_band_fraction"),
        "max_margin_out16": as_float(o16["margin_max"].max(), "max out16 margin_max"),
        "table": dg.MetadataValue.md(markdown_table(o16.select(*columns, *worst))),
    }


def bounds_metadata(bounds_df: pl.DataFrame) -> dict[str, Any]:
    """Metadata of ``c2_row_bounds``: the band, the row count and each family's bound formula."""
    formulas = bounds_df.unique(["family", "output", "chain"], maintain_order=True)
    return {
        "band": BAND_WORDS,
        "rows": bounds_df.height,
        "formulas": dg.MetadataValue.md(markdown_table(formulas.select("family", "output", "chain", "bound_formula"))),
    }


@dg.multi_asset(outs=OUTS, group_name=GROUP, pool="compute_device")
def c2_reduction_order(context: dg.AssetExecutionContext, settings: ExperimentSettings):
    """Runs every summation version on the seeded input (repeatedly) and on the row pool."""
    profile = settings.get_profile()
    device = settings.torch_device()
    length, n_pool, runs = profile.c2_length, profile.c2_pool_rows, profile.c2_runs
    check_c2_shape(length, runs)
    seed = settings.derived_seed("c2", "rows")
    result = run_c2(build_versions(settings, device), length, n_pool, runs, seed, device, context.log.info)
    yield dg.Output(
        result.stored,
        output_name="c2_version_outputs",
        metadata={"rows": 1 + n_pool, "length": length, "seed": seed},
    )
    yield dg.Output(result.versions, output_name="c2_versions", metadata=versions_metadata(result, runs))
    yield dg.Output(
        result.ulp_matrix,
        output_name="c2_ulp_matrix",
        metadata=matrix_metadata(result.ulp_matrix, result.versions.height, n_pool),
    )
    yield dg.Output(result.error_vs_fp64, output_name="c2_error_vs_fp64", metadata=error_metadata(result.error_vs_fp64))
    yield dg.Output(result.row_bounds, output_name="c2_row_bounds", metadata=bounds_metadata(result.row_bounds))


# --- decision helpers (plain functions, unit-tested) ----------------------------------------------


def judge_bounds(bounds: pl.DataFrame, families: tuple[str, ...]) -> tuple[str, str, dict[str, Any]]:
    """The "within the derived bound" rule on the rows of ``families``: contradicted when any row's
    margin (error / deterministic bound) exceeds 1 or is not finite, supported when every row is
    within, inconclusive when the families have no rows."""
    fam = bounds.filter(pl.col("family").is_in(list(families)))
    if fam.height == 0:
        return INCONCLUSIVE, f"no rows for {', '.join(families)}", {"rows_judged": 0}
    margin = fam["margin"].fill_nan(float("inf")).fill_null(float("inf"))
    fam = fam.with_columns(
        margin.alias("_m"), fam["margin_prob"].fill_nan(float("inf")).fill_null(float("inf")).alias("_mp")
    )
    above = fam.filter(pl.col("_m") > 1.0)
    above_prob = fam.filter(pl.col("_mp") > 1.0)
    per_version = fam.group_by("version", "output", maintain_order=True).agg(
        pl.col("_m").max().alias("margin_max"), (pl.col("_m") > 1.0).sum().alias("rows_above")
    )
    worst = fam.sort("_m", descending=True).head(5)
    meta: dict[str, Any] = {
        "rows_judged": fam.height,
        "versions_judged": fam["version"].n_unique(),
        "rows_above_bound": above.height,
        "margin_max": as_float(fam["_m"].max(), "margin_max"),
        "margin_prob_max": as_float(fam["_mp"].max(), "margin_prob_max"),
        "rows_above_probabilistic_bound": above_prob.height,
        "lambda": float(fam["lambda"][0]) if "lambda" in fam.columns else LAMBDA,
        "margin_max_out16": as_float(fam.filter(pl.col("output") == "out16")["_m"].max() or 0.0, "out16 margin_max"),
        "margin_max_acc32": as_float(fam.filter(pl.col("output") == "acc32")["_m"].max() or 0.0, "acc32 margin_max"),
        "per_version": dg.MetadataValue.md(markdown_table(per_version)),
        "worst_rows": dg.MetadataValue.md(
            markdown_table(worst.select("version", "output", "row", "abs_ref", "abs_sum", "error", "bound", "margin"))
        ),
    }
    if above.height:
        w = above.sort("_m", descending=True).row(0, named=True)
        return (
            CONTRADICTED,
            (
                f"{above.height} of {fam.height} rows exceed their deterministic bound; worst {w['version']}/{w['output']} "
                f"row {w['row']}: |error| {w['error']:.4g} > bound {w['bound']:.4g} (margin {w['_m']:.3g})"
            ),
            meta,
        )
    if above_prob.height:
        w = above_prob.sort("_mp", descending=True).row(0, named=True)
        return (
            CONTRADICTED,
            (
                f"{above_prob.height} of {fam.height} rows exceed the probabilistic bound (lambda "
                f"{meta['lambda']:.3g}, all rows together at confidence {PROB_CONFIDENCE:g}); worst "
                f"{w['version']}/{w['output']} row {w['row']}: |error| {w['error']:.4g} > {w['bound_prob']:.4g} "
                f"(margin {w['_mp']:.3g}; deterministic margin {w['_m']:.3g})"
            ),
            meta,
        )
    return (
        SUPPORTED,
        (
            f"all {fam.height} rows within their deterministic bound (largest margin {meta['margin_max']:.3g}) "
            f"and their probabilistic bound (largest margin {meta['margin_prob_max']:.3g})"
        ),
        meta,
    )


def sign_test_p(worse: int, better: int) -> float:
    """One-sided exact sign test: P(Binomial(worse + better, 1/2) >= worse)."""
    n = worse + better
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(worse, n + 1)) / 2**n


# --- checks -----------------------------------------------------------------------------------

_BOUND_DERIVATION = (
    "Higham, Accuracy and Stability of Numerical Algorithms, ch. 3-4: the worst-case forward error of the "
    "version's summation order from the row's own sum|x| (and sum|p_j| for stored partials); see "
    "c2_row_bounds.bound_formula. " + BAND_WORDS
)

_BOUND_DERIVATION += (
    " Probabilistic part: Higham & Mary 2019, lambda = sqrt(2 ln(2 R N / (1 - confidence))) for R "
    "rows of N terms (a union bound over every rounding of every row)."
)
_BOUND_DECISION = (
    "contradicted if any row's error exceeds its deterministic bound (impossible for any correct "
    "implementation of that order and precision), or exceeds its probabilistic bound (the seed's 'random "
    "error range'; lambda chosen so that all judged rows hold together at the stated confidence); "
    "supported if every row is within both; inconclusive if the family has no rows"
)

SEED_RULE = Rule(
    claim="Every C2 version with fp32 accumulation (eager, fused default, each Inductor knob, each framework-tiled version, "
    "hand-written tilings 512/1024/2048 with fp32 partials) falls within the rounding-error range of the fp64 baseline "
    "on every row",
    metric="margin = |result - fp64 sum| / B, B the deterministic error bound derived for the row, the version's "
    "summation order and the output (fp16 result and fp32 accumulator)",
    decision=_BOUND_DECISION,
    threshold=1.0,
    unit="margin (error / derived bound)",
    confidence=PROB_CONFIDENCE,
    sample_size="(1 + c2_pool_rows) rows x every version of the family x 2 outputs",
    derivation=_BOUND_DERIVATION,
)

FP16_PARTIALS_RULE = Rule(
    claim="The tilings with fp16-stored partials (512/1024/2048) fall within their own rounding-error range of the "
    "fp64 baseline on every row (the bound includes one fp16 rounding per stored partial)",
    metric="margin = |result - fp64 sum| / B, B the deterministic bound of fp32 tile sums, fp16-stored partials and an "
    "fp32 sum of the partials (fp16 result and fp32 accumulator)",
    decision=_BOUND_DECISION,
    threshold=1.0,
    unit="margin (error / derived bound)",
    confidence=PROB_CONFIDENCE,
    sample_size="(1 + c2_pool_rows) rows x 3 tilings x 2 outputs",
    derivation=_BOUND_DERIVATION,
)

DETERMINISM_RULE = Rule(
    claim="Each C2 version's repeated runs on the same input are bit-identical (fp16 result and fp32 accumulator)",
    metric="distinct bit patterns among the c2_runs repeated runs of the seed input, minus one, per version and output",
    decision="contradicted if any version has a run whose bits differ from its first run; supported otherwise",
    threshold=0.0,
    unit="differing runs",
    confidence=None,
    sample_size="c2_runs runs of the seed input x every version (profile: 1000 full, 200 default, 5 smoke)",
    derivation="the seed's step 2 (bit_equal over repeated runs): determinism is exact, so no tolerance",
)


@validity_check(
    asset="c2_versions",
    description="C2 run validity: every planned version ran (eager, fused default, the device's Inductor knobs, three tiles x "
    "two partial dtypes); each fused version compiled to generated kernels with no graph break and no recompile "
    "during its runs; no version produced a non-finite output.",
)
def c2_run_valid(c2_versions: pl.DataFrame) -> dg.AssetCheckResult:
    problems = []
    names = set(c2_versions["version"].to_list())
    planned = {"eager", "fused_default", *(f"tile{t}_{p}_partials" for t in TILES for p in PARTIALS)}
    missing = sorted(planned - names)
    if missing:
        problems.append(f"versions missing: {', '.join(missing)}")
    for r in c2_versions.iter_rows(named=True):
        if r["mode"] == "fused":
            if not r["kernel_count"]:
                problems.append(f"{r['version']}: no generated kernel")
            if r["graph_breaks"]:
                problems.append(f"{r['version']}: {r['graph_breaks']} graph break(s)")
            if r["recompiles"]:
                problems.append(f"{r['version']}: {r['recompiles']} recompile(s) during its runs")
        if r["nonfinite_outputs"]:
            problems.append(f"{r['version']}: {r['nonfinite_outputs']} non-finite output(s)")
    fused_versions = c2_versions.filter(pl.col("mode") == "fused")
    return validity_result(
        problems,
        {
            "versions": c2_versions.height,
            "fused_versions": fused_versions.height,
            "knob_versions": fused_versions.height - int("fused_default" in names),
        },
    )


@claim_check(
    rule=DETERMINISM_RULE,
    asset="c2_versions",
    description="Seed C2 step 2: every version's repeated runs are bit-identical (fp16 result and fp32 accumulator).",
)
def c2_versions_self_deterministic(c2_versions: pl.DataFrame) -> dg.AssetCheckResult:
    bad = c2_versions.filter(~pl.col("self_deterministic"))
    runs = int(c2_versions["runs"][0])
    meta = {
        "versions": c2_versions.height,
        "runs_per_version": runs,
        "nondeterministic": ", ".join(
            f"{r['version']} ({r['unique_out16']} distinct fp16 / {r['unique_acc32']} distinct fp32 results)"
            for r in bad.iter_rows(named=True)
        )
        or "none",
    }
    if bad.height:
        return claim_result(
            CONTRADICTED,
            DETERMINISM_RULE,
            f"{bad.height} of {c2_versions.height} versions gave differing bits over {runs} runs",
            meta,
        )
    return claim_result(
        SUPPORTED, DETERMINISM_RULE, f"all {c2_versions.height} versions bit-identical over {runs} runs", meta
    )


@claim_check(
    rule=SEED_RULE,
    asset="c2_row_bounds",
    description="Seed C2 claim, on the seed's family (fp32 accumulation: eager, Inductor default and knobs, framework-tiled "
    "versions, hand-written tilings with fp32 partials): every row's error against fp64 is within the deterministic bound derived for that row and that version's "
    "summation order (not a tolerance-matrix band).",
)
def c2_versions_within_fp64_band(c2_row_bounds: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_bounds(c2_row_bounds, SEED_FAMILIES)
    return claim_result(verdict, SEED_RULE, reason, meta)


@claim_check(
    rule=FP16_PARTIALS_RULE,
    asset="c2_row_bounds",
    description="C2, fp16-stored partials (not the seed's configuration): every row within the family's own deterministic "
    "bound, which adds one fp16 rounding per stored partial. Exceeding it would contradict 'within the error range' for "
    "this family too, since the bound holds for any correct implementation of that order and precision.",
)
def c2_fp16_partials_within_bound(c2_row_bounds: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_bounds(c2_row_bounds, (FP16_PARTIALS_FAMILY,))
    return claim_result(verdict, FP16_PARTIALS_RULE, reason, meta)


@finding_check(
    asset="c2_row_bounds",
    description="C2 finding: per tile, fp16-stored partials against fp32 partials on the same rows (fp16 result): rows where "
    "each is closer to fp64, an exact one-sided sign test, mean |error| and margins. Reported when fp16 partials are "
    "measurably less accurate (sign test p < 0.01); a cost of the storage precision, not an error.",
)
def c2_fp16_partials_less_accurate(c2_row_bounds: pl.DataFrame) -> dg.AssetCheckResult:
    o16 = c2_row_bounds.filter(pl.col("output") == "out16")
    findings, meta = [], {}
    for tile in TILES:
        a = o16.filter(pl.col("version") == f"tile{tile}_fp16_partials").sort("row")
        b = o16.filter(pl.col("version") == f"tile{tile}_fp32_partials").sort("row")
        if a.height == 0 or a.height != b.height:
            raise ValueError(f"c2_row_bounds lacks paired rows for tile {tile}")
        ea, eb = a["error"].to_numpy(), b["error"].to_numpy()
        worse, better = int((ea > eb).sum()), int((ea < eb).sum())
        p = sign_test_p(worse, better)
        margin16 = as_float(a["margin"].max(), f"tile{tile}_fp16_partials margin_max")
        meta.update(
            {
                f"tile{tile}.fp16_worse_rows": worse,
                f"tile{tile}.fp16_better_rows": better,
                f"tile{tile}.equal_rows": int(a.height - worse - better),
                f"tile{tile}.sign_test_p": p,
                f"tile{tile}.fp16_mean_error": float(ea.mean()),
                f"tile{tile}.fp32_mean_error": float(eb.mean()),
                f"tile{tile}.fp16_margin_max": margin16,
                f"tile{tile}.fp32_margin_max": as_float(b["margin"].max(), f"tile{tile}_fp32_partials margin_max"),
            }
        )
        if p < 0.01:
            findings.append(
                f"tile {tile}: fp16-stored partials farther from fp64 on {worse} rows, closer on {better} (sign test p = {p:.2g}); "
                f"mean |error| {ea.mean():.3g} vs {eb.mean():.3g} with fp32 partials, largest margin {margin16:.3g}"
            )
    return finding_result(findings, meta)


@finding_check(
    asset="c2_ulp_matrix",
    description="Seed C2 expectation 'tilings differ by >= 1 ULP', per partial dtype, over the seed input and the pool. A finding, "
    "not a claim: it is an existence statement with no error budget. An fp16 ULP is 2^13 fp32 ULP, so a reordering's "
    "fp32-accumulator difference shows in the fp16 result only when the accumulator lies within that difference of an "
    "fp16 rounding boundary: whether an fp16 difference shows depends on how many rows are drawn, not on correctness. "
    "Reported when a family's fp16 results never differ, with the measured fp32-accumulator differences (row-pairs, "
    "max fp32 ULP) as the evidence of whether the order changed.",
)
def c2_tilings_differ(c2_ulp_matrix: pl.DataFrame) -> dg.AssetCheckResult:
    meta, findings = {}, []
    for partials in PARTIALS:
        names = [f"tile{t}_{partials}_partials" for t in TILES]
        fam = c2_ulp_matrix.filter(pl.col("version_a").is_in(names) & pl.col("version_b").is_in(names))
        if fam.height == 0:
            raise ValueError(f"c2_ulp_matrix has no pairs for the {partials} tilings")
        o16 = fam.filter(pl.col("output") == "out16")
        a32 = fam.filter(pl.col("output") == "acc32")
        meta[f"{partials}.out16_differ_rows"] = int(o16["differ_rows"].sum())
        meta[f"{partials}.out16_ulp_max"] = as_int(o16["ulp_max"].max(), f"{partials} out16 ulp_max")
        meta[f"{partials}.acc32_differ_rows"] = int(a32["differ_rows"].sum())
        meta[f"{partials}.acc32_ulp_max"] = as_int(a32["ulp_max"].max(), f"{partials} acc32 ulp_max")
        if meta[f"{partials}.out16_differ_rows"] == 0:
            findings.append(
                f"{partials} partials: the three tilings give bit-identical fp16 sums on every row; the order does change the "
                f"fp32 accumulator ({meta[f'{partials}.acc32_differ_rows']} differing row-pairs, max {meta[f'{partials}.acc32_ulp_max']} fp32 ULP), "
                "and those differences vanish in the final rounding"
                if meta[f"{partials}.acc32_differ_rows"]
                else f"{partials} partials: the three tilings agree bit for bit in both the fp16 sum and the fp32 accumulator on every row"
            )
    return finding_result(findings, meta)


@finding_check(
    asset="c2_row_bounds",
    description="C2 finding: every row above its probabilistic bound (Higham & Mary 2019, lambda chosen so that all rows "
    f"hold together with probability >= {PROB_CONFIDENCE:g} under independent, mean-zero rounding errors), in any family, "
    "with its version and output: the rows behind a contradicted 'random error range' claim, listed for a human "
    "(systematic rounding bias shows here first).",
)
def c2_probabilistic_margin(c2_row_bounds: pl.DataFrame) -> dg.AssetCheckResult:
    mp = c2_row_bounds["margin_prob"].fill_nan(float("inf"))
    above = c2_row_bounds.filter(mp > 1.0)
    expected = float((1 - c2_row_bounds["prob_bound_probability"]).sum())
    meta = {
        "lambda": float(c2_row_bounds["lambda"][0]) if c2_row_bounds.height else LAMBDA,
        "rows_judged": c2_row_bounds.height,
        "rows_above": above.height,
        "expected_above_at_most": expected,
        "margin_prob_max": as_float(mp.max(), "margin_prob_max"),
        "min_probability": as_float(c2_row_bounds["prob_bound_probability"].min(), "prob_bound_probability"),
    }
    findings = [
        f"{r['version']}/{r['output']} row {r['row']}: |error| {r['error']:.4g} > probabilistic bound {r['bound_prob']:.4g}"
        for r in above.sort("margin_prob", descending=True).head(10).iter_rows(named=True)
    ]
    if above.height > 10:
        findings.append(f"... {above.height - 10} more")
    return finding_result(findings, meta)
