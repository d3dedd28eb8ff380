"""Diagnostics: per-layer divergence table of the task E model (the tool seed 002's team lacked).

:func:`precisionkit.locator.locate_divergence` runs the GPT-2-style model of ``pipeline.experiments.training.gpt``
eager, fused per submodule and in fp64, and tabulates every submodule call: error of eager and
fused against fp64 (propagated and local), eager-vs-fused ULP distance, fusion evidence, and the
first layer whose fused error exceeds eager's by more than the measured noise. Feeds §3.2/§6.1
(which layer, if any, makes the fused path worse).
"""

import time

import dagster as dg
import polars as pl
import torch

from precisionkit.locator import locate_divergence

from ...resources import ExperimentSettings
from ...tables import markdown_table
from ...verdicts import finding_check, finding_result
from ..training.config import TrainConfig, eval_batches
from ..training.corpus import load_corpus
from ..training.gpt import GPT
from ..training.spec import SIZES as TRAIN_SIZES
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
    cfg = TrainConfig.from_profile(TRAIN_SIZES[settings.profile].model(), device=str(device), init_seed=init_seed)
    torch.manual_seed(cfg.init_seed)  # the E training runs' initialization, before any step
    model = GPT(cfg.layers, cfg.heads, cfg.width, cfg.context).to(device)
    tokens, _ = eval_batches(load_corpus(), cfg)[0]
    tokens = tokens[:SEQUENCES].to(device)
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
            "model_shape": f"layers={cfg.layers} heads={cfg.heads} width={cfg.width} context={cfg.context}",
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


@finding_check(
    asset=divergence_per_layer,
    description="Finding (diagnostic, seed 002's expectation of a correct fused path): WARN when a layer's fused error "
    "exceeds eager's by more than the measured noise; it points a human at the layer, it judges no claim.",
)
def no_layer_diverges(divergence_per_layer: pl.DataFrame) -> dg.AssetCheckResult:
    bad = divergence_per_layer.filter(pl.col("divergent"))
    first = bad["layer"][0] if bad.height else "none"
    findings = [
        f"{r['layer']}: fused error exceeds eager's by {float(r['excess']):.3g} > noise {float(r['noise']):.3g}"
        for r in bad.iter_rows(named=True)
    ]
    return finding_result(
        findings,
        {
            "divergent_rows": bad.height,
            "first_divergent_layer": first,
            "finding": (
                f"fused path diverges first at {first} (excess {float(bad['excess'][0]):.3g} > noise {float(bad['noise'][0]):.3g})"
                if bad.height
                else "no layer beyond the noise"
            ),
        },
    )
