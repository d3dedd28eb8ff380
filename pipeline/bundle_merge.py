"""Several bundles of one device and profile as one: what a device's short leases produced in pieces.

A GPU lease rarely fits a whole profile, so one machine's results of a profile arrive as several
bundles (A, D and M in one session, B and E in the next), and ``import-bundle`` takes one bundle
per device and profile. :func:`merge_bundles` checks each bundle as an import would
(:func:`pipeline.bundle.read_manifest`), refuses bundles of different devices, profiles or torch
versions, and writes one bundle in which each asset comes, with its file and its checks'
evaluations, from the newest bundle that holds it. Every asset keeps its own materialization
metadata (its source commit included); the manifest lists the bundles it was made from
(``merged_from``; a bundle merged before contributes its own sessions, so that each asset keeps
the commit that made it), and its provenance is the newest bundle's.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .bundle import MANIFEST, BundleError, ExportResult, read_manifest


def _same(manifests: list[tuple[Path, dict[str, Any]]], what: str, get: Any) -> None:
    values = {str(get(m)) for _, m in manifests}
    if len(values) > 1:
        named = ", ".join(f"{p.name}: {get(m)}" for p, m in manifests)
        raise BundleError(f"cannot merge bundles of different {what} ({named}): import them separately")


def _sessions(folder: Path, manifest: dict[str, Any], mine: set[str]) -> list[dict[str, Any]]:
    """The ``merged_from`` entries of the assets ``mine`` that ``manifest``'s bundle gives the merge.

    A bundle merged before lists its own sessions: each of its assets keeps the session (folder,
    time and source commit) that made it, rather than taking the merged bundle's newest commit."""
    sessions = []
    covered: set[str] = set()
    for earlier in manifest.get("merged_from", []):
        kept = sorted(set(earlier["assets"]) & mine)
        covered.update(earlier["assets"])
        if kept:
            sessions.append({**earlier, "assets": kept})
    rest = sorted(mine - covered)
    if rest:
        sessions.append(
            {
                "folder": folder.name,
                "created_at": manifest.get("created_at"),
                "git_commit": manifest["provenance"].get("git_commit"),
                "assets": rest,
            }
        )
    return sessions


def merge_bundles(bundles: Sequence[Path | str], out: Path | str) -> ExportResult:
    """Write one bundle at ``out`` from ``bundles`` (two or more) of one device, profile and torch.

    An asset found in several bundles is taken from the newest (``created_at``), with its stored file,
    its left-out note and its checks' evaluations from that bundle only. A ``NOTES.json`` is not
    carried over (notes are written by hand for the merged bundle). The folder appears complete or not
    at all; ``out`` must not exist."""
    out = Path(out)
    if len(bundles) < 2:
        raise BundleError("merging needs two bundles or more")
    if out.exists():
        raise BundleError(f"{out} already exists: choose a new folder for the merged bundle")
    loaded = sorted(((Path(b), read_manifest(b)) for b in bundles), key=lambda pm: str(pm[1].get("created_at", "")))
    _same(loaded, "profiles", lambda m: m["profile"])
    _same(loaded, "devices", lambda m: m["provenance"]["device_label"])
    _same(loaded, "torch versions", lambda m: m["versions"]["torch"])
    owner: dict[str, int] = {}  # asset -> index in ``loaded`` of the newest bundle holding it
    for i, (_, manifest) in enumerate(loaded):
        owner.update({r["asset"]: i for r in manifest["assets"]})
    newest = loaded[-1][1]
    merged: dict[str, Any] = {
        **{k: newest[k] for k in ("schema_version", "created_at", "profile", "provenance", "versions")},
        "assets": [],
        "checks": [],
        "files": {},
        "left_out": {},
        "include_tensors": any(m.get("include_tensors", True) for _, m in loaded),
        "max_tensor_bytes": max(int(m.get("max_tensor_bytes", 0)) for _, m in loaded),
        "merged_from": [
            session
            for i, (p, m) in enumerate(loaded)
            for session in _sessions(p, m, {r["asset"] for r in m["assets"] if owner[r["asset"]] == i})
        ],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for i, (folder, manifest) in enumerate(loaded):
            mine = {r["asset"] for r in manifest["assets"] if owner[r["asset"]] == i}
            for record in manifest["assets"]:
                if record["asset"] not in mine:
                    continue
                merged["assets"].append(record)
                if record.get("file"):
                    rel = record["file"]
                    (staging / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(folder / rel, staging / rel)
                    merged["files"][rel] = manifest["files"][rel]
                if record["asset"] in manifest.get("left_out", {}):
                    merged["left_out"][record["asset"]] = manifest["left_out"][record["asset"]]
            merged["checks"] += [c for c in manifest["checks"] if c["asset"] in mine]
        merged["assets"].sort(key=lambda r: r["asset"])
        (staging / MANIFEST).write_text(json.dumps(merged, indent=1, sort_keys=True, default=str))
        read_manifest(staging)  # what was written reads back as a bundle, files and hashes included
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ExportResult(out, len(merged["assets"]), len(merged["checks"]), len(merged["files"]), merged["left_out"])
