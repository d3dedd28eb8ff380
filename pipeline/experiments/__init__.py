"""The registry of experiments: the one list the code location, the report, the baseline, the k8s
step list and the tests read. Each experiment is a folder of this package holding everything about
it (see :mod:`pipeline.experiment`); adding one is a folder and a line in :data:`PACKAGES`.

Importing the registry imports each experiment's record and report sections, never its asset code:
that is loaded when the code location builds its definitions (``Experiment.assets``).
"""

import importlib
import os

import dagster as dg

from .. import storage as _storage
from ..experiment import Experiment

#: Every experiment's package, then the instruments' (:mod:`pipeline.instruments`), in the report's order:
#: the toolkit first, then the experiments in the order of the test plan. Adding one is its folder and
#: one line here (the package's ``EXPERIMENT`` record declares everything else).
PACKAGES: tuple[str, ...] = (
    "pipeline.experiments.toolkit",
    "pipeline.experiments.determinism",
    "pipeline.experiments.instruction_selection",
    "pipeline.experiments.reduction_order",
    "pipeline.experiments.rsqrt_iterations",
    "pipeline.experiments.data_movement",
    "pipeline.experiments.accumulated_error",
    "pipeline.experiments.training",
    "pipeline.experiments.models",
    "pipeline.instruments.diagnostics",
    "pipeline.instruments.regression",
)

#: More packages to register after :data:`PACKAGES` (comma-separated import paths), for an experiment
#: that lives outside this repository, such as the tests' fixture experiment.
EXTRA_ENV = "FUSION_EXTRA_EXPERIMENTS"


def _record(package: str) -> Experiment:
    try:
        module = importlib.import_module(package)
    except ModuleNotFoundError as exc:
        if package in PACKAGES or exc.name != package:
            raise  # a module of the repository's own, or one the package imports, is missing: as it is
        raise ModuleNotFoundError(
            f"{EXTRA_ENV} names {package!r}, which cannot be imported (is its folder on PYTHONPATH?)", name=package
        ) from None
    record = getattr(module, "EXPERIMENT", None)
    if not isinstance(record, Experiment):
        raise TypeError(f"{package} is registered as an experiment but has no EXPERIMENT record")
    return record


def _packages() -> tuple[str, ...]:
    extra = tuple(p.strip() for p in os.environ.get(EXTRA_ENV, "").split(",") if p.strip())
    return PACKAGES + tuple(p for p in extra if p not in PACKAGES)


EXPERIMENTS: tuple[Experiment, ...] = tuple(_record(p) for p in _packages())


def _shared_keys() -> list[dg.AssetKey]:
    """The registered assets stored once for every compiler (tagged as not using the fused path)."""
    from ..storage import uses_fused_path

    return [
        key
        for exp in EXPERIMENTS
        for a in exp.assets()
        for key in a.keys
        if not uses_fused_path(a.tags_by_key.get(key))
    ]


_storage.provide_shared_keys(_shared_keys)
_duplicated = sorted({e.id for e in EXPERIMENTS if sum(o.id == e.id for o in EXPERIMENTS) > 1})
if _duplicated:
    raise ValueError(f"experiment ids registered twice: {', '.join(_duplicated)}")

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


__all__ = ["BY_ID", "EXPERIMENTS", "PACKAGES", "Experiment", "baseline_experiments", "experiment"]
