"""E: does a model trained fused learn the same as one trained eager, within measured noise?"""

from ...experiment import BaselineTable, Experiment
from . import report, spec


def _load():
    from . import assets

    return (assets,)


def _cost():
    from . import cost

    return cost


EXPERIMENT = Experiment(
    id=spec.ID,
    title="End-to-end training alignment",
    group=spec.GROUP,
    slug="training",
    sections=("3.2", "6.1"),
    load=_load,
    plan_deliverable="loss (train / eval), grad norm and perplexity curves and the final-metric difference table",
    deliverable=report.deliverable,
    details=report.details,
    baseline=(BaselineTable("training_curves", method="curves"),),
    sizes=spec.SIZES,
    short="Training alignment",
    cost=_cost,
)
