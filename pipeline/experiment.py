"""What an experiment is, as a record: everything the code location, the report, the baseline and the
tests need to know about one experiment, declared in the experiment's own folder.

An experiment lives in ``pipeline/experiments/<name>/``: ``spec.py`` (its id, group and typed sizes per
profile), asset modules, ``report.py`` (its page sections, built from stored values only) and
``__init__.py``, which builds the :class:`Experiment` record. The registry
(``pipeline/experiments/__init__.py``) lists the records; nothing else keeps a list of experiments.

This module imports no experiment and nothing of the report, so both may import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from types import ModuleType
from typing import Any, Literal

import dagster as dg

from .fusion_checks import ExpectedFusion

#: A page section of the report: markdown built from the stored values the report holds. Called with
#: the report (``pipeline.reporting.render.Report``, not imported here: the report imports this module)
#: and the experiment.
ReportSection = Callable[[Any, "Experiment"], str]

#: How a stored value is compared with its promoted baseline (see ``instruments/regression/comparators.py``):
#: ``columns`` bit-exact column by column, rows matched on ``keys``; ``tensors`` bit-exact tensor by
#: tensor (md5); ``distribution`` a per-group statistic against a bootstrap tolerance drawn from the
#: baseline's own sets; ``curves`` training curves against the data-order noise band; ``kept`` promoted
#: with the others (so a baseline is complete) and compared through another table.
BaselineMethod = Literal["columns", "tensors", "distribution", "curves", "kept"]
#: Which way a compared column is worse: ``lower`` (an error: higher is worse), ``higher`` (a
#: fraction or flag: lower is worse), ``any`` (every change is a move the worse way), ``code`` (a hash of
#: generated code: a change is a finding, WARN).
Direction = Literal["lower", "higher", "any", "code"]


@dataclass(frozen=True)
class BaselineTable:
    """One stored value of an experiment as the regression baseline compares it."""

    asset: str
    method: BaselineMethod = "columns"
    keys: tuple[str, ...] = ()  # row key columns (``columns``, ``distribution``)
    columns: Mapping[str, Direction] = field(default_factory=dict)
    #: ``distribution``: the columns that order a group's rows (sets), so that baseline and current
    #: pair set by set (e.g. the input distribution, then the set's index).
    order: tuple[str, ...] = ()
    #: Rewrites the stored table before the comparison (e.g. nulls in a key column to a marker), or
    #: aggregates it (A's output hashes per round); ``label`` then names the derived table's items.
    prepare: Callable[[Any], Any] | None = None
    label: str = ""

    @property
    def item_prefix(self) -> str:
        return self.label or self.asset


@dataclass(frozen=True)
class Reproducers:
    """The reproducer cases an experiment declares: the diagnostics instrument builds a reproducer for the
    rows of ``table`` that contradict the experiment's claim, and ``python -m pipeline.cli repros --make
    <prefix>/...`` makes one by hand. Neither names the experiment: both read this declaration."""

    table: str  # the stored table whose rows can contradict the experiment's claim
    prefix: str  # the first part of a ``repros --make`` spec of its cases (``d``: ``d/...``)
    #: Imports and returns the module that builds the cases (only when a reproducer is made, so reading the
    #: registry imports no asset code). It defines ``contradictions(table)`` (the rows that contradict),
    #: ``ONE_PER`` (columns: one reproducer per group of rows), ``row_case(row, backend, device, derived_seed)``,
    #: ``spec_case(parts, backend, device)`` (the case
    #: of a ``--make`` spec, ``parts`` after the prefix; None when they do not have its form) and
    #: ``SPEC_FORM`` (that form, for messages).
    load: Callable[[], ModuleType]
    #: The bisection also varies Inductor's knobs and the native toolchain's flags (slower; for faults that
    #: can sit in code generation), and how many candidates the minimizer may try.
    knobs: bool = True
    max_checks: int = 40


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one record per experiment
class Experiment:
    """One experiment of the report: its identity, its Dagster definitions, its page and its baseline."""

    id: str  # S, A, B, C1, C2, C3, D, E, Diagnostics, Regression, M
    title: str
    group: str  # Dagster asset group of every asset of the experiment
    slug: str  # page name under results/
    sections: tuple[str, ...]  # keys of pipeline.sections.SECTIONS the experiment gives evidence for
    #: Imports and returns the modules holding the experiment's assets and checks. Called only when
    #: definitions are built, so that reading the registry (the report does) imports no asset code.
    load: Callable[[], Sequence[ModuleType]]
    plan_deliverable: str = ""  # what the test plan asks it to deliver, in the plan's words ("" if none)
    deliverable: ReportSection | None = None  # the page's opening section, in the plan's form
    details: ReportSection | None = None  # charts and tables behind the deliverable
    baseline: tuple[BaselineTable, ...] = ()
    #: Typed sizes per profile name (every profile of pipeline.profiles must have one).
    sizes: Mapping[str, Any] = field(default_factory=dict)
    #: Outside the test plan's task list (a page says so).
    beyond_plan: bool = False
    #: Its part in the planted-bug matrix (``instruments/regression``): ``judged`` — the matrix re-runs it
    #: with each planted backend and scores its checks (its claims are what the planted bugs are built to
    #: trip); ``upstream`` — materialized beside those runs as their input (S's pools); "" — not run there.
    matrix: Literal["", "judged", "upstream"] = ""
    #: The name in the site's navigation ("" : the title).
    short: str = ""
    #: Its reproducer cases (None: its claims have no row-level contradiction to reproduce).
    reproducers: Reproducers | None = None
    #: The stored tables that carry its fusion evidence and which of their rows are fused paths; a run-validity
    #: check is generated from each (:func:`pipeline.fusion_checks.fusion_check`).
    fusion: tuple[ExpectedFusion, ...] = ()
    #: Why the experiment needs Inductor ("" when any fusing compiler will do): it reads what only
    #: Inductor produces (its generated C++, its config). A run with another compiler's adapter stores
    #: its checks as "not applicable to <compiler>: <why>" (:func:`pipeline.compilers.not_applicable`),
    #: as it does for a claim the adapter itself declares not applicable.
    needs_inductor: str = ""
    #: Imports and returns the module holding its cost (its ``cost.py``; only when a plan is made, so reading
    #: the registry imports no cost code): ``costs(profile, device_type)`` gives its rows of a run's estimate
    #: (:class:`pipeline.costmodel.Cost`, its id on each), ``SELF_TEST = True`` where a run leaves them out
    #: unless asked. None: it declares no cost, and the plan's estimate says so in a row of its own.
    cost: Callable[[], ModuleType] | None = None
    #: Its planted bugs (with ``matrix="judged"``): the planted-bug backends (``instruments/regression``) its
    #: claims are built to catch, each to the ``asset:check`` prefix of the claim that must catch it at ERROR.
    #: The matrix scores each bug against the claim of the experiment that declares it, and re-runs that
    #: experiment alone for it where a profile asks (``designed_only``).
    planted: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sizes:
            _DECLARED_SIZES[self.id] = self

    def load_modules(self) -> list[ModuleType]:
        return list(self.load())

    def definitions(self) -> dg.Definitions:
        """The experiment's assets and asset checks (no resources: the code location binds those)."""
        return dg.Definitions(assets=self.assets(), asset_checks=self.checks())

    def assets(self) -> list[dg.AssetsDefinition]:
        return list(_loaded(self)[0])

    def checks(self) -> list[dg.AssetChecksDefinition]:
        return list(_loaded(self)[1])

    def generated_checks(self) -> list[dg.AssetChecksDefinition]:
        """The checks generated from the record's declarations (new definition objects on each call)."""
        from .fusion_checks import fusion_check, precision_check

        return [
            *(fusion_check(self.id, expected) for expected in self.fusion),
            *(precision_check(self.id, expected) for expected in self.fusion),
        ]

    def baseline_assets(self) -> tuple[str, ...]:
        """The stored values a baseline of this experiment holds (all must exist to promote it)."""
        return tuple(t.asset for t in self.baseline)

    def sizes_for(self, profile: str) -> Any:
        """The experiment's typed sizes under ``profile``."""
        try:
            return self.sizes[profile]
        except KeyError:
            known = ", ".join(self.sizes) or "none"
            raise ValueError(f"experiment {self.id} has no sizes for profile {profile!r} (has {known})") from None


#: Every record that declares sizes, by experiment id, entered as the record is built. Importing any
#: experiment's module imports the registry first (its package's parent), which builds every record,
#: so an asset always finds its own and the ones it reads (:func:`declared_sizes`).
_DECLARED_SIZES: dict[str, Experiment] = {}


def declared_sizes(experiment: str, profile: str) -> Any:
    """The typed sizes experiment ``experiment`` (its id) declares on its record for ``profile``; read
    through ``ExperimentSettings.sizes``, so no asset indexes a sizes table itself."""
    record = _DECLARED_SIZES.get(experiment)
    if record is None:
        known = ", ".join(sorted(_DECLARED_SIZES)) or "none (no experiment record is built yet)"
        raise ValueError(f"no experiment {experiment!r} declares sizes (those that do: {known})")
    return record.sizes_for(profile)


@cache
def _loaded(exp: Experiment) -> tuple[tuple[dg.AssetsDefinition, ...], tuple[dg.AssetChecksDefinition, ...]]:
    """The assets and checks of ``exp``'s modules, loaded once (each load makes new definition objects)."""
    modules = exp.load_modules()
    assets = tuple(a for a in dg.load_assets_from_modules(modules) if isinstance(a, dg.AssetsDefinition))
    return assets, (*dg.load_asset_checks_from_modules(modules), *exp.generated_checks())


def flat_sizes(sizes: Any, prefix: str = "") -> dict[str, Any]:
    """A typed sizes record as flat metadata (``prefix`` + field name; tuples as text)."""
    return {f"{prefix}{f.name}": str(v) if isinstance(v := getattr(sizes, f.name), tuple) else v for f in fields(sizes)}


__all__ = [
    "BaselineTable",
    "ExpectedFusion",
    "Experiment",
    "ReportSection",
    "Reproducers",
    "declared_sizes",
    "flat_sizes",
]
