"""The registry of experiments: the one list the code location, the report, the baseline, the k8s
step list and the tests read. Each experiment is a folder of this package holding everything about
it (see :mod:`pipeline.experiment`); adding one is a folder and a line here.

Importing the registry imports each experiment's record and report sections, never its asset code:
that is loaded when the code location builds its definitions (``Experiment.assets``).
"""

from ..experiment import Experiment, fill_catalogue
from . import (
    accumulated_error,
    data_movement,
    determinism,
    diagnostics,
    instruction_selection,
    models,
    reduction_order,
    regression,
    rsqrt_iterations,
    toolkit,
    training,
)

#: In the report's order (the toolkit first, then the experiments in the order of the test plan).
EXPERIMENTS: tuple[Experiment, ...] = (
    toolkit.EXPERIMENT,
    determinism.EXPERIMENT,
    instruction_selection.EXPERIMENT,
    reduction_order.EXPERIMENT,
    rsqrt_iterations.EXPERIMENT,
    data_movement.EXPERIMENT,
    accumulated_error.EXPERIMENT,
    training.EXPERIMENT,
    models.EXPERIMENT,
    diagnostics.EXPERIMENT,
    regression.EXPERIMENT,
)

fill_catalogue(EXPERIMENTS)

BY_ID: dict[str, Experiment] = {e.id: e for e in EXPERIMENTS}


def experiment(exp_id: str) -> Experiment:
    """The experiment called ``exp_id`` (``KeyError`` naming the known ones otherwise)."""
    try:
        return BY_ID[exp_id]
    except KeyError:
        raise KeyError(f"no experiment {exp_id!r}; known: {', '.join(BY_ID)}") from None


def baseline_experiments() -> dict[str, tuple[str, ...]]:
    """Experiment id -> the stored values its baseline holds, for the experiments that have one (by id)."""
    return {e.id: e.baseline_assets() for e in sorted(EXPERIMENTS, key=lambda e: e.id) if e.baseline}


__all__ = ["BY_ID", "EXPERIMENTS", "Experiment", "baseline_experiments", "experiment"]
