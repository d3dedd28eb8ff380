"""Diagnostics: a minimal reproducer, bisected to the layer at fault, for every contradiction an experiment
declares reproducer cases for (its record's ``reproducers``: D's pure data-movement rows that are not
bit-exact) and the first fuzzer and differential-tester mismatches.

Each becomes a folder under ``<data>/<profile>/repros/<id>/`` (:mod:`.repro_build`): the
standalone ``repro.py`` (exits 1 while the defect reproduces), the issue-ready ``report.md`` and
the numbers in ``meta.json``. The site's diagnostics page lists them and an experiment's page links
each row to its reproducer. A healthy run has nothing to reproduce, so the asset is then an empty table.
"""

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import torch

from precisionkit.repro import Case

from ...compile_pool import run_tasks
from ...experiment import Experiment
from ...experiments import EXPERIMENTS
from ...resources import ExperimentSettings
from ...storage import DataFolder
from ...verdicts import finding_check, finding_result
from . import repro_build
from .cases import difftest_case, fuzz_case
from .spec import GROUP, ID

#: The experiments whose records declare reproducer cases, in the registry's order: the asset reads each
#: one's contradicting table by the name the record gives.
SOURCES: tuple[Experiment, ...] = tuple(e for e in EXPERIMENTS if e.reproducers is not None)
#: How the fuzzers' finds are bisected: the layers only, with fewer minimization candidates.
FUZZER_BISECT = {"knobs": False, "max_checks": 25}


def bisect_options(source: str) -> dict[str, Any]:
    """The bisection options of a case from ``source``: an experiment's own declaration, else the fuzzers'."""
    for e in SOURCES:
        if e.id == source and e.reproducers is not None:
            return {"knobs": e.reproducers.knobs, "max_checks": e.reproducers.max_checks}
    return dict(FUZZER_BISECT)


SCHEMA = {
    "id": pl.String,
    "source": pl.String,
    "title": pl.String,
    "backend": pl.String,
    "rule": pl.String,
    "ops_before": pl.Int64,
    "ops_after": pl.Int64,
    "shapes_before": pl.String,
    "shapes_after": pl.String,
    "minimize_checks": pl.Int64,
    "minimize_accepted": pl.Int64,
    "minimize_ended": pl.String,
    "minimize_max_checks": pl.Int64,
    "lines": pl.Int64,
    "status": pl.String,
    "first_layer": pl.String,
    "layer_at_fault": pl.String,
    "workaround": pl.String,
    "minimize_seconds": pl.Float64,
    "bisect_seconds": pl.Float64,
    "folder": pl.String,
}


def cases_to_build(
    tables: Mapping[str, pl.DataFrame],
    fuzz_outcomes: pl.DataFrame,
    difftest_outcomes: pl.DataFrame,
    backend: str,
    cap: int,
    contradiction_cap: int = 3,
    device: str = "cpu",
    derived_seed: Callable[..., int] | None = None,
    sources: tuple[Experiment, ...] = SOURCES,
) -> list[tuple[str, Case]]:
    """(source, case) for each source experiment's contradictions (``tables``: its declared table by name;
    one per group its cases declare, at most ``contradiction_cap`` each), then the fuzzers' mismatches
    (at most ``cap`` each, one per feature set for the tester), the fuzzers' cases on the ``device`` they
    ran on. An experiment's cases draw the row's own inputs from the run's ``derived_seed``."""
    out: list[tuple[str, Case]] = []
    for source in sources:
        assert source.reproducers is not None
        declared = source.reproducers.load()
        rows = declared.contradictions(tables[source.reproducers.table])
        rows = rows.unique(list(declared.ONE_PER), keep="first", maintain_order=True)
        for r in rows.head(contradiction_cap).iter_rows(named=True):
            out.append((source.id, declared.row_case(r, backend, device, derived_seed)))
    for r in fuzz_outcomes.filter(pl.col("class") == "mismatch").head(cap).iter_rows(named=True):
        out.append(("fuzzer", fuzz_case(int(r["seed"]), backend, r["dtype"], device)))
    mismatches = difftest_outcomes.filter(pl.col("class") == "mismatch").unique("features", maintain_order=True)
    for r in mismatches.head(cap).iter_rows(named=True):
        case = difftest_case(r["generator"], int(r["seed"]), r["dtype"], backend, r.get("device") or device)
        out.append(("differential tester", case))
    return out


def source_metadata(
    tables: Mapping[str, pl.DataFrame], cap: int, sources: tuple[Experiment, ...] = SOURCES
) -> dict[str, int]:
    """Per source experiment (``<id>_`` in lower case): its contradicting rows, the cap on its reproducers and
    how many groups of rows it declares were left without one by that cap."""
    out: dict[str, int] = {}
    for source in sources:
        assert source.reproducers is not None
        declared = source.reproducers.load()
        rows = declared.contradictions(tables[source.reproducers.table])
        name = source.id.lower()
        out[f"{name}_contradicting_rows"] = rows.height
        out[f"cap_{name}"] = cap
        out[f"{name}_not_built"] = max(0, rows.unique(list(declared.ONE_PER)).height - cap)
    return out


def build_workers(device: torch.device, cases: int) -> int:
    """Reproducers built at once: one on the CPU (a build's minimization compiles in its process and
    its bisection already runs variants side by side); on an accelerator one per four host cores, as
    each build's bisection runs several fresh interpreters of its own (repro_build.bisect_workers)."""
    if device.type == "cpu":
        return 1
    return max(1, min(cases, (os.cpu_count() or 1) // 4))


def build_row(source: str, case: Case, root: Path, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Build one reproducer (:func:`.repro_build.build`) and its row of the table, bisected as its source
    declares (:func:`bisect_options`). A compile-pool task."""
    meta = repro_build.build(case, root, **bisect_options(source), log=log)
    return {
        "id": meta["id"],
        "source": source,
        "title": meta["title"],
        "backend": meta["backend"],
        "rule": meta["rule"],
        "ops_before": meta["ops_before"],
        "ops_after": meta["ops_after"],
        "shapes_before": str(meta["shapes_before"]),
        "shapes_after": str(meta["shapes_after"]),
        "minimize_checks": meta["minimize_checks"],
        "minimize_accepted": meta["minimize_accepted"],
        "minimize_ended": meta["minimize_ended"],
        "minimize_max_checks": meta["minimize_max_checks"],
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
        "Minimal standalone reproducers (feeds §6.1): for every contradiction of an experiment that declares "
        "reproducer cases (" + ", ".join(e.id for e in SOURCES) + ") and the first fuzzer and differential-"
        "tester mismatches (up to the profile's cap), the graph "
        "minimized over ops and dims, run in a fresh interpreter, and bisected to the layer at fault (Dynamo, "
        "AOTAutograd, decompositions, Inductor, the native toolchain: C++ on the CPU, Triton/PTX on CUDA) with a "
        "workaround, on the run's device; files under "
        "<data>/<profile>/repros/<id>/."
    ),
    ins={e.reproducers.table: dg.AssetIn() for e in SOURCES if e.reproducers is not None},
    kinds={"pytorch", "polars"},
)
def reproducers(
    context: dg.AssetExecutionContext,
    fuzz_outcomes: pl.DataFrame,
    difftest_outcomes: pl.DataFrame,
    **tables: pl.DataFrame,
) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    data: DataFolder = context.resources.data
    root = data.profile_dir(settings.profile) / "repros"
    cap, own_cap = settings.sizes(ID).repro_cap, settings.sizes(ID).contradiction_repro_cap
    todo = cases_to_build(
        tables,
        fuzz_outcomes,
        difftest_outcomes,
        settings.backend,
        cap,
        own_cap,
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
    found = int((fuzz_outcomes["class"] == "mismatch").sum()) + int((difftest_outcomes["class"] == "mismatch").sum())
    context.add_output_metadata(
        {
            "reproducers": table.height,
            **source_metadata(tables, own_cap),
            "fuzzer_mismatches": found,
            "cap_per_fuzzer": cap,
            "reproducing": int((table["status"] == "reproduces").sum()),
            "wall_seconds": time.perf_counter() - start,
            "environment": dg.MetadataValue.json(repro_build.environment(settings.torch_device())),
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
