"""Diagnostics: differential fuzzing of the fused path with random small graphs (seed 001's
graph fuzzer and differential testing, against fp64 and eager).

Each of the profile's ``fuzz_graphs`` seeds gives one random graph (:mod:`precisionkit.fuzz`),
run eager, fused with the configured backend and in fp64, and classified (ok, mismatch, graph
break, compile error, crash). Failures are shrunk to a minimal graph and saved as a standalone
reproducer script under ``<data>/<profile>/reproducers/fuzz``. Feeds §6.1 (compiler bugs found,
with reproducers) and the measured tolerance table.
"""

import time
from collections import Counter
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from precisionkit import fuzz

from ...compile_pool import pool_size, run_tasks
from ...progress import Progress
from ...resources import ExperimentSettings
from ...storage import DataFolder
from ...verdicts import (
    Rule,
    claim_check,
    claim_result,
    finding_check,
    finding_result,
)
from .spec import GROUP, ID
from .wrong_results import RATE_CONFIDENCE, judge_wrong_results

#: Shrinking candidates per failing graph (each one is a compile).
MAX_SHRINK_CHECKS = 16

SCHEMA = {
    "seed": pl.Int64,
    "dtype": pl.String,
    "ops": pl.String,
    "n_ops": pl.Int64,
    "class": pl.String,
    "fused_abs_err": pl.Float64,
    "eager_abs_err": pl.Float64,
    "fused_tol_ratio": pl.Float64,
    "eager_tol_ratio": pl.Float64,
    "atol": pl.Float64,
    "rtol": pl.Float64,
    "op_class": pl.String,
    "reduction_size": pl.Int64,
    "graph_count": pl.Int64,
    "kernel_count": pl.Int64,
    "compile_seconds": pl.Float64,
    "detail": pl.String,
    "shrunk_ops": pl.String,
    "shrunk_n_ops": pl.Int64,
    "reproducer": pl.String,
}


def fuzz_seeds(settings: ExperimentSettings) -> list[int]:
    """The profile's graph seeds: a contiguous block starting at a value derived from the base seed."""
    start = settings.derived_seed("fuzz") % 1_000_000
    return list(range(start, start + settings.sizes(ID).fuzz_graphs))


def _number(value: object) -> float:
    """A polars aggregate as a float; 0.0 where it is empty (None)."""
    return float(value) if isinstance(value, (int, float)) else 0.0


def fuzz_one(seed: int, backend: str, options: dict[str, Any], out_dir: Path, device: str) -> fuzz.FuzzOutcome:
    """One fuzzer graph, run, classified and (if it fails) shrunk: a compile-pool task."""
    return fuzz.fuzz(
        [seed], backend=backend, options=options, out_dir=out_dir, max_shrink_checks=MAX_SHRINK_CHECKS, device=device
    )[0]


@dg.asset(
    group_name=GROUP,
    pool="compute_device",
    required_resource_keys={"data", "settings"},
    description=(
        "Differential graph fuzzer (feeds §6.1): random small graphs (elementwise, reductions, matmul, layernorm, "
        "softmax, reshape/transpose/concat, broadcasting) run eager, fused and fp64; outcome class, errors, the "
        "tolerance used, and a shrunk standalone reproducer for every failure."
    ),
    kinds={"pytorch", "polars"},
)
def fuzz_outcomes(context: dg.AssetExecutionContext) -> pl.DataFrame:
    settings: ExperimentSettings = context.resources.settings
    data: DataFolder = context.resources.data
    folder = data.profile_dir(settings.profile) / "reproducers" / "fuzz"
    seeds = fuzz_seeds(settings)
    start = time.perf_counter()
    progress = Progress(context.log.info, "fuzzer graphs", len(seeds))

    def log(line: str) -> None:  # one line per graph: kept at DEBUG, counted for the progress line
        context.log.debug(line)
        progress.advance(note=line)

    # One graph per task, one worker per core (a graph's cost is its compile, host work, on any device:
    # pipeline.compile_pool.pool_size); the outcomes and the log come in seed order either way.
    device = settings.torch_device()
    tasks = [(seed, settings.backend, settings.options(), folder, str(device)) for seed in seeds]
    outcomes = run_tasks(
        fuzz_one,
        tasks,
        device,
        pool_size(device, len(tasks), compile_bound=True),
        on_result=lambda _, o: log(f"seed {o.graph.seed}: {o.klass} ({o.graph.dtype}; {o.graph.op_list()})"),
    )
    seconds = time.perf_counter() - start
    table = pl.DataFrame([o.row() for o in outcomes], schema=SCHEMA)
    counts = Counter(o.klass for o in outcomes)
    ok = table.filter(pl.col("class") == "ok")
    context.add_output_metadata(
        {
            "graphs": len(outcomes),
            **{f"class.{k}": counts.get(k, 0) for k in fuzz.CLASSES},
            "first_seed": seeds[0] if seeds else -1,
            "wall_seconds": seconds,
            "seconds_per_graph": seconds / max(1, len(outcomes)),
            "median_compile_seconds": _number(table["compile_seconds"].median()),
            "max_fused_tol_ratio_ok": _number(ok["fused_tol_ratio"].max()),
            "fused_better_than_eager_fraction": _number((ok["fused_tol_ratio"] < ok["eager_tol_ratio"]).mean()),
            "dtypes": ", ".join(f"{k}={v}" for k, v in sorted(Counter(table["dtype"]).items())),
            "rule": f"mismatch: fused max|err|/(atol+rtol|ref|) > 1 and > {fuzz.EAGER_MARGIN:g} x eager's",
            "failures": dg.MetadataValue.md(
                "\n".join(
                    f"- seed {r['seed']} **{r['class']}** ({r['dtype']}): {r['shrunk_ops'] or r['ops']} -> `{r['reproducer']}` {r['detail']}"
                    for r in table.filter(~pl.col("class").is_in(["ok"])).iter_rows(named=True)
                )
                or "none"
            ),
        }
    )
    return table


#: Compared graphs (ok or mismatch) below which "no mismatch" supports nothing.
MIN_GRAPHS_FOR_SUPPORTED = 40

FUZZ_RULE = Rule(
    claim="The fused path computes every fuzzed float graph as accurately as eager does, up to the tolerance of its "
    "op class: no silent wrong result (§6.1; seed 001's graph fuzzing against fp64 and eager)",
    metric="graphs whose fused result is outside the op class's tolerance against fp64 (max |fused - ref| / "
    f"(atol + rtol |ref|) > 1) and more than {fuzz.EAGER_MARGIN:g} times as far outside it as eager's, confirmed "
    "after shrinking to a minimal graph with a standalone reproducer",
    decision=f"contradicted if any graph mismatches; supported if none of at least {MIN_GRAPHS_FOR_SUPPORTED} compared "
    f"graphs does (the mismatch rate of graphs like these is then below -ln(1 - {RATE_CONFIDENCE:g}) / n at "
    f"confidence {RATE_CONFIDENCE:g}); inconclusive with fewer. Crashes, compile errors, graph breaks and invalid "
    "graphs are findings, not verdicts",
    threshold=1.0,
    unit="tolerance ratio (error / (atol + rtol |ref|))",
    confidence=RATE_CONFIDENCE,
    sample_size=f"the profile's fuzzer graphs (diagnostics/spec.py); supported needs >= {MIN_GRAPHS_FOR_SUPPORTED} compared",
    derivation="A graph counts only when fused is both outside the tolerance its op class is allowed against fp64 "
    f"and {fuzz.EAGER_MARGIN:g}x worse than eager on the same inputs, so eager's own rounding on an ill-conditioned "
    "graph does not count against fused: one such graph is a wrong result to triage with its reproducer. With 0 of n, "
    "P(0 | rate p) = (1 - p)^n <= 1 - confidence for p >= -ln(1 - confidence) / n.",
)


def judge_fuzz(outcomes: pl.DataFrame) -> tuple[str, str, dict[str, Any]]:
    """:data:`FUZZ_RULE` on a fuzzer outcomes table: verdict, reason and metadata.

    Unlike the differential tester's, no mismatch is rerun with the compiler's faithful-casts options: a
    fuzzed graph runs in one dtype with no cast and has only float outputs, judged against fp64 beyond
    a margin over eager's own error, so a 16-bit rounding the compiler elides removes error rather than
    adds it, and no integer or class downstream turns it into a flip. None is by design (the metadata's
    ``by_design`` is 0)."""

    def line(r: dict[str, Any]) -> str:
        return (
            f"- seed {r['seed']} ({r['dtype']}): {r['shrunk_ops'] or r['ops']}, fused tolerance ratio "
            f"{r['fused_tol_ratio']:.3g} vs eager {r['eager_tol_ratio']:.3g} -> `{r['reproducer']}`"
        )

    return judge_wrong_results(
        outcomes,
        noun="graphs",
        min_compared=MIN_GRAPHS_FOR_SUPPORTED,
        line=line,
        first=lambda r: (
            f"seed {r['seed']} ({r['shrunk_ops'] or r['ops']}): fused {r['fused_tol_ratio']:.3g}x its "
            f"tolerance, eager {r['eager_tol_ratio']:.3g}x"
        ),
    )


@claim_check(
    rule=FUZZ_RULE,
    asset=fuzz_outcomes,
    description="Claim (§6.1): no fuzzed graph gets a wrong fused result; a mismatch beyond the tolerance and beyond "
    "eager's error is an ERROR, with its shrunk reproducer.",
)
def fuzzed_graphs_no_wrong_results(fuzz_outcomes: pl.DataFrame) -> dg.AssetCheckResult:
    verdict, reason, meta = judge_fuzz(fuzz_outcomes)
    return claim_result(verdict, FUZZ_RULE, reason, meta)


@finding_check(
    asset=fuzz_outcomes,
    description="Finding (diagnostic): WARN for every fuzzed graph that crashes, fails to compile, breaks or that the "
    "generator made invalid (each with a shrunk reproducer; wrong results are the claim above); for a human to triage.",
)
def fuzzed_graphs_all_ok(fuzz_outcomes: pl.DataFrame) -> dg.AssetCheckResult:
    bad = fuzz_outcomes.filter(~pl.col("class").is_in(["ok", "mismatch"]))
    counts = dict(Counter(fuzz_outcomes["class"]))
    return finding_result(
        [f"seed {r['seed']}: {r['class']} ({r['reproducer']})" for r in bad.iter_rows(named=True)],
        {
            "graphs": fuzz_outcomes.height,
            "failing": bad.height,
            "classes": ", ".join(f"{k}={v}" for k, v in sorted(counts.items())),
            "finding": "; ".join(
                f"seed {r['seed']}: {r['class']} ({r['reproducer']})" for r in bad.head(10).iter_rows(named=True)
            )
            or "none",
        },
    )
