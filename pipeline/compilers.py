"""Compilers side by side: which experiments apply to a run's compiler, the outcome stored for those that
do not, and every check's latest evaluation per (compiler, device), for the site's columns of compilers.

A run names its compiler by the settings' ``backend``: an adapter's name (``inductor``, ``openvino``,
``iree``, a user's adapter) or a plain ``torch.compile`` backend (``aot_eager``, a planted-bug backend),
which compiles through Inductor's adapter. An experiment does not apply to a compiler when the compiler's
adapter says so (``BackendAdapter.not_applicable``, by experiment id) or when the experiment needs
Inductor (``Experiment.needs_inductor``) and the compiler is another one. Its assets are then not run, and
each of its checks is stored as one evaluation that says "not applicable to <compiler>: <why>"
(:func:`record_not_applicable`); :func:`pipeline.verdicts.summarize` reads those as the experiment's
outcome.

What experiments ask of a compiler (its intents, why it declined a fused path) is :mod:`pipeline.intents`,
a module the experiments may import; whether an experiment applies, and storing that it does not, is
:mod:`pipeline.experiment`'s (the guard where its assets run uses it). Both are re-exported here.

Local check evaluations carry no provenance of their own: the compiler and device of one are read from
its metadata where it has them (the not-applicable records, imported bundles), else from the
materialization of the checked asset in the same run, else from the run's settings
(:func:`pipeline.runs.evaluation_compiler`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import dagster as dg

from .experiment import Experiment, not_applicable, record_not_applicable
from .intents import (
    adapter_of,
    compiler_title,
    declined,
    intent_options,
    intent_variants,
    options_text,
    whole_graph_options,
)
from .runs import DEFAULT_BACKEND, evaluation_compiler, is_imported, plain, run_settings
from .verdicts import ExperimentOutcome, check_outcome, summarize

__all__ = [
    "adapter_of",
    "compiler_title",
    "declined",
    "intent_options",
    "intent_variants",
    "not_applicable",
    "not_applicable_assets",
    "not_applicable_experiments",
    "options_text",
    "record_not_applicable",
    "whole_graph_options",
]


def not_applicable_experiments(backend: str, experiments: Iterable[Experiment] | None = None) -> dict[str, str]:
    """Experiment id -> why it does not apply to ``backend``'s compiler, for every registered experiment
    (or those given) that does not."""
    if experiments is None:
        from .experiments import EXPERIMENTS

        experiments = EXPERIMENTS
    return {e.id: why for e in experiments if (why := not_applicable(e, backend)) is not None}


def not_applicable_assets(backend: str, experiments: Iterable[Experiment] | None = None) -> set[dg.AssetKey]:
    """The asset keys of the experiments that do not apply to ``backend``'s compiler (a run leaves them out)."""
    if experiments is None:
        from .experiments import EXPERIMENTS

        experiments = EXPERIMENTS
    skipped = not_applicable_experiments(backend, experiments)
    return {k for e in experiments if e.id in skipped for a in e.assets() for k in a.keys}


# --- evaluations per (compiler, device) ------------------------------------------------------------


@dataclass(frozen=True)
class CompilerEvaluation:
    """One check's latest evaluation for one (compiler, device)."""

    check_key: dg.AssetCheckKey
    backend: str
    device: str  # device label ("" when the record names none)
    profile: str
    timestamp: float
    evaluation: dg.AssetCheckEvaluation


def latest_evaluations_by_compiler(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    profile: str | None = None,
    include_imported: bool = False,
    limit: int = 100,
) -> dict[tuple[str, str], list[CompilerEvaluation]]:
    """(compiler, device) -> every check's latest evaluation for that compiler on that device, among each
    check's newest ``limit`` evaluations; only ``profile``'s where given, only those made here unless
    ``include_imported``. Records of a run stopped before its check ran (planned, no result) are passed
    over. For the site's table of compilers side by side (:func:`outcomes_by_compiler` summarizes it)."""
    cache: dict[str, dict[str, Any]] = {}
    out: dict[tuple[str, str], list[CompilerEvaluation]] = {}
    for check_key in defs.resolve_asset_graph().asset_check_keys:
        seen: set[tuple[str, str]] = set()
        for record in instance.event_log_storage.get_asset_check_execution_history(check_key, limit=limit):
            event = record.event.dagster_event if record.event is not None else None
            data = event.event_specific_data if event is not None else None
            if not isinstance(data, dg.AssetCheckEvaluation):
                continue
            if is_imported(plain(data.metadata)) and not include_imported:
                continue
            backend, device, rec_profile = evaluation_compiler(instance, check_key, record.run_id, data.metadata, cache)
            if profile is not None and rec_profile and rec_profile != profile:
                continue
            if (backend, device) in seen:
                continue
            seen.add((backend, device))
            stamp = record.event.timestamp if record.event is not None else 0.0
            out.setdefault((backend, device), []).append(
                CompilerEvaluation(check_key, backend, device, rec_profile, stamp, data)
            )
    return out


def outcomes_by_compiler(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    profile: str | None = None,
    include_imported: bool = False,
) -> dict[tuple[str, str], dict[str, ExperimentOutcome]]:
    """(compiler, device) -> experiment id -> its outcome (run validity, verdict, findings) from that
    compiler's latest evaluations on that device and its failed steps (:func:`failed_steps_by_compiler`;
    such an experiment is ``invalid``, ``step failed: <step>`` among its invalid checks): a not-applicable
    experiment reads validity ``not applicable`` and its reason as verdict. Experiments with neither an
    evaluation nor a failed step there are left out. Failed steps name no device: they count for every
    device of their compiler (device ``""`` when the compiler has no evaluation at all). A check of a value
    stored once for every compiler (it depends on no fused path: S's pools, the planted-bug matrix) counts
    for every compiler on its device with its newest evaluation, whichever compiler's run made it, as the
    site reads it."""
    from .experiments import EXPERIMENTS
    from .storage import uses_fused_path

    graph = defs.resolve_asset_graph()
    group_of = {e.group: e.id for e in EXPERIMENTS}
    out: dict[tuple[str, str], dict[str, ExperimentOutcome]] = {}
    failed = failed_steps_by_compiler(instance, profile)
    evaluated = latest_evaluations_by_compiler(defs, instance, profile, include_imported)
    shared: dict[tuple[str, dg.AssetCheckKey], CompilerEvaluation] = {}
    for (_, device), evaluations in evaluated.items():
        for item in evaluations:
            if uses_fused_path(getattr(graph.get(item.check_key.asset_key), "tags", None)):
                continue
            newest = shared.get((device, item.check_key))
            if newest is None or item.timestamp > newest.timestamp:
                shared[(device, item.check_key)] = item
    for (backend, device), evaluations in evaluated.items():
        own = [i for i in evaluations if (device, i.check_key) not in shared]
        evaluated[(backend, device)] = own + [i for (d, _), i in shared.items() if d == device]
    for backend in failed:
        if not any(b == backend for b, _ in evaluated):
            evaluated[(backend, "")] = []
    for where, evaluations in evaluated.items():
        by_exp: dict[str, list[Any]] = {}
        for item in evaluations:
            e = item.evaluation
            spec = graph.get_check_spec(item.check_key)
            outcome = check_outcome(
                f"{e.asset_key.to_user_string()}:{e.check_name}",
                e.passed,
                e.severity,
                e.metadata,
                (spec.metadata or {}).get("outcome"),
            )
            exp_id = group_of.get(graph.get(item.check_key.asset_key).group_name or "")
            if exp_id is not None:
                by_exp.setdefault(exp_id, []).append(outcome)
        steps = {i: [step] for i, (step, _) in failed.get(where[0], {}).items()}
        out[where] = {i: summarize(by_exp.get(i, []), steps.get(i, ()), not_applicable=True) for i in {*by_exp, *steps}}
    return out


def failed_steps_by_compiler(
    instance: dg.DagsterInstance, profile: str | None = None, limit: int = 50
) -> dict[str, dict[str, tuple[str, str]]]:
    """Compiler -> experiment id -> (step, reason) of the experiments whose step failed the last time a run
    of that compiler (and ``profile``, where given) ran one of their steps, among the newest ``limit``
    runs: a compiler that raised while compiling, sent the graph back to eager (``FusionError``) or
    crashed its worker leaves no check evaluation, only the failed step. An experiment whose latest
    step succeeded is not listed. The compiler of a run is its settings' backend (Inductor when the run
    names none)."""
    from dagster._core.events import DagsterEventType

    from .run_summary import root_cause, step_owners

    owners = step_owners()
    seen: set[tuple[str, str]] = set()
    out: dict[str, dict[str, tuple[str, str]]] = {}
    cache: dict[str, dict[str, Any]] = {}
    for run in instance.get_runs(limit=limit):  # newest first
        settings = run_settings(instance, run.run_id, cache)
        if profile is not None and settings.get("profile", profile) != profile:
            continue
        backend = str(settings.get("backend") or DEFAULT_BACKEND)
        touched: set[str] = set()
        failures: dict[str, tuple[str, str]] = {}  # within a run, any failed step of an experiment wins
        for record in instance.all_logs(
            run.run_id, of_type={DagsterEventType.STEP_FAILURE, DagsterEventType.STEP_SUCCESS}
        ):
            event = record.dagster_event
            step = event.step_key if event is not None else None
            exp_id = owners.get(step or "")
            if event is None or step is None or exp_id is None:
                continue
            touched.add(exp_id)
            data = event.step_failure_data if event.is_step_failure else None
            if data is not None and data.error is not None and exp_id not in failures:
                cause = root_cause(data.error)
                failures[exp_id] = (step, f"step {step}: {cause.error}: {cause.message}")
        for exp_id in touched - {e for b, e in seen if b == backend}:
            seen.add((backend, exp_id))
            if exp_id in failures:
                out.setdefault(backend, {})[exp_id] = failures[exp_id]
    return out
