"""C1: does tensor x scalar differ from tensor x broadcast tensor, and why?"""

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
    title="Tensor x scalar instruction selection",
    group=spec.GROUP,
    slug="instruction-selection",
    sections=("1.2-2",),
    load=_load,
    needs_inductor="it reads the instruction route (scalar or vector, FMA or not) from the C++ Inductor generates",
    plan_deliverable="ULP = 0 / ULP = 1 / ULP >= 2 percentages and the ULP difference histogram",
    deliverable=report.deliverable,
    details=report.details,
    baseline=(
        BaselineTable("c1_path_outputs", method="tensors"),
        BaselineTable(
            "c1_ulp_distribution",
            keys=("comparison",),
            columns={"bit_equal": "any", "ulp1_pct": "any", "ulp_max": "any"},
        ),
        BaselineTable("c1_error_vs_fp64", keys=("path",), columns={"ulp_max": "lower", "ulp_mean": "lower"}),
    ),
    sizes=spec.SIZES,
    short="Instruction selection",
    cost=_cost,
)
