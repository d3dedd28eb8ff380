"""E's run set: which runs one materialization trains (:func:`training_runs`), under which names, and the
stored curve table a run becomes (:data:`CURVE_SCHEMA`, :func:`curve_frame`)."""

import json
from typing import Any

import polars as pl
import torch

from ...compile_pool import device_lanes
from ...resources import ExperimentSettings
from .config import TrainConfig
from .gpt import VOCAB
from .loop import TrainResult
from .rules import REPLICATE_ORDERS
from .spec import ID, TrainSizes


def main_precision(settings: ExperimentSettings) -> str:
    """fp16 on CUDA; on CPU the profile's ``cpu_precision`` (bf16 autocast in every profile; see
    training/spec.py for what it costs on CPUs without native 16-bit matmul)."""
    return "float16" if settings.torch_device().type == "cuda" else settings.sizes(ID).cpu_precision


def replicate_run(main: str, order: str) -> str:
    """Run name of the eager run on data order ``order`` (order A is the plain eager run)."""
    return f"{main}_eager" if order == "A" else f"{main}_eager_order_{order}"


def fused_run(main: str, order: str) -> str:
    """Run name of the fused run on data order ``order``."""
    return f"{main}_fused" if order == "A" else f"{main}_fused_order_{order}"


def control_run(main: str, order: str = "A") -> str:
    """Run name of the one-ULP control on data order ``order`` (eager, that order, initial weights nudged)."""
    return f"{main}_eager_ulp_nudge" if order == "A" else f"{main}_eager_ulp_nudge_order_{order}"


def training_runs(settings: ExperimentSettings) -> list[dict[str, Any]]:
    """The runs of one materialization: name, path, precision, data order, role, init nudge.

    Per data order of :data:`.rules.REPLICATE_ORDERS`: ``replicate`` (eager), ``fused`` and
    ``control`` (eager, initial weights one ULP off), all from the same initial weights; and the
    optional ``fp32_pair`` (fp32 eager and fused on order A).
    """
    main = main_precision(settings)

    def entry(run: str, path: str, order: str, role: str, nudge: bool, precision: str = main) -> dict[str, Any]:
        return {
            "run": run,
            "path": path,
            "precision": precision,
            "data_order": order,
            "role": role,
            "init_ulp_nudge": nudge,
        }

    plan = []
    for o in REPLICATE_ORDERS:
        plan += [
            entry(replicate_run(main, o), "eager", o, "replicate", False),
            entry(fused_run(main, o), "fused", o, "fused", False),
            entry(control_run(main, o), "eager", o, "control", True),
        ]
    if settings.sizes(ID).fp32_control and main != "float32":
        plan += [
            entry("float32_eager", "eager", "A", "fp32_pair", False, "float32"),
            entry("float32_fused", "fused", "A", "fp32_pair", False, "float32"),
        ]
    return plan


def run_device_bytes(sizes: TrainSizes) -> int:
    """Device memory one training run holds at its peak, estimated: 18 bytes per parameter (fp32 weights,
    gradients and AdamW's two moments, and the 16-bit copies autocast makes) and what each transformer
    layer keeps for its backward, 34·s·b·h + 5·a·s²·b bytes in 16-bit (Korthikanti et al., 2022, "Reducing
    Activation Recomputation in Large Transformer Models", eq. 1), the whole doubled for the allocator."""
    w, s, b, a = sizes.width, sizes.context, sizes.batch, sizes.heads
    params = 12 * sizes.layers * w * w + (VOCAB + s) * w + VOCAB * w
    activations = sizes.layers * (34 * s * b * w + 5 * a * s * s * b)
    return 2 * (18 * params + activations)


def run_lanes(
    device: torch.device,
    threads: int,
    runs: int,
    run_bytes: int | None = None,
    device_bytes: int | None = None,
    cores: int | None = None,
) -> tuple[int, int]:
    """How E trains its ``runs``: (processes at a time, intra-op threads each).

    On a CPU with ``threads`` >= 2, one process per thread, one thread each: the default model's
    matmuls are too small to use two threads well, so two one-thread runs side by side finish sooner
    than two two-thread runs in turn (measured on an AVX2-only 2-core CPU, 60 bf16 steps of the default
    model: 10.3 s on one thread, 8.8 s on two). Every run of one materialization gets the same thread
    count, so the pairs the rule compares differ only in path and data order. With one thread, one
    process.

    On an accelerator, the device's lanes (:func:`pipeline.compile_pool.device_lanes`: a step there is
    bound by its host side, Python and kernel launches, which processes side by side overlap), capped so
    that ``run_bytes`` per run fit the device's memory (``device_bytes``, default: free now); the host's
    threads are shared among them (at least one each). A run's bits on a GPU do not depend on them.
    The cost model asks the same about a GPU's host (``cores``, ``device_bytes``: E's cost).
    """
    if threads < 1 or runs < 0:
        raise ValueError(f"threads must be >= 1 and runs >= 0, got {threads} and {runs}")
    if device.type != "cpu":
        lanes = device_lanes(device, runs, task_bytes=run_bytes, device_bytes=device_bytes, cores=cores)
        return lanes, max(1, threads // lanes)
    if threads < 2 or runs < 2:
        return 1, threads
    lanes = min(threads, runs)
    return lanes, threads // lanes


def execution_order(plan: list[dict[str, Any]]) -> list[int]:
    """The order several lanes take ``plan``'s runs in (results keep the plan's): the first fused run,
    which compiles the graphs into the Inductor cache, then every eager run, then the other fused runs,
    which load those graphs. Taken in plan order, a second fused run started while the first still
    compiled and compiled everything again: 33 s of a 47 s smoke training step on two lanes."""
    fused = [i for i, run in enumerate(plan) if run["path"] == "fused"]
    eager = [i for i, run in enumerate(plan) if run["path"] != "fused"]
    return fused[:1] + eager + fused[1:]


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
    "device": pl.String,
    "init_ulp_nudge": pl.Boolean,
    "data_seed": pl.Int64,
    "init_seed": pl.Int64,
    "nudged_elements": pl.Int64,
    "threads": pl.Int64,
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
    "graphs": pl.Int64,
    "graph_breaks": pl.Int64,
    "recompiles": pl.Int64,
    "fwd_kernels": pl.Int64,
    "bwd_kernels": pl.Int64,
    "eval_kernels": pl.Int64,
    "fwd_code_sha256": pl.String,
    "bwd_code_sha256": pl.String,
    "eval_code_sha256": pl.String,
}


def curve_frame(run: dict[str, Any], cfg: TrainConfig, result: TrainResult) -> pl.DataFrame:
    """One run's rows of the stored curves: its plan entry, seeds and fusion evidence on every eval point."""
    ev = result.evidence
    per_run = {
        **run,
        # The device the run trained on: the regression baseline compares curves bit for bit on a CPU.
        "device": str(cfg.device),
        "data_seed": int(cfg.data_seed),
        "init_seed": int(cfg.init_seed),
        "nudged_elements": int(result.nudged_elements),
        # Intra-op threads the run computed on: on a CPU part of what fixes its bits.
        "threads": int(result.threads),
        "wall_seconds": float(result.seconds),
        "n_params": int(result.n_params),
        # Fusion evidence of the fused runs (forward + lazily compiled backward + eval graph).
        # Dynamo graphs of the training and the evaluation loss (each backward comes with its forward).
        "graphs": int(ev.get("train_graph_count", 0) + ev.get("eval_graph_count", 0)) if ev else None,
        "graph_breaks": int(ev.get("train_graph_breaks", 0) + ev.get("eval_graph_breaks", 0)) if ev else None,
        "recompiles": int(ev.get("train_recompiles", 0) + ev.get("eval_recompiles", 0)) if ev else None,
        "fwd_kernels": ev.get("train_kernel_count"),
        "bwd_kernels": ev.get("bwd_kernel_count"),
        "eval_kernels": ev.get("eval_kernel_count"),
        "fwd_code_sha256": ev.get("train_code_sha256"),
        "bwd_code_sha256": ev.get("bwd_code_sha256"),
        "eval_code_sha256": ev.get("eval_code_sha256"),
    }
    return pl.DataFrame([{**per_run, **row} for row in result.rows], schema=CURVE_SCHEMA)
