"""What a resumed ``report`` runs: the assets missing or stale for a profile and its settings,
the checks never evaluated, and the selection ``--only`` names."""

from collections.abc import Sequence
from typing import Any

import dagster as dg

from ..runs import is_imported, records
from ..runs import plain as runs_plain

#: The settings that name the fused path: compared only for assets that depend on it.
FUSED_PATH_SETTINGS = ("backend", "backend_options")


def _stored_for_backend(path: Any, profile: str, backend: str) -> bool:
    """Whether a stored value's path is where ``backend``'s values go now (:func:`compiler_folder`):
    another compiler's value stored before values were kept per compiler sits in Inductor's folder."""
    from ..storage import COMPILERS_FOLDER, compiler_folder

    if path is None:
        return True
    text = str(path).replace("\\", "/")
    folder = compiler_folder(backend)
    if folder:
        return f"/{profile}/{'/'.join(folder)}/" in text
    return f"/{profile}/{COMPILERS_FOLDER}/" not in text


def stored_for_profile(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    profile: str,
    same: dict[str, str] | None = None,
    uses_fused_path: bool = True,
) -> float | None:
    """Timestamp of the latest materialization of ``key`` for ``profile`` whose stored file still
    exists, or None; None as well when that materialization's provenance differs from ``same``
    (device, backend, options: the stored value was computed under other settings).

    An asset that depends on the fused path (``uses_fused_path``) is stored per compiler: only the
    records of ``same``'s backend, stored in that backend's folder, are its records (another
    compiler's are passed over, not stale). One that does not is stored once for every compiler: its
    backend and options are not compared."""
    from ..storage import stored_exists

    same = dict(same or {})
    backend = same.get("backend")
    if not uses_fused_path:
        same = {k: v for k, v in same.items() if k not in FUSED_PATH_SETTINGS}
    # this profile's records made here (another machine's, imported from a bundle, do not count)
    for record, _, meta in records(instance, key, profile, origin="local", limit=50):
        path = meta.get("path")
        other_compiler = str(meta.get("provenance.backend", backend)) != backend or not _stored_for_backend(
            path, profile, str(backend)
        )
        if uses_fused_path and backend is not None and other_compiler:
            continue  # another compiler's value, in its own folder
        if path is not None and not stored_exists(str(path)):
            return None
        if any(str(meta.get(f"provenance.{k}", v)) != v for k, v in same.items()):
            return None
        return record.timestamp
    return None


def latest_local_record(instance: dg.DagsterInstance, check_key: dg.AssetCheckKey) -> Any:
    """The check's newest execution record made here: evaluations imported from a results bundle
    (another machine's) are skipped; None when there is none."""
    for record in instance.event_log_storage.get_asset_check_execution_history(check_key, limit=50):
        event = record.event.dagster_event if record.event is not None else None
        data = event.event_specific_data if event is not None else None
        if isinstance(data, dg.AssetCheckEvaluation) and is_imported(runs_plain(data.metadata)):
            continue
        return record
    return None


def _local_evaluation(instance: dg.DagsterInstance, check_key: dg.AssetCheckKey) -> dg.AssetCheckEvaluation | None:
    """The check's latest local result; None when there is none or the latest record is only
    "planned" by a run that stopped before the check ran."""
    latest = latest_local_record(instance, check_key)
    event = latest.event.dagster_event if latest is not None and latest.event is not None else None
    data = event.event_specific_data if event is not None else None
    return data if isinstance(data, dg.AssetCheckEvaluation) else None


def _local_evaluation_for(
    instance: dg.DagsterInstance, check_key: dg.AssetCheckKey, backend: str | None
) -> dg.AssetCheckEvaluation | None:
    """The check's latest local result for ``backend``'s compiler (:func:`_local_evaluation` when None)."""
    if backend is None:
        return _local_evaluation(instance, check_key)
    from ..runs import evaluation_compiler

    for record in instance.event_log_storage.get_asset_check_execution_history(check_key, limit=50):
        event = record.event.dagster_event if record.event is not None else None
        data = event.event_specific_data if event is not None else None
        if not isinstance(data, dg.AssetCheckEvaluation) or is_imported(runs_plain(data.metadata)):
            continue
        if evaluation_compiler(instance, check_key, record.run_id, data.metadata)[0] == backend:
            return data
    return None


def _evaluated_for(instance: dg.DagsterInstance, check_key: dg.AssetCheckKey, backend: str | None) -> bool:
    """Whether the check has a local result for ``backend``'s compiler (any result when None)."""
    return _local_evaluation_for(instance, check_key, backend) is not None


def latest_evaluations(
    defs: dg.Definitions, instance: dg.DagsterInstance, backend: str | None = None
) -> list[dg.AssetCheckEvaluation]:
    """Every check's latest local result (checks never evaluated are left out: not yet run); with ``backend``,
    of that compiler where the checked asset depends on the fused path, so that a run of one compiler is never
    summed up with another's results (a run with ``--only`` leaves the other experiments' latest to whichever
    compiler ran them last)."""
    from ..storage import uses_fused_path

    graph = defs.resolve_asset_graph()
    found = (
        _local_evaluation_for(instance, c, backend if uses_fused_path(graph.get(c.asset_key).tags) else None)
        for c in graph.asset_check_keys
    )
    return [e for e in found if e is not None]


def assets_to_run(
    defs: dg.Definitions, instance: dg.DagsterInstance, profile: str, same: dict[str, str] | None = None
) -> tuple[list[dg.AssetKey], list[dg.AssetCheckKey]]:
    """What a resumed run does. Assets: those missing for ``profile`` (never materialized, stored
    file gone, or computed under other ``same`` settings), those older than an upstream asset,
    everything downstream of those, and the report. Checks: every check of those assets, and the
    checks of stored assets that never produced a result (e.g. a run stopped before them); those
    run against the stored values without materializing their asset again."""
    from ..storage import uses_fused_path

    graph = defs.resolve_asset_graph()
    keys = [k for k in graph.get_all_asset_keys() if graph.get(k).is_materializable]
    per_compiler = {k: uses_fused_path(graph.get(k).tags) for k in keys}
    stamps = {k: stored_for_profile(instance, k, profile, same, per_compiler[k]) for k in keys}
    stored = {k: t for k, t in stamps.items() if t is not None}
    todo = {k for k in keys if k not in stored}
    for key in keys:
        node = graph.get(key)
        if key not in todo and any(p in stored and stored[p] > stored[key] for p in node.parent_keys):
            todo.add(key)
    frontier = list(todo)
    while frontier:
        for child in graph.get(frontier.pop()).child_keys:
            if child not in todo:
                todo.add(child)
                frontier.append(child)
    todo |= {k for k in keys if graph.get(k).group_name == "report"}
    # A multi-asset that cannot be subset runs whole: take its other outputs along.
    todo = set(dg.AssetSelection.assets(*todo).required_multi_asset_neighbors().resolve(graph))
    backend = (same or {}).get("backend")
    checks = {
        c
        for c in graph.asset_check_keys
        if c.asset_key in todo
        or not _evaluated_for(instance, c, backend if per_compiler.get(c.asset_key, True) else None)
    }
    return (
        sorted(todo, key=lambda k: k.to_user_string()),
        sorted(checks, key=lambda c: (c.asset_key.to_user_string(), c.name)),
    )


def selection_for(defs: dg.Definitions, only: Sequence[str]) -> tuple[set[dg.AssetKey], set[dg.AssetCheckKey]]:
    """The assets of the experiments ``only`` names, everything upstream of them and the report;
    the checks of those assets."""
    from ..experiments import experiment

    graph = defs.resolve_asset_graph()
    keys = {k for i in only for a in experiment(i).assets() for k in a.keys}
    chosen = set(dg.AssetSelection.assets(*keys).upstream().resolve(graph)) | {dg.AssetKey("report_site")}
    chosen = set(dg.AssetSelection.assets(*chosen).required_multi_asset_neighbors().resolve(graph))
    return chosen, {c for c in graph.asset_check_keys if c.asset_key in chosen}
