"""Task E: does fused numerics change what a model learns? (feeds main document §3.2 and §6.1)

One training function (:func:`pipeline.experiments.training.loop.train`) runs a GPT-2-style byte-level model with the
eager switch and the fused switch under identical seed, data order, batch, schedule and optimizer.

What "within normal random fluctuation" means is measured, not assumed, with two kinds of extra run:

* **replicates**: :data:`.rules.REPLICATE_ORDERS` eager runs that differ only in their data-order seed (order
  A is the eager run fused is paired with). Data order, not the init seed, because it is the
  fluctuation every real training run has and nobody controls (shuffling, sharding, worker timing),
  while the init stays shared with fused so every curve starts from the same point and the band
  covers what training does to it. Their envelope per eval step is the band.
* **numerics-only control**: eager with fused's data order and init, every initial weight moved by
  one ULP (:func:`pipeline.experiments.training.gpt.nudge_one_ulp`). Fused differs from eager only by rounding; the control
  shows how far a rounding-sized difference alone moves the curve through training. (A different
  intra-op thread count also changes bits on this CPU at the default size, but not at smoke size
  and not on a GPU, so it is not used.)

The claim is judged on every eval point by :data:`.rules.RULE` (see :func:`.judge.judge_fused_curve`); how fused
compares with the control is a finding. Runs: the main precision (bf16 autocast on CPU, fp16
autocast + GradScaler on CUDA) replicates, fused and control; an fp32 eager/fused pair where the
profile's ``fp32_control`` (training/spec.py) is 1 (reported, not judged).
"""

from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from ...progress import Progress
from ...resources import ExperimentSettings
from ...storage import DataFolder
from ...tables import markdown_table
from ...verdicts import (
    claim_check,
    claim_result,
    finding_check,
    finding_result,
    validity_check,
    validity_result,
)
from .config import TrainConfig
from .corpus import load_corpus
from .curves import deviation_frame, deviation_summary, final_metric_table, judge_frame, run_problems
from .judge import control_findings, rms
from .loop import train
from .rules import (
    CONTROL_FACTOR,
    ENVELOPE_WIDENING,
    EVAL_POINT_COLUMNS,
    FINAL_SPREAD_MULTIPLE,
    MAX_OUTSIDE_FRACTION,
    REPLICATE_ORDERS,
    RULE,
)
from .runs import curve_frame, main_precision, run_plan, run_summary, sorted_json
from .spec import GROUP, SIZES

# ------------------------------------------------------------------------------------- assets


def checkpoint_root(context: dg.AssetExecutionContext, settings: ExperimentSettings) -> Path:
    """``<data>/<profile>/checkpoints``, next to the stored assets of the profile."""
    data: DataFolder = context.resources.data
    return data.profile_dir(settings.profile) / "checkpoints"


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    deps=[dg.AssetKey("toolkit_selfcheck")],
    # The data folder holds the checkpoints (no settings param: Dagster rejects resource keys
    # given both in the decorator and as arguments).
    required_resource_keys={"data", "settings"},
    description=(
        "Task E training curves (feeds §3.2/§6.1): GPT-2-style byte-level model trained with the fused switch, "
        f"{len(REPLICATE_ORDERS)} eager replicates that differ only in data order, and an eager numerics-only control "
        "(fused's data order and init, weights one ULP off); train/eval loss, perplexity and grad norm every eval_every steps."
    ),
    kinds={"pytorch", "polars"},
)
def training_curves(context: dg.AssetExecutionContext) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    sizes = SIZES[settings.profile]
    corpus = load_corpus()
    device = settings.torch_device()
    ckpt_root = checkpoint_root(context, settings)
    frames, summary = [], []
    plan = run_plan(settings)
    progress = Progress(context.log.info, "training runs", len(plan), every=0.0)
    for run in plan:
        cfg = TrainConfig.from_profile(
            sizes.model(),
            path=run["path"],
            precision=run["precision"],
            device=str(device),
            init_seed=settings.derived_seed("train", "init"),
            data_seed=settings.derived_seed("train", "data", run["data_order"]),
            init_ulp_nudge=run["init_ulp_nudge"],
            backend=settings.backend,
            options_json=sorted_json(settings.options()),
            corpus_sha256=corpus.sha256,
        )
        context.log.info(f"training {run['run']} ({cfg.steps} steps, config {cfg.key()})")
        result = train(cfg, corpus, checkpoint_dir=ckpt_root / run["run"], log=context.log.info)
        frames.append(curve_frame(run, cfg, result))
        summary.append({**run, **run_summary(result)})
        progress.advance(note=f"{run['run']} done")
    curves = pl.concat(frames, how="vertical")
    context.add_output_metadata(
        {
            **corpus.metadata(),
            "runs": len(summary),
            "replicates": len(REPLICATE_ORDERS),
            "wall_seconds.total": round(sum(s["wall_seconds"] for s in summary), 2),
            **{f"wall_seconds.{s['run']}": s["wall_seconds"] for s in summary},
            **{f"final_eval_loss.{s['run']}": s["final_eval_loss"] for s in summary},
            **{
                f"{s['run']}.{k}": v
                for s in summary
                for k, v in s["evidence"].items()
                if isinstance(v, (int, float, str))
            },
            "n_params": summary[0]["n_params"],
            "tokens_per_run": int(sizes.steps * sizes.batch * sizes.context),
            "run_table": dg.MetadataValue.md(
                markdown_table(
                    pl.DataFrame(summary).select(
                        "run",
                        "role",
                        "path",
                        "precision",
                        "data_order",
                        "init_ulp_nudge",
                        "nudged_elements",
                        "wall_seconds",
                        "final_eval_loss",
                        "resumed_from_step",
                    )
                )
            ),
            **{f"train.{k}": v for k, v in sizes.model().items()},
        }
    )
    return curves


@dg.asset(
    group_name=GROUP,
    description="Task E final-metric difference table (feeds §3.2/§6.1): at the last step, eager, fused, fused - eager, "
    "the spread of the eager replicates (max - min over data orders) and the one-ULP control's difference from eager.",
    kinds={"polars"},
)
def training_final_metrics(
    context: dg.AssetExecutionContext, settings: ExperimentSettings, training_curves: pl.DataFrame
) -> pl.DataFrame:
    table = final_metric_table(training_curves, main_precision(settings))
    context.add_output_metadata(
        {
            "table": dg.MetadataValue.md(markdown_table(table)),
            **{
                f"{r['precision']}.{r['metric']}.fused_minus_eager": float(r["fused_minus_eager"])
                for r in table.iter_rows(named=True)
            },
            **{
                f"{r['precision']}.{r['metric']}.replicate_spread": float(r["replicate_spread"])
                for r in table.iter_rows(named=True)
                if r["replicate_spread"] is not None
            },
            **{
                f"{r['precision']}.{r['metric']}.control_minus_eager": float(r["control_minus_eager"])
                for r in table.iter_rows(named=True)
                if r["control_minus_eager"] is not None
            },
        }
    )
    return table


@dg.asset(
    group_name=GROUP,
    description="Task E deviation analysis (feeds §6.1): per eval step, the envelope of the eager replicates (and its "
    f"widening by {ENVELOPE_WIDENING:g} spreads), fused and the one-ULP control against eager; the first step outside.",
    kinds={"polars"},
)
def training_deviation(
    context: dg.AssetExecutionContext, settings: ExperimentSettings, training_curves: pl.DataFrame
) -> pl.DataFrame:
    dev = deviation_frame(training_curves, main_precision(settings))
    summary = deviation_summary(dev)
    meta: dict[str, Any] = {"summary": dg.MetadataValue.md(markdown_table(pl.DataFrame(summary)))}
    for s in summary:
        prefix = f"{s['precision']}.{s['metric']}"
        meta[f"{prefix}.first_outside_step"] = s["first_outside_step"]
        meta[f"{prefix}.points_outside"] = int(s["points_outside"])
        for k in (
            "spread_mean",
            "spread_final",
            "fused_rms_dev",
            "control_rms_dev",
            "final_fused_minus_eager",
            "final_control_minus_eager",
        ):
            if s[k] is not None:
                meta[f"{prefix}.{k}"] = float(s[k])
    context.add_output_metadata(meta)
    return dev


# ------------------------------------------------------------------------------------- checks


@validity_check(
    asset=training_curves,
    name="training_runs_valid",
    required_resource_keys={"settings"},
    description="The E run did what it claims: every planned run (replicates with distinct data orders, fused, one-ULP "
    "control with fused's order and init) is present with the same eval steps; every loss and grad norm is finite; "
    "every run learned (final eval loss below the initial one); each fused run compiled with 0 graph breaks, "
    "0 recompiles and generated forward and backward kernels; the control's weights were all nudged and its curve "
    "differs from eager's.",
)
def training_runs_valid(context: dg.AssetCheckExecutionContext, training_curves: pl.DataFrame) -> dg.AssetCheckResult:
    plan = run_plan(context.resources.settings)
    return validity_result(
        run_problems(training_curves, plan), {"runs": training_curves["run"].n_unique(), "planned_runs": len(plan)}
    )


@claim_check(
    rule=RULE,
    asset=training_deviation,
    name="fused_learns_like_eager",
    required_resource_keys={"settings"},
    description=f"§3.2: the fused eval-loss curve stays within the variation of {len(REPLICATE_ORDERS)} eager data-order "
    f"replicates at every eval point (envelope widened by {ENVELOPE_WIDENING:g} spreads, at most "
    f"{MAX_OUTSIDE_FRACTION:.0%} of points outside; final |fused - eager| <= {FINAL_SPREAD_MULTIPLE:g} spreads).",
)
def fused_learns_like_eager(
    context: dg.AssetCheckExecutionContext, training_deviation: pl.DataFrame
) -> dg.AssetCheckResult:
    main = main_precision(context.resources.settings)
    j = judge_frame(training_deviation, main)
    part = training_deviation.filter(
        (pl.col("precision") == main) & (pl.col("metric") == "eval_loss") & pl.col("judged")
    ).sort("step")
    table = part.select(EVAL_POINT_COLUMNS)
    return claim_result(
        j.verdict,
        RULE,
        j.reason,
        {"precision": main, **j.metadata(), "points": dg.MetadataValue.md(markdown_table(table))},
    )


@finding_check(
    asset=training_deviation,
    name="fused_deviation_vs_rounding_control",
    required_resource_keys={"settings"},
    description=f"For a human: fused's RMS deviation from eager over the eval-loss curve against the one-ULP control's "
    f"(same data order and init); a finding above {CONTROL_FACTOR:g}x (fused moves the curve more than pure rounding "
    "does, even if within the replicate envelope).",
)
def fused_deviation_vs_rounding_control(
    context: dg.AssetCheckExecutionContext, training_deviation: pl.DataFrame
) -> dg.AssetCheckResult:
    main = main_precision(context.resources.settings)
    part = training_deviation.filter(
        (pl.col("precision") == main) & (pl.col("metric") == "eval_loss") & pl.col("judged")
    ).sort("step")
    fused_dev, control_dev = part["fused_minus_eager"].to_list(), part["control_minus_eager"].to_list()
    f, c = rms(fused_dev), rms(control_dev)
    meta: dict[str, Any] = {"control_factor": CONTROL_FACTOR, "judged_points": part.height}
    if f is not None:
        meta["fused_rms_dev"] = f
    if c is not None:
        meta["control_rms_dev"] = c
    if f is not None and c:
        meta["fused_over_control"] = f / c
    return finding_result(control_findings(fused_dev, control_dev), meta)
