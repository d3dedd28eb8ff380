"""B: is fused accumulated error no worse than eager"s against fp64?"""

from ...experiment import BaselineTable, Experiment
from . import report, spec


def _load():
    from . import assets, checks

    return (assets, checks)


def _cost():
    from . import cost

    return cost


EXPERIMENT = Experiment(
    id=spec.ID,
    title="Eager vs fused accumulated error",
    group=spec.GROUP,
    slug="accumulated-error",
    sections=("3.2", "6.1"),
    load=_load,
    plan_deliverable="one summary-table row and one error-distribution comparison chart per operator chain",
    deliverable=report.deliverable,
    details=report.details,
    baseline=(
        BaselineTable(
            "accumulated_error_per_set",
            method="distribution",
            keys=("chain", "dtype", "path"),
            order=("distribution", "set_index"),
            columns={"ulp_max": "lower"},
        ),
        BaselineTable("accumulated_error_summary", method="kept"),
    ),
    short="Accumulated error",
    matrix="judged",
    fusion=spec.FUSION,
    cost=_cost,
)
