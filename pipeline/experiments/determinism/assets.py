"""Task A's asset: run-to-run and cold-start determinism of the fused FFN first half (main document §3.3).

Round 1 compiles in this process and runs N times; round 2 is a fresh process with an empty,
disabled compiler cache that recompiles and runs N times; a third, cheaper round repeats the cold
start with another CPU thread count, on the CPU only (on an accelerator the kernels run on the
device, so the round is skipped and the summary says why; sizes with ``cold_start`` off, i.e. smoke,
run round 1 only; the rounds are in :mod:`.rounds`). Every output is hashed (md5 of its raw bytes). Each round
records two hashes of what it compiled: the normalized generated *source* (``code_sha256``) and
the compiled *artifact* of every kernel (``artifact_sha256``: the shared object Inductor loads on
the CPU; the cubin/PTX and the autotuning choice of each Triton kernel on CUDA, see
:mod:`pipeline.artifacts`). Round 1's artifact hash is H_k0, the seed's fusion-kernel binary hash.
Where a hash is not the same, the row says where the difference was measured (which kernel,
which source lines, which bytes) in ``difference_source`` (:mod:`.compare`). The checks are in
:mod:`.checks`.
"""

import tempfile
from pathlib import Path
from typing import Any

import dagster as dg
import torch

from ...resources import ExperimentSettings
from ...tables import markdown_table
from .compare import determinism_tables, summary_metadata
from .rounds import (
    DETERMINISM_DTYPES,
    cold_rounds,
    determinism_inputs,
    other_thread_count,
    run_rounds,
    thread_round_skipped,
)
from .spec import GROUP, ID


@dg.multi_asset(
    group_name=GROUP,
    pool="compute_device",
    ins={"pool": dg.AssetIn("input_pool_ffn")},
    outs={
        "determinism_runs": dg.AssetOut(
            description="Per-run output hash log of task A (round, dtype, threads, run index, md5, ULP distances).",
            kinds={"pytorch", "polars"},
            is_required=True,
        ),
        "determinism_summary": dg.AssetOut(
            description=(
                "Feeds main document §3.3. One row per dtype x round: run count / unique output hashes / "
                "max ULP across runs / generated-code hash equal across cold start, with fusion evidence."
            ),
            kinds={"polars"},
            is_required=True,
        ),
        "determinism_artifacts": dg.AssetOut(
            description="Feeds main document §3.3 (H_k0). One row per round x dtype x generated kernel: the compiled "
            "artifact that runs (CPU shared object; Triton cubin with its autotuning choice on CUDA), its sha256 and size, "
            "whether it equals round 1's (artifact_sha256: the loaded sections of a shared object; file_sha256: "
            "the whole file), and where the file's bytes differ when they do.",
            kinds={"polars"},
            is_required=True,
        ),
    },
)
def determinism(context: dg.AssetExecutionContext, settings: ExperimentSettings, pool: Any):  # lazy SetTensors
    """Round 1 in process, round 2 cold in a fresh process, round 3 cold with another thread count
    (on the CPU)."""
    sizes = settings.sizes(ID)
    runs = sizes.runs_by_dtype(DETERMINISM_DTYPES)
    inputs = determinism_inputs(pool)
    default_threads = torch.get_num_threads()
    device_type = settings.torch_device().type
    cold_runs = sizes.cold_runs_by_dtype(DETERMINISM_DTYPES)
    cold = cold_rounds(cold_runs, default_threads, device_type) if sizes.cold_start else []
    thread_round = next((r for r in cold if r[0].startswith("cold_threads")), None)
    alt_threads = thread_round[1] if thread_round else other_thread_count(default_threads)
    thread_runs = max(thread_round[2].values()) if thread_round else 0
    with tempfile.TemporaryDirectory(prefix="determinism_") as tmp:
        rounds, wall = run_rounds(inputs, runs, cold, settings, Path(tmp), context.log.info)
        tables = determinism_tables(rounds)
    context.add_output_metadata(
        {
            "rows": tables.runs.height,
            "runs_per_round": sizes.runs,
            "runs_per_round_by_dtype": ", ".join(f"{d}={n}" for d, n in runs.items()),
            "cold_round_runs_by_dtype": ", ".join(f"{d}={n}" for d, n in cold_runs.items()) if cold else "not run",
            "thread_round_runs": thread_runs,
        },
        output_name="determinism_runs",
    )
    metadata = summary_metadata(tables.summary, tables.code_diffs, wall, default_threads, alt_threads)
    if thread_round:
        metadata["thread_count_round"] = f"run (up to {thread_runs} runs per dtype with {alt_threads} threads)"
    elif sizes.cold_start:
        metadata["thread_count_round"] = thread_round_skipped(device_type) or "not run"
    else:
        metadata["thread_count_round"] = "not run (the profile skips the cold-start rounds)"
    context.add_output_metadata(metadata, output_name="determinism_summary")
    context.add_output_metadata(
        {
            "rows": tables.artifacts.height,
            "kernels_differing_from_round1": int((tables.artifacts["equal_to_round1"] == "no").sum()),
            "table": dg.MetadataValue.md(markdown_table(tables.artifacts.drop("detail"))),
        },
        output_name="determinism_artifacts",
    )
    return tables.runs, tables.summary, tables.artifacts
