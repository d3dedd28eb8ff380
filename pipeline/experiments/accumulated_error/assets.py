"""Task B: is the fused path's accumulated error no worse than eager's? (main document §3.2, §6.1)

Every operator chain of :data:`CHAINS` runs on each stored input set three ways: eager (op by op),
fused (``torch.compile`` with the configured backend) and fused with
``emulate_precision_casts`` (intermediates rounded as eager rounds them). Each output is judged
against the stored fp64 reference; per-set errors become a table, and the table a verdict per
chain x distribution x dtype under :data:`RULE`, declared here before any data: paired fused vs
eager per set, P99 across sets of the per-set max scale-aware ULP error, a materiality threshold
of one scale-aware ULP, a bootstrap interval with Holm's adjustment across rows, and any
non-finite fused output where eager is finite as a contradiction. Every row where fused is worse
at all becomes a counterexample with a saved reproducer; an ablation (each op kept out of the
fused region in turn) measures which op is responsible, and that feeds the §6.1 switch list.
"""

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import polars as pl
import torch

from precisionkit import FusedFunction, fused, ulp_diff
from precisionkit.batched import error_stats_per_set
from precisionkit.decide import holm, paired_quantile_test, sign_test

from ...devices import synchronize
from ...profiles import get_profile
from ...progress import Progress
from ...resources import ExperimentSettings
from ...storage import DataFolder, save_tensors
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
    validity_check,
    validity_result,
)
from ...workloads import CHAIN_STAGES, CHAINS, WORKLOADS, Workload, chain_without_fusing
from ..toolkit.assets import pool_set_seed
from .spec import GROUP

DTYPES_B = ("float16", "bfloat16")
PATHS = ("eager", "fused", "fused_emulate")
FUSED_PATHS = ("fused", "fused_emulate")
#: Elements of one path's outputs held at once: batches keep memory flat whatever the set count.
BATCH_ELEMENTS = 1 << 20

_MATMUL_EXTERNS = ("mm", "bmm", "addmm", "baddbmm")


def _path_options(settings: ExperimentSettings, path: str) -> dict[str, Any]:
    options = settings.options()
    if path == "fused_emulate":
        options = {**options, "emulate_precision_casts": True}
    return options


def _fused_ops(chain: str, extern_calls: str) -> list[str]:
    """The chain's op types that the fused path generated code for (not left to a library call)."""
    externs = {e.strip() for e in extern_calls.split(",") if e.strip()}
    matmul_extern = bool(externs & set(_MATMUL_EXTERNS))
    ops = [op for op in CHAIN_STAGES[chain][0] if not (op == "matmul" and matmul_extern)]
    if "addmm" in externs:  # the bias add went into the library call as well
        ops = [op for op in ops if op != "add"]
    return list(dict.fromkeys(ops))


# --- the runs --------------------------------------------------------------------------------


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
    "code_sha256",
    "compile_seconds",
)


def per_set_rows(
    chain: str, dist: str, dtype: str, first_set: int, outputs: Mapping[str, torch.Tensor], ref: torch.Tensor
) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Error rows of a batch of input sets (numbered from ``first_set``), path by path in
    :data:`PATHS` order, each output judged against the fp64 ``ref``; and per set the fused path's
    scale-aware max error minus eager's (+inf where fused is non-finite and eager is finite), which
    picks the reproducer set."""
    n = ref.shape[0]
    eager_finite = torch.isfinite(outputs["eager"]).reshape(n, -1)
    ref_finite = torch.isfinite(ref).reshape(n, -1).to(eager_finite.device)
    all_stats = {p: error_stats_per_set(outputs[p], ref) for p in PATHS}
    rows: list[dict[str, Any]] = []
    fused_gap = np.full(n, -np.inf)
    for p in PATHS:
        stats = all_stats[p]
        vs_eager = ulp_diff(outputs[p], outputs["eager"]).reshape(n, -1).amax(dim=1).cpu().numpy()
        nonfinite = ~torch.isfinite(outputs[p]).reshape(n, -1)
        nonfinite_vs_eager = (nonfinite & eager_finite).sum(dim=1).cpu().numpy()
        nonfinite_vs_ref = (nonfinite & ref_finite).sum(dim=1).cpu().numpy()
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
                    "n_compared": int(stats["n_compared"][j]),
                    "nonfinite_mismatch": int(stats["nan_mismatch"][j] + stats["inf_mismatch"][j]),
                    "nonfinite_vs_eager": int(nonfinite_vs_eager[j]),
                    "nonfinite_vs_ref": int(nonfinite_vs_ref[j]),
                    "max_ulp_vs_eager": int(vs_eager[j]),
                }
            )
    return rows, fused_gap


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
) -> tuple[list[dict[str, Any]], np.ndarray, dict[str, float]]:
    """Every path on every set of one distribution, a batch of sets at a time: the error rows, the
    per-set fused-minus-eager gap and the seconds each path spent executing."""
    n_sets = ref.shape[0]
    batch = max(1, min(n_sets, BATCH_ELEMENTS // max(1, ref[0].numel())))
    rows: list[dict[str, Any]] = []
    fused_gap = np.full(n_sets, -np.inf)
    seconds = dict.fromkeys(PATHS, 0.0)
    for start in range(0, n_sets, batch):
        stop = min(n_sets, start + batch)
        args = [t[start:stop].to(device) for t in stacked.values()]
        sets = [tuple(t[i] for t in args) for i in range(stop - start)]
        outputs: dict[str, torch.Tensor] = {}
        for p in PATHS:
            t0 = time.perf_counter()
            outputs[p] = torch.stack([paths[p](*one) for one in sets])
            synchronize(device)
            seconds[p] += time.perf_counter() - t0
        batch_rows, fused_gap[start:stop] = per_set_rows(workload.name, dist, dtype, start, outputs, ref[start:stop])
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
    worst.update({f"{prefix}/output/{p}": paths[p](*one).cpu() for p in PATHS})
    worst[f"{prefix}/fp64_reference"] = ref[idx].clone()
    worst[f"{prefix}/set_index"] = torch.tensor([idx], dtype=torch.int64)
    return worst


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
) -> ChainRun:
    """One chain at one dtype: every distribution's sets through eager, fused and fused_emulate."""
    device = settings.torch_device()
    distributions = list(workload.distributions)
    keys = [f"{d}/{dtype}/{workload.arg_names[0]}" for d in distributions]
    missing = [k for k in keys if k not in pool] + [f"{d}/{dtype}" for d in distributions if f"{d}/{dtype}" not in refs]
    if missing:
        raise ValueError(f"input_pool/fp64_reference of {workload.name!r} lack entries {missing}: rematerialize S")
    paths: dict[str, Callable[..., torch.Tensor]] = {"eager": workload.fn}
    for p in FUSED_PATHS:
        paths[p] = fused(workload.fn, backend=settings.backend, options=_path_options(settings, p))
    # The first call compiles; do it up front so the timed loop measures execution only.
    first = tuple(pool[f"{distributions[0]}/{dtype}/{a}"][0].to(device) for a in workload.arg_names)
    for p in FUSED_PATHS:
        paths[p](*first)
    total = sum(refs[f"{d}/{dtype}"].shape[0] for d in distributions)
    progress = Progress(log, f"{workload.name} {dtype} input sets", total)
    out, seconds = ChainRun(), dict.fromkeys(PATHS, 0.0)
    for dist in distributions:
        stacked = {a: pool[f"{dist}/{dtype}/{a}"] for a in workload.arg_names}
        ref = refs[f"{dist}/{dtype}"]
        rows, fused_gap, spent = _run_distribution(workload, dist, dtype, paths, stacked, ref, device, progress)
        out.rows.extend(rows)
        seconds = {p: seconds[p] + spent[p] for p in PATHS}
        # Keep the set where fused is worst relative to eager, with every path's output, for a reproducer.
        prefix = f"{workload.name}/{dist}/{dtype}"
        out.worst.update(_worst_set(workload, prefix, int(np.argmax(fused_gap)), paths, stacked, ref, device))
    out.evidence = [_evidence_row(workload.name, dtype, p, paths[p], total, seconds[p]) for p in PATHS]
    if log:
        log(f"{workload.name}/{dtype}: " + ", ".join(f"{p} {total / max(seconds[p], 1e-9):.0f} sets/s" for p in PATHS))
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


_EVIDENCE_SCHEMA = {
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
    "code_sha256": pl.String,
    "compile_seconds": pl.Float64,
}


@dg.multi_asset(
    group_name=GROUP,
    pool="compute_device",
    ins={
        **{f"pool_{c}": dg.AssetIn(f"input_pool_{c}") for c in CHAINS},
        **{f"ref_{c}": dg.AssetIn(f"fp64_reference_{c}") for c in CHAINS},
    },
    outs={
        "accumulated_error_per_set": dg.AssetOut(
            description="Per input set: max abs / max rel error and ULP p50/p99/max against fp64 for every "
            "chain x distribution x dtype x path (eager, fused, fused_emulate). Feeds §3.2.",
            kinds={"polars", "pytorch"},
        ),
        "accumulated_error_fusion_evidence": dg.AssetOut(
            description="Per chain x dtype x path: throughput (input sets per second) and, for fused paths, the "
            "fusion evidence (kernels, graph breaks, recompiles, code hash). Feeds §3.2.",
            kinds={"polars"},
        ),
        "accumulated_error_worst_sets": dg.AssetOut(
            description="Per chain x distribution x dtype: inputs, fp64 reference and every path's output of the set "
            "where fused is worst (raw material for reproducers, §6.1).",
            kinds={"safetensors"},
        ),
    },
)
def accumulated_error_runs(context: dg.AssetExecutionContext, settings: ExperimentSettings, **inputs: Any):
    """Run every chain's input sets eager / fused / fused_emulate; compile each (chain, dtype, path) once."""
    wall = time.perf_counter()
    runs = [
        run_chain(settings, WORKLOADS[chain], inputs[f"pool_{chain}"], inputs[f"ref_{chain}"], context.log.info)
        for chain in CHAINS
    ]
    per_set = pl.DataFrame([row for run in runs for row in run.rows])
    ev = pl.DataFrame([row for run in runs for row in run.evidence], schema=_EVIDENCE_SCHEMA)
    worst = {k: v for run in runs for k, v in run.worst.items()}
    wall = time.perf_counter() - wall
    by_path = ev.group_by("path").agg(pl.col("sets").sum(), pl.col("path_seconds").sum())
    throughput = {r["path"]: r["sets"] / r["path_seconds"] for r in by_path.iter_rows(named=True)}
    common = {
        "wall_seconds": round(wall, 2),
        "compile_seconds_total": round(float(ev["compile_seconds"].sum()), 2),
        **{f"sets_per_second_{p}": round(throughput[p], 1) for p in PATHS},
        "recompiles_total": int(ev["recompiles"].sum()),
    }
    yield dg.Output(
        per_set, "accumulated_error_per_set", metadata={"sets_total": per_set.height // len(PATHS), **common}
    )
    yield dg.Output(
        ev,
        "accumulated_error_fusion_evidence",
        metadata={
            **common,
            "table": dg.MetadataValue.md(markdown_table(ev.drop("kernel_names", "options", "backend"))),
        },
    )
    yield dg.Output(worst, "accumulated_error_worst_sets", metadata={"entries": len(worst)})


# --- the rule --------------------------------------------------------------------------------

#: How much worse matters: one ULP at the scale of the data (see precisionkit.stats.scaled_spacing).
MATERIALITY_SULP = 1.0
#: Quantile of per-set errors the seed's claim is about ("AutoFuse P99 / Max error <= Eager's").
TAIL_QUANTILE = 0.99
#: Family-wise confidence of a "contradicted" verdict (Holm over every judged row) and the
#: one-sided confidence of each row's interval.
CONFIDENCE = 0.99
BOOTSTRAP_RESAMPLES = 9999
#: Below this many sets a P99 across sets is an extrapolation: such rows can be contradicted
#: (the evidence against the claim is already there) but not supported.
MIN_SETS_FOR_SUPPORTED = 100
JUDGED_PATHS = FUSED_PATHS

RULE = Rule(
    claim="§3.2: fused accumulated error against fp64 is no worse than eager's, per chain x distribution x dtype",
    metric="per input set: max scale-aware ULP error against fp64 (error in ULPs of the row's largest |reference|), "
    "paired fused vs eager on the same set; statistic: P99 across sets of fused minus P99 of eager; plus the "
    "count of sets where fused is non-finite where eager is finite",
    decision=(
        f"contradicted when any set has a non-finite fused output where eager's is finite, or when the bootstrap "
        f"test rejects 'P99(fused) - P99(eager) <= {MATERIALITY_SULP:g}' after Holm's adjustment over every judged "
        f"row (family-wise confidence {CONFIDENCE:g}); supported when the row has at least "
        f"{MIN_SETS_FOR_SUPPORTED} sets and the one-sided {CONFIDENCE:g} upper bound of the difference is at most "
        f"{MATERIALITY_SULP:g}; inconclusive otherwise"
    ),
    threshold=MATERIALITY_SULP,
    unit="scale-aware ULP (ULPs of the row's largest |fp64 reference|)",
    confidence=CONFIDENCE,
    sample_size=f"every input set of the profile per row (1000 in default and seed); {BOOTSTRAP_RESAMPLES} paired "
    f"bootstrap resamples; supported needs >= {MIN_SETS_FOR_SUPPORTED} sets",
    derivation="Rounding error of a normalization, reduction or smooth elementwise op is proportional to the "
    "magnitudes it combines, so it is measured in ULPs of the row's largest reference value; one such ULP is the "
    "smallest change a single extra rounding at the data's scale can make, so a P99 shift below it is not material. "
    "Pairing removes the input-to-input variation; Holm keeps the healthy backend's chance of any false "
    "'contradicted' across the whole table at most 1 - confidence.",
)


#: Columns of :func:`paired_statistics`, None when fewer than two sets pair up (``p_value`` is then 1).
_PAIRED_COLUMNS = (
    "eager_p99",
    "fused_p99",
    "p99_difference",
    "ci_lower",
    "ci_upper",
    "eager_max",
    "fused_max",
    "materially_worse_sets",
    "materially_better_sets",
    "sign_test_p",
)


def paired_statistics(
    f: np.ndarray,
    e: np.ndarray,
    seed: int,
    *,
    q: float = TAIL_QUANTILE,
    margin: float = MATERIALITY_SULP,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> dict[str, Any]:
    """The rule's statistics of one row from paired per-set errors (fused ``f``, eager ``e``, both
    finite): the bootstrap test of the ``q`` quantiles' difference against ``margin`` (seeded by
    ``seed``), the maxima and the sign test's counts of materially worse and better sets."""
    if len(f) < 2:
        return {**dict.fromkeys(_PAIRED_COLUMNS), "p_value": 1.0}
    test = paired_quantile_test(f, e, q=q, margin=margin, confidence=confidence, resamples=resamples, seed=seed)
    sign = sign_test(f, e, margin=margin)
    return {
        "eager_p99": test.y_quantile,
        "fused_p99": test.x_quantile,
        "p99_difference": test.estimate,
        "ci_lower": test.lower,
        "ci_upper": test.upper,
        "p_value": test.p_value,
        "eager_max": float(e.max()),
        "fused_max": float(f.max()),
        "materially_worse_sets": sign.positive,
        "materially_better_sets": int((e - f > margin).sum()),
        "sign_test_p": sign.p_value,
    }


def judge(
    per_set: pl.DataFrame,
    *,
    margin: float = MATERIALITY_SULP,
    confidence: float = CONFIDENCE,
    q: float = TAIL_QUANTILE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    min_sets: int = MIN_SETS_FOR_SUPPORTED,
    paths: tuple[str, ...] = JUDGED_PATHS,
) -> pl.DataFrame:
    """B's rule applied to the per-set table: one row per chain x distribution x dtype x judged path.

    Pairs each path's per-set ``sulp_max`` with eager's on the same ``set_index``; sets where
    either side has no finite element to compare are counted (``unpaired_sets``) and left out of
    the bootstrap; sets where the path is non-finite where eager is finite contradict the claim
    outright. Deterministic: each row's bootstrap is seeded from its key.
    """
    eager = per_set.filter(pl.col("path") == "eager").select(
        *GROUP_KEYS, "set_index", pl.col("sulp_max").alias("eager")
    )
    rows: list[dict[str, Any]] = []
    for path in paths:
        pair = per_set.filter(pl.col("path") == path).join(eager, on=[*GROUP_KEYS, "set_index"])
        for key, grp in pair.group_by(GROUP_KEYS, maintain_order=True):
            chain, dist, dtype = key
            f = grp["sulp_max"].to_numpy().astype(np.float64)
            e = grp["eager"].to_numpy().astype(np.float64)
            nonfinite_sets = int((grp["nonfinite_vs_eager"] > 0).sum())
            ok = np.isfinite(f) & np.isfinite(e)
            row: dict[str, Any] = {
                "chain": chain,
                "distribution": dist,
                "dtype": dtype,
                "path": path,
                "sets": grp.height,
                "paired_sets": int(ok.sum()),
                "unpaired_sets": int((~ok).sum()),
                "nonfinite_sets": nonfinite_sets,
                "nonfinite_elements": int(grp["nonfinite_vs_eager"].sum()),
            }
            seed = int.from_bytes(f"{chain}/{dist}/{dtype}/{path}".encode()[:8].ljust(8, b"\0"), "little")
            row.update(
                paired_statistics(f[ok], e[ok], seed, q=q, margin=margin, confidence=confidence, resamples=resamples)
            )
            rows.append(row)
    table = pl.DataFrame(rows, schema=JUDGE_SCHEMA)
    if table.height == 0:
        return table.with_columns(pl.lit(None, pl.Float64).alias("p_holm"), pl.lit(None, pl.String).alias("verdict"))
    rejected, adjusted = holm(table["p_value"].to_numpy(), alpha=1.0 - confidence)
    table = table.with_columns(pl.Series("p_holm", adjusted), pl.Series("_rejected", rejected))
    verdict = (
        pl.when((pl.col("nonfinite_sets") > 0) | pl.col("_rejected"))
        .then(pl.lit(CONTRADICTED))
        .when((pl.col("paired_sets") >= min_sets) & (pl.col("ci_upper") <= margin))
        .then(pl.lit(SUPPORTED))
        .otherwise(pl.lit(INCONCLUSIVE))
    )
    return table.with_columns(verdict.alias("verdict")).drop("_rejected")


JUDGE_SCHEMA = {
    "chain": pl.String,
    "distribution": pl.String,
    "dtype": pl.String,
    "path": pl.String,
    "sets": pl.Int64,
    "paired_sets": pl.Int64,
    "unpaired_sets": pl.Int64,
    "nonfinite_sets": pl.Int64,
    "nonfinite_elements": pl.Int64,
    "eager_p99": pl.Float64,
    "fused_p99": pl.Float64,
    "p99_difference": pl.Float64,
    "ci_lower": pl.Float64,
    "ci_upper": pl.Float64,
    "p_value": pl.Float64,
    "eager_max": pl.Float64,
    "fused_max": pl.Float64,
    "materially_worse_sets": pl.Int64,
    "materially_better_sets": pl.Int64,
    "sign_test_p": pl.Float64,
}


def _reason(row: dict[str, Any]) -> str:
    where = f"{row['chain']}/{row['distribution']}/{row['dtype']} ({row['path']})"
    if row["nonfinite_sets"]:
        return (
            f"{where}: {row['nonfinite_sets']} of {row['sets']} sets have non-finite outputs where eager's are "
            f"finite ({row['nonfinite_elements']} elements)"
        )
    if row["p99_difference"] is None:
        return f"{where}: fewer than two sets with finite errors on both paths"
    return (
        f"{where}: P99 {row['fused_p99']:.3g} vs eager {row['eager_p99']:.3g} sULP, difference "
        f"{row['p99_difference']:+.3g} [{row['ci_lower']:+.3g}, {row['ci_upper']:+.3g}], Holm p {row['p_holm']:.2g}, "
        f"{row['paired_sets']} sets: {row['verdict']}"
    )


# --- summary ---------------------------------------------------------------------------------

GROUP_KEYS = ["chain", "distribution", "dtype"]
#: Per-set metrics summarized per path (each by P99 and max across sets), for the summary table.
METRICS = ("abs_max", "rel_max", "ulp_p99", "ulp_max", "sulp_p99", "sulp_max")


def _path_aggregates(per_set: pl.DataFrame) -> pl.DataFrame:
    """p99 (linear) and max across sets of every per-set metric, one row per chain/dist/dtype/path."""
    return per_set.group_by([*GROUP_KEYS, "path"]).agg(
        pl.len().alias("sets"),
        *[pl.col(m).quantile(0.99, interpolation="linear").alias(f"{m}__p99") for m in METRICS],
        *[pl.col(m).max().alias(f"{m}__max") for m in METRICS],
        (pl.col("max_ulp_vs_eager") == 0).mean().alias("bit_equal_eager_fraction"),
        pl.col("nonfinite_vs_ref").sum().alias("nonfinite_vs_ref"),
    )


#: Columns of :func:`judge` carried into the summary per judged path (prefixed ``fused_`` / ``emulate_``).
_SUMMARY_VERDICT_COLUMNS = (
    "verdict",
    "p99_difference",
    "ci_lower",
    "ci_upper",
    "p_value",
    "p_holm",
    "nonfinite_sets",
    "nonfinite_elements",
    "materially_worse_sets",
    "materially_better_sets",
    "sign_test_p",
    "paired_sets",
)
#: Columns of the fusion evidence carried into the summary per fused path.
_SUMMARY_EVIDENCE_COLUMNS = (
    "kernel_count",
    "graph_breaks",
    "recompiles",
    "code_sha256",
    "extern_calls",
    "sets_per_second",
)
#: Judged paths and the prefix of their summary columns.
_SUMMARY_LABELS = (("fused", "fused"), ("fused_emulate", "emulate"))


def _path_metrics_wide(per_set: pl.DataFrame) -> pl.DataFrame:
    """Per chain x distribution x dtype: the set count and, per path, P99 and max across sets of each
    metric, non-finite elements against fp64 and (fused paths) the share of sets bit-equal to eager."""
    aggs = _path_aggregates(per_set)
    wide = aggs.filter(pl.col("path") == "eager").select([*GROUP_KEYS, "sets"])
    for p in PATHS:
        part = aggs.filter(pl.col("path") == p).select(
            GROUP_KEYS
            + [pl.col(f"{m}__{s}").alias(f"{p}_{m}_{s}") for m in METRICS for s in ("p99", "max")]
            + [pl.col("nonfinite_vs_ref").alias(f"{p}_nonfinite_vs_ref")]
            + ([pl.col("bit_equal_eager_fraction").alias(f"{p}_bit_equal_eager_fraction")] if p != "eager" else [])
        )
        wide = wide.join(part, on=GROUP_KEYS)
    return wide


def _with_verdicts_and_shares(wide: pl.DataFrame, per_set: pl.DataFrame) -> pl.DataFrame:
    """``wide`` with each judged path's verdict columns and its shares of sets better / equal / worse than eager."""
    verdicts = judge(per_set)
    for p, label in _SUMMARY_LABELS:
        v = verdicts.filter(pl.col("path") == p).select(
            *GROUP_KEYS, *[pl.col(c).alias(f"{label}_{c}") for c in _SUMMARY_VERDICT_COLUMNS]
        )
        wide = wide.join(v, on=GROUP_KEYS, how="left")
        # Per set, by scale-aware error: is this path strictly better / equal / worse than eager on the same inputs?
        pair = per_set.filter(pl.col("path") == p).join(
            per_set.filter(pl.col("path") == "eager"), on=[*GROUP_KEYS, "set_index"], suffix="_eager"
        )
        shares = pair.group_by(GROUP_KEYS).agg(
            (pl.col("sulp_max") < pl.col("sulp_max_eager")).mean().alias(f"{label}_better_fraction"),
            (pl.col("sulp_max") == pl.col("sulp_max_eager")).mean().alias(f"{label}_equal_fraction"),
            (pl.col("sulp_max") > pl.col("sulp_max_eager")).mean().alias(f"{label}_worse_fraction"),
        )
        wide = wide.join(shares, on=GROUP_KEYS)
    return wide


def summarize(per_set: pl.DataFrame, evidence: pl.DataFrame) -> pl.DataFrame:
    """B's summary table (one row per chain x distribution x dtype, in :data:`CHAINS` order): path
    metrics, the rule's verdicts, better/equal/worse shares and the fusion evidence."""
    wide = _with_verdicts_and_shares(_path_metrics_wide(per_set), per_set)
    for p, label in _SUMMARY_LABELS:
        ev = evidence.filter(pl.col("path") == p).select(
            "chain", "dtype", *[pl.col(c).alias(f"{label}_{c}") for c in _SUMMARY_EVIDENCE_COLUMNS]
        )
        wide = wide.join(ev, on=["chain", "dtype"], how="left")
    eager_tp = evidence.filter(pl.col("path") == "eager").select(
        "chain", "dtype", pl.col("sets_per_second").alias("eager_sets_per_second")
    )
    wide = wide.join(eager_tp, on=["chain", "dtype"], how="left").with_columns(
        (pl.col("fused_code_sha256") == pl.col("emulate_code_sha256")).alias("emulate_same_code_as_fused"),
        (pl.col("fused_sulp_max_p99") <= pl.col("eager_sulp_max_p99")).alias("fused_p99_not_above_eager"),
    )
    order = {c: i for i, c in enumerate(CHAINS)}
    return (
        wide.with_columns(pl.col("chain").replace_strict(order, return_dtype=pl.Int64).alias("_o"))
        .sort("_o", "distribution", "dtype")
        .drop("_o")
    )


@dg.asset(
    group_name=GROUP,
    ins={
        "per_set": dg.AssetIn("accumulated_error_per_set"),
        "evidence": dg.AssetIn("accumulated_error_fusion_evidence"),
    },
    description="One row per chain x distribution x dtype: the verdict of B's rule for fused and fused_emulate "
    "(P99 across sets of the per-set max scale-aware ULP error, paired with eager, bootstrap interval, Holm "
    "p-value, non-finite sets), P99 and max across sets of each per-set metric per path, the share of sets where "
    "fused is better / equal / worse, and the fusion evidence. The §3.2 summary table.",
    kinds={"polars"},
)
def accumulated_error_summary(
    context: dg.AssetExecutionContext, per_set: pl.DataFrame, evidence: pl.DataFrame
) -> pl.DataFrame:
    wide = summarize(per_set, evidence)
    table = verdict_table(wide)
    counts = {v: int((wide["fused_verdict"] == v).sum()) for v in (SUPPORTED, CONTRADICTED, INCONCLUSIVE)}
    context.add_output_metadata(
        {
            "rows": wide.height,
            **{f"fused_{v}_rows": n for v, n in counts.items()},
            "emulate_contradicted_rows": int((wide["emulate_verdict"] == CONTRADICTED).sum()),
            "nonfinite_sets_fused": int(wide["fused_nonfinite_sets"].sum()),
            **RULE.metadata(),
            "verdicts": dg.MetadataValue.md(markdown_table(table)),
        }
    )
    return wide


def verdict_table(summary: pl.DataFrame) -> pl.DataFrame:
    """B's verdict table: one row per chain x distribution x dtype with the rule's figures."""
    return summary.select(
        *GROUP_KEYS,
        pl.col("fused_paired_sets").alias("sets"),
        pl.col("eager_sulp_max_p99").round(3).alias("eager P99"),
        pl.col("fused_sulp_max_p99").round(3).alias("fused P99"),
        pl.col("fused_p99_difference").round(3).alias("difference"),
        pl.col("fused_ci_lower").round(3).alias("CI low"),
        pl.col("fused_ci_upper").round(3).alias("CI high"),
        pl.col("fused_p_holm").round(4).alias("Holm p"),
        pl.col("fused_nonfinite_sets").alias("non-finite sets"),
        pl.col("fused_materially_worse_sets").alias("sets worse > 1 sULP"),
        pl.col("fused_verdict").alias("verdict"),
        pl.col("emulate_verdict").alias("emulate verdict"),
    )


# --- counterexamples, ablation and the switch list -------------------------------------------


def _explain(row: dict[str, Any], fused_ops: list[str]) -> str:
    dtype = row["dtype"]
    verdict = row["fused_verdict"]
    parts = [
        f"Fused P99 of per-set scale-aware error {row['fused_sulp_max_p99']:.3g} vs eager {row['eager_sulp_max_p99']:.3g} "
        f"(difference {row['fused_p99_difference']:+.3g} sULP, one-sided {CONFIDENCE:g} interval "
        f"[{row['fused_ci_lower']:+.3g}, {row['fused_ci_upper']:+.3g}]); non-finite sets {row['fused_nonfinite_sets']}; "
        f"verdict {verdict} under B's rule (materiality {MATERIALITY_SULP:g} sULP). Fused is worse than eager on "
        f"{row['fused_worse_fraction']:.1%} of sets, better on {row['fused_better_fraction']:.1%}, bit-identical to "
        f"eager on {row['fused_bit_equal_eager_fraction']:.1%}."
    ]
    if row["emulate_same_code_as_fused"]:
        parts.append(
            "emulate_precision_casts generated the same code as plain fusion here, so it cannot separate "
            "intermediate precision from the fused kernel's own arithmetic."
        )
    elif row["emulate_verdict"] != CONTRADICTED and (row["fused_emulate_sulp_max_p99"] or 0) <= (
        row["eager_sulp_max_p99"] or 0
    ):
        parts.append(
            f"With emulate_precision_casts (intermediates rounded to {dtype} as eager rounds them) fused is "
            "no worse than eager: the difference comes from the precision fused intermediates are kept in."
        )
    else:
        parts.append("emulate_precision_casts does not remove it, so it is not only intermediate rounding.")
    parts.append(
        f"Fused code covers: {', '.join(fused_ops) or 'none'}; the ablation table names the op whose removal "
        "from the fused region measurably reduces the error."
    )
    return " ".join(parts)


def _reproducer_dir(context: dg.AssetExecutionContext, settings: ExperimentSettings) -> Path:
    data: DataFolder = context.resources.data
    return data.profile_dir(settings.profile) / "reproducers" / "accumulated_error"


def is_counterexample(row: dict[str, Any]) -> bool:
    """A row where fused's P99 (or max) of per-set scale-aware error is above eager's, or any fused
    output is non-finite where eager's is finite: a contradiction when the rule says so, a finding
    to read otherwise."""
    if row["fused_nonfinite_sets"]:
        return True
    if row["fused_verdict"] == CONTRADICTED:
        return True
    return bool(
        row["fused_sulp_max_p99"] > row["eager_sulp_max_p99"] or row["fused_sulp_max_max"] > row["eager_sulp_max_max"]
    )


COUNTEREXAMPLE_SCHEMA = {
    "chain": pl.String,
    "distribution": pl.String,
    "dtype": pl.String,
    "operator_chain": pl.String,
    "fused_ops": pl.String,
    "verdict": pl.String,
    "p99_difference": pl.Float64,
    "ci_lower": pl.Float64,
    "ci_upper": pl.Float64,
    "nonfinite_sets": pl.Int64,
    "eager_sulp_p99": pl.Float64,
    "fused_sulp_p99": pl.Float64,
    "eager_sulp_max": pl.Float64,
    "fused_sulp_max": pl.Float64,
    "eager_ulp_max_max": pl.Float64,
    "fused_ulp_max_max": pl.Float64,
    "fused_worse_fraction": pl.Float64,
    "emulate_verdict": pl.String,
    "emulate_same_code_as_fused": pl.Boolean,
    "worst_set_index": pl.Int64,
    "pool_seed": pl.Int64,
    "reproducer": pl.String,
    "explanation": pl.String,
}


@dg.asset(
    group_name=GROUP,
    ins={
        "summary": dg.AssetIn("accumulated_error_summary"),
        "worst_sets": dg.AssetIn("accumulated_error_worst_sets"),
    },
    # Reproducers go next to the stored assets, in the data folder.
    required_resource_keys={"data", "settings"},
    description="Every chain x distribution x dtype where fused's P99 or max of per-set scale-aware error exceeds "
    "eager's, or fused is non-finite where eager is finite: B's verdict for it (contradicted, or within the rule), "
    "the fused op types, a saved reproducer (the set where fused is worst relative to eager: inputs, fp64 reference, "
    "every path's output, seed) and an explanation. Hand-over list for §6.1.",
    kinds={"polars", "safetensors"},
)
def accumulated_error_counterexamples(
    context: dg.AssetExecutionContext,
    summary: pl.DataFrame,
    worst_sets: dict[str, torch.Tensor],
) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    folder = _reproducer_dir(context, settings)
    out = []
    for row in summary.iter_rows(named=True):
        if not is_counterexample(row):
            continue
        chain, dist, dtype = row["chain"], row["distribution"], row["dtype"]
        ops = _fused_ops(chain, row["fused_extern_calls"] or "")
        prefix = f"{chain}/{dist}/{dtype}"
        workload = WORKLOADS[chain]
        tensors = {f"input/{a}": worst_sets[f"{prefix}/input/{a}"] for a in workload.arg_names}
        tensors.update({f"output/{p}": worst_sets[f"{prefix}/output/{p}"] for p in PATHS})
        tensors["fp64_reference"] = worst_sets[f"{prefix}/fp64_reference"]
        tensors["set_index"] = worst_sets[f"{prefix}/set_index"]
        # The worst set's own seed, derived exactly as input_pool_<chain> derives it: redraws that set alone.
        seed = pool_set_seed(settings, chain, dist, int(tensors["set_index"][0]))
        tensors["pool_seed"] = torch.tensor([seed], dtype=torch.int64)
        path = folder / f"{chain}__{dist}__{dtype}.safetensors"
        save_tensors(tensors, path)
        out.append(
            {
                "chain": chain,
                "distribution": dist,
                "dtype": dtype,
                "operator_chain": " -> ".join(CHAIN_STAGES[chain][0]),
                "fused_ops": ", ".join(ops),
                "verdict": row["fused_verdict"],
                "p99_difference": row["fused_p99_difference"],
                "ci_lower": row["fused_ci_lower"],
                "ci_upper": row["fused_ci_upper"],
                "nonfinite_sets": row["fused_nonfinite_sets"],
                "eager_sulp_p99": row["eager_sulp_max_p99"],
                "fused_sulp_p99": row["fused_sulp_max_p99"],
                "eager_sulp_max": row["eager_sulp_max_max"],
                "fused_sulp_max": row["fused_sulp_max_max"],
                "eager_ulp_max_max": row["eager_ulp_max_max"],
                "fused_ulp_max_max": row["fused_ulp_max_max"],
                "fused_worse_fraction": row["fused_worse_fraction"],
                "emulate_verdict": row["emulate_verdict"],
                "emulate_same_code_as_fused": row["emulate_same_code_as_fused"],
                "worst_set_index": int(tensors["set_index"][0]),
                "pool_seed": seed,
                "reproducer": str(path),
                "explanation": _explain(row, ops),
            }
        )
    table = pl.DataFrame(out, schema=COUNTEREXAMPLE_SCHEMA)
    context.add_output_metadata(
        {
            "counterexamples": table.height,
            "contradicted": int((table["verdict"] == CONTRADICTED).sum()),
            "chains_with_counterexamples": ", ".join(sorted(set(table["chain"].to_list()))) or "none",
            "list": dg.MetadataValue.md(
                markdown_table(
                    table.select(
                        "chain", "distribution", "dtype", "verdict", pl.col("p99_difference").round(3), "nonfinite_sets"
                    )
                )
            ),
        }
    )
    return table


#: Sets per counterexample the ablation re-runs: those where fused is worst relative to eager.
ABLATION_SETS = 32

ABLATION_SCHEMA = {
    "chain": pl.String,
    "distribution": pl.String,
    "dtype": pl.String,
    "verdict": pl.String,
    "op_index": pl.Int64,
    "op": pl.String,
    "sets": pl.Int64,
    "eager_mean": pl.Float64,
    "fused_mean": pl.Float64,
    "ablated_mean": pl.Float64,
    "fused_nonfinite_sets": pl.Int64,
    "ablated_nonfinite_sets": pl.Int64,
    "improvement": pl.Float64,
    "share_of_gap": pl.Float64,
    "responsible": pl.Boolean,
}


def ablate(
    chain: str,
    dtype: str,
    pool: dict[str, torch.Tensor],
    ref: torch.Tensor,
    set_indices: list[int],
    dist: str,
    fused_errors: np.ndarray,
    eager_errors: np.ndarray,
    fused_nonfinite: int,
    compiled: dict[tuple[str, str, int], Callable[..., torch.Tensor]],
    make_fused: Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]],
    device: torch.device,
) -> list[dict[str, Any]]:
    """For each op of ``chain``: the chain compiled with that op kept out of the fused region, run
    on ``set_indices``; its mean per-set scale-aware error against the fused and eager means.

    ``improvement`` = fused mean - ablated mean (positive: keeping the op out helps), and
    ``share_of_gap`` its share of fused - eager. An ablation that turns non-finite sets finite
    counts those as improved. ``compiled`` caches one compiled variant per (chain, dtype, op)."""
    workload = WORKLOADS[chain]
    ops = CHAIN_STAGES[chain][0]
    args = [pool[f"{dist}/{dtype}/{a}"][set_indices].to(device) for a in workload.arg_names]
    refs = ref[set_indices]
    out: list[dict[str, Any]] = []
    for i, op in enumerate(ops):
        key = (chain, dtype, i)
        if key not in compiled:
            compiled[key] = make_fused(chain_without_fusing(chain, i))
        fn = compiled[key]
        outputs = torch.stack([fn(*(a[j] for a in args)) for j in range(len(set_indices))])
        stats = error_stats_per_set(outputs, refs)
        nonfinite = int((~torch.isfinite(outputs)).reshape(len(set_indices), -1).any(dim=1).sum())
        ablated = np.nan_to_num(stats["sulp_max"], nan=0.0)
        out.append(
            {
                "op_index": i,
                "op": op,
                "sets": len(set_indices),
                "eager_mean": float(eager_errors.mean()),
                "fused_mean": float(fused_errors.mean()),
                "ablated_mean": float(ablated.mean()),
                "fused_nonfinite_sets": fused_nonfinite,
                "ablated_nonfinite_sets": nonfinite,
            }
        )
    for r in out:
        r["improvement"] = r["fused_mean"] - r["ablated_mean"]
        gap = r["fused_mean"] - r["eager_mean"]
        r["share_of_gap"] = r["improvement"] / gap if gap > 0 else None
    return out


def _responsible(rows: list[dict[str, Any]]) -> None:
    """Mark the op whose removal helps most: fewer non-finite sets first, then the largest
    improvement, which must exceed a tenth of a scale-aware ULP to count as measured."""
    if not rows:
        return
    best = max(rows, key=lambda r: (r["fused_nonfinite_sets"] - r["ablated_nonfinite_sets"], r["improvement"]))
    fixed_nonfinite = best["ablated_nonfinite_sets"] < best["fused_nonfinite_sets"]
    for r in rows:
        r["responsible"] = r is best and (fixed_nonfinite or r["improvement"] > 0.1)


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    ins={
        "counterexamples": dg.AssetIn("accumulated_error_counterexamples"),
        "per_set": dg.AssetIn("accumulated_error_per_set"),
        **{f"pool_{c}": dg.AssetIn(f"input_pool_{c}") for c in CHAINS},
        **{f"ref_{c}": dg.AssetIn(f"fp64_reference_{c}") for c in CHAINS},
    },
    description=f"§6.1 by measurement: for every counterexample, each op of the chain kept out of the fused region in "
    f"turn (the rest still fused), re-run on the {ABLATION_SETS} sets where fused is worst relative to eager; the "
    "mean per-set scale-aware error with and without that op fused, and the op whose removal helps most.",
    kinds={"polars"},
)
def fusion_ablation(
    context: dg.AssetExecutionContext,
    settings: ExperimentSettings,
    counterexamples: pl.DataFrame,
    per_set: pl.DataFrame,
    **inputs: Any,
) -> pl.DataFrame:
    device = settings.torch_device()
    compiled: dict[tuple[str, str, int], Any] = {}

    def make_fused(fn: Any) -> Any:
        return fused(fn, backend=settings.backend, options=settings.options(), require_fusion=False)

    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    for cex in counterexamples.iter_rows(named=True):
        chain, dist, dtype = cex["chain"], cex["distribution"], cex["dtype"]
        grp = per_set.filter((pl.col("chain") == chain) & (pl.col("distribution") == dist) & (pl.col("dtype") == dtype))
        f = grp.filter(pl.col("path") == "fused").sort("set_index")
        e = grp.filter(pl.col("path") == "eager").sort("set_index")
        fe, ee = f["sulp_max"].fill_nan(0.0).to_numpy(), e["sulp_max"].fill_nan(0.0).to_numpy()
        nonfinite = f["nonfinite_vs_eager"].to_numpy() > 0
        gap = np.where(nonfinite, np.inf, fe - ee)
        chosen = np.argsort(-gap, kind="stable")[:ABLATION_SETS]
        found = ablate(
            chain,
            dtype,
            inputs[f"pool_{chain}"],
            inputs[f"ref_{chain}"][f"{dist}/{dtype}"],
            [int(i) for i in f["set_index"].to_numpy()[chosen]],
            dist,
            fe[chosen],
            ee[chosen],
            int(nonfinite[chosen].sum()),
            compiled,
            make_fused,
            device,
        )
        _responsible(found)
        rows.extend(
            {"chain": chain, "distribution": dist, "dtype": dtype, "verdict": cex["verdict"], **r} for r in found
        )
    table = pl.DataFrame(rows, schema=ABLATION_SCHEMA)
    responsible = table.filter(pl.col("responsible"))
    context.add_output_metadata(
        {
            "counterexamples_ablated": counterexamples.height,
            "variants_compiled": len(compiled),
            "wall_seconds": round(time.perf_counter() - start, 1),
            "responsible_ops": dg.MetadataValue.md(
                markdown_table(
                    responsible.select(
                        "chain",
                        "distribution",
                        "dtype",
                        "verdict",
                        "op",
                        pl.col("improvement").round(3),
                        pl.col("share_of_gap").round(2),
                    )
                )
            )
            if responsible.height
            else "none measured",
        }
    )
    return table


@dg.asset(
    group_name=GROUP,
    ins={"ablation": dg.AssetIn("fusion_ablation")},
    description="Which op types to keep out of fusion, per dtype (§6.1 'disable fusion by operator type'): the op "
    "whose removal from the fused region measurably reduced the error, for every counterexample that contradicts "
    "B's claim; counterexamples within the rule are listed to watch. Says so when there is nothing to switch off.",
    kinds={"json"},
)
def fusion_switch_list(context: dg.AssetExecutionContext, ablation: pl.DataFrame) -> dict[str, Any]:
    responsible = ablation.filter(pl.col("responsible"))
    keep: dict[str, set[str]] = {}
    watch: dict[str, set[str]] = {}
    for row in responsible.iter_rows(named=True):
        target = keep if row["verdict"] == CONTRADICTED else watch
        target.setdefault(row["dtype"], set()).add(row["op"])
    cases = ablation.select(*GROUP_KEYS, "verdict").unique()
    unexplained = cases.join(responsible.select(*GROUP_KEYS), on=GROUP_KEYS, how="anti")
    contradicted = int((cases["verdict"] == CONTRADICTED).sum())
    if cases.height == 0:
        note = "No chain, distribution or dtype had fused error above eager's: nothing needs to be kept out of fusion."
    else:
        note = (
            f"{cases.height} counterexample(s), {contradicted} contradicting B's claim; each op listed was measured "
            f"by ablation (kept out of the fused region, error fell). {unexplained.height} counterexample(s) had no "
            "single op whose removal helped by more than 0.1 scale-aware ULP."
        )
    value = {
        "counterexamples": cases.height,
        "contradicted": contradicted,
        "keep_out_of_fusion": {d: sorted(ops) for d, ops in sorted(keep.items())},
        "watch": {d: sorted(ops) for d, ops in sorted(watch.items())},
        "evidence": [
            {k: row[k] for k in ("chain", "distribution", "dtype", "verdict", "op", "improvement", "share_of_gap")}
            for row in responsible.iter_rows(named=True)
        ],
        "no_single_op": [f"{r['chain']}/{r['distribution']}/{r['dtype']}" for r in unexplained.iter_rows(named=True)],
        "note": note,
    }
    context.add_output_metadata(
        {
            "counterexamples": cases.height,
            "note": note,
            "keep_out_of_fusion": str(value["keep_out_of_fusion"] or "none"),
            "watch": str(value["watch"] or "none"),
        }
    )
    return value


# --- chart data ------------------------------------------------------------------------------

#: Log-scale bins: this many per power of two.
BINS_PER_OCTAVE = 2


@dg.asset(
    group_name=GROUP,
    ins={"per_set": dg.AssetIn("accumulated_error_per_set")},
    description="Histogram and CDF of per-set scale-aware ULP max, ULP max and ULP p99 per chain x distribution x "
    f"dtype x path, in log-scale bins ({BINS_PER_OCTAVE} per power of two; exact zeros in their own bin), for the "
    "§3.2 charts.",
    kinds={"polars"},
)
def accumulated_error_distributions(context: dg.AssetExecutionContext, per_set: pl.DataFrame) -> pl.DataFrame:
    keys = [*GROUP_KEYS, "path"]
    long = per_set.unpivot(
        index=keys, on=["sulp_max", "ulp_max", "ulp_p99"], variable_name="metric", value_name="value"
    )
    long = long.filter(pl.col("value").is_not_nan())
    binned = long.with_columns(
        pl.when(pl.col("value") > 0)
        .then((pl.col("value").log(2) * BINS_PER_OCTAVE).floor().cast(pl.Int64))
        .otherwise(None)
        .alias("bin")
    )
    hist = (
        binned.group_by([*keys, "metric", "bin"])
        .agg(pl.len().alias("count"))
        .with_columns(
            pl.when(pl.col("bin").is_null())
            .then(0.0)
            .otherwise(2.0 ** (pl.col("bin") / BINS_PER_OCTAVE))
            .alias("bin_lo"),
            pl.when(pl.col("bin").is_null())
            .then(0.0)
            .otherwise(2.0 ** ((pl.col("bin") + 1) / BINS_PER_OCTAVE))
            .alias("bin_hi"),
        )
        .sort([*keys, "metric", "bin"], nulls_last=False)
        .with_columns((pl.col("count") / pl.col("count").sum().over([*keys, "metric"])).alias("fraction"))
        .with_columns(pl.col("fraction").cum_sum().over([*keys, "metric"]).alias("cdf"))
        .drop("bin")
    )
    context.add_output_metadata({"rows": hist.height, "groups": hist.select([*keys, "metric"]).unique().height})
    return hist


# --- checks ----------------------------------------------------------------------------------


@validity_check(
    asset="accumulated_error_summary",
    name="accumulated_error_run_valid",
    additional_ins={
        "per_set": dg.AssetIn("accumulated_error_per_set"),
        "evidence": dg.AssetIn("accumulated_error_fusion_evidence"),
    },
    required_resource_keys={"settings"},
    description="The B run did what it claims: every chain x distribution x dtype x path has every input set; each "
    "fused path compiled once, without graph breaks, with generated kernels; eager outputs are finite wherever the "
    "fp64 reference is (the input distributions stay inside the dtype's finite range, as the plan says).",
)
def accumulated_error_run_valid(
    context: dg.AssetCheckExecutionContext,
    accumulated_error_summary: pl.DataFrame,
    per_set: pl.DataFrame,
    evidence: pl.DataFrame,
) -> dg.AssetCheckResult:
    settings: ExperimentSettings = context.resources.settings
    expected_sets = get_profile(settings.profile).chain_sets
    problems = []
    counts = per_set.group_by([*GROUP_KEYS, "path"]).agg(pl.len().alias("n"))
    short = counts.filter(pl.col("n") != expected_sets)
    if short.height:
        problems.append(
            f"{short.height} chain/distribution/dtype/path groups lack sets (expected {expected_sets} each)"
        )
    expected_groups = sum(len(WORKLOADS[c].distributions) for c in CHAINS) * len(DTYPES_B) * len(PATHS)
    if counts.height != expected_groups:
        problems.append(f"{counts.height} groups in the per-set table, expected {expected_groups}")
    fused_ev = evidence.filter(pl.col("path").is_in(list(FUSED_PATHS)))
    for name, bad in (
        ("graph breaks", pl.col("graph_breaks") > 0),
        ("recompiles", pl.col("recompiles") > 0),
        ("no generated kernel", pl.col("kernel_count") < 1),
    ):
        hit = fused_ev.filter(bad)
        if hit.height:
            problems.append(
                f"{name}: " + ", ".join(f"{r['chain']}/{r['dtype']}/{r['path']}" for r in hit.iter_rows(named=True))
            )
    eager_nonfinite = per_set.filter((pl.col("path") == "eager") & (pl.col("nonfinite_vs_ref") > 0))
    if eager_nonfinite.height:
        where = eager_nonfinite.select(*GROUP_KEYS).unique().sort(pl.all())
        problems.append(
            f"eager is non-finite where the fp64 reference is finite on {eager_nonfinite.height} sets ("
            + ", ".join("/".join(r) for r in where.iter_rows())
            + "): inputs outside the planned finite range"
        )
    return validity_result(
        problems,
        {"groups": counts.height, "sets_per_group": expected_sets, "fused_paths_with_evidence": fused_ev.height},
    )


def _chain_check(chain: str) -> dg.AssetChecksDefinition:
    @claim_check(
        rule=RULE,
        asset="accumulated_error_summary",
        name=f"fused_not_worse_than_eager_{chain}",
        description=f"§3.2 for {chain}: fused (and fused with emulate_precision_casts) is no worse than eager against "
        "fp64, per distribution x dtype, by B's rule (P99 across sets of per-set max scale-aware ULP error, paired "
        f"bootstrap, materiality {MATERIALITY_SULP:g} sULP, Holm over all rows, any non-finite output where eager "
        "is finite contradicts).",
    )
    def check(accumulated_error_summary: pl.DataFrame) -> dg.AssetCheckResult:
        rows = accumulated_error_summary.filter(pl.col("chain") == chain)
        judged = [
            {
                **{k: r[k] for k in GROUP_KEYS},
                "path": p,
                "sets": r[f"{label}_paired_sets"],
                "verdict": r[f"{label}_verdict"],
                "nonfinite_sets": r[f"{label}_nonfinite_sets"],
                "nonfinite_elements": r[f"{label}_nonfinite_elements"],
                "p99_difference": r[f"{label}_p99_difference"],
                "ci_lower": r[f"{label}_ci_lower"],
                "ci_upper": r[f"{label}_ci_upper"],
                "p_holm": r[f"{label}_p_holm"],
                "paired_sets": r[f"{label}_paired_sets"],
                "fused_p99": r[f"{p}_sulp_max_p99"],
                "eager_p99": r["eager_sulp_max_p99"],
            }
            for r in rows.iter_rows(named=True)
            for p, label in (("fused", "fused"), ("fused_emulate", "emulate"))
        ]
        if not judged:
            return claim_result(INCONCLUSIVE, RULE, f"no rows for {chain} in the summary")
        verdict = combine(j["verdict"] for j in judged)
        deciding = [j for j in judged if j["verdict"] == verdict] or judged
        meta = {
            "rows_judged": len(judged),
            **{f"rows_{v}": sum(j["verdict"] == v for j in judged) for v in (SUPPORTED, CONTRADICTED, INCONCLUSIVE)},
            "nonfinite_sets": sum(j["nonfinite_sets"] or 0 for j in judged),
            "sets_per_row": max(j["sets"] or 0 for j in judged),
            "rows": dg.MetadataValue.md(
                markdown_table(
                    pl.DataFrame(judged).select(
                        *GROUP_KEYS,
                        "path",
                        "sets",
                        pl.col("eager_p99").round(3),
                        pl.col("fused_p99").round(3),
                        pl.col("p99_difference").round(3),
                        pl.col("ci_lower").round(3),
                        pl.col("ci_upper").round(3),
                        pl.col("p_holm").round(4),
                        "nonfinite_sets",
                        "verdict",
                    )
                )
            ),
        }
        return claim_result(verdict, RULE, "; ".join(_reason(j) for j in deciding[:3]), meta)

    return check


chain_checks = [_chain_check(c) for c in CHAINS]


@finding_check(
    asset="accumulated_error_summary",
    name="fused_worse_within_rule",
    description="Rows where fused's P99 or max of per-set scale-aware error is above eager's but B's rule does not "
    "call it a contradiction (below the materiality threshold or not significant): for a human to read, with the "
    "reproducers in accumulated_error_counterexamples.",
)
def fused_worse_within_rule(accumulated_error_summary: pl.DataFrame) -> dg.AssetCheckResult:
    rows = [
        r
        for r in accumulated_error_summary.iter_rows(named=True)
        if is_counterexample(r) and r["fused_verdict"] != CONTRADICTED
    ]
    findings = [
        f"{r['chain']}/{r['distribution']}/{r['dtype']}: P99 {r['fused_sulp_max_p99']:.3g} vs {r['eager_sulp_max_p99']:.3g}, "
        f"max {r['fused_sulp_max_max']:.3g} vs {r['eager_sulp_max_max']:.3g} sULP ({r['fused_verdict']})"
        for r in rows
    ]
    return finding_result(findings, {"rows_compared": accumulated_error_summary.height})
