"""Regression: drift against the promoted baseline, and the planted-bug suite that proves the checks catch silent bugs."""

from ...backends import offer
from ...experiment import Experiment
from . import report, spec


def _register_planted() -> object:
    from .planted_bugs import register_planted_backends

    return register_planted_backends()


offer(spec.PLANTED_BACKENDS, _register_planted)


def _load():
    from . import drift, matrix

    return (drift, matrix)


def _cost():
    from . import cost

    return cost


EXPERIMENT = Experiment(
    id=spec.ID,
    title="Drift against the baseline and the planted-bug suite",
    group=spec.GROUP,
    slug="drift",
    sections=(),
    load=_load,
    details=report.details,
    sizes=spec.SIZES,
    short="Drift and planted bugs",
    cost=_cost,
)
