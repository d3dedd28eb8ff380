"""A: is the fused path bit-for-bit deterministic, and is its generated code hash-stable across a cold start?"""

import polars as pl

from ...experiment import BaselineTable, Experiment
from . import report, spec


def output_md5s(runs: pl.DataFrame) -> pl.DataFrame:
    """The distinct output hashes per round and dtype, as one sorted comma-joined string."""
    return runs.group_by("round", "dtype").agg(pl.col("md5").unique().sort().str.join(","))


def _load():
    from . import assets, checks

    return (assets, checks)


def _cost():
    from . import cost

    return cost


EXPERIMENT = Experiment(
    id=spec.ID,
    title="Fused-path binary determinism",
    group=spec.GROUP,
    slug="determinism",
    sections=("3.3",),
    load=_load,
    plan_deliverable="table of run count / unique hash count / max ULP diff, expected 1000 / 1 / 0",
    deliverable=report.deliverable,
    details=report.details,
    baseline=(
        BaselineTable(
            "determinism_summary",
            keys=("dtype", "round"),
            columns={"unique_output_hashes": "lower", "max_ulp_diff_across_runs": "lower", "code_sha256": "code"},
        ),
        BaselineTable(
            "determinism_runs",
            keys=("round", "dtype"),
            columns={"md5": "any"},
            prepare=output_md5s,
            label="determinism_runs/output_md5s",
        ),
    ),
    sizes=spec.SIZES,
    short="Determinism",
    fusion=spec.FUSION,
    cost=_cost,
)
