"""C3: are torch's rsqrt and division correctly rounded, special values included? (and the Newton-iteration study)"""

import polars as pl

from ...experiment import BaselineTable, Experiment
from . import report, spec


def iterations_as_text(table: pl.DataFrame) -> pl.DataFrame:
    """The iteration count as a row key: text, with "-" for the paths that have none (torch's own ops)."""
    return table.with_columns(pl.col("iterations").cast(pl.String).fill_null("-"))


def _load():
    from . import assets, checks

    return (assets, checks)


def _cost():
    from . import cost

    return cost


EXPERIMENT = Experiment(
    id=spec.ID,
    title="rsqrt algorithm iterations",
    group=spec.GROUP,
    slug="rsqrt-iterations",
    sections=("1.2-4",),
    load=_load,
    needs_inductor="it counts rsqrt's Newton iterations in the code Inductor generates and switches them with Inductor's config",
    plan_deliverable="table of iteration count vs last-bit difference and the two paths' ULP histograms",
    deliverable=report.deliverable,
    details=report.details,
    baseline=(
        BaselineTable("c3_path_outputs", method="tensors"),
        BaselineTable(
            "c3_iteration_table",
            keys=("path", "iterations", "compute_dtype"),
            columns={"ulp_max": "lower", "correctly_rounded_fraction": "higher"},
            prepare=iterations_as_text,
        ),
    ),
    sizes=spec.SIZES,
    short="rsqrt iterations",
    cost=_cost,
)
