"""Portable results bundles: a run on another machine (a GPU box, a cluster node) brought home.

``export_bundle`` writes one folder::

    bundle.json          schema version, provenance (device, driver/CUDA, torch, backend), the
                         versions of the exporting software, every materialization and check
                         evaluation of the profile with its metadata, and every file's sha256
    data/<asset>.<ext>   the stored tables and JSON records (tensors too, up to a size cap)

``import_bundle`` checks a bundle (schema, provenance, versions, every file present with its
hash) before it touches anything, copies the files under ``<data>/devices/<device>/<profile>/``
(so nothing stored locally is overwritten) and records each materialization and check
evaluation in the local Dagster instance as a runless event carrying the original metadata.
A bundle that fails a check is refused whole; a failed copy leaves no partial folder.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from .files import file_sha256
from .runs import (
    IMPORTED_FROM,
    device_of,
    evaluation_in_run,
    matches,
    profile_of,
    provenance,
    records,
)

SCHEMA_VERSION = 1
MANIFEST = "bundle.json"
#: Optional annotation next to a bundle's manifest, written by a person after the run: what did not
#: run there and why, and recorded provenance known to be wrong (see :func:`read_notes`). It is not
#: part of the manifest's hashed files, is copied in with an import and shown on the devices page.
NOTES = "NOTES.json"
#: The fields a notes file may hold, each with its JSON type.
NOTES_FIELDS: dict[str, type] = {
    "title": str,
    "summary": str,
    "did_not_finish": dict,
    "verdict_notes": dict,
    "provenance_corrections": dict,
}
#: Tensor files (input pools, references, raw outputs) above this size stay out of a bundle by default.
DEFAULT_MAX_TENSOR_BYTES = 8 << 20
#: Provenance every bundle must carry.
REQUIRED_PROVENANCE = ("profile", "device", "device_name", "device_label", "backend", "torch_version")
_EXTENSIONS = (".parquet", ".json", ".safetensors")


class BundleError(ValueError):
    """A bundle that is malformed, partial, tampered with or for another schema."""


def device_slug(label: str) -> str:
    """A folder name for a device label (``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``)."""
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    if not slug:
        raise BundleError(f"device label {label!r} has no letters or digits to name a folder by")
    return slug


# --- metadata, portable both ways --------------------------------------------------------------


def _portable(value: Any) -> dict[str, Any]:
    """A Dagster metadata value as ``{"type", "value"}`` JSON."""
    if isinstance(value, dg.MarkdownMetadataValue):
        return {"type": "md", "value": value.value}
    if isinstance(value, dg.PathMetadataValue):
        return {"type": "path", "value": str(value.value)}
    if isinstance(value, dg.JsonMetadataValue):
        return {"type": "json", "value": value.value}
    inner = getattr(value, "value", value)
    if inner is None or isinstance(inner, (bool, int, float, str)):
        return {"type": "value", "value": inner}
    return {"type": "text", "value": str(inner)}


def _restore(entry: dict[str, Any]) -> Any:
    kind, value = entry.get("type"), entry.get("value")
    if kind == "md":
        return dg.MetadataValue.md(str(value))
    if kind == "path":
        return dg.MetadataValue.path(str(value))
    if kind == "json":
        if not isinstance(value, (dict, list)):
            raise BundleError(f"json metadata entry holds {type(value).__name__}, not an object or a list")
        return dg.MetadataValue.json(value)
    if kind == "value":
        return dg.MetadataValue.null() if value is None else value
    if kind == "text":
        return str(value)
    raise BundleError(f"metadata entry of unknown type {kind!r}")


# --- export --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportResult:
    folder: Path
    assets: int
    checks: int
    files: int
    left_out: dict[str, str]


def _versions() -> dict[str, str]:
    import torch

    from .source import package_version

    project = package_version()
    return {
        "schema": str(SCHEMA_VERSION),
        "fusion_precision": project,
        "dagster": dg.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def _stored_file(stem: Path) -> Path | None:
    return next((stem.with_suffix(e) for e in _EXTENSIONS if stem.with_suffix(e).exists()), None)


def export_bundle(
    instance: dg.DagsterInstance,
    asset_graph: Any,
    data_dir: Path | str,
    profile: str,
    out: Path | str,
    *,
    include_tensors: bool = True,
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES,
) -> ExportResult:
    """Write the bundle of ``profile`` from ``instance`` and ``<data_dir>/<profile>`` to ``out``.

    Each asset's latest materialization with this profile is exported with its stored file and
    the evaluations of its checks from the same run. Tensor files larger than ``max_tensor_bytes``
    (or every tensor file, without ``include_tensors``) are listed as left out, not copied. The
    folder appears complete or not at all."""
    out = Path(out)
    if out.exists():
        raise BundleError(f"{out} already exists: choose a new folder for the bundle")
    source = Path(data_dir) / profile
    assets: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    files: dict[str, dict[str, Any]] = {}
    left_out: dict[str, str] = {}
    provenance: dict[str, Any] | None = None
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for key in sorted(asset_graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
            latest = _latest_for_profile(instance, key, profile, local_only=True)
            if latest is None:
                continue
            event, mat = latest
            meta = {k: _portable(v) for k, v in mat.metadata.items()}
            provenance = _same_device(provenance, key, {k: e["value"] for k, e in meta.items()}, profile)
            name = key.to_user_string()
            record: dict[str, Any] = {
                "asset": name,
                "timestamp": event.timestamp,
                "run_id": event.run_id,
                "metadata": meta,
                "file": None,
            }
            stored = _stored_file(source / Path(*key.path))
            if stored is not None:
                reason = _left_out_reason(stored, include_tensors, max_tensor_bytes)
                if reason is not None:
                    left_out[name] = reason
                else:
                    rel = Path("data", *key.path).with_suffix(stored.suffix).as_posix()
                    files[rel] = _copy_file(stored, staging / rel, name)
                    record["file"] = rel
            assets.append(record)
            checks += _check_records(instance, asset_graph, key, event.run_id)
        if not assets:
            raise BundleError(f"nothing to export: no materialization with profile {profile!r} in this instance")
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "profile": profile,
            "provenance": provenance,
            "versions": _versions(),
            "assets": assets,
            "checks": checks,
            "files": files,
            "left_out": left_out,
            "include_tensors": include_tensors,
            "max_tensor_bytes": max_tensor_bytes,
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True, default=str))
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ExportResult(out, len(assets), len(checks), len(files), left_out)


def _same_device(
    first: dict[str, Any] | None, key: dg.AssetKey, metadata: dict[str, Any], profile: str
) -> dict[str, Any]:
    """The bundle's provenance: that of its first asset (``first`` None), which every later
    asset's ``metadata`` must share the device of; raises :class:`BundleError` naming both devices."""
    if first is None:
        return provenance(metadata)
    if device_of(metadata) != first.get("device_label"):
        raise BundleError(
            f"{key.to_user_string()} was last materialized on {device_of(metadata)!r}, other "
            f"assets of profile {profile!r} on {first.get('device_label')!r}: a bundle holds "
            "one device's results; re-materialize the profile on one device"
        )
    return first


def _left_out_reason(stored: Path, include_tensors: bool, max_tensor_bytes: int) -> str | None:
    """Why a stored file stays out of the bundle (a tensor file without tensors, or over the cap), or None."""
    size = stored.stat().st_size
    if stored.suffix == ".safetensors" and (not include_tensors or size > max_tensor_bytes):
        return f"{size} bytes of tensors (cap {max_tensor_bytes if include_tensors else 0})"
    return None


def _copy_file(stored: Path, target: Path, asset: str) -> dict[str, Any]:
    """Copy ``stored`` to ``target``; its manifest entry (sha256 of the copy, size, asset)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(stored, target)
    return {"sha256": file_sha256(target), "bytes": stored.stat().st_size, "asset": asset}


def _check_records(
    instance: dg.DagsterInstance, asset_graph: Any, key: dg.AssetKey, run_id: str
) -> list[dict[str, Any]]:
    """The manifest records of the evaluations of ``key``'s checks made in run ``run_id``."""
    out = []
    for check_key in asset_graph.asset_check_keys:
        if check_key.asset_key != key:
            continue
        evaluation = evaluation_in_run(instance, check_key, run_id)
        if evaluation is not None:
            out.append(
                {
                    "asset": key.to_user_string(),
                    "name": check_key.name,
                    "passed": bool(evaluation.passed),
                    "severity": evaluation.severity.value,
                    "metadata": {k: _portable(v) for k, v in evaluation.metadata.items()},
                }
            )
    return out


def _latest_for_profile(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    profile: str,
    device: str | None = None,
    limit: int = 50,
    local_only: bool = False,
) -> tuple[dg.EventLogEntry, dg.AssetMaterialization] | None:
    """The latest materialization event of ``key`` made with ``profile`` (and ``device``, if
    given; only those made here, not imported, with ``local_only``), with its materialization."""
    for record, mat, _ in records(instance, key, profile, device, "local" if local_only else "any", limit):
        return record.event_log_entry, mat
    return None


def imported_results(instance: dg.DagsterInstance, asset_graph: Any, limit: int = 100) -> list[tuple[str, str]]:
    """(device label, profile) of every imported bundle in ``instance``, sorted."""
    found: set[tuple[str, str]] = set()
    for key in asset_graph.get_all_asset_keys():
        for _, _, meta in records(instance, key, origin="imported", limit=limit):
            profile = profile_of(meta)
            if profile:
                found.add((device_of(meta), profile))
    return sorted(found)


# --- import --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportResult:
    device: str
    profile: str
    folder: Path
    assets: int
    checks: int
    #: One line each: what the import accepted but a reader should know (e.g. an unknown commit).
    warnings: tuple[str, ...] = ()


def commit_warning(manifest: dict[str, Any]) -> str | None:
    """One line when the bundle's recorded source commit is not a commit of this repository (a
    copy of the source inside another repository records that one's commit), else None."""
    from .source import commit_known

    commit = str(manifest.get("provenance", {}).get("git_commit") or "")
    if commit_known(commit) is not False:
        return None
    return (
        f"the bundle's provenance names commit {commit[:12]}, which this repository does not hold: "
        "its results may come from other source than that commit"
    )


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; raises :class:`BundleError` on invalid JSON or another JSON type."""
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise BundleError(f"{path} must hold a JSON object")
    return value


def read_manifest(bundle: Path | str) -> dict[str, Any]:
    """The bundle's manifest after every check an import makes; raises :class:`BundleError`."""
    bundle = Path(bundle)
    path = bundle / MANIFEST
    if not path.is_file():
        raise BundleError(f"{bundle} is not a results bundle: {MANIFEST} is missing")
    manifest = _json_object(path)
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BundleError(f"bundle schema version {version!r} is not supported (this checkout reads {SCHEMA_VERSION})")
    missing = [k for k in ("profile", "provenance", "versions", "assets", "checks", "files") if k not in manifest]
    if missing:
        raise BundleError(f"{path} lacks {', '.join(missing)}")
    from .profiles import PROFILES

    if manifest["profile"] not in PROFILES:
        raise BundleError(
            f"bundle profile {manifest['profile']!r} is unknown here (expected one of {', '.join(PROFILES)})"
        )
    prov = manifest["provenance"]
    if not isinstance(prov, dict):
        raise BundleError("bundle provenance must be an object")
    absent = [k for k in REQUIRED_PROVENANCE if not prov.get(k)]
    if absent:
        raise BundleError(f"bundle provenance lacks {', '.join(absent)}: cannot say where its results come from")
    if prov["profile"] != manifest["profile"]:
        raise BundleError(
            f"bundle provenance says profile {prov['profile']!r} but the bundle is for {manifest['profile']!r}"
        )
    versions = manifest["versions"]
    if (
        not isinstance(versions, dict)
        or str(versions.get("schema")) != str(SCHEMA_VERSION)
        or not versions.get("torch")
    ):
        raise BundleError(f"bundle versions {versions!r} must name the schema ({SCHEMA_VERSION}) and torch")
    if versions["torch"] != prov["torch_version"]:
        raise BundleError(f"bundle versions name torch {versions['torch']} but its provenance {prov['torch_version']}")
    label = prov["device_label"]
    for record in manifest["assets"]:
        meta = {k: e.get("value") for k, e in record.get("metadata", {}).items()}
        if not matches(meta, manifest["profile"], label):
            raise BundleError(
                f"asset {record.get('asset')!r} was materialized with profile "
                f"{profile_of(meta)!r} on {device_of(meta)!r}, not the bundle's "
                f"{manifest['profile']!r} on {label!r}"
            )
    root = bundle.resolve()
    for rel, info in manifest["files"].items():
        target = (bundle / rel).resolve()
        if not target.is_relative_to(root / "data"):
            raise BundleError(f"bundle file {rel!r} lies outside the bundle's data folder")
        if not target.is_file():
            raise BundleError(f"bundle is partial: {rel} is missing")
        if target.stat().st_size != info.get("bytes") or file_sha256(target) != info.get("sha256"):
            raise BundleError(f"bundle file {rel} does not match its recorded sha256/size: altered or truncated")
    named = {r["file"] for r in manifest["assets"] if r.get("file")}
    if named - set(manifest["files"]):
        raise BundleError(f"assets name files the bundle does not list: {sorted(named - set(manifest['files']))}")
    exported = {r["asset"] for r in manifest["assets"]}
    orphans = sorted({c["asset"] for c in manifest["checks"]} - exported)
    if orphans:
        raise BundleError(f"check evaluations for assets the bundle lacks: {orphans}")
    return manifest


def read_notes(folder: Path | str) -> dict[str, Any]:
    """The notes file (:data:`NOTES`) of a bundle or an imported device folder ({} when there is none).

    Fields, all optional: ``title`` and ``summary`` (text); ``did_not_finish``, experiment id -> why
    it has no result from that machine; ``verdict_notes``, experiment id -> what a reader must know
    about a stored verdict (one later code judges differently, say: stored judgments are not
    re-judged); ``provenance_corrections``, provenance field -> ``recorded`` (the value the bundle
    carries), ``actual`` and ``why``. Raises :class:`BundleError` on anything else."""
    path = Path(folder) / NOTES
    if not path.is_file():
        return {}
    notes = _json_object(path)
    for key, value in notes.items():
        kind = NOTES_FIELDS.get(key)
        if kind is None:
            raise BundleError(f"{path}: unknown field {key!r} (expected {', '.join(NOTES_FIELDS)})")
        if not isinstance(value, kind):
            raise BundleError(f"{path}: {key} must be a JSON {'object' if kind is dict else 'string'}")
    for field in ("did_not_finish", "verdict_notes"):
        if not all(isinstance(v, str) for v in notes.get(field, {}).values()):
            raise BundleError(f"{path}: {field} maps experiment ids to text")
    for field, fix in notes.get("provenance_corrections", {}).items():
        if not isinstance(fix, dict) or not isinstance(fix.get("actual"), str) or not fix["actual"]:
            raise BundleError(f"{path}: provenance_corrections.{field} needs an 'actual' value (text)")
    return notes


def import_target(bundle: Path | str, data_dir: Path | str) -> Path:
    """Where an import of ``bundle`` puts its files: ``<data_dir>/devices/<device>/<profile>``
    (after every check :func:`read_manifest` makes)."""
    return _target(read_manifest(bundle), data_dir)


def _target(manifest: dict[str, Any], data_dir: Path | str) -> Path:
    return Path(data_dir) / "devices" / device_slug(manifest["provenance"]["device_label"]) / manifest["profile"]


def import_bundle(
    instance: dg.DagsterInstance,
    bundle: Path | str,
    data_dir: Path | str,
    asset_graph: Any = None,
    *,
    replace: bool = False,
) -> ImportResult:
    """Check ``bundle``, store its files under ``<data_dir>/devices/<device>/<profile>/`` and record
    its materializations and check evaluations in ``instance``.

    Refuses (``BundleError``) a bad or partial bundle before anything is written, and a device
    and profile imported before unless ``replace`` (the earlier import is then kept aside as
    ``<profile>.replaced-<time>``). Assets the local code location does not define (``asset_graph``)
    are refused too: their results could not be shown. Evaluations of checks it does not define
    (renamed or removed since the bundle's source) are left out, each named in the result's warnings."""
    bundle = Path(bundle)
    manifest = read_manifest(bundle)
    read_notes(bundle)  # a malformed notes file is refused before anything is written
    profile = manifest["profile"]
    label = manifest["provenance"]["device_label"]
    warnings: list[str] = []
    if asset_graph is not None:
        unknown = undefined_in(manifest, asset_graph)
        assets = [name for name in unknown if ":" not in name]  # checks are named asset:check
        if assets:
            raise BundleError(f"bundle holds assets this code location does not define: {assets}")
        if unknown:
            # Checks renamed or removed since the bundle's source: their evaluations cannot be shown;
            # the assets they judged still can, so those evaluations alone stay out, said in one line.
            manifest = {
                **manifest,
                "checks": [c for c in manifest["checks"] if f"{c['asset']}:{c['name']}" not in unknown],
            }
            warnings.append(
                f"left out {len(unknown)} check evaluation(s) this code location does not define: {', '.join(unknown)}"
            )
    target = _target(manifest, data_dir)  # read_manifest hashes every file: once per import
    if target.exists() and not replace:
        raise BundleError(
            f"results of {label!r} for profile {profile!r} were imported before ({target}); "
            "pass replace to import these instead (the earlier ones are kept aside)"
        )
    # Every event is built (and so every metadata entry checked) before anything is written.
    events = import_events(manifest, bundle, target)
    _copy_in(bundle, manifest["files"], target, profile)
    # Files are in place; the events point at them.
    for event in events:
        instance.report_runless_asset_event(event)
    checks = sum(isinstance(e, dg.AssetCheckEvaluation) for e in events)
    warning = commit_warning(manifest)
    return ImportResult(
        label, profile, target, len(events) - checks, checks, (*warnings, *([warning] if warning else []))
    )


def undefined_in(manifest: dict[str, Any], asset_graph: Any) -> list[str]:
    """The assets, then the checks (``asset:check``), of a bundle's manifest that ``asset_graph`` does not define."""
    known = {k.to_user_string() for k in asset_graph.get_all_asset_keys()}
    unknown = sorted({r["asset"] for r in manifest["assets"]} - known)
    known_checks = {(c.asset_key.to_user_string(), c.name) for c in asset_graph.asset_check_keys}
    unknown += sorted(
        f"{c['asset']}:{c['name']}" for c in manifest["checks"] if (c["asset"], c["name"]) not in known_checks
    )
    return unknown


def import_events(
    manifest: dict[str, Any], bundle: Path, target: Path
) -> list[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """The runless events an import records: each asset's materialization (its file under ``target``)
    and each check evaluation, with the original metadata and where they came from. Raises
    :class:`BundleError` on a metadata entry or severity it cannot restore."""
    profile = manifest["profile"]
    label = manifest["provenance"]["device_label"]
    origin = {
        IMPORTED_FROM: str(bundle.resolve()),
        "bundle.created_at": manifest.get("created_at", ""),
        "bundle.schema_version": SCHEMA_VERSION,
    }
    events: list[dg.AssetMaterialization | dg.AssetCheckEvaluation] = []
    for record in manifest["assets"]:
        meta = {k: _restore(e) for k, e in record["metadata"].items()}
        if record.get("file"):
            meta["path"] = dg.MetadataValue.path(str((target / Path(record["file"]).relative_to("data")).resolve()))
        meta["bundle.original_run_id"] = record.get("run_id") or ""
        meta["bundle.original_timestamp"] = float(record.get("timestamp") or 0.0)
        events.append(
            dg.AssetMaterialization(
                asset_key=dg.AssetKey.from_user_string(record["asset"]), metadata={**meta, **origin}
            )
        )
    for c in manifest["checks"]:
        meta = {k: _restore(e) for k, e in c["metadata"].items()}
        meta["provenance.device_label"] = label
        meta["provenance.profile"] = profile
        try:
            severity = dg.AssetCheckSeverity(c["severity"])
        except ValueError:
            raise BundleError(f"check {c['asset']}:{c['name']} has unknown severity {c['severity']!r}") from None
        events.append(
            dg.AssetCheckEvaluation(
                asset_key=dg.AssetKey.from_user_string(c["asset"]),
                check_name=c["name"],
                passed=bool(c["passed"]),
                severity=severity,
                metadata={**meta, **origin},
            )
        )
    return events


def _copy_in(bundle: Path, files: dict[str, Any], target: Path, profile: str) -> None:
    """Copy the bundle's ``files`` to ``target`` through a staging folder, keeping an earlier import aside."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{profile}.", suffix=".partial", dir=target.parent))
    try:
        for rel in files:
            dest = staging / Path(rel).relative_to("data")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(bundle / rel, dest)
        if (bundle / NOTES).is_file():
            shutil.copy2(bundle / NOTES, staging / NOTES)
        if target.exists():
            target.rename(target.with_name(f"{profile}.replaced-{dt.datetime.now():%Y%m%dT%H%M%S}"))
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
