"""Diagnostics: the per-layer divergence locator, the differential graph fuzzer, minimal reproducers bisected to\nthe layer at fault, and the measured tolerance table."""

from ...experiment import Experiment
from . import report, spec


def _load():
    from . import difftesting, divergence, fuzzing, reproducers, tolerances

    return (divergence, fuzzing, difftesting, reproducers, tolerances)


def _cost():
    from . import cost

    return cost


EXPERIMENT = Experiment(
    id=spec.ID,
    title="Divergence locator, graph fuzzer, reproducers, measured tolerances",
    group=spec.GROUP,
    slug="diagnostics",
    sections=(),
    load=_load,
    details=report.details,
    sizes=spec.SIZES,
    short="Diagnostics",
    cost=_cost,
)
