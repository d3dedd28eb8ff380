"""D: is pure data movement bit-exact between eager and fused?"""

from ...experiment import BaselineTable, Experiment
from . import report, spec


def _load():
    from . import assets

    return (assets,)


EXPERIMENT = Experiment(
    id=spec.ID,
    title="Pure data movement is bit-exact",
    group=spec.GROUP,
    slug="data-movement",
    sections=("2",),
    load=_load,
    plan_deliverable="check table (subgraph x dtype x shape) and the counterexample list",
    deliverable=report.deliverable,
    details=report.details,
    baseline=(
        BaselineTable(
            "data_movement_check_table",
            keys=("subgraph", "dtype", "shape", "layout"),
            columns={"bit_equal": "higher", "ulp_max": "lower"},
        ),
    ),
    sizes=spec.SIZES,
    short="Data movement",
    matrix="judged",
)
