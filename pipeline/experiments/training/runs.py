"""E's runs: which runs one materialization trains (:func:`run_plan`), under which names, and the
stored curve table a run becomes (:data:`CURVE_SCHEMA`, :func:`curve_frame`)."""

import json
from typing import Any

import polars as pl

from ...resources import ExperimentSettings
from .config import TrainConfig
from .loop import TrainResult
from .rules import REPLICATE_ORDERS
from .spec import SIZES


def main_precision(settings: ExperimentSettings) -> str:
    """fp16 on CUDA; on CPU the profile's ``cpu_precision`` (bf16 autocast in every profile; see
    training/spec.py for what it costs on CPUs without native 16-bit matmul)."""
    return "float16" if settings.torch_device().type == "cuda" else SIZES[settings.profile].cpu_precision


def replicate_run(main: str, order: str) -> str:
    """Run name of the eager replicate with data order ``order`` (order A is the plain eager run)."""
    return f"{main}_eager" if order == "A" else f"{main}_eager_order_{order}"


def control_run(main: str) -> str:
    """Run name of the one-ULP control (eager, fused's data order and init, initial weights nudged)."""
    return f"{main}_eager_ulp_nudge"


def run_plan(settings: ExperimentSettings) -> list[dict[str, Any]]:
    """The runs of one materialization: name, path, precision, data order, role, init nudge.

    Roles: ``replicate`` (eager, one per data order), ``fused`` (order A), ``control`` (eager,
    order A, initial weights one ULP off), ``fp32_pair`` (the optional fp32 eager/fused pair).
    """
    main = main_precision(settings)
    plan = [
        {
            "run": replicate_run(main, "A"),
            "path": "eager",
            "precision": main,
            "data_order": "A",
            "role": "replicate",
            "init_ulp_nudge": False,
        },
        {
            "run": f"{main}_fused",
            "path": "fused",
            "precision": main,
            "data_order": "A",
            "role": "fused",
            "init_ulp_nudge": False,
        },
        {
            "run": control_run(main),
            "path": "eager",
            "precision": main,
            "data_order": "A",
            "role": "control",
            "init_ulp_nudge": True,
        },
    ]
    plan += [
        {
            "run": replicate_run(main, o),
            "path": "eager",
            "precision": main,
            "data_order": o,
            "role": "replicate",
            "init_ulp_nudge": False,
        }
        for o in REPLICATE_ORDERS[1:]
    ]
    if SIZES[settings.profile].fp32_control and main != "float32":
        plan += [
            {
                "run": "float32_eager",
                "path": "eager",
                "precision": "float32",
                "data_order": "A",
                "role": "fp32_pair",
                "init_ulp_nudge": False,
            },
            {
                "run": "float32_fused",
                "path": "fused",
                "precision": "float32",
                "data_order": "A",
                "role": "fp32_pair",
                "init_ulp_nudge": False,
            },
        ]
    return plan


def sorted_json(value: dict[str, Any]) -> str:
    """``value`` as JSON with sorted keys (a config field must be hashable and stable)."""
    return json.dumps(value, sort_keys=True)


def run_summary(result: TrainResult) -> dict[str, Any]:
    """A finished run's figures for the asset's metadata and run table."""
    return {
        "wall_seconds": round(result.seconds, 2),
        "final_eval_loss": result.rows[-1]["eval_loss"],
        "resumed_from_step": result.resumed_from_step,
        "n_params": result.n_params,
        "nudged_elements": result.nudged_elements,
        "evidence": result.evidence,
    }


CURVE_SCHEMA = {
    "run": pl.String,
    "path": pl.String,
    "precision": pl.String,
    "data_order": pl.String,
    "role": pl.String,
    "init_ulp_nudge": pl.Boolean,
    "data_seed": pl.Int64,
    "init_seed": pl.Int64,
    "nudged_elements": pl.Int64,
    "step": pl.Int64,
    "tokens": pl.Int64,
    "train_loss": pl.Float64,
    "eval_loss": pl.Float64,
    "perplexity": pl.Float64,
    "grad_norm": pl.Float64,
    "lr": pl.Float64,
    "skipped_steps": pl.Int64,
    "wall_seconds": pl.Float64,
    "n_params": pl.Int64,
    "graph_breaks": pl.Int64,
    "recompiles": pl.Int64,
    "fwd_kernels": pl.Int64,
    "bwd_kernels": pl.Int64,
    "eval_kernels": pl.Int64,
    "fwd_code_sha256": pl.String,
    "bwd_code_sha256": pl.String,
}


def curve_frame(run: dict[str, Any], cfg: TrainConfig, result: TrainResult) -> pl.DataFrame:
    """One run's rows of the stored curves: its plan entry, seeds and fusion evidence on every eval point."""
    ev = result.evidence
    per_run = {
        **run,
        "data_seed": int(cfg.data_seed),
        "init_seed": int(cfg.init_seed),
        "nudged_elements": int(result.nudged_elements),
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
    return pl.DataFrame([{**per_run, **row} for row in result.rows], schema=CURVE_SCHEMA)
