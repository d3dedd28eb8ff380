"""M: real models (beyond the test plan): is fused inference worse than eager on architectures from
``transformers`` and on the user's own workloads, and where does a divergence start?"""

from typing import Any

from ...experiment import BaselineTable, Experiment
from . import report, spec


def _load():
    from . import assets, checks

    return (assets, checks)


def _cost():
    from . import cost

    return cost


def workload_problem(workloads: str, device: Any) -> str | None:
    """The one line a bad spec of the user's own workloads gets (each is imported, built and asked for inputs on
    ``device``: ``user_workloads.load_workloads``), or None: for the CLI, which refuses a run before it starts."""
    from .user_workloads import WorkloadError, load_workloads

    try:
        load_workloads(workloads, device)
    except WorkloadError as exc:
        return str(exc)
    return None


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
