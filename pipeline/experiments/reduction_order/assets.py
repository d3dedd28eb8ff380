"""Task C2 (main document §1.2 (3)): reduction accumulation order.

``sum(dim=-1)`` of an fp16 row is computed by several *versions* that differ only in the order of
the additions:

* compiler versions: eager, the fused default, and the fused path under Inductor's own knobs that
  touch the reduction loop (CPU: ``cpp.threads``, ``cpp.simdlen``, ``split_reductions``; CUDA:
  ``split_reductions``, ``triton.persistent_reductions``). Whether a knob changed the generated
  code (hash) and the result is recorded per version;
* framework-tiled versions (family ``framework_tiled``): the fused sum under the settings with which
  Inductor itself tiles the reduction. On the CPU the generated kernel splits the row into one
  range per thread (``cpp.threads``), walks each range in vector steps of ``cpp.simdlen`` bits
  (0: scalar) and accumulates each lane with a cascade (CascadeSumHelper) of fixed-size chunks; the
  grid threads x simdlen gives the versions, and ``framework_tiling`` states the tiling read back
  from the generated code. On CUDA: split reductions on/off, persistent / non-persistent and
  cooperative reductions, and the Triton block sizes the autotuner chose (from the kernel's
  launcher). These are *the framework's* tilings, labelled apart (``tiling_source``) from
* the hand-written tilings built from framework ops: per-tile partial sums ``reshape(-1, tile).sum(-1)``
  then a sum of the partials, for tiles 512 / 1024 / 2048, with the partials kept in fp32 or
  stored in fp16. These are controllable on every backend.

Every version yields the fp16 result of the operation and its fp32 accumulator (the value before
the final rounding): with fp32 accumulation, an order effect shows in the fp16 result only near an
fp16 rounding boundary, while the accumulator shows it directly.

The band each result is judged against is derived per row and per version from the row's own
data (:mod:`precisionkit.bounds`): a deterministic forward error bound for the version's
summation order, accumulation precision, partial storage and final rounding (no tolerance-matrix
entry). ``c2_row_bounds`` holds error, bound and margin = error / bound for every row, version and
output; the checks (:mod:`.checks`) are declared with the three outcomes of :mod:`pipeline.verdicts`.

Modules: :mod:`.versions` (the versions), :mod:`.bounds` (the band), :mod:`.compute` (the run and its
tables), this module (the asset and its metadata), :mod:`.checks` (checks and decision helpers).
"""

from typing import Any

import dagster as dg
import polars as pl

from ...resources import ExperimentSettings
from ...scalars import as_float, as_int
from ...tables import markdown_table
from .bounds import BAND_WORDS
from .compute import C2Result, check_c2_shape, knob_summary, run_c2
from .long import long_versions, one_thread_not_applicable, run_long
from .spec import GROUP, ID
from .versions import build_versions, parts_not_applicable

OUTS = {
    "c2_version_outputs": dg.AssetOut(
        description="C2 (§1.2 (3)): input rows (row 0 = the seed's single input, then the pool) and every version's fp16 result and fp32 accumulator.",
        kinds={"pytorch", "safetensors"},
    ),
    "c2_versions": dg.AssetOut(
        description="C2 (§1.2 (3)): every version (compiler knob or explicit tiling), its self-determinism over the profile's runs, its fusion evidence and its non-finite outputs.",
        kinds={"polars"},
    ),
    "c2_ulp_matrix": dg.AssetOut(
        description="C2 (§1.2 (3)): pairwise ULP differences between versions (long format: version_a, version_b, output, scope, metrics).",
        kinds={"polars"},
    ),
    "c2_error_vs_fp64": dg.AssetOut(
        description="C2 (§1.2 (3)): each version's error against fp64 over all rows, how often it is the closest, and its margin against its derived error bound (within_band_fraction = rows with margin <= 1).",
        kinds={"polars"},
    ),
    "c2_row_bounds": dg.AssetOut(
        description="C2 (§1.2 (3)): per row, version and output: error against fp64, the derived deterministic (and probabilistic) bound of the version's summation order, margin = error / bound.",
        kinds={"polars"},
    ),
}


def versions_metadata(result: C2Result, runs: int) -> dict[str, Any]:
    """Metadata of ``c2_versions``: counts, the Inductor knobs' effect and the table."""
    versions_df = result.versions
    knobs = knob_summary(versions_df, result.stored)
    columns = ("version", "tiling_source", "framework_tiling", "options", "unique_out16", "unique_acc32")
    values = ("out16_value", "acc32_value", "fp64_value", "kernel_count", "same_code_as_fused_default")
    return {
        "versions": versions_df.height,
        "all_self_deterministic": bool(versions_df["self_deterministic"].all()),
        "runs_per_version": runs,
        "inductor_knobs": dg.MetadataValue.md("\n".join(f"- {s}" for s in knobs) or "none for this device"),
        "framework_tiled_versions": int((versions_df["family"] == "framework_tiled").sum()),
        "hand_tiled_versions": int(versions_df["tiling_source"].str.starts_with("hand").sum()),
        "framework_tilings_rejected": dg.MetadataValue.md("\n".join(f"- {s}" for s in result.skipped) or "none"),
        # parts of the version set the compiler has no way to make: stored with the reason, never as a pass
        "versions_not_applicable": dg.MetadataValue.md(
            "\n".join(f"- {part}: {why}" for part, why in result.not_applicable.items()) or "none"
        ),
        "table": dg.MetadataValue.md(markdown_table(versions_df.select(*columns, *values))),
    }


def matrix_metadata(matrix_df: pl.DataFrame, n_versions: int, n_pool: int) -> dict[str, Any]:
    """Metadata of ``c2_ulp_matrix``: pairs, how many differ in the fp16 result, the pool table."""
    out16 = matrix_df.filter(pl.col("output") == "out16")
    shown = out16.filter(pl.col("scope") == ("pool" if n_pool else "seed_input")).drop("output", "scope")
    return {
        "pairs": n_versions * (n_versions - 1) // 2,
        "out16_pairs_differing": out16.filter(pl.col("differ_rows") > 0)
        .select(["version_a", "version_b"])
        .unique()
        .height,
        "out16_ulp_max": as_int(out16["ulp_max"].max(), "c2_ulp_matrix out16 ulp_max"),
        "table_out16_pool": dg.MetadataValue.md(markdown_table(shown)),
    }


def error_metadata(err_df: pl.DataFrame) -> dict[str, Any]:
    """Metadata of ``c2_error_vs_fp64``: the band, the fp16 results' worst margins, the table."""
    o16 = err_df.filter(pl.col("output") == "out16")
    columns = ("version", "chain", "ulp_mean", "ulp_max", "abs_max", "closest_fraction", "margin_max")
    worst = ("worst_margin_row", "worst_error", "worst_bound", "margin_prob_max")
    return {
        "band": BAND_WORDS,
        "min_within_band_fraction": as_float(o16["within_band_fraction"].min(), "min within_band_fraction"),
        "max_margin_out16": as_float(o16["margin_max"].max(), "max out16 margin_max"),
        "table": dg.MetadataValue.md(markdown_table(o16.select(*columns, *worst))),
    }


def bounds_metadata(bounds_df: pl.DataFrame) -> dict[str, Any]:
    """Metadata of ``c2_row_bounds``: the band, the row count and each family's bound formula."""
    formulas = bounds_df.unique(["family", "output", "chain"], maintain_order=True)
    return {
        "band": BAND_WORDS,
        "rows": bounds_df.height,
        "formulas": dg.MetadataValue.md(markdown_table(formulas.select("family", "output", "chain", "bound_formula"))),
    }


@dg.multi_asset(outs=OUTS, group_name=GROUP, pool="compute_device")
def c2_reduction_order(context: dg.AssetExecutionContext, settings: ExperimentSettings):
    """Runs every summation version on the seeded input (repeatedly) and on the row pool."""
    sizes = settings.sizes(ID)
    device = settings.torch_device()
    length, n_pool, runs = sizes.length, sizes.pool_rows, sizes.runs
    check_c2_shape(length, runs)
    seed = settings.derived_seed("c2", "rows")
    missing = parts_not_applicable(settings.backend, device)
    for part, why in missing.items():
        context.log.info(f"C2 {part}: {why}")
    result = run_c2(build_versions(settings, device), length, n_pool, runs, seed, device, context.log.info, missing)
    yield dg.Output(
        result.stored,
        output_name="c2_version_outputs",
        metadata={"rows": 1 + n_pool, "length": length, "seed": seed},
    )
    yield dg.Output(result.versions, output_name="c2_versions", metadata=versions_metadata(result, runs))
    yield dg.Output(
        result.ulp_matrix,
        output_name="c2_ulp_matrix",
        metadata=matrix_metadata(result.ulp_matrix, result.versions.height, n_pool),
    )
    yield dg.Output(result.error_vs_fp64, output_name="c2_error_vs_fp64", metadata=error_metadata(result.error_vs_fp64))
    yield dg.Output(result.row_bounds, output_name="c2_row_bounds", metadata=bounds_metadata(result.row_bounds))


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    kinds={"pytorch", "polars"},
    description="C2, long reductions: fp32 sum of rows of 2^24 terms (default; 2^27 seed) from U(-1, 1) and U(0, 1) by eager, "
    "the fused default (every thread) and the fused path on one thread; per row and version the error against the fp64 "
    "sum, the derived deterministic and probabilistic bounds, margins, and bit equality with eager and with one thread.",
)
def c2_long_reductions(context: dg.AssetExecutionContext, settings: ExperimentSettings) -> pl.DataFrame:
    sizes = settings.sizes(ID)
    device = settings.torch_device()
    table = run_long(
        long_versions(settings, device),
        sizes.long_rows,
        sizes.long_length,
        lambda dist: settings.derived_seed("c2", "long", dist),
        device,
        context.log.info,
    )
    shown = table.select(
        "distribution", "row", "version", "threads", "relative_error", "margin_prob", "bit_equal_eager", "seconds"
    )
    one_thread = one_thread_not_applicable(settings.backend, device)
    context.add_output_metadata(
        {
            "terms": sizes.long_length,
            # the one-thread version where the compiler has one; else why it has none (never a pass)
            "one_thread_version": one_thread or "run",
            "rows": table.height,
            "margin_prob_max": as_float(table["margin_prob"].max(), "long margin_prob_max"),
            "table": dg.MetadataValue.md(markdown_table(shown)),
        }
    )
    return table
