"""Regression: drift against the promoted baseline, and the planted-bug suite that proves the checks catch silent bugs."""

from ...experiment import Experiment
from . import report, spec


def _load():
    from . import drift, matrix

    return (drift, matrix)


EXPERIMENT = Experiment(
    id=spec.ID,
    title="Drift against the baseline and the planted-bug suite",
    group=spec.GROUP,
    slug="drift",
    sections=(),
    load=_load,
    details=report.details,
    sizes=spec.SIZES,
)
