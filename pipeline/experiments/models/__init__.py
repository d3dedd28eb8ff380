"""M: real models (beyond the test plan): is fused inference worse than eager on architectures from
``transformers`` and on the user's own workloads, and where does a divergence start?"""

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
    title="Real models and your own workloads",
    group=spec.GROUP,
    slug="models",
    sections=("3.2",),
    load=_load,
    details=report.details,
    deliverable=report.deliverable,
    baseline=(
        BaselineTable(
            "model_verdicts",
            keys=("model", "dtype"),
            columns={"eager_p99": "lower", "fused_p99": "lower", "fused_nonfinite": "lower", "verdict": "any"},
        ),
    ),
    sizes=spec.SIZES,
    beyond_plan=True,
    short="Real models",
    cost=_cost,
)
