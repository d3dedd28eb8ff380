"""S: seeded input pools on disk, their fp64 references, precisionkit"s self-check."""

from ...experiment import Experiment
from . import report, spec


def _load():
    from . import assets

    return (assets,)


def _cost():
    from . import cost

    return cost


EXPERIMENT = Experiment(
    id=spec.ID,
    title="Precision toolkit",
    group=spec.GROUP,
    slug="toolkit",
    sections=(),
    load=_load,
    plan_deliverable="toolkit interface and a unit-test report over fp16 / bf16 / fp32 and every IEEE value class",
    deliverable=report.deliverable,
    details=report.details,
    sizes=spec.SIZES,
    short="Precision toolkit",
    matrix="upstream",
    cost=_cost,
)
