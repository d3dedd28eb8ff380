"""Diagnostics: the typed differential tester (:mod:`precisionkit.difftest`) on the fused path.

Programs over float, integer and bool tensors, in every input layout and with edge values, plus
structured programs in the source forms that Inductor pattern-matches (attention, layer norm and
RMSNorm, GELU) and long reductions on one thread and on all of them. Each is run eagerly, fused and
in fp64 and judged by the ``diff`` rule: integer and bool outputs where they differ from both eager
and fp64 (so an index that picks fp64's optimum among 16-bit ties is right), float outputs by their
class (NaN, +-inf, +-0) and by an error against fp64 beyond rounding noise and eager's own error.
A mismatch is a real defect of the fused path (or of what it wraps); the reproducers asset turns
the first of them into standalone reproducers. Every program runs on the run's device (on CUDA,
Inductor's Triton code; a third of the programs from the ``gpu`` generator). Feeds §6.1.
"""

import time
from collections import Counter
from typing import Any

import dagster as dg
import polars as pl

from precisionkit import difftest

from ...compile_pool import pool_size
from ...progress import Progress
from ...resources import ExperimentSettings
from ...verdicts import (
    Rule,
    claim_check,
    claim_result,
    finding_check,
    finding_result,
)
from .spec import GROUP, ID
from .wrong_results import RATE_CONFIDENCE, judge_wrong_results

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
    "device": pl.String,
    "reference_device": pl.String,
    "control": pl.String,
}


#: What the tester's worker interpreter runs first: the planted-bug backends, so a matrix run's
#: backend exists there too.
_WORKER_SETUP = (
    "from pipeline.instruments.regression.planted_bugs import register_planted_backends\nregister_planted_backends()\n"
)


def program_plan(settings: ExperimentSettings) -> list[tuple[str, int]]:
    """The profile's programs (:func:`precisionkit.difftest.plan`) from a start derived from the base
    seed, for the run's device (on CUDA a third from the ``gpu`` generator)."""
    return difftest.plan(
        settings.sizes(ID).difftest_programs,
        settings.derived_seed("difftest") % 1_000_000,
        str(settings.torch_device()),
    )


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
    todo = program_plan(settings)
    progress = Progress(context.log.info, "differential tester programs", len(todo))
    start = time.perf_counter()
    # In a worker interpreter: a program whose compiled code crashes or hangs is a "crash" outcome,
    # not the end of this step (or of the run, under the in-process executor).
    # One worker interpreter per core: a program's cost is its compile, host work, on any device
    # (pipeline.compile_pool.pool_size).
    workers = pool_size(settings.torch_device(), len(todo), compile_bound=True)
    outcomes = difftest.fuzz(
        todo,
        backend=settings.backend,
        log=lambda o: progress.advance(note=f"{o.case.id}: {o.klass}"),
        isolated=True,
        setup=_WORKER_SETUP,
        device=str(settings.torch_device()),
        workers=workers,
    )
    rows = [{**o.row(), "seed": seed} for o, (_, seed) in zip(outcomes, todo, strict=True)]
    seconds = time.perf_counter() - start
    table = pl.DataFrame(rows, schema=SCHEMA)
    counts = Counter(table["class"].to_list())
    context.add_output_metadata(
        {
            "programs": table.height,
            "device": str(settings.torch_device()),
            "workers": workers,
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


#: Compared programs (ok or mismatch) below which "no mismatch" supports nothing.
MIN_PROGRAMS_FOR_SUPPORTED = 40

DIFFTEST_RULE = Rule(
    claim="The fused path computes every generated program as eager does within rounding noise: no silent wrong "
    "result (§6.1; differential testing of the compiler against eager and fp64)",
    metric="programs the diff rule flags: an integer or bool output that is not exact, a float output of another "
    "class (NaN, +-inf, +-0) than eager's where eager has fp64's class, or a float error against fp64 beyond "
    "rounding noise and eager's own error",
    decision=f"contradicted if any program mismatches (a wrong result is a defect, whatever the rate); supported if "
    f"none of at least {MIN_PROGRAMS_FOR_SUPPORTED} compared programs does, which bounds the mismatch rate of "
    f"programs like these below -ln(1 - {RATE_CONFIDENCE:g}) / n at confidence {RATE_CONFIDENCE:g}; inconclusive "
    "with fewer compared programs. Crashes, compile errors and invalid programs are findings, not verdicts",
    threshold=0.0,
    unit="mismatching programs",
    confidence=RATE_CONFIDENCE,
    sample_size=f"the profile's programs (diagnostics/spec.py); supported needs >= {MIN_PROGRAMS_FOR_SUPPORTED} compared",
    derivation="The diff rule judges each output against fp64 beyond the rounding noise of both paths, so a flagged "
    "program is a wrong result of the fused path or of what it wraps, not a tolerance question: one is enough. With "
    "0 of n mismatches, P(0 | rate p) = (1 - p)^n <= 1 - confidence for p >= -ln(1 - confidence) / n.",
)


def judge_difftest(outcomes: pl.DataFrame) -> tuple[str, str, dict[str, Any]]:
    """:data:`DIFFTEST_RULE` on an outcomes table: verdict, reason and metadata."""
    return judge_wrong_results(
        outcomes,
        noun="programs",
        min_compared=MIN_PROGRAMS_FOR_SUPPORTED,
        line=lambda r: f"- `{r['id']}` ({r['features']}): {r['message'][:300]}",
        first=lambda r: f"{r['id']}: {r['message'][:200]}",
    )


@claim_check(
    rule=DIFFTEST_RULE,
    asset=difftest_outcomes,
    description="Claim (§6.1): no generated program gets a wrong fused result; a genuine mismatch is an ERROR, "
    "with its reproducer from the reproducers asset.",
)
def difftest_no_wrong_results(difftest_outcomes: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_difftest(difftest_outcomes)
    return claim_result(verdict, DIFFTEST_RULE, reason, meta)


@finding_check(
    asset=difftest_outcomes,
    description="Finding (diagnostic): WARN for every program that crashes, fails to compile or that the generator "
    "made invalid (wrong results are the claim above); for a human to triage.",
)
def difftest_programs_agree(difftest_outcomes: pl.DataFrame) -> dg.AssetCheckResult:
    bad = difftest_outcomes.filter(~pl.col("class").is_in(["ok", "mismatch"]))
    return finding_result(
        [f"{r['id']}: {r['class']}: {r['message'][:200]}" for r in bad.iter_rows(named=True)],
        {
            "programs": difftest_outcomes.height,
            "classes": ", ".join(f"{k}={v}" for k, v in sorted(Counter(difftest_outcomes["class"]).items())),
        },
    )
