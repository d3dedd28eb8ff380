"""Diagnostics: a minimal reproducer, bisected to the layer at fault, for every contradiction of D
(a pure data-movement row that is not bit-exact) and every fuzzer mismatch.

Each becomes a folder under ``<data>/<profile>/repros/<id>/`` (:mod:`pipeline.repros`): the
standalone ``repro.py`` (exits 1 while the defect reproduces), the issue-ready ``report.md`` and
the numbers in ``meta.json``. The site's diagnostics page lists them and D's page links each row
to its reproducer. A healthy run has nothing to reproduce, so the asset is then an empty table.
"""

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import torch

from precisionkit.repro import Case

from ... import repros
from ...compile_pool import run_tasks
from ...experiments.data_movement.spec import repro_id
from ...resources import ExperimentSettings
from ...storage import DataFolder
from ...verdicts import finding_check, finding_result
from .spec import GROUP, ID

SCHEMA = {
    "id": pl.String,
    "source": pl.String,
    "title": pl.String,
    "backend": pl.String,
    "rule": pl.String,
    "ops_before": pl.Int64,
    "ops_after": pl.Int64,
    "shapes_after": pl.String,
    "lines": pl.Int64,
    "status": pl.String,
    "first_layer": pl.String,
    "layer_at_fault": pl.String,
    "workaround": pl.String,
    "minimize_seconds": pl.Float64,
    "bisect_seconds": pl.Float64,
    "folder": pl.String,
}


def d_contradictions(table: pl.DataFrame) -> pl.DataFrame:
    """D's rows that contradict the claim: pure data movement, not bit-exact, and not only NaN
    payloads (those are attributed op by op by D itself)."""
    return table.filter(
        ~pl.col("has_implicit_computation")
        & ~pl.col("bit_equal")
        & (pl.col("nan_encoding_mismatches") < pl.col("mismatched_elements"))
    )


def d_repro_id(row: dict) -> str:
    """The reproducer id of one D row, as D declares it (:func:`data_movement.spec.repro_id`)."""
    return repro_id(row["subgraph"], row["dtype"], row["shape"], row["layout"])


def cases_to_build(
    data_movement_check_table: pl.DataFrame,
    fuzz_outcomes: pl.DataFrame,
    difftest_outcomes: pl.DataFrame,
    backend: str,
    cap: int,
    d_cap: int = 3,
    device: str = "cpu",
    derived_seed: Callable[..., int] | None = None,
) -> list[tuple[str, Case]]:
    """(source, case) for D's contradictions (one per subgraph and dtype, at most ``d_cap``), then
    the fuzzers' mismatches (at most ``cap`` each, one per feature set for the tester), the
    fuzzers' cases on the ``device`` they ran on. D's cases draw the row's own inputs from the
    run's ``derived_seed``."""
    out: list[tuple[str, Case]] = []
    d_rows = d_contradictions(data_movement_check_table).unique(
        ["subgraph", "dtype"], keep="first", maintain_order=True
    )
    for r in d_rows.head(d_cap).iter_rows(named=True):
        shape = tuple(int(d) for d in r["shape"].split("x"))
        case = repros.d_case(r["subgraph"], r["dtype"], shape, r["layout"], backend, device, derived_seed)
        out.append(("D", case))
    for r in fuzz_outcomes.filter(pl.col("class") == "mismatch").head(cap).iter_rows(named=True):
        out.append(("fuzzer", repros.fuzz_case(int(r["seed"]), backend, r["dtype"], device)))
    mismatches = difftest_outcomes.filter(pl.col("class") == "mismatch").unique("features", maintain_order=True)
    for r in mismatches.head(cap).iter_rows(named=True):
        case = repros.difftest_case(r["generator"], int(r["seed"]), r["dtype"], backend, r.get("device") or device)
        out.append(("differential tester", case))
    return out


def build_workers(device: torch.device, cases: int) -> int:
    """Reproducers built at once: one on the CPU (a build's minimization compiles in its process and
    its bisection already runs variants side by side); on an accelerator one per four host cores, as
    each build's bisection runs several fresh interpreters of its own (pipeline.repros.bisect_workers)."""
    if device.type == "cpu":
        return 1
    return max(1, min(cases, (os.cpu_count() or 1) // 4))


def build_row(source: str, case: Case, root: Path, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Build one reproducer (:func:`pipeline.repros.build`) and its row of the table: D's contradictions
    get the whole bisection (knobs and toolchain), the fuzzers' finds the layers. A compile-pool task."""
    meta = repros.build(case, root, knobs=source == "D", max_checks=40 if source == "D" else 25, log=log)
    return {
        "id": meta["id"],
        "source": source,
        "title": meta["title"],
        "backend": meta["backend"],
        "rule": meta["rule"],
        "ops_before": meta["ops_before"],
        "ops_after": meta["ops_after"],
        "shapes_after": str(meta["shapes_after"]),
        "lines": meta["lines"],
        "status": meta["status"],
        "first_layer": meta["first_layer"],
        "layer_at_fault": meta["layer_at_fault"],
        "workaround": meta["workaround"],
        "minimize_seconds": meta["minimize_seconds"],
        "bisect_seconds": meta["bisect_seconds"],
        "folder": str(Path(root) / meta["id"]),
    }


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    required_resource_keys={"data", "settings"},
    description=(
        "Minimal standalone reproducers (feeds §6.1): for every D contradiction and the first fuzzer and differential-"
        "tester mismatches (up to the profile's cap), the graph "
        "minimized over ops and dims, run in a fresh interpreter, and bisected to the layer at fault (Dynamo, "
        "AOTAutograd, decompositions, Inductor, the native toolchain: C++ on the CPU, Triton/PTX on CUDA) with a "
        "workaround, on the run's device; files under "
        "<data>/<profile>/repros/<id>/."
    ),
    kinds={"pytorch", "polars"},
)
def reproducers(
    context: dg.AssetExecutionContext,
    data_movement_check_table: pl.DataFrame,
    fuzz_outcomes: pl.DataFrame,
    difftest_outcomes: pl.DataFrame,
) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    data: DataFolder = context.resources.data
    root = data.profile_dir(settings.profile) / "repros"
    cap, d_cap = settings.sizes(ID).repro_cap, settings.sizes(ID).d_repro_cap
    todo = cases_to_build(
        data_movement_check_table,
        fuzz_outcomes,
        difftest_outcomes,
        settings.backend,
        cap,
        d_cap,
        str(settings.torch_device()),
        settings.derived_seed,
    )
    start = time.perf_counter()
    device = settings.torch_device()
    workers = build_workers(device, len(todo))
    if workers == 1:
        rows = [build_row(source, case, root, context.log.info) for source, case in todo]
    else:  # side by side in compile-pool workers; each logs its own lines, this process one per case
        rows = run_tasks(
            build_row,
            [(source, case, root) for source, case in todo],
            device,
            workers,
            on_result=lambda _, r: context.log.info(f"{r['id']}: {r['status']}, fault: {r['layer_at_fault'] or '-'}"),
        )
    table = pl.DataFrame(rows, schema=SCHEMA)
    d_total = d_contradictions(data_movement_check_table).height
    found = int((fuzz_outcomes["class"] == "mismatch").sum()) + int((difftest_outcomes["class"] == "mismatch").sum())
    context.add_output_metadata(
        {
            "reproducers": table.height,
            "d_contradicting_rows": d_total,
            "fuzzer_mismatches": found,
            "cap_per_fuzzer": cap,
            "cap_d": d_cap,
            "d_not_built": max(
                0, d_contradictions(data_movement_check_table).unique(["subgraph", "dtype"]).height - d_cap
            ),
            "reproducing": int((table["status"] == "reproduces").sum()),
            "wall_seconds": time.perf_counter() - start,
            "environment": dg.MetadataValue.json(repros.environment(settings.torch_device())),
        }
    )
    return table


@finding_check(
    asset=reproducers,
    description="Finding: every reproducer built for a contradiction or a fuzzer mismatch reproduces in a fresh "
    "interpreter (WARN names those that do not: the defect depends on process state, or did not survive "
    "minimization), and each names a layer at fault.",
)
def reproducers_reproduce(reproducers: pl.DataFrame) -> dg.AssetCheckResult:
    bad = reproducers.filter(pl.col("status") != "reproduces")
    return finding_result(
        [f"{r['id']}: {r['status']} in a fresh interpreter" for r in bad.iter_rows(named=True)],
        {
            "reproducers": reproducers.height,
            "layers_at_fault": ", ".join(sorted(set(reproducers["layer_at_fault"].to_list()))) or "none",
        },
    )
