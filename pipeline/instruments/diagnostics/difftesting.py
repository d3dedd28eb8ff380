"""Diagnostics: the typed differential tester (:mod:`precisionkit.difftest`) on the fused path.

Programs over float, integer and bool tensors, in every input layout and with edge values, plus
structured programs in the source forms that Inductor pattern-matches (attention, layer norm and
RMSNorm, GELU) and long reductions on one thread and on all of them. Each is run eagerly, fused and
in fp64 and judged by the ``diff`` rule: integer and bool outputs where they differ from both eager
and fp64 (so an index that picks fp64's optimum among 16-bit ties is right), float outputs by their
class (NaN, +-inf, +-0) and by an error against fp64 beyond rounding noise and eager's own error.
Each mismatch is run once more with the run's compiler's faithful-casts options (intent
``faithful_casts``; Inductor: ``emulate_precision_casts``): one that is then clean is by design, the
compiler's documented elision of a 16-bit rounding between fused operations (class ``by_design``, its
reason in the ``by_design`` column), counted apart from the wrong results. Any other mismatch is a
real defect of the fused path (or of what it wraps); the reproducers asset turns the first of them
into standalone reproducers. Every program runs on the run's device (on CUDA, Inductor's Triton code;
a third of the programs from the ``gpu`` generator). Feeds §6.1.
"""

import contextlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import dagster as dg
import polars as pl

from precisionkit import difftest

from ...compile_pool import pool_size
from ...intents import adapter_or_none, options_text
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
from .wrong_results import BY_DESIGN, RATE_CONFIDENCE, by_design_rows, judge_wrong_results

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
    # why a mismatch is by design ("" for every other row)
    "by_design": pl.String,
    # the class of a mismatch's rerun with the compiler's faithful-casts options, or why it was not rerun
    # ("" for a program that did not mismatch)
    "faithful_rerun": pl.String,
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
    # One pool for the programs and their faithful-casts reruns: each worker interpreter starts once.
    with difftest.WorkerPool(_WORKER_SETUP, workers) as pool:
        outcomes = difftest.fuzz(
            todo,
            backend=settings.backend,
            log=lambda o: progress.advance(note=f"{o.case.id}: {o.klass}"),
            isolated=True,
            device=str(settings.torch_device()),
            pool=pool,
        )
        rows = [{**o.row(), "seed": seed} for o, (_, seed) in zip(outcomes, todo, strict=True)]
        seconds = time.perf_counter() - start
        table = pl.DataFrame(rows, schema=SCHEMA)
        table, rerun = relabel_by_design(
            table, settings.backend, str(settings.torch_device()), pool=pool, log=context.log.info
        )
    counts = Counter(table["class"].to_list())
    context.add_output_metadata(
        {
            "programs": table.height,
            "device": str(settings.torch_device()),
            "workers": workers,
            **{f"class.{k}": counts.get(k, 0) for k in (*difftest.CLASSES, BY_DESIGN)},
            "wall_seconds": seconds,
            "programs_per_minute": 60.0 * table.height / max(seconds, 1e-9),
            "mismatches": dg.MetadataValue.md(
                "\n".join(
                    f"- `{r['id']}` ({r['features']}): {r['message']}"
                    for r in table.filter(pl.col("class") == "mismatch").iter_rows(named=True)
                )
                or "none"
            ),
            **rerun,
        }
    )
    return table


#: Where a mismatch's faithful-casts rerun is skipped: a program without a float16 or bfloat16 value (an
#: input, a cast or a dtype argument) has no 16-bit rounding for the compiler to elide.
NO_16_BIT = "not rerun: no 16-bit float in the program"


def faithful_casts(backend: str, device: str) -> tuple[Any, dict[str, Any] | None, str]:
    """The adapter of ``backend``'s compiler and the options of its ``faithful_casts`` intent on ``device``
    (round every cast between fused operations as eager does), which a tester program can carry: (adapter,
    options, ""). (adapter or None, None, why) where a mismatch cannot be rerun so: no adapter here, a
    compiler without the intent (:meth:`~precisionkit.backends.base.BackendAdapter.why_not`), one that
    keeps every cast already (its options are empty: its run was faithful), or one whose options are not
    Inductor's (a program carries Inductor options alone, patched into ``torch._inductor.config``)."""
    from precisionkit.backends import FAITHFUL_CASTS

    adapter = adapter_or_none(backend)
    if adapter is None:
        return None, None, f"no compiler adapter for backend {backend!r} here: no faithful-casts rerun"
    title = adapter.title or adapter.name
    options = adapter.intent(FAITHFUL_CASTS, device)
    if options is None:
        return adapter, None, f"not applicable to {title}: {adapter.why_not(FAITHFUL_CASTS, device)}"
    if not options:
        return adapter, None, f"{title} keeps every cast between fused operations by default: its run was faithful"
    if adapter.name != "inductor":
        return (
            adapter,
            None,
            f"{title}'s faithful-casts options ({options_text(options)}) are not Inductor options, the only ones a "
            "tester program carries",
        )
    return adapter, dict(options), ""


def _sixteen_bit(case: Any) -> bool:
    """Whether a program holds a float16 or bfloat16 value: an input, or a cast or dtype in its source."""
    return "float16" in case.source or any("float16" in i.dtype for i in case.inputs)


def relabel_by_design(
    table: pl.DataFrame,
    backend: str,
    device: str,
    *,
    pool: difftest.WorkerPool | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """``table`` (the tester's outcomes) with every "mismatch" rerun once, in worker interpreters, with
    ``backend``'s faithful-casts options (:func:`faithful_casts`) merged over the program's own: one the
    rerun finds clean becomes class :data:`BY_DESIGN` with its reason in ``by_design`` (its message stays
    the rule's), and each rerun's class is in ``faithful_rerun``. Nothing is relabelled where the
    compiler has no such options (the metadata's ``faithful_casts`` says why). ``pool``: the worker
    interpreters that ran the programs (one of its own, of one worker, when None). Returns the table and
    the step's metadata of the reruns."""
    table = table.with_columns(pl.lit("").alias("by_design"), pl.lit("").alias("faithful_rerun"))
    adapter, options, why = faithful_casts(backend, device)
    meta: dict[str, Any] = {"faithful_casts": why or options_text(options or {})}
    mismatches = [i for i, k in enumerate(table["class"].to_list()) if k == "mismatch"]
    if options is None or not mismatches:
        none = {"faithful_reruns": 0, "faithful_rerun_workers": 0, "faithful_rerun_seconds": 0.0}
        said = pl.when(pl.col("class") == "mismatch").then(pl.lit(f"not rerun: {why}")).otherwise(pl.lit(""))
        return table.with_columns(said.alias("faithful_rerun")), {
            **none,
            **meta,
            "by_design": dg.MetadataValue.md("none"),
        }
    title = adapter.title or adapter.name
    reason = f"{title}'s elided 16-bit rounding: clean with {options_text(options)}"
    classes, by_design, reruns = table["class"].to_list(), table["by_design"].to_list(), [""] * table.height
    jobs, where = [], []
    for i in mismatches:
        gen, seed = table["generator"][i], int(table["seed"][i])
        case = difftest.generate(seed, gen, device=device)
        if not _sixteen_bit(case):
            reruns[i] = NO_16_BIT
            continue
        merged = adapter.merge_options(dict(case.options), options)
        jobs.append((case.with_(options=tuple(sorted(merged.items()))), difftest.threads_for(gen, seed)))
        where.append(i)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if pool is None and jobs:
            pool = stack.enter_context(difftest.WorkerPool())
        done = pool.run(jobs, backend, return_exceptions=True) if pool is not None else []
    n_workers = min(pool.workers, len(jobs)) if pool is not None else 0
    for i, o in zip(where, done, strict=True):
        # A worker that fails outright gives ("failed", why): the rerun is evidence about one row, not the step's end.
        failed = isinstance(o, Exception)
        klass = "failed" if failed else o.klass
        message = f"{type(o).__name__}: {str(o)[:200]}" if failed else o.message
        reruns[i] = klass if klass in ("ok", "mismatch") else f"{klass}: {message[:200]}"
        if klass == "ok":
            classes[i], by_design[i] = BY_DESIGN, reason
        if log:
            log(f"{table['id'][i]} with {options_text(options)}: {klass}")
    seconds = time.perf_counter() - start
    if log:
        log(f"{len(jobs)} faithful-casts reruns in {seconds:.1f} s: {classes.count(BY_DESIGN)} by design")
    table = table.with_columns(
        pl.Series("class", classes, pl.String),
        pl.Series("by_design", by_design, pl.String),
        pl.Series("faithful_rerun", reruns, pl.String),
    )
    meta.update(
        {
            "faithful_reruns": len(jobs),
            "faithful_rerun_workers": n_workers,
            "faithful_rerun_seconds": seconds,
            "by_design": dg.MetadataValue.md(
                "\n".join(f"- `{r['id']}`: {r['by_design']}" for r in by_design_rows(table).iter_rows(named=True))
                or "none"
            ),
        }
    )
    return table, meta


#: Compared programs (ok, or a mismatch not by design) below which "no mismatch" supports nothing.
MIN_PROGRAMS_FOR_SUPPORTED = 40

DIFFTEST_RULE = Rule(
    claim="The fused path computes every generated program as eager does within rounding noise: no silent wrong "
    "result (§6.1; differential testing of the compiler against eager and fp64)",
    metric="programs the diff rule flags (an integer or bool output that is not exact, a float output of another "
    "class (NaN, +-inf, +-0) than eager's where eager has fp64's class, or a float error against fp64 beyond "
    "rounding noise and eager's own error) and that are still flagged when rerun with the compiler's faithful-casts "
    "options (Inductor: emulate_precision_casts). A flagged program that rerun clears is by design: the compiler "
    "elides a 16-bit rounding between fused operations, a documented precision increase that an integer or a class "
    "downstream can expose; it is counted and listed apart. Where the compiler has no such options (OpenVINO), or "
    "keeps every cast already (IREE), every flagged program counts",
    decision=f"contradicted if any program mismatches other than by design (a wrong result is a defect, whatever the "
    f"rate); supported if none of at least {MIN_PROGRAMS_FOR_SUPPORTED} compared programs does, which bounds the "
    f"mismatch rate of programs like these below -ln(1 - {RATE_CONFIDENCE:g}) / n at confidence "
    f"{RATE_CONFIDENCE:g}; inconclusive with fewer compared programs. A by-design program is neither wrong nor "
    "compared: its fused result is not eager's, so it is no evidence that the fused path computes as eager does, "
    "and it counts toward neither the contradiction nor n. Crashes, compile errors and invalid programs are "
    "findings, not verdicts",
    threshold=0.0,
    unit="mismatching programs",
    confidence=RATE_CONFIDENCE,
    sample_size=f"the profile's programs (diagnostics/spec.py); supported needs >= {MIN_PROGRAMS_FOR_SUPPORTED} compared "
    "(ok, or mismatching other than by design)",
    derivation="The diff rule judges each output against fp64 beyond the rounding noise of both paths, so a flagged "
    "program is a wrong result of the fused path or of what it wraps, not a tolerance question: one is enough, "
    "unless the compiler's own faithful-casts setting clears it, which makes it the compiler's documented choice "
    "rather than a defect. With 0 of n mismatches, P(0 | rate p) = (1 - p)^n <= 1 - confidence for "
    "p >= -ln(1 - confidence) / n.",
)


def judge_difftest(outcomes: pl.DataFrame) -> tuple[str, str, dict[str, Any]]:
    """:data:`DIFFTEST_RULE` on an outcomes table: verdict, reason and metadata (the by-design mismatches
    counted and listed apart: ``by_design``, ``by_design_results``)."""
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
    "with its reproducer from the reproducers asset. A mismatch the compiler's faithful-casts rerun clears is by "
    "design, counted and listed apart.",
)
def difftest_no_wrong_results(difftest_outcomes: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_difftest(difftest_outcomes)
    return claim_result(verdict, DIFFTEST_RULE, reason, meta)


@finding_check(
    asset=difftest_outcomes,
    description="Finding (diagnostic): WARN for every program that crashes, fails to compile or that the generator "
    "made invalid, and for every mismatch that is by design (clean with the compiler's faithful-casts options), "
    "with its reason (wrong results are the claim above); for a human to triage.",
)
def difftest_programs_agree(difftest_outcomes: pl.DataFrame) -> dg.AssetCheckResult:
    bad = difftest_outcomes.filter(~pl.col("class").is_in(["ok", "mismatch", BY_DESIGN]))
    apart = by_design_rows(difftest_outcomes)
    return finding_result(
        [
            *(f"{r['id']}: {r['class']}: {r['message'][:200]}" for r in bad.iter_rows(named=True)),
            *(f"{r['id']}: by design ({r['by_design']}): {r['message'][:200]}" for r in apart.iter_rows(named=True)),
        ],
        {
            "programs": difftest_outcomes.height,
            "classes": ", ".join(f"{k}={v}" for k, v in sorted(Counter(difftest_outcomes["class"]).items())),
            "by_design": apart.height,
        },
    )
