"""Diagnostics: the per-layer divergence locator, the differential graph fuzzer and the measured tolerance table."""

from ...experiment import Experiment
from . import report, spec


def _load():
    from . import divergence, fuzzing, tolerances

    return (divergence, fuzzing, tolerances)


EXPERIMENT = Experiment(
    id=spec.ID,
    title="Divergence locator, graph fuzzer, measured tolerances",
    group=spec.GROUP,
    slug="diagnostics",
    sections=(),
    load=_load,
    details=report.details,
    sizes=spec.SIZES,
    short="Diagnostics",
)
