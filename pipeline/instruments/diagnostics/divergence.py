"""Diagnostics: per-layer divergence table of the task E model (the tool seed 002's team lacked).

:func:`precisionkit.locator.locate_divergence` runs E's GPT-2-style model (from E's record's package,
``pipeline.experiments.training.divergence_subject``) eager, fused per submodule and in fp64, and tabulates every submodule call: error of eager and
fused against fp64 (propagated and local), eager-vs-fused ULP distance, fusion evidence, and the
first layer whose fused error exceeds eager's by more than the measured noise. Feeds §3.2/§6.1
(which layer, if any, makes the fused path worse).
"""

import time
from typing import Any

import dagster as dg
import polars as pl
import torch

from precisionkit.locator import locate_divergence

from ...experiments.training import divergence_subject
from ...experiments.training.spec import ID as TRAIN_ID
from ...resources import ExperimentSettings
from ...scalars import as_float
from ...tables import markdown_table
from ...verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Rule, claim_check, claim_result
from .spec import GROUP

#: Sequences of the first evaluation batch fed to the model (each of E's context length, training/spec.py).
SEQUENCES = 2
#: Chart-ready column order; the rest of the locator's columns follow.
LEAD_COLUMNS = (
    "layer_index",
    "layer",
    "module_type",
    "depth",
    "eager_err",
    "fused_err",
    "eager_local_err",
    "fused_local_err",
    "excess",
    "noise",
    "divergent",
    "ulp_eager_vs_fused_max",
    "ulp_eager_vs_fused_mean",
    "bit_equal_fraction",
    "eager_abs_max",
    "fused_abs_max",
    "kernel_count",
    "extern_calls",
    "graph_breaks",
)


def working_dtype(device: torch.device) -> torch.dtype:
    """The E model's main precision: bf16 on CPU, fp16 on CUDA (as the training assets use)."""
    return torch.float16 if device.type == "cuda" else torch.bfloat16


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    description=(
        "Per-layer divergence table of the task E GPT model (feeds §3.2/§6.1): every submodule call run eager, "
        "fused (compiled per submodule on eager's captured inputs) and fp64; errors vs fp64, eager-vs-fused ULP, "
        "fusion evidence, and the first layer whose fused error exceeds eager's by more than the measured noise."
    ),
    kinds={"pytorch", "polars"},
)
def divergence_per_layer(context: dg.AssetExecutionContext, settings: ExperimentSettings) -> pl.DataFrame:
    device = settings.torch_device()
    init_seed = settings.derived_seed("train", "init")
    model, tokens, model_shape = divergence_subject(settings.sizes(TRAIN_ID).model(), device, init_seed, SEQUENCES)
    dtype = working_dtype(device)

    start = time.perf_counter()
    result = locate_divergence(model, tokens, dtype=dtype, backend=settings.backend, options=settings.options())
    seconds = time.perf_counter() - start

    table = pl.DataFrame(result.table, infer_schema_length=None).rename({"index": "layer_index"})
    table = table.select([*LEAD_COLUMNS, *[c for c in table.columns if c not in LEAD_COLUMNS]])
    divergent = table.filter(pl.col("divergent"))
    worst = table.sort("excess", descending=True, nulls_last=True).row(0, named=True)
    context.add_output_metadata(
        {
            "first_divergent_layer": result.first_divergent_layer or "none",
            "divergent_rows": divergent.height,
            "rows": table.height,
            "noise": result.noise,
            "noise_rule": result.noise_rule,
            "largest_excess": float(worst["excess"]),
            "largest_excess_layer": worst["layer"],
            "final_eager_err": float(table["eager_err"][-1]),
            "final_fused_err": float(table["fused_err"][-1]),
            "dtype": result.dtype,
            "model_weights": (
                "fresh seeded initialization (the E runs' init seed): the E assets keep no trained checkpoint "
                "(pipeline.experiments.training.loop.train deletes it when a run completes)"
            ),
            "model_cast": f"whole model cast to {result.dtype} (the E runs use autocast instead)",
            "model_shape": model_shape,
            "input_tokens": f"{SEQUENCES} x {tokens.shape[1]} bytes, first eval batch",
            "compiled_submodules": result.meta["compiled_submodules"],
            "total_compile_seconds": float(table["compile_seconds"].fill_null(0).sum()),
            "wall_seconds": seconds,
            "head": dg.MetadataValue.md(markdown_table(table.head(12).select(_HEAD_COLUMNS))),
        }
    )
    return table


_HEAD_COLUMNS = (
    "layer_index",
    "layer",
    "eager_err",
    "fused_err",
    "excess",
    "ulp_eager_vs_fused_max",
    "kernel_count",
    "divergent",
)


LOCATOR_RULE = Rule(
    claim="No layer of the E model makes the fused path less accurate than eager beyond rounding noise (§3.2/§6.1; "
    "seed 002's missing localisation, applied to the model E trains)",
    metric="per submodule call: excess = fused's error against fp64 minus eager's (precisionkit.locator), against "
    "the noise measured over all calls: max(unit roundoff of the working dtype, 3 robust sigmas of the excesses)",
    decision="contradicted if any call's excess is above the noise (the first such layer is named); supported if none "
    "is and every call ran on both paths; inconclusive if a call's fused run failed",
    threshold=3.0,
    unit="robust standard deviations of the per-call excess (at least one unit roundoff)",
    confidence=0.97,
    sample_size="every submodule call of the E model on two sequences of its first eval batch",
    derivation="Rounding alone scatters the excess around zero; a call whose fused error is 3 robust sigmas (and "
    "at least one unit roundoff) above eager's is a one-sided 0.135% event under a normal null, so over the model's "
    "20-odd calls a healthy fused path is wrongly contradicted with probability at most about 0.03. Calls the "
    "fused path computes identically to eager have excess 0 and shrink the measured sigma, so the unit roundoff "
    "is the floor.",
)


def judge_locator(table: pl.DataFrame) -> tuple[str, str, dict[str, Any]]:
    """:data:`LOCATOR_RULE` on the divergence table: verdict, reason and metadata."""
    bad = table.filter(pl.col("divergent"))
    failed = (
        table.filter(pl.col("fused_error").fill_null("") != "") if "fused_error" in table.columns else table.head(0)
    )
    meta: dict[str, Any] = {"rows": table.height, "divergent_rows": bad.height, "failed_rows": failed.height}
    if bad.height:
        first = bad.row(0, named=True)
        return (
            CONTRADICTED,
            f"{bad.height} of {table.height} calls diverge; first {first['layer']}: fused error exceeds eager's by "
            f"{float(first['excess']):.3g} > noise {float(first['noise']):.3g}",
            meta,
        )
    if failed.height:
        return INCONCLUSIVE, f"{failed.height} calls did not run on the fused path: {failed['layer'][0]}", meta
    largest = as_float(table["excess"].max(), "divergence_per_layer excess max")
    noise = as_float(table["noise"].max(), "divergence_per_layer noise max")
    return SUPPORTED, f"no call diverges: largest excess {largest:.3g} within the noise {noise:.3g}", meta


@claim_check(
    rule=LOCATOR_RULE,
    asset=divergence_per_layer,
    description="Claim (§3.2/§6.1): no layer's fused error exceeds eager's beyond the measured noise; a divergent "
    "layer is an ERROR, named with its excess.",
)
def no_layer_diverges(divergence_per_layer: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_locator(divergence_per_layer)
    return claim_result(verdict, LOCATOR_RULE, reason, meta)
