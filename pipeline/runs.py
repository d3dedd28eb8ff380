"""Run records: what a materialization says about itself, and the event-log queries that find them.

Every stored value's materialization carries ``provenance.*`` metadata (written by
:class:`pipeline.storage.PrecisionIOManager`); values imported from another machine also carry
``bundle.imported_from``. Everything that reads those records (the CLI's resume logic, the report,
its history page, the bundle import and export, the baseline, the planted-bug matrix) reads them
through this module.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

import dagster as dg

#: Prefix of the provenance keys in materialization metadata.
PROVENANCE = "provenance."
#: Metadata key of a materialization imported from a results bundle (its source).
IMPORTED_FROM = "bundle.imported_from"
#: The compiler of a record that names none (every record made before runs named other compilers).
DEFAULT_BACKEND = "inductor"


def plain(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """Metadata with Dagster's value wrappers removed (``MetadataValue.value``), keys unchanged."""
    return {k: getattr(v, "value", v) for k, v in (metadata or {}).items()}


def provenance(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The ``provenance.*`` entries of plain metadata, without the prefix."""
    return {k.removeprefix(PROVENANCE): v for k, v in metadata.items() if k.startswith(PROVENANCE)}


def device_of(metadata: Mapping[str, Any]) -> str:
    """The device label a materialization's metadata names (older records: the hardware name)."""
    return str(metadata.get("provenance.device_label") or metadata.get("provenance.device_name") or "unknown device")


def is_imported(metadata: Mapping[str, Any]) -> bool:
    return IMPORTED_FROM in metadata


def profile_of(metadata: Mapping[str, Any]) -> str | None:
    """The profile a materialization's plain metadata names (None when it names none)."""
    value = metadata.get(PROVENANCE + "profile")
    return None if value is None else str(value)


#: Which records a query takes: made on this machine, imported from a results bundle, or either.
Origin = Literal["local", "imported", "any"]


def matches(
    metadata: Mapping[str, Any], profile: str | None = None, device: str | None = None, origin: Origin = "any"
) -> bool:
    """Whether plain ``metadata`` is a record of ``profile`` on ``device`` (a device label, as
    :func:`device_of` reads it) of ``origin``; ``None`` takes every profile or device."""
    if origin not in ("local", "imported", "any"):
        raise ValueError(f"origin must be 'local', 'imported' or 'any', got {origin!r}")
    if origin != "any" and is_imported(metadata) != (origin == "imported"):
        return False
    if profile is not None and profile_of(metadata) != profile:
        return False
    return device is None or device_of(metadata) == device


def materializations(
    instance: dg.DagsterInstance, key: dg.AssetKey, limit: int = 50
) -> Iterator[tuple[dg.EventLogRecord, dg.AssetMaterialization, dict[str, Any]]]:
    """The newest ``limit`` materializations of ``key``, newest first, each with its plain metadata."""
    result = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=limit, ascending=False)
    for record in result.records:
        mat = record.asset_materialization
        if mat is not None:
            yield record, mat, plain(mat.metadata)


def records(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    profile: str | None = None,
    device: str | None = None,
    origin: Origin = "any",
    limit: int = 50,
) -> Iterator[tuple[dg.EventLogRecord, dg.AssetMaterialization, dict[str, Any]]]:
    """The records of this profile and device: among the newest ``limit`` materializations of ``key``,
    newest first, those :func:`matches` takes, each with its plain metadata."""
    for record, mat, meta in materializations(instance, key, limit):
        if matches(meta, profile, device, origin):
            yield record, mat, meta


def evaluation_in_run(
    instance: dg.DagsterInstance, check_key: dg.AssetCheckKey, run_id: str
) -> dg.AssetCheckEvaluation | None:
    """The check's evaluation from run ``run_id`` (None when it did not run there)."""
    history = instance.event_log_storage.get_asset_check_execution_history(check_key, limit=50)
    for record in history:
        event = record.event
        if record.run_id == run_id and event is not None and event.dagster_event is not None:
            data = event.dagster_event.event_specific_data
            if isinstance(data, dg.AssetCheckEvaluation):  # else planned, never evaluated
                return data
    return None


def run_settings(instance: dg.DagsterInstance, run_id: str, cache: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ``settings`` resource config a run was launched with (``{}`` for none), memoized in ``cache``."""
    if run_id not in cache:
        run = instance.get_run_by_id(run_id) if run_id else None
        config: dict[str, Any] = dict((run.run_config if run is not None else {}) or {})
        cache[run_id] = dict(((config.get("resources") or {}).get("settings") or {}).get("config") or {})
    return cache[run_id]


def _materialization_in_run(instance: dg.DagsterInstance, key: dg.AssetKey, run_id: str) -> dict[str, Any] | None:
    for record, _, meta in materializations(instance, key, limit=50):
        if record.run_id == run_id:
            return meta
    return None


def evaluation_compiler(
    instance: dg.DagsterInstance,
    check_key: dg.AssetCheckKey,
    run_id: str,
    metadata: Mapping[str, Any],
    cache: dict[str, dict[str, Any]] | None = None,
) -> tuple[str, str, str]:
    """(compiler, device label, profile) of one check evaluation: from its own ``provenance.*``
    metadata, else the checked asset's materialization in the same run, else the run's settings;
    the compiler defaults to :data:`DEFAULT_BACKEND`, the others to ``""``."""
    meta = plain(metadata)
    found = {
        k: str(meta[f"provenance.{k}"]) for k in ("backend", "device_label", "profile") if f"provenance.{k}" in meta
    }
    if len(found) < 3 and run_id:
        mat = _materialization_in_run(instance, check_key.asset_key, run_id) or {}
        for k in ("backend", "device_label", "profile"):
            if k not in found and f"provenance.{k}" in mat:
                found[k] = str(mat[f"provenance.{k}"])
    if len(found) < 3 and run_id:
        settings = run_settings(instance, run_id, cache if cache is not None else {})
        for k in ("backend", "device_label", "profile"):
            if k not in found and settings.get(k):
                found[k] = str(settings[k])
    return found.get("backend", DEFAULT_BACKEND), found.get("device_label", ""), found.get("profile", "")
