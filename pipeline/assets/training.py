"""Task E: does fused numerics change what a model learns? (feeds main document §3.2 and §6.1)

One training function (:func:`pipeline.gpt.train`) runs a GPT-2-style byte-level model with the
eager switch and the fused switch under identical seed, data order, batch, schedule and optimizer.
The run-to-run noise band is measured, not assumed: a second eager run that differs only in its
data-order seed shows how far two equally valid runs drift apart; a fused curve that leaves that
band is a finding for §6.1.

Runs: the main precision (bf16 autocast on CPU, fp16 autocast + GradScaler on CUDA) eager, fused,
and eager with the second data order; an fp32 eager/fused control pair where the profile's
``train.fp32_control`` is 1.
"""


import math
import os
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from ..corpus import load_corpus
from ..gpt import TrainConfig, TrainResult, train
from ..resources import ExperimentSettings
from ..tables import markdown_table

GROUP = "E_training"
#: Metrics compared between the paths; perplexity is exp(eval_loss), so it is only in the final table.
DEVIATION_METRICS = ("eval_loss", "train_loss", "grad_norm")
FINAL_METRICS = ("train_loss", "eval_loss", "perplexity", "grad_norm")
#: Evaluation points on each side of a step whose noise forms that step's band (1 -> 3 points).
BAND_HALF_WIDTH = 1


def main_precision(settings: ExperimentSettings) -> str:
    """bf16 on CPU (fp16 autocast is slow and unrepresentative there); fp16 on CUDA."""
    return "float16" if settings.torch_device().type == "cuda" else "bfloat16"


def run_plan(settings: ExperimentSettings) -> list[dict[str, str]]:
    """The runs of one materialization: name, path, precision, data order (A or B)."""
    main = main_precision(settings)
    plan = [
        {"run": f"{main}_eager", "path": "eager", "precision": main, "data_order": "A"},
        {"run": f"{main}_fused", "path": "fused", "precision": main, "data_order": "A"},
        {"run": f"{main}_eager_order_B", "path": "eager", "precision": main, "data_order": "B"},
    ]
    if settings.get_profile().train.get("fp32_control", 0):
        plan += [
            {"run": "float32_eager", "path": "eager", "precision": "float32", "data_order": "A"},
            {"run": "float32_fused", "path": "fused", "precision": "float32", "data_order": "A"},
        ]
    return plan


def checkpoint_root(context: dg.AssetExecutionContext, settings: ExperimentSettings) -> Path:
    """``<data>/<profile>/checkpoints``, next to the stored assets of the same IO manager."""
    base = getattr(context.resources.io_manager, "base_dir", None) or os.environ.get("FUSION_DATA_DIR", "data")
    return Path(base) / settings.profile / "checkpoints"


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    deps=[dg.AssetKey("toolkit_selfcheck")],
    # The IO manager is required so checkpoints land under its data folder (no settings param:
    # Dagster rejects resource keys given both in the decorator and as arguments).
    required_resource_keys={"io_manager", "settings"},
    description=(
        "Task E training curves (feeds §3.2/§6.1): GPT-2-style byte-level model trained with the eager and the "
        "fused switch (same seed, data, schedule); train/eval loss, perplexity and grad norm every eval_every steps."
    ),
    kinds={"pytorch", "polars"},
)
def training_curves(context: dg.AssetExecutionContext) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    profile = settings.get_profile()
    corpus = load_corpus()
    device = settings.torch_device()
    ckpt_root = checkpoint_root(context, settings)
    frames, summary = [], []
    for run in run_plan(settings):
        cfg = TrainConfig.from_profile(
            profile.train,
            path=run["path"],
            precision=run["precision"],
            device=str(device),
            init_seed=settings.derived_seed("train", "init"),
            data_seed=settings.derived_seed("train", "data", run["data_order"]),
            backend=settings.backend,
            options_json=_sorted_json(settings.options()),
            corpus_sha256=corpus.sha256,
        )
        context.log.info(f"training {run['run']} ({cfg.steps} steps, config {cfg.key()})")
        result = train(cfg, corpus, checkpoint_dir=ckpt_root / run["run"], log=context.log.info)
        frames.append(_curve_frame(run, result))
        summary.append({**run, **_run_summary(result)})
    curves = pl.concat(frames, how="vertical")
    context.add_output_metadata(
        {
            **corpus.metadata(),
            "runs": len(summary),
            **{f"wall_seconds.{s['run']}": s["wall_seconds"] for s in summary},
            **{f"final_eval_loss.{s['run']}": s["final_eval_loss"] for s in summary},
            **{f"{s['run']}.{k}": v for s in summary for k, v in s["evidence"].items() if isinstance(v, (int, float, str))},
            "n_params": summary[0]["n_params"],
            "tokens_per_run": int(profile.train["steps"] * profile.train["batch"] * profile.train["context"]),
            "run_table": dg.MetadataValue.md(markdown_table(pl.DataFrame(summary).select("run", "path", "precision", "data_order", "wall_seconds", "final_eval_loss", "resumed_from_step"))),
            **{f"train.{k}": v for k, v in profile.train.items()},
        }
    )
    return curves


def _sorted_json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value, sort_keys=True)


def _run_summary(result: TrainResult) -> dict[str, Any]:
    return {
        "wall_seconds": round(result.seconds, 2),
        "final_eval_loss": result.rows[-1]["eval_loss"],
        "resumed_from_step": result.resumed_from_step,
        "n_params": result.n_params,
        "evidence": result.evidence,
    }


def _curve_frame(run: dict[str, str], result: TrainResult) -> pl.DataFrame:
    ev = result.evidence
    per_run = {
        **run,
        "wall_seconds": float(result.seconds),
        "n_params": int(result.n_params),
        # Fusion evidence of the fused runs (forward + lazily compiled backward + eval graph).
        "graph_breaks": int(ev.get("train_graph_breaks", 0) + ev.get("eval_graph_breaks", 0)) if ev else None,
        "recompiles": int(ev.get("train_recompiles", 0) + ev.get("eval_recompiles", 0)) if ev else None,
        "fwd_kernels": ev.get("train_kernel_count"),
        "bwd_kernels": ev.get("bwd_kernel_count"),
        "eval_kernels": ev.get("eval_kernel_count"),
        "fwd_code_sha256": ev.get("train_code_sha256"),
        "bwd_code_sha256": ev.get("bwd_code_sha256"),
    }
    schema = {
        "run": pl.String, "path": pl.String, "precision": pl.String, "data_order": pl.String,
        "step": pl.Int64, "tokens": pl.Int64, "train_loss": pl.Float64, "eval_loss": pl.Float64,
        "perplexity": pl.Float64, "grad_norm": pl.Float64, "lr": pl.Float64, "skipped_steps": pl.Int64,
        "wall_seconds": pl.Float64, "n_params": pl.Int64, "graph_breaks": pl.Int64, "recompiles": pl.Int64,
        "fwd_kernels": pl.Int64, "bwd_kernels": pl.Int64, "eval_kernels": pl.Int64,
        "fwd_code_sha256": pl.String, "bwd_code_sha256": pl.String,
    }
    return pl.DataFrame([{**per_run, **row} for row in result.rows], schema=schema)


# ------------------------------------------------------------------------------ noise analysis


def noise_band(noise: list[float | None], half_width: int = BAND_HALF_WIDTH) -> list[float | None]:
    """Per evaluation point, the largest data-order noise within ``half_width`` points of it.

    A single point's noise can be near zero where two noisy curves happen to cross; the window
    keeps such crossings from being read as a band of zero width.
    """
    out: list[float | None] = []
    for i in range(len(noise)):
        window = [v for v in noise[max(0, i - half_width) : i + half_width + 1] if v is not None]
        out.append(max(window) if window else None)
    return out


def _series(curves: pl.DataFrame, run: str, metric: str) -> list[float | None]:
    return curves.filter(pl.col("run") == run).sort("step")[metric].to_list()


def deviation_frame(curves: pl.DataFrame, main: str) -> pl.DataFrame:
    """Per precision x metric x step: fused vs eager distance against the measured noise band.

    The band comes from ``<main>_eager`` vs ``<main>_eager_order_B`` and also serves the fp32
    control pair, which has no second-order run of its own.
    """
    runs = set(curves["run"].unique().to_list())
    noise_runs = (f"{main}_eager", f"{main}_eager_order_B")
    missing = [r for r in noise_runs if r not in runs]
    if missing:
        raise ValueError(f"noise band needs runs {', '.join(missing)}; curves hold {', '.join(sorted(runs))}")
    steps = curves.filter(pl.col("run") == noise_runs[0]).sort("step")["step"].to_list()
    rows = []
    for precision in curves["precision"].unique(maintain_order=True).to_list():
        eager_run, fused_run = f"{precision}_eager", f"{precision}_fused"
        if eager_run not in runs or fused_run not in runs:
            continue
        for metric in DEVIATION_METRICS:
            a, b = (_series(curves, r, metric) for r in noise_runs)
            eager, fused = _series(curves, eager_run, metric), _series(curves, fused_run, metric)
            if not (len(a) == len(b) == len(eager) == len(fused) == len(steps)):
                raise ValueError(f"runs of {precision}/{metric} have different evaluation steps")
            noise = [abs(x - y) if x is not None and y is not None else None for x, y in zip(a, b)]
            band = noise_band(noise)
            for i, step in enumerate(steps):
                diff = abs(fused[i] - eager[i]) if fused[i] is not None and eager[i] is not None else None
                rows.append(
                    {
                        "precision": precision, "metric": metric, "step": step,
                        "eager": eager[i], "fused": fused[i], "eager_order_B": b[i],
                        "fused_abs_diff": diff, "noise_abs_diff": noise[i], "noise_band": band[i],
                        "outside_band": (diff > band[i]) if diff is not None and band[i] is not None else None,
                    }
                )
    return pl.DataFrame(rows)


def deviation_summary(dev: pl.DataFrame) -> list[dict[str, Any]]:
    """Per precision x metric: first step outside the band and by how much, band size, final gap."""
    out = []
    for (precision, metric), part in dev.group_by(["precision", "metric"], maintain_order=True):
        part = part.sort("step").drop_nulls("fused_abs_diff")
        outside = part.filter(pl.col("outside_band"))
        noise = part["noise_abs_diff"].drop_nulls()
        last = part.row(-1, named=True)
        first = outside.row(0, named=True) if outside.height else None
        out.append(
            {
                "precision": precision,
                "metric": metric,
                "first_outside_step": first["step"] if first else "never",
                "first_outside_amount": first["fused_abs_diff"] if first else None,
                "first_outside_band": first["noise_band"] if first else None,
                "points_outside": outside.height,
                "points": part.height,
                "noise_max": float(noise.max()) if noise.len() else None,
                "noise_p90": float(noise.quantile(0.9, "nearest")) if noise.len() else None,
                "fused_diff_max": float(part["fused_abs_diff"].max()),
                "final_fused_diff": last["fused_abs_diff"],
                "final_noise_band": last["noise_band"],
                "final_within_band": bool(last["fused_abs_diff"] <= last["noise_band"]),
            }
        )
    return out


@dg.asset(
    group_name=GROUP,
    description="Task E final-metric difference table (feeds §3.2/§6.1): fused minus eager at the last step per precision, against the measured data-order noise.",
    kinds={"polars"},
)
def training_final_metrics(context: dg.AssetExecutionContext, settings: ExperimentSettings, training_curves: pl.DataFrame) -> pl.DataFrame:
    main = main_precision(settings)
    last = training_curves.group_by("run").agg(pl.all().sort_by("step").last())
    final = {r["run"]: r for r in last.iter_rows(named=True)}
    dev = deviation_frame(training_curves, main)
    bands = {
        (r["precision"], r["metric"]): r["noise_band"]
        for r in dev.sort("step").group_by(["precision", "metric"]).agg(pl.col("noise_band").last()).iter_rows(named=True)
    }
    noise_a, noise_b = final[f"{main}_eager"], final[f"{main}_eager_order_B"]
    rows = []
    for precision in training_curves["precision"].unique(maintain_order=True).to_list():
        e, f = final.get(f"{precision}_eager"), final.get(f"{precision}_fused")
        if e is None or f is None:
            continue
        for metric in (*FINAL_METRICS, "wall_seconds"):
            diff = f[metric] - e[metric]
            noise = abs(noise_a[metric] - noise_b[metric]) if metric != "wall_seconds" else None
            # perplexity = exp(eval_loss): its band follows the eval-loss band through exp.
            band = (
                bands.get((precision, metric))
                if metric in DEVIATION_METRICS
                else (math.exp(e["eval_loss"]) * math.expm1(bands[(precision, "eval_loss")]) if metric == "perplexity" else None)
            )
            rows.append(
                {
                    "precision": precision, "metric": metric, "step": e["step"],
                    "eager": e[metric], "fused": f[metric], "fused_minus_eager": diff,
                    "rel_diff": diff / e[metric] if e[metric] else None,
                    "noise_abs_diff": noise, "noise_band": band,
                    "within_noise_band": abs(diff) <= band if band is not None else None,
                }
            )
    table = pl.DataFrame(rows)
    context.add_output_metadata(
        {
            "table": dg.MetadataValue.md(markdown_table(table)),
            **{f"{r['precision']}.{r['metric']}.fused_minus_eager": float(r["fused_minus_eager"]) for r in rows},
        }
    )
    return table


@dg.asset(
    group_name=GROUP,
    description="Task E deviation analysis (feeds §6.1): per step, |fused - eager| against the band of two eager runs with different data orders; the first step outside the band and its size.",
    kinds={"polars"},
)
def training_deviation(context: dg.AssetExecutionContext, settings: ExperimentSettings, training_curves: pl.DataFrame) -> pl.DataFrame:
    dev = deviation_frame(training_curves, main_precision(settings))
    summary = deviation_summary(dev)
    meta: dict[str, Any] = {"summary": dg.MetadataValue.md(markdown_table(pl.DataFrame(summary)))}
    for s in summary:
        prefix = f"{s['precision']}.{s['metric']}"
        meta[f"{prefix}.first_outside_step"] = s["first_outside_step"] if s["first_outside_step"] == "never" else int(s["first_outside_step"])
        for k in ("noise_max", "noise_p90", "final_fused_diff", "final_noise_band", "points_outside"):
            if s[k] is not None:
                meta[f"{prefix}.{k}"] = float(s[k]) if k != "points_outside" else int(s[k])
    context.add_output_metadata(meta)
    return dev


# ------------------------------------------------------------------------------------- checks


@dg.asset_check(
    asset=training_deviation,
    description="Seed expectation: the fused final eval loss lies within the measured noise band of the eager runs (WARN with the deviation point otherwise: a §6.1 finding).",
)
def fused_final_eval_loss_within_noise(training_deviation: pl.DataFrame) -> dg.AssetCheckResult:
    summary = [s for s in deviation_summary(training_deviation) if s["metric"] == "eval_loss"]
    failing = [s for s in summary if not s["final_within_band"]]
    meta: dict[str, Any] = {}
    for s in summary:
        p = s["precision"]
        meta[f"{p}.final_fused_diff"] = float(s["final_fused_diff"])
        meta[f"{p}.final_noise_band"] = float(s["final_noise_band"])
        meta[f"{p}.first_outside_step"] = str(s["first_outside_step"])
        if s["first_outside_amount"] is not None:
            meta[f"{p}.first_outside_amount"] = float(s["first_outside_amount"])
    meta["finding"] = (
        "none: fused and eager final eval loss agree within the data-order noise band"
        if not failing
        else "; ".join(
            f"{s['precision']}: final |fused-eager| eval loss {s['final_fused_diff']:.4g} > band {s['final_noise_band']:.4g}; "
            f"first outside at step {s['first_outside_step']} by {s['first_outside_amount']:.4g}"
            for s in failing
        )
    )
    return dg.AssetCheckResult(passed=not failing, severity=dg.AssetCheckSeverity.WARN, metadata=meta)


@dg.asset_check(
    asset=training_curves,
    description="Every run learned (final eval loss below the initial one, all finite) and every fused run compiled with 0 graph breaks, 0 recompiles and generated forward and backward kernels.",
)
def training_runs_learned_and_fused(training_curves: pl.DataFrame) -> dg.AssetCheckResult:
    problems = []
    for run, part in training_curves.group_by("run", maintain_order=True):
        part = part.sort("step")
        name = run[0]
        first, last = part["eval_loss"][0], part["eval_loss"][-1]
        if not all(math.isfinite(v) for v in part["eval_loss"].to_list()):
            problems.append(f"{name}: non-finite eval loss")
        elif not last < first:
            problems.append(f"{name}: eval loss did not decrease ({first:.4f} -> {last:.4f})")
        if part["path"][0] == "fused":
            row = part.row(0, named=True)
            if row["graph_breaks"] != 0 or row["recompiles"] != 0:
                problems.append(f"{name}: {row['graph_breaks']} graph breaks, {row['recompiles']} recompiles")
            if not (row["fwd_kernels"] or 0) > 0 or not (row["bwd_kernels"] or 0) > 0:
                problems.append(f"{name}: no generated forward/backward kernels recorded")
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"problems": "; ".join(problems) or "none", "runs": training_curves["run"].n_unique()},
    )
