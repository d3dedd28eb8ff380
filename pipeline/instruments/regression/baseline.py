"""Promoted baselines and the comparison of a materialization against one.

A promotion copies each experiment's stored tables from ``<data>/<profile>/`` into a new version
folder ``<data>/baselines/<profile>/<version>/`` with a ``manifest.json`` (file hashes and the
provenance each table was produced under) and points ``<data>/baselines/<profile>/CURRENT`` at
it. Versions are never overwritten: every promotion makes a new folder, older ones stay.

:func:`compare` turns a baseline version and the current stored tables into one row per compared
item (see :data:`~.rows.COLUMNS`). What an experiment's baseline holds and how each value
is compared is the experiment's own declaration (its ``Experiment.baseline``: bit-exact columns
and tensors, per-set distributions against a bootstrap tolerance, training curves against their
noise band); :mod:`.comparators` holds one comparator per declared method. The experiments come
from the registry (:mod:`pipeline.experiments`): an instrument sits above the experiments it judges.
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from ...experiment import Experiment, not_applicable
from ...experiments import EXPERIMENTS as REGISTERED
from ...files import atomic_path, file_sha256
from ...storage import HOME_BACKEND, compiler_folder, key_uses_fused_path, read_value
from .comparators import COMPARATORS, compare_tables
from .rows import COLUMNS, row

#: The experiments that declare a baseline, by id.
_RECORDS: dict[str, Experiment] = {e.id: e for e in sorted(REGISTERED, key=lambda e: e.id) if e.baseline}
#: Experiment -> the stored assets that make up its baseline (all must exist to count as materialized).
BASELINE_ASSETS: dict[str, tuple[str, ...]] = {exp_id: e.baseline_assets() for exp_id, e in _RECORDS.items()}
#: Provenance fields compared between baseline and current (all recorded ones are shown).
PROVENANCE_FIELDS = (
    "torch_version",
    "backend",
    "backend_options",
    "device",
    "device_name",
    "cpu_threads",
    "seed",
    "profile",
    "git_commit",
)
_EXTENSIONS = (".parquet", ".safetensors", ".json")


class BaselineError(RuntimeError):
    """A promotion or comparison cannot proceed (the message says why)."""


# --- locations -------------------------------------------------------------------------------


def baselines_root(base_dir: str | Path, profile: str, compiler: str = HOME_BACKEND) -> Path:
    """``<data>/baselines/<profile>`` for Inductor, ``<data>/baselines/<profile>/compilers/<compiler>`` for
    another compiler: the version folders and the ``CURRENT`` pointer of the baselines recorded with it.
    A compiler's values are only ever compared with a baseline recorded with the same compiler."""
    return Path(base_dir) / "baselines" / profile / Path(*compiler_folder(compiler))


def data_dir(base_dir: str | Path, profile: str, compiler: str = HOME_BACKEND) -> Path:
    """Where ``compiler``'s stored values of ``profile`` are (``<data>/<profile>[/compilers/<compiler>]``)."""
    return Path(base_dir) / profile / Path(*compiler_folder(compiler))


def asset_dir(base_dir: str | Path, profile: str, compiler: str, asset: str) -> Path:
    """The folder of ``asset``'s stored value for ``compiler``: the compiler's own, or the profile's for an
    asset that depends on no fused path (stored once for every compiler)."""
    if compiler != HOME_BACKEND and not key_uses_fused_path(dg.AssetKey(asset)):
        return Path(base_dir) / profile
    return data_dir(base_dir, profile, compiler)


def stored_file(folder: Path, asset: str) -> Path | None:
    """The stored file of ``asset`` in ``folder`` (any of the storage extensions), or None."""
    for ext in _EXTENSIONS:
        path = folder / f"{asset}{ext}"
        if path.exists():
            return path
    return None


def compiler_file(base_dir: str | Path, profile: str, compiler: str, asset: str) -> Path | None:
    """The stored file of ``asset`` computed with ``compiler`` (see :func:`asset_dir`), or None."""
    return stored_file(asset_dir(base_dir, profile, compiler, asset), asset)


def current_version(base_dir: str | Path, profile: str, compiler: str = HOME_BACKEND) -> Path | None:
    """The version folder ``CURRENT`` of ``compiler``'s baselines points at, or None when nothing was promoted."""
    root = baselines_root(base_dir, profile, compiler)
    pointer = root / "CURRENT"
    if not pointer.exists():
        return None
    folder = root / pointer.read_text().strip()
    if not (folder / "manifest.json").exists():
        raise BaselineError(f"{pointer} points at {folder.name!r}, which has no manifest.json")
    return folder


def manifest_compiler(manifest: dict[str, Any]) -> str:
    """The compiler a baseline was recorded with (a manifest written before baselines named one: Inductor)."""
    return str(manifest.get("compiler") or HOME_BACKEND)


def list_versions(base_dir: str | Path, profile: str, compiler: str = HOME_BACKEND) -> list[str]:
    root = baselines_root(base_dir, profile, compiler)
    return sorted(p.name for p in root.iterdir() if (p / "manifest.json").exists()) if root.exists() else []


def load_manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "manifest.json").read_text())


def not_applicable_here(compiler: str) -> dict[str, str]:
    """Experiment with a baseline -> why it does not apply to ``compiler`` (its run stores no tables, so a
    baseline of that compiler leaves it out with the reason instead of counting it missing)."""
    return {exp: why for exp, e in _RECORDS.items() if (why := not_applicable(e, compiler)) is not None}


def materialization_status(base_dir: str | Path, profile: str, compiler: str = HOME_BACKEND) -> dict[str, list[str]]:
    """Experiment -> its tables ``compiler`` has not stored for ``profile`` (empty list: materialized)."""
    return {
        exp: [a for a in assets if compiler_file(base_dir, profile, compiler, a) is None]
        for exp, assets in BASELINE_ASSETS.items()
    }


# --- promotion -------------------------------------------------------------------------------

ProvenanceLookup = Callable[[str], "tuple[dict[str, Any], str] | None"]


@dataclass
class Promotion:
    """What a promotion did."""

    version: str
    folder: Path
    promoted: list[str]
    skipped: dict[str, list[str]] = field(default_factory=dict)
    previous: str | None = None
    not_applicable: dict[str, str] = field(default_factory=dict)


def promote(
    base_dir: str | Path,
    profile: str,
    *,
    allow_partial: bool = False,
    provenance_lookup: ProvenanceLookup | None = None,
    environment: dict[str, Any] | None = None,
    note: str = "",
    now: datetime | None = None,
    compiler: str = HOME_BACKEND,
) -> Promotion:
    """Copy every experiment's tables that ``compiler`` materialized into a new baseline version of that
    compiler (:func:`baselines_root`) and point its CURRENT at it.

    Refuses (``BaselineError``) when an experiment is not materialized, unless ``allow_partial``. An
    experiment that does not apply to ``compiler`` (:func:`not_applicable_here`) is never missing: the
    manifest records it as not applicable, with the reason.
    ``provenance_lookup(asset)`` returns the provenance the stored table was produced under and
    where that came from (e.g. a Dagster materialization event); ``environment`` is the promoting
    process's own provenance, kept as the fallback for tables without a recorded one.
    """
    source = data_dir(base_dir, profile, compiler)
    if not source.is_dir():
        raise BaselineError(f"no stored data for profile {profile!r} at {source}: materialize it first")
    status = materialization_status(base_dir, profile, compiler)
    skipped = not_applicable_here(compiler)
    missing = {exp: m for exp, m in status.items() if m and exp not in skipped}
    present = [exp for exp, m in status.items() if not m and exp not in skipped]
    if not present:
        raise BaselineError(f"no experiment is materialized under {source}; missing tables: {missing}")
    if missing and not allow_partial:
        detail = "; ".join(f"{exp}: {', '.join(m)}" for exp, m in missing.items())
        raise BaselineError(f"refusing to promote: not materialized under {source}: {detail} (use --allow-partial)")

    root = baselines_root(base_dir, profile, compiler)
    root.mkdir(parents=True, exist_ok=True)
    version = _new_version(root, now or datetime.now(UTC))
    previous = current_version(base_dir, profile, compiler)
    staging = root / f".{version}.partial"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    experiments: dict[str, Any] = {}
    for exp, assets in BASELINE_ASSETS.items():
        if exp in skipped:
            experiments[exp] = {"status": "not applicable", "reason": skipped[exp]}
        elif exp in missing:
            experiments[exp] = {"status": "not materialized", "missing": missing[exp]}
        else:
            folders = functools.partial(asset_dir, base_dir, profile, compiler)
            experiments[exp] = _promote_tables(folders, staging, assets, provenance_lookup, environment)
    manifest = {
        "version": version,
        "profile": profile,
        "compiler": compiler,
        "promoted_at": (now or datetime.now(UTC)).isoformat(),
        "promoted_by": _user(),
        "note": note,
        "allow_partial": allow_partial,
        "source_dir": str(source.resolve()),
        "previous": previous.name if previous else None,
        "environment": environment or {},
        "experiments": experiments,
    }
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    os.replace(staging, root / version)
    with atomic_path(root / "CURRENT") as tmp:
        tmp.write_text(version + "\n")
    return Promotion(version, root / version, present, missing, previous.name if previous else None, skipped)


def _new_version(root: Path, now: datetime) -> str:
    """A baseline version name from ``now`` (UTC, to the second) that no folder under ``root`` has:
    a folder is never reused, even within the same second (``-2``, ``-3``, ... appended)."""
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    version, n = stamp, 1
    while (root / version).exists():
        n += 1
        version = f"{stamp}-{n}"
    return version


def _promote_tables(
    data_dir: Path | Callable[[str], Path],
    staging: Path,
    assets: Sequence[str],
    provenance_lookup: ProvenanceLookup | None,
    environment: dict[str, Any] | None,
) -> dict[str, Any]:
    """Copy one experiment's stored ``assets`` from ``data_dir`` (a folder, or asset -> its folder) into
    ``staging``; its manifest entry (each table's file, sha256, size and time stored, and the provenance of
    the first table that has one recorded, else the promoting ``environment``)."""
    tables, provenance, source = {}, None, None
    for asset in assets:
        folder = data_dir(asset) if callable(data_dir) else data_dir
        src = stored_file(folder, asset)
        if src is None:
            raise BaselineError(f"{asset} has no stored file under {folder}")
        shutil.copy2(src, staging / src.name)
        tables[asset] = {
            "file": src.name,
            "sha256": file_sha256(src),
            "bytes": src.stat().st_size,
            "stored_at": datetime.fromtimestamp(src.stat().st_mtime, UTC).isoformat(),
        }
        found = provenance_lookup(asset) if provenance_lookup else None
        if found and provenance is None:
            provenance, source = found
    if provenance is None:
        provenance = dict(environment or {})
        source = "promoting environment (no materialization event recorded for these tables)"
    return {"status": "promoted", "tables": tables, "provenance": provenance, "provenance_source": source}


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name in some containers
        return "unknown"


# --- comparison ------------------------------------------------------------------------------


def _compare_experiment(
    exp: str | Experiment, base_dir: Path, cur_dir: Path | Callable[[str], Path], same_inputs: bool
) -> list[dict[str, Any]]:
    """The rows of one experiment (its id, or a record): its declared baseline tables read from
    ``base_dir`` and ``cur_dir`` (a folder, or asset -> its folder) and compared by their declared methods."""
    record = exp if isinstance(exp, Experiment) else _RECORDS.get(exp)
    if record is None:
        raise BaselineError(f"unknown experiment {exp!r} (baselines cover {', '.join(BASELINE_ASSETS)})")
    unknown = [t.method for t in record.baseline if t.method not in COMPARATORS]
    if unknown:
        raise BaselineError(f"experiment {record.id!r} declares baseline methods with no comparator: {unknown}")
    assets = record.baseline_assets()
    b = {a: read_value(base_dir / a) for a in assets}
    c = {a: read_value((cur_dir(a) if callable(cur_dir) else cur_dir) / a) for a in assets}
    return compare_tables(record, b, c, same_inputs)


def provenance_changes(base: dict[str, Any], cur: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Recorded provenance fields whose value differs (fields missing on either side are skipped)."""
    out = {}
    for key in PROVENANCE_FIELDS:
        if key in base and key in cur and str(base[key]) != str(cur[key]):
            out[key] = (base[key], cur[key])
    return out


@dataclass
class Comparison:
    """The comparison table plus what the checks and metadata need."""

    table: pl.DataFrame
    baseline_version: str | None
    provenance_changed: dict[str, dict[str, tuple[Any, Any]]]
    reason: str = ""


def compare(
    base_dir: str | Path,
    profile: str,
    current_provenance: Callable[[str], dict[str, Any]],
    compiler: str = HOME_BACKEND,
) -> Comparison:
    """Compare the tables ``compiler`` stored for ``profile`` with the CURRENT baseline recorded with the
    same compiler (never another compiler's: each has its own baselines, :func:`baselines_root`).

    ``current_provenance(experiment)`` returns the provenance the current tables of that experiment
    were produced under. Without a promoted baseline the table has one row saying so.
    """
    folder = current_version(base_dir, profile, compiler)
    if folder is None:
        root = baselines_root(base_dir, profile, compiler)
        reason = f"no baseline promoted for profile {profile!r} with {compiler} (expected {root}/CURRENT)"
        table = pl.DataFrame(
            [row("-", "baseline", "presence", None, None, status="no baseline", severity="WARN")], schema=COLUMNS
        )
        return Comparison(table, None, {}, reason)
    manifest = load_manifest(folder)
    if manifest_compiler(manifest) != compiler:
        raise BaselineError(
            f"baseline {folder.name} was recorded with {manifest_compiler(manifest)}: "
            f"it is never compared with {compiler}'s values"
        )

    def cur_dir(asset: str) -> Path:
        return asset_dir(base_dir, profile, compiler, asset)

    status = materialization_status(base_dir, profile, compiler)
    skipped = not_applicable_here(compiler)
    rows: list[dict[str, Any]] = []
    changed: dict[str, dict[str, tuple[Any, Any]]] = {}
    for exp in BASELINE_ASSETS:
        entry = manifest["experiments"].get(exp, {"status": "not in baseline"})
        if exp in skipped:  # not run for this compiler, by design (a table left from before is not read)
            rows.append(row(exp, "(experiment)", "presence", None, None, status=skipped[exp], severity="INFO"))
            continue
        in_base = entry.get("status") == "promoted"
        in_cur = not status[exp]
        if not in_base and not in_cur:
            absent = "not in baseline, not materialized"
            rows.append(row(exp, "(experiment)", "presence", None, None, status=absent, severity="INFO"))
            continue
        if not in_base:
            rows.append(
                row(exp, "(experiment)", "presence", None, "materialized", status="not in baseline", severity="WARN")
            )
            continue
        if not in_cur:
            rows.append(
                row(
                    exp,
                    "(experiment)",
                    "presence",
                    "promoted",
                    None,
                    status=f"not materialized (missing {', '.join(status[exp])})",
                    severity="WARN",
                )
            )
            continue
        base_prov = entry.get("provenance", {})
        same_files = all(
            (f := compiler_file(base_dir, profile, compiler, a)) is not None and file_sha256(f) == t.get("sha256")
            for a, t in entry.get("tables", {}).items()
        )
        # Byte-identical tables are the baseline's own materialization: its recorded provenance holds.
        cur_prov = base_prov if same_files else current_provenance(exp)
        diff = provenance_changes(base_prov, cur_prov)
        if diff:
            changed[exp] = diff
        for key, (bv, cv) in diff.items():
            rows.append(row(exp, f"provenance.{key}", "provenance", bv, cv, moved=True, severity="INFO"))
        same_inputs = str(base_prov.get("seed")) == str(cur_prov.get("seed")) or "seed" not in base_prov
        rows += _compare_experiment(exp, folder, cur_dir, same_inputs)
    return Comparison(pl.DataFrame(rows, schema=COLUMNS), manifest["version"], changed)
