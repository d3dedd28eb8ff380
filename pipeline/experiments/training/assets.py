"""Task E: does fused numerics change what a model learns? (feeds main document §3.2 and §6.1)

One training function (:func:`pipeline.experiments.training.loop.train`) runs a GPT-2-style byte-level model with the
eager switch and the fused switch under identical seed, data order, batch, schedule and optimizer.

What "within normal random fluctuation" means is measured, not assumed. Each data order of
:data:`.rules.REPLICATE_ORDERS` trains three runs from the same initial weights:

* **eager**: the eager runs differ only in their data-order seed, so their spread is the variation
  every real training run has and nobody controls (shuffling, sharding, worker timing); it is shown
  beside the verdict for scale. The init stays shared so every curve starts from the same point.
* **fused**: on the same order, so fused - eager removes the data-order variation and leaves the
  numerics of fusion (and the chaotic growth of any rounding difference).
* **numerics-only control**: eager with every initial weight moved by one ULP
  (:func:`pipeline.experiments.training.gpt.nudge_one_ulp`): how far a rounding-sized difference
  alone moves training. (A different intra-op thread count also changes bits on this CPU at the
  default size, but not at smoke size and not on a GPU, so it is not used.)

The claim is judged by :data:`.rules.RULE` (:func:`.judge.judge_training`: paired t tests of final
value, curve area and drift of eval loss, train loss and grad norm against margins fixed before the
runs, :data:`.rules.MARGINS`; the one-ULP controls must pass the same equivalence tests for
"supported"). The claim check also stores this run's paired noise (where the page places the run in the rule's
stored power table, ``power.json``) and the rule's power at that noise, measured by running the judge on simulated
runs (:func:`.error_rates.this_run_error_rates`), as a table of the shared power format; fused against the controls
is a rank-test finding. Runs: the main precision (bf16 autocast on CPU, fp16
autocast + GradScaler on CUDA) replicates, fused and control; an fp32 eager/fused pair where the
profile's ``fp32_control`` (training/spec.py) is 1 (reported, not judged).
"""

import datetime as dt
import functools
import time
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import torch

from ...compile_pool import run_tasks
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
from .compilers import training_options
from .config import TrainConfig
from .corpus import Corpus, load_corpus
from .curves import (
    deviation_frame,
    deviation_summary,
    final_differences,
    final_metric_table,
    judge_frame,
    run_problems,
)
from .error_rates import LEVEL_KEY, RUN_POWER_KEY, paired_noise_in_margins, power_table, this_run_error_rates
from .judge import TrainingJudgement, control_rank_test, rms
from .loop import TrainResult, pinned_threads, train
from .rules import (
    CONFIDENCE,
    EVAL_POINT_COLUMNS,
    POWER_SEED,
    REPLICATE_ORDERS,
    RULE,
    margin_text,
)
from .run_set import (
    curve_frame,
    execution_order,
    main_precision,
    run_device_bytes,
    run_lanes,
    run_summary,
    sorted_json,
    training_runs,
)
from .spec import GROUP, ID

# ------------------------------------------------------------------------------------- assets


def train_planned(cfg: TrainConfig, checkpoint_dir: str) -> TrainResult:
    """One planned run (a compile-pool task: here or in a worker process, see :func:`.run_set.run_lanes`)."""
    return train(cfg, _corpus(), checkpoint_dir=Path(checkpoint_dir))


@functools.cache
def _corpus() -> Corpus:
    return load_corpus()


def run_config(
    settings: ExperimentSettings, run: dict[str, Any], device: str, corpus_sha256: str, threads: int = 0
) -> TrainConfig:
    """The config of one planned run: the profile's model and schedule, the run's path, precision, data
    order and nudge, the seeds derived from the run's seed, the backend and its options (with what the compiler needs to differentiate, :func:`.compilers.training_options`), and on a CPU
    the intra-op ``threads`` it computes on (part of what fixes its bits, so of its checkpoint key)."""
    return TrainConfig.from_profile(
        settings.sizes(ID).model(),
        path=run["path"],
        precision=run["precision"],
        device=device,
        init_seed=settings.derived_seed("train", "init"),
        data_seed=settings.derived_seed("train", "data", run["data_order"]),
        init_ulp_nudge=run["init_ulp_nudge"],
        backend=settings.backend,
        options_json=sorted_json(training_options(settings.backend, settings.options())),
        corpus_sha256=corpus_sha256,
        threads=threads if torch.device(device).type == "cpu" else 0,
    )


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
        f"per each of {len(REPLICATE_ORDERS)} data orders an eager run, a fused run and an eager numerics-only control "
        "(weights one ULP off), all from one init; train/eval loss, perplexity and grad norm every eval_every steps."
    ),
    kinds={"pytorch", "polars"},
)
def training_curves(context: dg.AssetExecutionContext) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    sizes = settings.sizes(ID)
    corpus = _corpus()
    device = settings.torch_device()
    ckpt_root = checkpoint_root(context, settings)
    frames, summary = [], []
    plan = training_runs(settings)
    progress = Progress(context.log.info, "training runs", len(plan), every=0.0)
    threads = torch.get_num_threads()
    lanes, lane_threads = run_lanes(device, threads, len(plan), run_device_bytes(sizes))
    configs = [run_config(settings, run, str(device), corpus.sha256, lane_threads) for run in plan]
    context.log.info(
        f"training {len(plan)} runs of {sizes.steps} steps, {lanes} at a time on {lane_threads} thread(s) each"
    )

    order = execution_order(plan) if lanes > 1 else list(range(len(plan)))

    def done(k: int, result: TrainResult) -> None:
        run = plan[order[k]]
        progress.advance(
            note=f"{run['run']} done (config {result.config.key()}, final eval loss "
            f"{result.rows[-1]['eval_loss']:.4f}, {result.seconds:.1f} s)"
        )

    started = time.perf_counter()
    with pinned_threads(lane_threads):  # the workers start with the lanes' count
        tasks = [(configs[i], str(ckpt_root / plan[i]["run"])) for i in order]
        results = dict(zip(order, run_tasks(train_planned, tasks, device, workers=lanes, on_result=done), strict=True))
    elapsed = time.perf_counter() - started
    for i, run in enumerate(plan):
        frames.append(curve_frame(run, configs[i], results[i]))
        summary.append({**run, **run_summary(results[i])})
    curves = pl.concat(frames, how="vertical")
    context.add_output_metadata(
        {
            **corpus.metadata(),
            "runs": len(summary),
            "runs_at_a_time": lanes,
            "threads_per_run": lane_threads,
            "replicates": len(REPLICATE_ORDERS),
            # Elapsed for the whole table, and the runs' own seconds summed (larger when runs overlap).
            "wall_seconds.total": round(elapsed, 2),
            "wall_seconds.runs_summed": round(sum(s["wall_seconds"] for s in summary), 2),
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
    description="Task E final-metric difference table (feeds §3.2/§6.1): at the last step, eager, fused, fused - eager "
    "on order A and averaged over the data orders, the spread of the eager runs (max - min over data orders) and the "
    "one-ULP control's difference from eager.",
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
    description="Task E deviation analysis (feeds §6.1): per eval step and data order, eager, fused and the one-ULP "
    "control; the eager runs' range over data orders; fused - eager paired per order (mean and sd over orders).",
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
        for k in (
            "spread_mean",
            "final_mean_fused_minus_eager",
            "final_margin",
            "final_p_beyond_holm",
            "drift_mean",
            "fused_rms_dev",
            "control_rms_dev",
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
    description="The E run did what it claims: every planned run (per data order eager, fused and the one-ULP control, "
    "sharing that order and the init; distinct orders) is present with the same eval steps; every loss and grad norm is finite; "
    "every run learned (final eval loss below the initial one); each fused run compiled with 0 graph breaks, "
    "0 recompiles and generated forward and backward kernels; the control's weights were all nudged and its curve "
    "differs from eager's.",
)
def training_runs_valid(context: dg.AssetCheckExecutionContext, training_curves: pl.DataFrame) -> dg.AssetCheckResult:
    plan = training_runs(context.resources.settings)
    return validity_result(
        run_problems(training_curves, plan), {"runs": training_curves["run"].n_unique(), "planned_runs": len(plan)}
    )


@claim_check(
    rule=RULE,
    asset=training_deviation,
    name="fused_learns_like_eager",
    required_resource_keys={"settings"},
    description=f"§3.2: over {len(REPLICATE_ORDERS)} data orders, fused - eager on the same order (final value, curve "
    f"area and drift of eval loss, train loss and grad norm) is within a margin fixed before the runs ({margin_text()}): "
    "equivalence (TOST, the one-ULP controls too) for supported, Holm-adjusted t tests beyond the margin for "
    f"contradicted (confidence {CONFIDENCE:g}). Stores the run's paired noise and the rule's power there, measured by "
    "running the judge on simulated runs.",
)
def fused_learns_like_eager(
    context: dg.AssetCheckExecutionContext, training_deviation: pl.DataFrame
) -> dg.AssetCheckResult:
    main = main_precision(context.resources.settings)
    j = judge_frame(training_deviation, main)
    part = training_deviation.filter(
        (pl.col("precision") == main) & (pl.col("metric") == "eval_loss") & pl.col("judged")
    ).sort("step")
    tests = pl.DataFrame([t.row() for t in j.tests]) if j.tests else pl.DataFrame()
    return claim_result(
        j.verdict,
        RULE,
        j.reason,
        {
            "precision": main,
            **j.metadata(),
            "tests": dg.MetadataValue.md(markdown_table(tests)),
            "points": dg.MetadataValue.md(markdown_table(part.select(EVAL_POINT_COLUMNS))),
            **_power_metadata(j),
        },
    )


def _power_metadata(j: TrainingJudgement) -> dict[str, Any]:
    """Where the run sits in the rule's stored power table (its paired noise in margins; its data orders are
    already stored), and the rule's power at this run's noise, measured here by running the judge on simulated
    runs, as one table of the shared power format (the page shows both under the rule)."""
    level = paired_noise_in_margins(j)
    rows = this_run_error_rates(j)
    meta: dict[str, Any] = {} if level is None else {LEVEL_KEY: level}
    if rows:
        date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
        command = "claim check fused_learns_like_eager: error_rates.this_run_error_rates"
        meta[RUN_POWER_KEY] = dg.MetadataValue.json(power_table(rows, command=command, date=date, seed=POWER_SEED))
    return meta


#: Rank-test level of the control finding.
CONTROL_ALPHA = 0.05


@finding_check(
    asset=training_deviation,
    name="fused_deviation_vs_rounding_control",
    required_resource_keys={"settings"},
    description="For a human: per data order |fused - eager| against |control - eager| of the final eval loss (the "
    "one-ULP controls are the null of a pure rounding perturbation); a finding when the exact rank test says fusion "
    f"moves training further than a one-ULP nudge (p <= {CONTROL_ALPHA:g}).",
)
def fused_deviation_vs_rounding_control(
    context: dg.AssetCheckExecutionContext, training_deviation: pl.DataFrame
) -> dg.AssetCheckResult:
    main = main_precision(context.resources.settings)
    fused_dev, control_dev = final_differences(training_deviation, main)
    meta: dict[str, Any] = {"orders": len(fused_dev), "rank_alpha": CONTROL_ALPHA}
    if not fused_dev or not control_dev:
        return finding_result(["fused or control deviation undefined (no finite final eval loss)"], meta)
    u, p = control_rank_test(fused_dev, control_dev)
    meta.update({"rank_u": u, "rank_p": p, "fused_rms_dev": rms(fused_dev), "control_rms_dev": rms(control_dev)})
    findings = []
    if p <= CONTROL_ALPHA:
        findings.append(
            f"fusion moves the final eval loss further than a one-ULP nudge of the weights on {len(fused_dev)} data "
            f"orders (rank U {u:g}, p {p:.3g}; RMS {meta['fused_rms_dev']:.4g} vs {meta['control_rms_dev']:.4g})"
        )
    return finding_result(findings, meta)
