"""Task B: is the fused path's accumulated error no worse than eager's? (main document §3.2, §6.1)

Every operator chain of :data:`CHAINS` runs on each stored input set three ways: eager (op by op),
fused (``torch.compile`` with the configured backend) and fused with
``emulate_precision_casts`` (intermediates rounded as eager rounds them). Each output is judged
against the stored fp64 reference; per-set errors become a table, the table a per-chain verdict,
and every chain where fused is worse becomes a counterexample with a saved reproducer and the
list of op types to keep out of fusion (§6.1).
"""


import time
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import polars as pl
import torch

from precisionkit import fused, ulp_diff
from precisionkit.batched import error_stats_per_set

from ..resources import ExperimentSettings
from ..tables import markdown_table
from ..storage import save_tensors
from ..workloads import CHAINS, WORKLOADS, Workload

GROUP = "B_accumulated_error"
DTYPES_B = ("float16", "bfloat16")
PATHS = ("eager", "fused", "fused_emulate")
FUSED_PATHS = ("fused", "fused_emulate")
#: Per-set metrics compared between paths (each summarized across sets by p99 and max).
METRICS = ("abs_max", "rel_max", "ulp_p50", "ulp_p99", "ulp_max")
#: Elements of one path's outputs held at once: batches keep memory flat whatever the set count.
BATCH_ELEMENTS = 1 << 20

#: Op types of each chain in order; ``matmul`` usually stays an extern library call when fused.
CHAIN_OPS = {
    "mul_add_gelu_mul": ("mul", "add", "gelu", "mul"),
    "layernorm": ("layer_norm",),
    "softmax": ("softmax",),
    "matmul_add_layernorm": ("matmul", "add", "layer_norm"),
    "attention": ("matmul", "mul", "softmax", "matmul"),
}
#: Ops whose fused code computes differently from eager beyond rounding (own reduction order or
#: transcendental implementation), most suspect first.
_SUSPECT_ORDER = ("layer_norm", "softmax", "gelu", "add", "mul")
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
    ops = [op for op in CHAIN_OPS[chain] if not (op == "matmul" and matmul_extern)]
    if "addmm" in externs:  # the bias add went into the library call as well
        ops = [op for op in ops if op != "add"]
    return list(dict.fromkeys(ops))


def _suspect_op(ops: list[str]) -> str:
    for op in _SUSPECT_ORDER:
        if op in ops:
            return op
    return ops[0] if ops else "matmul"


# --- the runs --------------------------------------------------------------------------------


def _run_chain(
    context: dg.AssetExecutionContext,
    settings: ExperimentSettings,
    workload: Workload,
    pool: dict[str, torch.Tensor],
    refs: dict[str, torch.Tensor],
    rows: list[dict[str, Any]],
    evidence: list[dict[str, Any]],
    worst: dict[str, torch.Tensor],
) -> None:
    device = settings.torch_device()
    distributions = list(workload.distributions)
    for dtype in DTYPES_B:
        keys = [f"{d}/{dtype}/{workload.arg_names[0]}" for d in distributions]
        missing = [k for k in keys if k not in pool] + [f"{d}/{dtype}" for d in distributions if f"{d}/{dtype}" not in refs]
        if missing:
            raise ValueError(f"input_pool/fp64_reference of {workload.name!r} lack entries {missing}: rematerialize S")
        paths: dict[str, Any] = {"eager": workload.fn}
        for p in FUSED_PATHS:
            paths[p] = fused(workload.fn, backend=settings.backend, options=_path_options(settings, p))
        # The first call compiles; do it up front so the timed loop measures execution only.
        first = tuple(pool[f"{distributions[0]}/{dtype}/{a}"][0].to(device) for a in workload.arg_names)
        for p in FUSED_PATHS:
            paths[p](*first)
        seconds = dict.fromkeys(PATHS, 0.0)
        n_total = 0
        for dist in distributions:
            stacked = {a: pool[f"{dist}/{dtype}/{a}"] for a in workload.arg_names}
            ref = refs[f"{dist}/{dtype}"]
            n_sets = ref.shape[0]
            per_set = max(1, ref[0].numel())
            batch = max(1, min(n_sets, BATCH_ELEMENTS // per_set))
            fused_ulp_max = np.full(n_sets, np.nan)
            for start in range(0, n_sets, batch):
                stop = min(n_sets, start + batch)
                args = [t[start:stop].to(device) for t in stacked.values()]
                sets = [tuple(t[i] for t in args) for i in range(stop - start)]
                ref_batch = ref[start:stop]
                outputs: dict[str, torch.Tensor] = {}
                for p in PATHS:
                    fn = paths[p]
                    t0 = time.perf_counter()
                    outputs[p] = torch.stack([fn(*s) for s in sets])
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    seconds[p] += time.perf_counter() - t0
                for p in PATHS:
                    stats = error_stats_per_set(outputs[p], ref_batch)
                    vs_eager = ulp_diff(outputs[p], outputs["eager"]).reshape(stop - start, -1).amax(dim=1).cpu().numpy()
                    if p == "fused":
                        fused_ulp_max[start:stop] = stats["ulp_max"]
                    for j in range(stop - start):
                        rows.append(
                            {
                                "chain": workload.name,
                                "distribution": dist,
                                "dtype": dtype,
                                "path": p,
                                "set_index": start + j,
                                "abs_max": float(stats["abs_max"][j]),
                                "rel_max": float(stats["rel_max"][j]),
                                "ulp_p50": float(stats["ulp_p50"][j]),
                                "ulp_p99": float(stats["ulp_p99"][j]),
                                "ulp_max": float(stats["ulp_max"][j]),
                                "ulp_mean": float(stats["ulp_mean"][j]),
                                "exact_fraction": float(stats["exact_fraction"][j]),
                                "n_compared": int(stats["n_compared"][j]),
                                "nonfinite_mismatch": int(stats["nan_mismatch"][j] + stats["inf_mismatch"][j]),
                                "max_ulp_vs_eager": int(vs_eager[j]),
                            }
                        )
            n_total += n_sets
            # Keep the set where fused is worst, with every path's output, for a reproducer.
            idx = int(np.nanargmax(fused_ulp_max)) if np.isfinite(fused_ulp_max).any() else 0
            one = tuple(stacked[a][idx].to(device) for a in workload.arg_names)
            prefix = f"{workload.name}/{dist}/{dtype}"
            for a in workload.arg_names:
                worst[f"{prefix}/input/{a}"] = stacked[a][idx].clone()
            for p in PATHS:
                worst[f"{prefix}/output/{p}"] = paths[p](*one).cpu()
            worst[f"{prefix}/fp64_reference"] = ref[idx].clone()
            worst[f"{prefix}/set_index"] = torch.tensor([idx], dtype=torch.int64)
        for p in PATHS:
            row: dict[str, Any] = {
                "chain": workload.name,
                "dtype": dtype,
                "path": p,
                "sets": n_total,
                "path_seconds": seconds[p],
                "sets_per_second": n_total / seconds[p] if seconds[p] > 0 else None,
            }
            if p in FUSED_PATHS:
                ev = paths[p].evidence
                if ev.recompiles != 0:
                    raise RuntimeError(
                        f"{workload.name}/{dtype}/{p} recompiled {ev.recompiles} time(s) over the input sets: "
                        "each (chain, dtype, path) must compile once"
                    )
                meta = ev.as_metadata()
                row.update({k: meta[k] for k in ("backend", "options", "graph_count", "graph_breaks", "recompiles",
                                                 "kernel_count", "kernel_names", "extern_calls", "code_sha256",
                                                 "compile_seconds")})
            evidence.append(row)
        context.log.info(
            f"{workload.name}/{dtype}: "
            + ", ".join(f"{p} {n_total / max(seconds[p], 1e-9):.0f} sets/s" for p in PATHS)
        )


_EVIDENCE_SCHEMA = {
    "chain": pl.String, "dtype": pl.String, "path": pl.String, "sets": pl.Int64, "path_seconds": pl.Float64,
    "sets_per_second": pl.Float64, "backend": pl.String, "options": pl.String, "graph_count": pl.Int64,
    "graph_breaks": pl.Int64, "recompiles": pl.Int64, "kernel_count": pl.Int64, "kernel_names": pl.String,
    "extern_calls": pl.String, "code_sha256": pl.String, "compile_seconds": pl.Float64,
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
    rows: list[dict[str, Any]] = []
    evidence: list[dict[str, Any]] = []
    worst: dict[str, torch.Tensor] = {}
    for chain in CHAINS:
        _run_chain(context, settings, WORKLOADS[chain], inputs[f"pool_{chain}"], inputs[f"ref_{chain}"], rows, evidence, worst)
    per_set = pl.DataFrame(rows)
    ev = pl.DataFrame(evidence, schema=_EVIDENCE_SCHEMA)
    wall = time.perf_counter() - wall
    by_path = ev.group_by("path").agg(pl.col("sets").sum(), pl.col("path_seconds").sum())
    throughput = {r["path"]: r["sets"] / r["path_seconds"] for r in by_path.iter_rows(named=True)}
    common = {
        "wall_seconds": round(wall, 2),
        "compile_seconds_total": round(float(ev["compile_seconds"].sum()), 2),
        **{f"sets_per_second_{p}": round(throughput[p], 1) for p in PATHS},
        "recompiles_total": int(ev["recompiles"].sum()),
    }
    yield dg.Output(per_set, "accumulated_error_per_set", metadata={"sets_total": per_set.height // len(PATHS), **common})
    yield dg.Output(ev, "accumulated_error_fusion_evidence", metadata={
        **common, "table": dg.MetadataValue.md(markdown_table(ev.drop("kernel_names", "options", "backend")))})
    yield dg.Output(worst, "accumulated_error_worst_sets", metadata={"entries": len(worst)})


# --- summary ---------------------------------------------------------------------------------

GROUP_KEYS = ["chain", "distribution", "dtype"]


def _path_aggregates(per_set: pl.DataFrame) -> pl.DataFrame:
    """p99 (linear) and max across sets of every per-set metric, one row per chain/dist/dtype/path."""
    return per_set.group_by([*GROUP_KEYS, "path"]).agg(
        pl.len().alias("sets"),
        *[pl.col(m).quantile(0.99, interpolation="linear").alias(f"{m}__p99") for m in METRICS],
        *[pl.col(m).max().alias(f"{m}__max") for m in METRICS],
        (pl.col("max_ulp_vs_eager") == 0).mean().alias("bit_equal_eager_fraction"),
    )


def worse_metrics(aggs: pl.DataFrame, path: str = "fused") -> pl.DataFrame:
    """Per chain/dist/dtype: the ``metric:stat`` entries where ``path`` exceeds eager (strictly)."""
    e = aggs.filter(pl.col("path") == "eager")
    f = aggs.filter(pl.col("path") == path)
    joined = f.join(e, on=GROUP_KEYS, suffix="_eager")
    worse = [
        pl.when(pl.col(f"{m}__{s}") > pl.col(f"{m}__{s}_eager")).then(pl.lit(f"{m}:{s}")).otherwise(None)
        for m in METRICS
        for s in ("p99", "max")
    ]
    return joined.select(*GROUP_KEYS, pl.concat_list(worse).list.drop_nulls().alias("worse"))


@dg.asset(
    group_name=GROUP,
    ins={
        "per_set": dg.AssetIn("accumulated_error_per_set"),
        "evidence": dg.AssetIn("accumulated_error_fusion_evidence"),
    },
    description="One row per chain x distribution x dtype: eager vs fused (and fused_emulate) p99 and max across "
    "sets of each per-set error metric, the 'fused <= eager' verdict per metric, the share of sets where fused "
    "is better / equal / worse by per-set ULP max, and the fusion evidence. The §3.2 summary table.",
    kinds={"polars"},
)
def accumulated_error_summary(context: dg.AssetExecutionContext, per_set: pl.DataFrame, evidence: pl.DataFrame) -> pl.DataFrame:
    aggs = _path_aggregates(per_set)
    wide = aggs.filter(pl.col("path") == "eager").select(GROUP_KEYS + ["sets"])
    for p in PATHS:
        part = aggs.filter(pl.col("path") == p).select(
            GROUP_KEYS
            + [pl.col(f"{m}__{s}").alias(f"{p}_{m}_{s}") for m in METRICS for s in ("p99", "max")]
            + ([pl.col("bit_equal_eager_fraction").alias(f"{p}_bit_equal_eager_fraction")] if p != "eager" else [])
        )
        wide = wide.join(part, on=GROUP_KEYS)
    for p, label in (("fused", "fused"), ("fused_emulate", "emulate")):
        wide = wide.with_columns(
            [
                ((pl.col(f"{p}_{m}_p99") <= pl.col(f"eager_{m}_p99")) & (pl.col(f"{p}_{m}_max") <= pl.col(f"eager_{m}_max"))).alias(
                    f"{label}_le_eager_{m}"
                )
                for m in METRICS
            ]
        ).with_columns(pl.all_horizontal([f"{label}_le_eager_{m}" for m in METRICS]).alias(f"{label}_not_worse"))
        # Per set, by ULP max: is this path strictly better / equal / worse than eager on the same inputs?
        pair = per_set.filter(pl.col("path") == p).join(
            per_set.filter(pl.col("path") == "eager"), on=[*GROUP_KEYS, "set_index"], suffix="_eager"
        )
        shares = pair.group_by(GROUP_KEYS).agg(
            (pl.col("ulp_max") < pl.col("ulp_max_eager")).mean().alias(f"{label}_better_fraction"),
            (pl.col("ulp_max") == pl.col("ulp_max_eager")).mean().alias(f"{label}_equal_fraction"),
            (pl.col("ulp_max") > pl.col("ulp_max_eager")).mean().alias(f"{label}_worse_fraction"),
        )
        wide = wide.join(shares, on=GROUP_KEYS)
    for p, label in (("fused", "fused"), ("fused_emulate", "emulate")):
        ev = evidence.filter(pl.col("path") == p).select(
            "chain", "dtype",
            *[pl.col(c).alias(f"{label}_{c}") for c in ("kernel_count", "graph_breaks", "recompiles", "code_sha256", "extern_calls", "sets_per_second")],
        )
        wide = wide.join(ev, on=["chain", "dtype"], how="left")
    eager_tp = evidence.filter(pl.col("path") == "eager").select("chain", "dtype", pl.col("sets_per_second").alias("eager_sets_per_second"))
    wide = wide.join(eager_tp, on=["chain", "dtype"], how="left").with_columns(
        (pl.col("fused_code_sha256") == pl.col("emulate_code_sha256")).alias("emulate_same_code_as_fused")
    )
    order = {c: i for i, c in enumerate(CHAINS)}
    wide = wide.with_columns(pl.col("chain").replace_strict(order, return_dtype=pl.Int64).alias("_o")).sort(
        "_o", "distribution", "dtype").drop("_o")
    verdict = wide.select(
        *GROUP_KEYS, "fused_not_worse", "emulate_not_worse",
        *[pl.col(f"{p}_ulp_max_{s}").round(3) for p in ("eager", "fused", "fused_emulate") for s in ("p99", "max")],
        pl.col("fused_better_fraction").round(3), pl.col("fused_worse_fraction").round(3),
    )
    context.add_output_metadata(
        {
            "rows": wide.height,
            "fused_not_worse_rows": int(wide["fused_not_worse"].sum()),
            "fused_worse_rows": int((~wide["fused_not_worse"]).sum()),
            "emulate_not_worse_rows": int(wide["emulate_not_worse"].sum()),
            "verdicts": dg.MetadataValue.md(markdown_table(verdict)),
        }
    )
    return wide


# --- counterexamples and the switch list -----------------------------------------------------


def _explain(row: dict[str, Any], worse: list[str], emulate_worse: list[str], fused_ops: list[str], suspect: str) -> str:
    dtype = row["dtype"]
    parts = [
        f"fused exceeds eager on {', '.join(worse)} (per-set metric:statistic across {row['sets']} sets); "
        f"fused is worse than eager by per-set ULP max on {row['fused_worse_fraction']:.1%} of sets, better on "
        f"{row['fused_better_fraction']:.1%}, bit-identical to eager on {row['fused_bit_equal_eager_fraction']:.1%}."
    ]
    if row["emulate_same_code_as_fused"]:
        parts.append(
            "emulate_precision_casts generated the same code as plain fusion here, so it cannot separate intermediate "
            "precision from the fused kernel's own arithmetic."
        )
    elif not emulate_worse:
        parts.append(
            f"With emulate_precision_casts (intermediates rounded to {dtype} as eager rounds them) fused is no worse "
            "than eager: the difference comes from the precision fused intermediates are kept in."
        )
    else:
        parts.append(
            f"emulate_precision_casts does not remove it (still worse on {', '.join(emulate_worse)}), so it is not "
            f"only intermediate rounding: the fused kernel's own arithmetic for {suspect} (reduction order / "
            "transcendental implementation) differs from eager's."
        )
    parts.append(f"Fused code covers: {', '.join(fused_ops) or 'none'}; most suspect op type: {suspect}.")
    return " ".join(parts)


def _reproducer_dir(context: dg.AssetExecutionContext, settings: ExperimentSettings) -> Path:
    base = getattr(context.resources.io_manager, "base_dir", None)
    if not base:
        raise ValueError("the io_manager resource has no base_dir: reproducers need PrecisionIOManager")
    return Path(base) / settings.profile / "reproducers" / "accumulated_error"


@dg.asset(
    group_name=GROUP,
    ins={
        "summary": dg.AssetIn("accumulated_error_summary"),
        "worst_sets": dg.AssetIn("accumulated_error_worst_sets"),
    },
    # Reproducers go next to the stored assets, so the asset needs the IO manager's base folder.
    required_resource_keys={"io_manager", "settings"},
    description="Every chain x distribution x dtype where fused p99 or max (of any per-set metric) exceeds eager's: "
    "the worse metrics, the fused op types and the most suspect one, a saved reproducer (worst set's inputs, fp64 "
    "reference, every path's output, seed) and a first explanation. Hand-over list for §6.1.",
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
        worse = [f"{m}:{s}" for m in METRICS for s in ("p99", "max") if row[f"fused_{m}_{s}"] > row[f"eager_{m}_{s}"]]
        if not worse:
            continue
        emulate_worse = [f"{m}:{s}" for m in METRICS for s in ("p99", "max") if row[f"fused_emulate_{m}_{s}"] > row[f"eager_{m}_{s}"]]
        ratio = max(row[f"fused_{w.replace(':', '_')}"] / row[f"eager_{w.replace(':', '_')}"] if row[f"eager_{w.replace(':', '_')}"] > 0 else float("inf") for w in worse)
        chain, dist, dtype = row["chain"], row["distribution"], row["dtype"]
        ops = _fused_ops(chain, row["fused_extern_calls"] or "")
        suspect = _suspect_op(ops)
        prefix = f"{chain}/{dist}/{dtype}"
        workload = WORKLOADS[chain]
        tensors = {f"input/{a}": worst_sets[f"{prefix}/input/{a}"] for a in workload.arg_names}
        tensors.update({f"output/{p}": worst_sets[f"{prefix}/output/{p}"] for p in PATHS})
        tensors["fp64_reference"] = worst_sets[f"{prefix}/fp64_reference"]
        tensors["set_index"] = worst_sets[f"{prefix}/set_index"]
        # The pool's seed for this chain/distribution, derived exactly as input_pool_<chain> derives it.
        seed = settings.derived_seed("pool", chain, dist)
        tensors["pool_seed"] = torch.tensor([seed], dtype=torch.int64)
        path = folder / f"{chain}__{dist}__{dtype}.safetensors"
        save_tensors(tensors, path)
        out.append(
            {
                "chain": chain,
                "distribution": dist,
                "dtype": dtype,
                "operator_chain": " -> ".join(CHAIN_OPS[chain]),
                "fused_ops": ", ".join(ops),
                "suspect_op": suspect,
                "worse_metrics": ", ".join(worse),
                "worst_ratio": ratio,
                "eager_ulp_max_max": row["eager_ulp_max_max"],
                "fused_ulp_max_max": row["fused_ulp_max_max"],
                "eager_ulp_p99_p99": row["eager_ulp_p99_p99"],
                "fused_ulp_p99_p99": row["fused_ulp_p99_p99"],
                "fused_worse_fraction": row["fused_worse_fraction"],
                "emulate_not_worse": not emulate_worse,
                "emulate_same_code_as_fused": row["emulate_same_code_as_fused"],
                "worst_set_index": int(tensors["set_index"][0]),
                "pool_seed": seed,
                "reproducer": str(path),
                "explanation": _explain(row, worse, emulate_worse, ops, suspect),
            }
        )
    schema = {
        "chain": pl.String, "distribution": pl.String, "dtype": pl.String, "operator_chain": pl.String,
        "fused_ops": pl.String, "suspect_op": pl.String, "worse_metrics": pl.String, "worst_ratio": pl.Float64,
        "eager_ulp_max_max": pl.Float64, "fused_ulp_max_max": pl.Float64, "eager_ulp_p99_p99": pl.Float64,
        "fused_ulp_p99_p99": pl.Float64, "fused_worse_fraction": pl.Float64, "emulate_not_worse": pl.Boolean,
        "emulate_same_code_as_fused": pl.Boolean, "worst_set_index": pl.Int64, "pool_seed": pl.Int64,
        "reproducer": pl.String, "explanation": pl.String,
    }
    table = pl.DataFrame(out, schema=schema)
    context.add_output_metadata(
        {
            "counterexamples": table.height,
            "chains_with_counterexamples": ", ".join(sorted(set(table["chain"].to_list()))) or "none",
            "list": dg.MetadataValue.md(markdown_table(table.select("chain", "distribution", "dtype", "suspect_op", "worse_metrics",
                                                         pl.col("worst_ratio").round(3), "emulate_not_worse"))),
        }
    )
    return table


@dg.asset(
    group_name=GROUP,
    ins={"counterexamples": dg.AssetIn("accumulated_error_counterexamples")},
    description="Which op types to keep out of fusion, per dtype, from the counterexample list (evidence for the "
    "§6.1 'disable fusion by operator type' switch); says so explicitly when there is nothing to switch off.",
    kinds={"json"},
)
def fusion_switch_list(context: dg.AssetExecutionContext, counterexamples: pl.DataFrame) -> dict[str, Any]:
    keep: dict[str, list[str]] = {}
    for row in counterexamples.iter_rows(named=True):
        keep.setdefault(row["dtype"], [])
        if row["suspect_op"] not in keep[row["dtype"]]:
            keep[row["dtype"]].append(row["suspect_op"])
    n = counterexamples.height
    if n == 0:
        note = "No chain, distribution or dtype had fused p99 or max error above eager's: nothing needs to be kept out of fusion."
    else:
        note = (
            f"{n} chain/distribution/dtype combination(s) had fused error above eager's; the listed op types are the "
            "most suspect fused op of each (see accumulated_error_counterexamples for evidence and reproducers)."
        )
    value = {
        "counterexamples": n,
        "keep_out_of_fusion": {d: sorted(ops) for d, ops in keep.items()},
        "evidence": [
            {k: row[k] for k in ("chain", "distribution", "dtype", "suspect_op", "worse_metrics", "worst_ratio", "reproducer")}
            for row in counterexamples.iter_rows(named=True)
        ],
        "note": note,
    }
    context.add_output_metadata({"counterexamples": n, "note": note,
                                 "keep_out_of_fusion": str(value["keep_out_of_fusion"] or "none")})
    return value


# --- chart data ------------------------------------------------------------------------------

#: Log-scale bins: this many per power of two.
BINS_PER_OCTAVE = 2


@dg.asset(
    group_name=GROUP,
    ins={"per_set": dg.AssetIn("accumulated_error_per_set")},
    description="Histogram and CDF of per-set ULP max and ULP p99 per chain x distribution x dtype x path, in "
    f"log-scale bins ({BINS_PER_OCTAVE} per power of two; exact zeros in their own bin), for the §3.2 charts.",
    kinds={"polars"},
)
def accumulated_error_distributions(context: dg.AssetExecutionContext, per_set: pl.DataFrame) -> pl.DataFrame:
    keys = [*GROUP_KEYS, "path"]
    long = per_set.unpivot(index=keys, on=["ulp_max", "ulp_p99"], variable_name="metric", value_name="value")
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
            pl.when(pl.col("bin").is_null()).then(0.0).otherwise(2.0 ** (pl.col("bin") / BINS_PER_OCTAVE)).alias("bin_lo"),
            pl.when(pl.col("bin").is_null()).then(0.0).otherwise(2.0 ** ((pl.col("bin") + 1) / BINS_PER_OCTAVE)).alias("bin_hi"),
        )
        .sort([*keys, "metric", "bin"], nulls_last=False)
        .with_columns((pl.col("count") / pl.col("count").sum().over([*keys, "metric"])).alias("fraction"))
        .with_columns(pl.col("fraction").cum_sum().over([*keys, "metric"]).alias("cdf"))
        .drop("bin")
    )
    context.add_output_metadata({"rows": hist.height, "groups": hist.select([*keys, "metric"]).unique().height})
    return hist


# --- checks ----------------------------------------------------------------------------------


def _chain_check(chain: str) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset="accumulated_error_summary",
        name=f"fused_not_worse_than_eager_{chain}",
        additional_ins={
            "per_set": dg.AssetIn("accumulated_error_per_set"),
            "counterexamples": dg.AssetIn("accumulated_error_counterexamples"),
        },
        description=f"{chain}: fused p99 and max of every per-set metric <= eager's (recomputed from the per-set "
        "table), or the combination is in the counterexample list with an explanation and reproducer (WARN).",
    )
    def check(accumulated_error_summary: pl.DataFrame, per_set: pl.DataFrame, counterexamples: pl.DataFrame) -> dg.AssetCheckResult:
        worse = worse_metrics(_path_aggregates(per_set.filter(pl.col("chain") == chain)))
        worse = worse.filter(pl.col("worse").list.len() > 0)
        found = {(r["distribution"], r["dtype"]): r["worse"] for r in worse.iter_rows(named=True)}
        listed = {
            (r["distribution"], r["dtype"]): r
            for r in counterexamples.filter(pl.col("chain") == chain).iter_rows(named=True)
        }
        groups = per_set.filter(pl.col("chain") == chain).select("distribution", "dtype").unique().height
        unlisted = sorted(k for k in found if k not in listed)
        spurious = sorted(k for k in listed if k not in found)
        incomplete = sorted(
            k for k, r in listed.items() if not r["explanation"] or not Path(r["reproducer"]).exists()
        )
        meta = {
            "groups_compared": groups,
            "fused_worse": ", ".join(f"{d}/{t}: {', '.join(w)}" for (d, t), w in sorted(found.items())) or "none",
            "counterexamples_listed": ", ".join(f"{d}/{t}" for d, t in sorted(listed)) or "none",
        }
        if groups == 0:
            return dg.AssetCheckResult(passed=False, metadata={**meta, "problem": f"no per-set rows for {chain}"})
        if unlisted or spurious or incomplete:
            meta["problem"] = (
                f"worse but not listed: {unlisted or 'none'}; listed but not worse: {spurious or 'none'}; "
                f"listed without explanation/reproducer: {incomplete or 'none'}"
            )
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.ERROR, metadata=meta)
        if found:
            meta["explanations"] = dg.MetadataValue.md(
                "\n".join(f"- **{d}/{t}** ({listed[(d, t)]['reproducer']}): {listed[(d, t)]['explanation']}" for d, t in sorted(found))
            )
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, metadata=meta)
        return dg.AssetCheckResult(passed=True, metadata=meta)

    return check


chain_checks = [_chain_check(c) for c in CHAINS]
