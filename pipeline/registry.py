"""The one registry of experiments: what each is called, where its assets live, what it gives evidence for.

Everything that needs to know which experiments exist reads it from :data:`EXPERIMENTS`: the code
location (``definitions.py`` merges each experiment's :meth:`Experiment.definitions`), the report
(pages, claim evidence), the baseline (which stored tables make up an experiment) and the planted-bug
matrix. This module imports no asset module at import time, so any of them may import it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

import dagster as dg

#: Package holding one module per experiment (or several modules for one experiment).
ASSETS_PACKAGE = "pipeline.experiments"


@dataclass(frozen=True)
class Experiment:
    id: str  # S, A, B, C1, C2, C3, D, E, Diagnostics, Regression
    title: str
    group: str  # Dagster asset group of every asset of the experiment
    slug: str  # page name under results/
    sections: tuple[str, ...]  # keys of reporting.claims.SECTIONS the experiment gives evidence for
    modules: tuple[str, ...]  # modules of ASSETS_PACKAGE holding its assets and checks
    baseline: tuple[str, ...] = ()  # stored assets compared against a promoted baseline (all must exist)

    def load_modules(self) -> list:
        return [importlib.import_module(f"{ASSETS_PACKAGE}.{m}") for m in self.modules]

    def definitions(self) -> dg.Definitions:
        """The experiment's assets and asset checks (no resources: the code location binds those)."""
        return dg.Definitions(assets=self.assets(), asset_checks=self.checks())

    def assets(self) -> list[dg.AssetsDefinition]:
        return list(_loaded(self)[0])

    def checks(self) -> list[dg.AssetChecksDefinition]:
        return list(_loaded(self)[1])


@cache
def _loaded(exp: Experiment) -> tuple[tuple[dg.AssetsDefinition, ...], tuple[dg.AssetChecksDefinition, ...]]:
    """The assets and checks of ``exp``'s modules, loaded once (each load makes new definition objects)."""
    modules = exp.load_modules()
    assets = tuple(a for a in dg.load_assets_from_modules(modules) if isinstance(a, dg.AssetsDefinition))
    return assets, tuple(dg.load_asset_checks_from_modules(modules))


#: In the report's order (the toolkit first, then the experiments in the order of the test plan).
EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("S", "Precision toolkit", "S_toolkit", "toolkit", (), ("toolkit.assets",)),
    Experiment(
        "A",
        "Fused-path binary determinism",
        "A_determinism",
        "determinism",
        ("3.3",),
        ("determinism.assets",),
        baseline=("determinism_summary", "determinism_runs"),
    ),
    Experiment(
        "C1",
        "Tensor x scalar instruction selection",
        "C1_instruction_selection",
        "instruction-selection",
        ("1.2-2",),
        ("instruction_selection.assets",),
        baseline=("c1_path_outputs", "c1_ulp_distribution", "c1_error_vs_fp64"),
    ),
    Experiment(
        "C2",
        "Reduction accumulation order",
        "C2_reduction_order",
        "reduction-order",
        ("1.2-3",),
        ("reduction_order.assets",),
        baseline=("c2_version_outputs", "c2_versions", "c2_error_vs_fp64"),
    ),
    Experiment(
        "C3",
        "rsqrt algorithm iterations",
        "C3_rsqrt_iterations",
        "rsqrt-iterations",
        ("1.2-4",),
        ("rsqrt_iterations.assets",),
        baseline=("c3_path_outputs", "c3_iteration_table"),
    ),
    Experiment(
        "D",
        "Pure data movement is bit-exact",
        "D_data_movement",
        "data-movement",
        ("2",),
        ("data_movement.assets",),
        baseline=("data_movement_check_table",),
    ),
    Experiment(
        "B",
        "Eager vs fused accumulated error",
        "B_accumulated_error",
        "accumulated-error",
        ("3.2", "6.1"),
        ("accumulated_error.assets",),
        baseline=("accumulated_error_per_set", "accumulated_error_summary"),
    ),
    Experiment(
        "E",
        "End-to-end training alignment",
        "E_training",
        "training",
        ("3.2", "6.1"),
        ("training.assets",),
        baseline=("training_curves",),
    ),
    Experiment(
        "Diagnostics",
        "Divergence locator, graph fuzzer, measured tolerances",
        "diagnostics",
        "diagnostics",
        (),
        ("diagnostics.divergence", "diagnostics.fuzzing", "diagnostics.tolerances"),
    ),
    Experiment(
        "Regression",
        "Drift against the baseline and the planted-bug suite",
        "regression",
        "drift",
        (),
        ("regression.drift", "regression.matrix"),
    ),
)

BY_ID: dict[str, Experiment] = {e.id: e for e in EXPERIMENTS}


def experiment(exp_id: str) -> Experiment:
    """The experiment called ``exp_id`` (``KeyError`` naming the known ones otherwise)."""
    try:
        return BY_ID[exp_id]
    except KeyError:
        raise KeyError(f"no experiment {exp_id!r}; known: {', '.join(BY_ID)}") from None


def group_of(exp_id: str) -> str:
    return experiment(exp_id).group
