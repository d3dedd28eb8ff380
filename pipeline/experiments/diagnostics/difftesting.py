"""Diagnostics: the typed differential tester (:mod:`precisionkit.difftest`) on the fused path.

Programs over float, integer and bool tensors, in every input layout and with edge values, plus
structured programs in the source forms that Inductor pattern-matches (attention, layer norm and
RMSNorm, GELU) and long reductions on one thread and on all of them. Each is run eagerly, fused and
in fp64 and judged by the ``diff`` rule: integer and bool outputs exactly, float outputs by their
class (NaN, +-inf, +-0) and by an error against fp64 beyond rounding noise and eager's own error.
A mismatch is a real defect of the fused path (or of what it wraps); the reproducers asset turns
the first of them into standalone reproducers. Feeds §6.1.
"""

import time
from collections import Counter

import dagster as dg
import polars as pl

from precisionkit import difftest

from ...progress import Progress
from ...resources import ExperimentSettings
from ...verdicts import finding_check, finding_result
from .spec import GROUP, SIZES

SCHEMA = {
    "id": pl.String,
    "generator": pl.String,
    "seed": pl.Int64,
    "dtype": pl.String,
    "class": pl.String,
    "message": pl.String,
    "features": pl.String,
    "n_lines": pl.Int64,
    "seconds": pl.Float64,
    "threads": pl.Int64,
}


#: What the tester's worker interpreter runs first: the planted-bug backends, so a matrix run's
#: backend exists there too.
_WORKER_SETUP = (
    "from pipeline.experiments.regression.planted_bugs import register_planted_backends\nregister_planted_backends()\n"
)


def plan(settings: ExperimentSettings) -> list[tuple[str, int]]:
    """The profile's programs (:func:`precisionkit.difftest.plan`) from a start derived from the base seed."""
    return difftest.plan(SIZES[settings.profile].difftest_programs, settings.derived_seed("difftest") % 1_000_000)


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    required_resource_keys={"settings"},
    description=(
        "Typed differential tester (feeds §6.1): random programs over float, int and bool tensors (arg-reductions, "
        "min/max, cumulative ops, casts, masking, edge values, gather/scatter/index, in-place ops on views, "
        "non-contiguous layouts) and structured attention / norm / GELU / long-reduction programs, run eager, fused "
        "and fp64; a mismatch is a defect beyond rounding noise."
    ),
    kinds={"pytorch", "polars"},
)
def difftest_outcomes(context: dg.AssetExecutionContext) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    todo = plan(settings)
    progress = Progress(context.log.info, "differential tester programs", len(todo))
    start = time.perf_counter()
    # In a worker interpreter: a program whose compiled code crashes or hangs is a "crash" outcome,
    # not the end of this step (or of the run, under the in-process executor).
    outcomes = difftest.fuzz(
        todo,
        backend=settings.backend,
        log=lambda o: progress.advance(note=f"{o.case.id}: {o.klass}"),
        isolated=True,
        setup=_WORKER_SETUP,
    )
    rows = [{**o.row(), "seed": seed} for o, (_, seed) in zip(outcomes, todo, strict=True)]
    seconds = time.perf_counter() - start
    table = pl.DataFrame(rows, schema=SCHEMA)
    counts = Counter(table["class"].to_list())
    context.add_output_metadata(
        {
            "programs": table.height,
            **{f"class.{k}": counts.get(k, 0) for k in difftest.CLASSES},
            "wall_seconds": seconds,
            "programs_per_minute": 60.0 * table.height / max(seconds, 1e-9),
            "mismatches": dg.MetadataValue.md(
                "\n".join(
                    f"- `{r['id']}` ({r['features']}): {r['message']}"
                    for r in table.filter(pl.col("class") == "mismatch").iter_rows(named=True)
                )
                or "none"
            ),
        }
    )
    return table


@finding_check(
    asset=difftest_outcomes,
    description="Finding (diagnostic): WARN for every program whose fused result is wrong beyond rounding noise "
    "(a defect to triage, with a reproducer from the reproducers asset), that fails to compile, or that the "
    "generator made invalid; not a claim verdict.",
)
def difftest_programs_agree(difftest_outcomes: pl.DataFrame) -> dg.AssetCheckResult:
    bad = difftest_outcomes.filter(pl.col("class") != "ok")
    return finding_result(
        [f"{r['id']}: {r['class']}: {r['message'][:200]}" for r in bad.iter_rows(named=True)],
        {
            "programs": difftest_outcomes.height,
            "classes": ", ".join(f"{k}={v}" for k, v in sorted(Counter(difftest_outcomes["class"]).items())),
        },
    )
