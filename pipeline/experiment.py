"""What an experiment is, as a record: everything the code location, the report, the baseline and the
tests need to know about one experiment, declared in the experiment's own folder.

An experiment lives in ``pipeline/experiments/<name>/``: ``spec.py`` (its id, group and typed sizes per
profile), asset modules, ``report.py`` (its page sections, built from stored values only) and
``__init__.py``, which builds the :class:`Experiment` record. The registry
(``pipeline/experiments/__init__.py``) lists the records; nothing else keeps a list of experiments.

This module imports no experiment and nothing of the report, so both may import it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from types import ModuleType
from typing import Any, Literal

import dagster as dg

from .fusion_checks import ExpectedFusion
from .verdicts import NOT_APPLICABLE_KEY, VALIDITY

#: A page section of the report: markdown built from the stored values the report holds. Called with
#: the report (``pipeline.pagekit.render.Report``, not imported here: the report imports this module)
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
    #: its checks as "not applicable to <compiler>: <why>" (:func:`not_applicable`),
    #: as it does for a claim the adapter itself declares not applicable.
    needs_inductor: str = ""
    #: Imports and returns the module holding its cost (its ``cost.py``; only when a plan is made, so reading
    #: the registry imports no cost code): ``costs(profile, device_type)`` gives its rows of a run's estimate
    #: (:class:`pipeline.costmodel.Cost`, its id on each), ``SELF_TEST = True`` where a run leaves them out
    #: unless asked. None: it declares no cost, and the plan's estimate says so in a row of its own.
    cost: Callable[[], ModuleType] | None = None
    #: The names of its parts a run can be narrowed to (``report --select <id>:<name>,...``, $FUSION_SELECT):
    #: imports and returns them (B's chains, D's subgraphs); None: it runs whole, always.
    parts: Callable[[], Sequence[str]] | None = None
    #: Its planted bugs (with ``matrix="judged"``): the planted-bug backends (``instruments/regression``) its
    #: claims are built to catch, each to the ``asset:check`` prefix of the claim that must catch it at ERROR.
    #: The matrix scores each bug against the claim of the experiment that declares it, and re-runs that
    #: experiment alone for it where a profile asks (``designed_only``).
    planted: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _RECORDS[self.id] = self
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
#: Every record built, by experiment id (the registry builds them all before any asset module loads).
_RECORDS: dict[str, Experiment] = {}


def record_of(experiment: str) -> Experiment:
    """The record of experiment ``experiment`` (its id), as the registry built it."""
    try:
        return _RECORDS[experiment]
    except KeyError:
        raise ValueError(f"no experiment {experiment!r} (records: {', '.join(_RECORDS) or 'none built yet'})") from None


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


#: The environment variable that narrows experiments to some of their parts (``report --select``): entries
#: ``<experiment id>:<name>,<name>`` separated by spaces, e.g. ``B:softmax D:transpose_concat``.
SELECT_ENV = "FUSION_SELECT"


def parse_selection(text: str) -> dict[str, tuple[str, ...]]:
    """``"B:softmax D:transpose_concat,scaled_add_concat"`` as experiment id -> the names selected.

    >>> parse_selection("B:softmax D:transpose_concat,scaled_add_concat")
    {'B': ('softmax',), 'D': ('transpose_concat', 'scaled_add_concat')}
    """
    out: dict[str, tuple[str, ...]] = {}
    for entry in text.split():
        exp_id, _, names = entry.partition(":")
        out[exp_id] = (*out.get(exp_id, ()), *(n for n in names.split(",") if n))
    return out


def selected_parts(experiment: str) -> tuple[str, ...] | None:
    """The parts of experiment ``experiment`` this run is narrowed to (:data:`SELECT_ENV`), None: all of them.
    An experiment whose claims rest on parts left out says so (its claims on them are inconclusive)."""
    import os

    return parse_selection(os.environ.get(SELECT_ENV, "")).get(experiment)


def selection_provenance(experiment: str) -> dict[str, str]:
    """The selection a value of ``experiment`` was made under, as the metadata that makes it stale for a run
    under another (``provenance.select.<id>``: the names, "" for every part)."""
    return {f"provenance.select.{experiment}": ",".join(selected_parts(experiment) or ())}


def not_applicable(exp: Experiment, backend: str) -> str | None:
    """Why ``exp`` does not apply to the compiler of ``backend``, as the outcome is stored ("not
    applicable to OpenVINO: <why>"), or None when it applies. Inductor, and every backend that
    compiles through Inductor's adapter (``aot_eager``, the planted-bug backends), takes every
    experiment; another adapter takes all but those it declares not applicable and those that need
    Inductor."""
    from .intents import adapter_or_none

    adapter = adapter_or_none(backend)
    if adapter is None or adapter.name == "inductor":
        return None
    why = dict(adapter.not_applicable).get(exp.id) or exp.needs_inductor
    if not why:
        return None
    return f"not applicable to {adapter.title or adapter.name}: {why}"


def record_not_applicable(
    instance: dg.DagsterInstance,
    experiments: Iterable[Experiment],
    reasons: Mapping[str, str],
    provenance: Mapping[str, Any],
) -> list[dg.AssetCheckKey]:
    """Store, for every check of each experiment in ``reasons``, one evaluation that says its experiment
    does not apply (:func:`pipeline.verdicts.not_applicable_result`'s form: not passed, WARN, the reason
    under ``not_applicable``), with ``provenance`` as ``provenance.*`` metadata (the run's compiler and
    device). Returns the checks recorded."""
    recorded = []
    for exp in experiments:
        reason = reasons.get(exp.id)
        if reason is None:
            continue
        for checks_def in exp.checks():
            for key in checks_def.check_keys:
                spec = checks_def.get_spec_for_check_key(key)
                outcome = (spec.metadata or {}).get("outcome", VALIDITY)
                meta = {
                    "outcome": str(getattr(outcome, "value", outcome)),
                    NOT_APPLICABLE_KEY: reason,
                    **{f"provenance.{k}": v for k, v in provenance.items() if isinstance(v, str | int | float | bool)},
                }
                instance.report_runless_asset_event(
                    dg.AssetCheckEvaluation(
                        asset_key=key.asset_key,
                        check_name=key.name,
                        passed=False,
                        severity=dg.AssetCheckSeverity.WARN,
                        metadata=meta,
                    )
                )
                recorded.append(key)
    return recorded


def runs_where_applicable(experiment: str) -> Callable[[Callable[..., Iterator[Any]]], Callable[..., Iterator[Any]]]:
    """Guard an asset function of experiment ``experiment`` (its id) where it runs: in a run whose compiler the
    experiment does not apply to (:func:`not_applicable`: the adapter declares it, or the
    experiment needs Inductor and the compiler is another), the function is not called; each of the
    experiment's checks is stored as "not applicable to <compiler>: <why>" and nothing is materialized, so
    its checks do not run. The CLI leaves such assets out of a run before it starts; this guard holds for any
    other run (the Dagster UI, a schedule, a test's ``materialize``). The function must be a generator taking
    ``(context, settings, ...)`` whose outputs are not required (``AssetOut(is_required=False)``)."""

    def guard(fn: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        @functools.wraps(fn)
        def body(context: Any, settings: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            exp = record_of(experiment)
            why = not_applicable(exp, settings.backend)
            if why is None:
                yield from fn(context, settings, *args, **kwargs)
                return
            record_not_applicable(context.instance, [exp], {exp.id: why}, settings.provenance())
            context.log.info(f"{exp.id}: {why}; nothing is materialized and its checks are stored as not applicable")

        return body

    return guard


def flat_sizes(sizes: Any, prefix: str = "") -> dict[str, Any]:
    """A typed sizes record as flat metadata (``prefix`` + field name; tuples as text)."""
    return {f"{prefix}{f.name}": str(v) if isinstance(v := getattr(sizes, f.name), tuple) else v for f in fields(sizes)}


__all__ = [
    "SELECT_ENV",
    "BaselineTable",
    "ExpectedFusion",
    "Experiment",
    "ReportSection",
    "Reproducers",
    "declared_sizes",
    "flat_sizes",
    "not_applicable",
    "parse_selection",
    "record_not_applicable",
    "record_of",
    "runs_where_applicable",
    "selected_parts",
    "selection_provenance",
]
