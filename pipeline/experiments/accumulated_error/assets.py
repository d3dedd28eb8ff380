"""Task B's assets: is the fused path's accumulated error no worse than eager's? (main document §3.2, §6.1)

Every operator chain of :data:`CHAINS` runs on each stored input set three ways: eager (op by op),
fused (``torch.compile`` with the configured backend) and fused with faithful casts (intermediates
rounded as eager rounds them: the compiler's answer to the intent ``faithful_casts``, Inductor's
``emulate_precision_casts``; not run, with the reason, where the compiler has none; the runs are in
:mod:`.chain_runs`). A fused path the compiler runs in torch after failing it, or fuses none of, is not
run either, with its reason: never judged as fused. Each output is judged against the stored fp64 reference; per-set errors become a
table, and the table a verdict per chain x distribution x dtype (:mod:`.summary`) under
:data:`.rules.RULE`, declared in :mod:`.rules` before any data: paired fused vs eager per set, P99
across sets of the per-set max scale-aware ULP error, a materiality threshold of one scale-aware
ULP, a bootstrap interval with Holm's adjustment across rows, and any non-finite fused output where
eager is finite as a contradiction. Every row where fused is worse at all becomes a counterexample
with a saved reproducer; an ablation (each op kept out of the fused region in turn, :mod:`.ablation`)
measures which op is responsible, and that feeds the §6.1 switch list. The checks are in
:mod:`.checks`.
"""

import time
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import polars as pl
import torch

from precisionkit import fused

from ...experiment import selected_parts, selection_provenance
from ...files import save_tensors
from ...resources import ExperimentSettings
from ...storage import DataFolder
from ...tables import markdown_table
from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, combine
from ...workloads import CHAINS, WORKLOADS
from .ablation import ABLATION_SCHEMA, ablate, mark_responsible
from .chain_runs import EVIDENCE_SCHEMA, faithful_casts_label, fused_ops, run_chains
from .explanations import explain
from .rules import (
    ABLATION_SETS,
    GROUP_KEYS,
    PATHS,
    RULE,
    cannot_judge_table,
    element_bounds_table,
    verdict_table,
)
from .spec import GROUP, ID
from .stages import CHAIN_STAGES
from .summary import is_counterexample, summary_table

# --- the runs --------------------------------------------------------------------------------


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
    """Run every chain's input sets eager / fused / fused_emulate; compile each (chain, dtype, path) once. A run
    narrowed to some chains (``report --select B:<chain>,...``) runs those; the others' claims are inconclusive."""
    wall = time.perf_counter()
    chains = selected_parts(ID) or CHAINS
    runs, lanes = run_chains(
        settings,
        {c: inputs[f"pool_{c}"] for c in chains},
        {c: inputs[f"ref_{c}"] for c in chains},
        context.log.info,
    )
    per_set = pl.DataFrame([row for run in runs for row in run.rows], infer_schema_length=None)
    ev = pl.DataFrame([row for run in runs for row in run.evidence], schema=EVIDENCE_SCHEMA)
    worst = {k: v for run in runs for k, v in run.worst.items()}
    wall = time.perf_counter() - wall
    by_path = ev.group_by("path").agg(pl.col("sets").sum(), pl.col("path_seconds").sum())
    # a path this torch could not compile ran no sets: it has no throughput, and its reason instead
    throughput = {r["path"]: r["sets"] / r["path_seconds"] for r in by_path.iter_rows(named=True) if r["sets"]}
    not_run = sorted(set(ev.filter(pl.col("unavailable").is_not_null())["unavailable"].to_list()))
    common = {
        "wall_seconds": round(wall, 2),
        "lanes": lanes,
        "compile_seconds_total": round(float(ev["compile_seconds"].sum()), 2),
        **{f"sets_per_second_{p}": round(throughput[p], 1) for p in PATHS if p in throughput},
        "recompiles_total": int(ev["recompiles"].sum()),
        **({"paths_not_run": "; ".join(not_run)} if not_run else {}),
        "chains": ", ".join(chains),
        **selection_provenance(ID),
    }
    sets_total = per_set.filter(pl.col("path") == "eager").height
    yield dg.Output(per_set, "accumulated_error_per_set", metadata={"sets_total": sets_total, **common})
    yield dg.Output(
        ev,
        "accumulated_error_fusion_evidence",
        metadata={
            **common,
            "table": dg.MetadataValue.md(markdown_table(ev.drop("kernel_names", "options", "backend"))),
        },
    )
    yield dg.Output(worst, "accumulated_error_worst_sets", metadata={"entries": len(worst)})


# --- summary ---------------------------------------------------------------------------------


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
    wide = summary_table(per_set, evidence)
    table = verdict_table(wide)
    counts = {v: int((wide["fused_verdict"] == v).sum()) for v in (SUPPORTED, CONTRADICTED, INCONCLUSIVE)}
    context.add_output_metadata(
        {
            "rows": wide.height,
            **{f"fused_{v}_rows": n for v, n in counts.items()},
            "emulate_contradicted_rows": int((wide["emulate_verdict"] == CONTRADICTED).sum()),
            "nonfinite_sets_fused": int(wide["fused_nonfinite_sets"].sum()),
            **RULE.metadata(),
            # the judgment as the page shows it: the page reads these, it does not re-derive them
            "verdicts": dg.MetadataValue.md(markdown_table(table)),
            "element_bounds": dg.MetadataValue.md(markdown_table(element_bounds_table(wide))),
            "cannot_judge": dg.MetadataValue.md(_cannot_judge_text(wide)),
            "chain_verdicts": dg.MetadataValue.json(chain_verdicts(wide)),
        }
    )
    return wide


def _cannot_judge_text(wide: pl.DataFrame) -> str:
    """The rows the element test cannot judge, as the page lists them (a sentence when there are none)."""
    table = cannot_judge_table(wide)
    if table.height == 0:
        return "Every whole-chain row has decisive elements: the element test judges each of them.\n"
    return markdown_table(table)


def chain_verdicts(wide: pl.DataFrame) -> dict[str, str]:
    """Per chain, its rows' fused verdicts as one (any contradicted wins, then any inconclusive): the
    verdict column of the deliverable's one-row-per-chain table."""
    per_chain = wide.group_by("chain", maintain_order=True).agg(pl.col("fused_verdict"))
    return {row["chain"]: combine(row["fused_verdict"]) for row in per_chain.iter_rows(named=True)}


# --- counterexamples, ablation and the switch list -------------------------------------------


def _reproducer_dir(context: dg.AssetExecutionContext, settings: ExperimentSettings) -> Path:
    data: DataFolder = context.resources.data
    return data.profile_dir(settings.profile) / "reproducers" / "accumulated_error"


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
    casts = faithful_casts_label(settings.backend, settings.torch_device()) or "faithful casts"
    out = []
    for row in summary.iter_rows(named=True):
        if not is_counterexample(row):
            continue
        chain, dist, dtype = row["chain"], row["distribution"], row["dtype"]
        ops = fused_ops(chain, row["fused_extern_calls"] or "", row.get("fused_library_calls") or "")
        prefix = f"{chain}/{dist}/{dtype}"
        workload = WORKLOADS[chain]
        tensors = {f"input/{a}": worst_sets[f"{prefix}/input/{a}"] for a in workload.arg_names}
        # the outputs of the paths that ran (a path not run, its reason in the summary, has none)
        tensors.update(
            {f"output/{p}": worst_sets[f"{prefix}/output/{p}"] for p in PATHS if f"{prefix}/output/{p}" in worst_sets}
        )
        tensors["fp64_reference"] = worst_sets[f"{prefix}/fp64_reference"]
        tensors["set_index"] = worst_sets[f"{prefix}/set_index"]
        # The worst set's own seed, derived exactly as input_pool_<chain> derives it: redraws that set alone.
        seed = settings.pool_set_seed(chain, dist, int(tensors["set_index"][0]))
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
                "explanation": explain(row, ops, casts),
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
        mark_responsible(found)
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
