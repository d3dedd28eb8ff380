"""Promoted baselines and the comparison of a materialization against one.

A promotion copies each experiment's stored tables from ``<data>/<profile>/`` into a new version
folder ``<data>/baselines/<profile>/<version>/`` with a ``manifest.json`` (file hashes and the
provenance each table was produced under) and points ``<data>/baselines/<profile>/CURRENT`` at
it. Versions are never overwritten: every promotion makes a new folder, older ones stay.

:func:`compare` turns a baseline version and the current stored tables into one row per compared
item (see :data:`COLUMNS`): bit-exact items (output hashes, data-movement bit equality, C1-C3
output tensors and ULP tables), error distributions (B: per chain x dtype x path, with a
tolerance measured by bootstrap over the baseline's input sets) and training curves (E: eval
loss against E's own data-order noise band).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from ...experiment import catalogue
from ...storage import atomic_path, read_value

#: Experiment -> the stored assets that make up its baseline (all must exist to count as materialized).
EXPERIMENTS: dict[str, tuple[str, ...]] = {
    e.id: e.baseline_assets() for e in sorted(catalogue(), key=lambda e: e.id) if e.baseline
}
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
#: Bootstrap resamples for B's noise tolerance, and the quantile of the resampled differences used.
BOOTSTRAP_RESAMPLES = 400
BOOTSTRAP_QUANTILE = 0.99
_EXTENSIONS = (".parquet", ".safetensors", ".json")

COLUMNS: dict[str, Any] = {
    "experiment": pl.String,
    "item": pl.String,
    "kind": pl.String,
    "baseline_value": pl.String,
    "current_value": pl.String,
    "delta": pl.Float64,
    "tolerance": pl.Float64,
    "tolerance_source": pl.String,
    "moved": pl.String,
    "severity": pl.String,
    "status": pl.String,
}


class BaselineError(RuntimeError):
    """A promotion or comparison cannot proceed (the message says why)."""


# --- locations -------------------------------------------------------------------------------


def baselines_root(base_dir: str | Path, profile: str) -> Path:
    """``<data>/baselines/<profile>``: the version folders and the ``CURRENT`` pointer."""
    return Path(base_dir) / "baselines" / profile


def stored_file(folder: Path, asset: str) -> Path | None:
    """The stored file of ``asset`` in ``folder`` (any of the storage extensions), or None."""
    for ext in _EXTENSIONS:
        path = folder / f"{asset}{ext}"
        if path.exists():
            return path
    return None


def current_version(base_dir: str | Path, profile: str) -> Path | None:
    """The version folder ``CURRENT`` points at, or None when nothing was promoted."""
    pointer = baselines_root(base_dir, profile) / "CURRENT"
    if not pointer.exists():
        return None
    folder = baselines_root(base_dir, profile) / pointer.read_text().strip()
    if not (folder / "manifest.json").exists():
        raise BaselineError(f"{pointer} points at {folder.name!r}, which has no manifest.json")
    return folder


def list_versions(base_dir: str | Path, profile: str) -> list[str]:
    root = baselines_root(base_dir, profile)
    return sorted(p.name for p in root.iterdir() if (p / "manifest.json").exists()) if root.exists() else []


def load_manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "manifest.json").read_text())


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def materialization_status(data_dir: Path) -> dict[str, list[str]]:
    """Experiment -> its tables missing from ``data_dir`` (empty list: materialized)."""
    return {exp: [a for a in assets if stored_file(data_dir, a) is None] for exp, assets in EXPERIMENTS.items()}


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


def promote(
    base_dir: str | Path,
    profile: str,
    *,
    allow_partial: bool = False,
    provenance_lookup: ProvenanceLookup | None = None,
    environment: dict[str, Any] | None = None,
    note: str = "",
    now: datetime | None = None,
) -> Promotion:
    """Copy every materialized experiment's tables into a new baseline version and point CURRENT at it.

    Refuses (``BaselineError``) when an experiment is not materialized, unless ``allow_partial``.
    ``provenance_lookup(asset)`` returns the provenance the stored table was produced under and
    where that came from (e.g. a Dagster materialization event); ``environment`` is the promoting
    process's own provenance, kept as the fallback for tables without a recorded one.
    """
    data_dir = Path(base_dir) / profile
    if not data_dir.is_dir():
        raise BaselineError(f"no stored data for profile {profile!r} at {data_dir}: materialize it first")
    status = materialization_status(data_dir)
    missing = {exp: m for exp, m in status.items() if m}
    present = [exp for exp, m in status.items() if not m]
    if not present:
        raise BaselineError(f"no experiment is materialized under {data_dir}; missing tables: {missing}")
    if missing and not allow_partial:
        detail = "; ".join(f"{exp}: {', '.join(m)}" for exp, m in missing.items())
        raise BaselineError(f"refusing to promote: not materialized under {data_dir}: {detail} (use --allow-partial)")

    root = baselines_root(base_dir, profile)
    root.mkdir(parents=True, exist_ok=True)
    version = _new_version(root, now or datetime.now(UTC))
    previous = current_version(base_dir, profile)
    staging = root / f".{version}.partial"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    experiments: dict[str, Any] = {}
    for exp, assets in EXPERIMENTS.items():
        if exp in missing:
            experiments[exp] = {"status": "not materialized", "missing": missing[exp]}
        else:
            experiments[exp] = _promote_tables(data_dir, staging, assets, provenance_lookup, environment)
    manifest = {
        "version": version,
        "profile": profile,
        "promoted_at": (now or datetime.now(UTC)).isoformat(),
        "promoted_by": _user(),
        "note": note,
        "allow_partial": allow_partial,
        "source_dir": str(data_dir.resolve()),
        "previous": previous.name if previous else None,
        "environment": environment or {},
        "experiments": experiments,
    }
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    os.replace(staging, root / version)
    with atomic_path(root / "CURRENT") as tmp:
        tmp.write_text(version + "\n")
    return Promotion(version, root / version, present, missing, previous.name if previous else None)


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
    data_dir: Path,
    staging: Path,
    assets: Sequence[str],
    provenance_lookup: ProvenanceLookup | None,
    environment: dict[str, Any] | None,
) -> dict[str, Any]:
    """Copy one experiment's stored ``assets`` into ``staging``; its manifest entry (each table's file,
    sha256, size and time stored, and the provenance of the first table that has one recorded,
    else the promoting ``environment``)."""
    tables, provenance, source = {}, None, None
    for asset in assets:
        src = stored_file(data_dir, asset)
        if src is None:
            raise BaselineError(f"{asset} has no stored file under {data_dir}")
        shutil.copy2(src, staging / src.name)
        tables[asset] = {
            "file": src.name,
            "sha256": _sha256(src),
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


def _row(
    exp: str,
    item: str,
    kind: str,
    base: Any,
    cur: Any,
    *,
    delta: float | None = None,
    tol: float | None = None,
    tol_source: str = "",
    moved: bool = False,
    severity: str = "none",
    status: str = "compared",
) -> dict[str, Any]:
    def fmt(v: Any) -> str | None:
        if v is None:
            return None
        if isinstance(v, float):
            return f"{v:.6g}"
        return str(v)

    return {
        "experiment": exp,
        "item": item,
        "kind": kind,
        "baseline_value": fmt(base),
        "current_value": fmt(cur),
        "delta": None if delta is None else float(delta),
        "tolerance": None if tol is None else float(tol),
        "tolerance_source": tol_source,
        "moved": "yes" if moved else "no",
        "severity": severity if moved or status != "compared" else "none",
        "status": status,
    }


#: Marks an item (row, tensor) absent on one side, as opposed to a stored null value.
MISSING = object()


def _exact(
    exp: str,
    item: str,
    kind: str,
    base: Any,
    cur: Any,
    *,
    worse_if: Callable[[Any, Any], bool] | None = None,
    severity: str = "ERROR",
) -> dict[str, Any]:
    """A bit-exact item: any difference moves it. ``worse_if(base, cur)`` False downgrades to WARN."""
    if base is MISSING:
        return _row(exp, item, kind, None, cur, moved=True, severity="WARN", status="not in baseline")
    if cur is MISSING:
        return _row(exp, item, kind, base, None, moved=True, severity="ERROR", status="not in current")
    if base is None or cur is None:
        return _row(exp, item, kind, base, cur, moved=base is not cur, severity=severity)
    numeric = (
        isinstance(base, (int, float, np.integer, np.floating))
        and not isinstance(base, bool)
        and isinstance(cur, (int, float, np.integer, np.floating))
        and not isinstance(cur, bool)
    )
    delta = float(cur) - float(base) if numeric else None
    moved = base != cur and not (numeric and np.isnan(float(base)) and np.isnan(float(cur)))
    sev = severity
    if moved and worse_if is not None and not worse_if(base, cur):
        sev = "WARN"
    return _row(exp, item, kind, base, cur, delta=delta, tol=0.0, tol_source="bit-exact", moved=moved, severity=sev)


def tensor_md5(t: torch.Tensor) -> str:
    """md5 over dtype, shape and raw bytes (so equal hashes mean bit-identical tensors)."""
    t = t.detach().cpu().contiguous()
    h = hashlib.md5(f"{t.dtype}:{tuple(t.shape)}:".encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _tensor_items(
    exp: str, asset: str, base: dict[str, torch.Tensor], cur: dict[str, torch.Tensor]
) -> list[dict[str, Any]]:
    keys = sorted(set(base) | set(cur))
    return [
        _exact(
            exp,
            f"{asset}/{k}/md5",
            "bit_exact",
            tensor_md5(base[k]) if k in base else MISSING,
            tensor_md5(cur[k]) if k in cur else MISSING,
        )
        for k in keys
    ]


def _table_items(
    exp: str,
    asset: str,
    base: pl.DataFrame,
    cur: pl.DataFrame,
    keys: list[str],
    values: dict[str, str],
    kind: str = "bit_exact",
) -> list[dict[str, Any]]:
    """Exact comparison of ``values`` columns, row matched on ``keys``; ``values[col]`` is
    "lower" (an error: higher is worse), "higher" (e.g. bit_equal: False is worse) or "any"."""
    rows = []

    def index(df: pl.DataFrame) -> dict[tuple, dict[str, Any]]:
        return {tuple(r[k] for k in keys): r for r in df.iter_rows(named=True)}

    b, c = index(base), index(cur)
    for key in sorted(set(b) | set(c), key=lambda k: tuple(str(x) for x in k)):
        name = "/".join(str(x) for x in key)
        for col, better in values.items():
            bv = b[key].get(col) if key in b else MISSING
            cv = c[key].get(col) if key in c else MISSING
            worse = {"lower": lambda x, y: y > x, "higher": lambda x, y: y < x}.get(better)
            rows.append(
                _exact(
                    exp,
                    f"{asset}/{name}/{col}",
                    kind,
                    bv,
                    cv,
                    worse_if=worse,
                    severity="WARN" if better == "code" else "ERROR",
                )
            )
    return rows


# B: per chain x dtype x path, per-set ulp_max distributions.
B_STATS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "mean": lambda a: a.mean(axis=-1),
    "p50": lambda a: np.quantile(a, 0.5, axis=-1),
    "p99": lambda a: np.quantile(a, 0.99, axis=-1),
    "max": lambda a: a.max(axis=-1),
}


def bootstrap_tolerance(
    sample: np.ndarray,
    stat: Callable[[np.ndarray], np.ndarray],
    seed: int,
    resamples: int = BOOTSTRAP_RESAMPLES,
    quantile: float = BOOTSTRAP_QUANTILE,
) -> float:
    """How far ``stat`` moves between two independent draws of ``len(sample)`` sets from the
    baseline's own distribution: the ``quantile`` of |stat(a) - stat(b)| over bootstrap pairs."""
    sample = sample[np.isfinite(sample)]
    if sample.size == 0:
        return 0.0
    rng = np.random.default_rng(seed)
    a = sample[rng.integers(0, sample.size, size=(resamples, sample.size))]
    b = sample[rng.integers(0, sample.size, size=(resamples, sample.size))]
    return float(np.quantile(np.abs(stat(a) - stat(b)), quantile))


def _compare_b(base: pl.DataFrame, cur: pl.DataFrame, same_inputs: bool) -> list[dict[str, Any]]:
    rows = []
    keys = ["chain", "dtype", "path"]
    groups = sorted(set(base.select(keys).unique().iter_rows()) | set(cur.select(keys).unique().iter_rows()))
    for chain, dtype, path in groups:
        name = f"{chain}/{dtype}/{path}"
        sel = (pl.col("chain") == chain) & (pl.col("dtype") == dtype) & (pl.col("path") == path)
        b = base.filter(sel).sort("distribution", "set_index")
        c = cur.filter(sel).sort("distribution", "set_index")
        if b.height == 0 or c.height == 0:
            rows.append(
                _row(
                    "B",
                    f"{name}/ulp_max",
                    "statistic",
                    b.height or None,
                    c.height or None,
                    moved=True,
                    severity="WARN" if b.height == 0 else "ERROR",
                    status="not in baseline" if b.height == 0 else "not in current",
                )
            )
            continue
        bv = b["ulp_max"].to_numpy().astype(float)
        cv = c["ulp_max"].to_numpy().astype(float)
        seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")
        for stat_name, stat in B_STATS.items():
            bs, cs = float(stat(bv[np.isfinite(bv)])), float(stat(cv[np.isfinite(cv)]))
            tol = bootstrap_tolerance(bv, stat, seed)
            delta = cs - bs
            moved = abs(delta) > tol
            rows.append(
                _row(
                    "B",
                    f"{name}/ulp_max_{stat_name}",
                    "statistic",
                    bs,
                    cs,
                    delta=delta,
                    tol=tol,
                    tol_source=f"bootstrap q{BOOTSTRAP_QUANTILE} of |diff| over {BOOTSTRAP_RESAMPLES} pairs of "
                    f"{bv.size}-set resamples of the baseline",
                    moved=moved,
                    severity="ERROR" if delta > 0 else "WARN",
                )
            )
        if same_inputs and b.height == c.height:
            # Same seed, same sets: per-set values are deterministic, so any change is a code/numerics change.
            changed = float((b["ulp_max"].to_numpy() != c["ulp_max"].to_numpy()).mean())
            rows.append(
                _row(
                    "B",
                    f"{name}/sets_with_changed_ulp_max",
                    "paired",
                    0.0,
                    changed,
                    delta=changed,
                    tol=0.0,
                    tol_source="same inputs: bit-exact per set",
                    moved=changed > 0,
                    severity="WARN",
                )
            )
    return rows


def _noise_band(
    eager: Sequence[float | None], order_b: Sequence[float | None], half_width: int = 1
) -> list[float | None]:
    """Per evaluation point, the largest data-order noise |eager - eager_order_B| within +-half_width points."""
    noise = [abs(x - y) if x is not None and y is not None else None for x, y in zip(eager, order_b, strict=False)]
    out = []
    for i in range(len(noise)):
        window = [v for v in noise[max(0, i - half_width) : i + half_width + 1] if v is not None]
        out.append(max(window) if window else None)
    return out


def _curve(df: pl.DataFrame, run: str) -> tuple[list[int], list[float]]:
    """Steps and eval losses of ``run``'s evaluation points (rows without an eval loss left out), by step."""
    part = df.filter((pl.col("run") == run) & pl.col("eval_loss").is_not_null()).sort("step")
    return part["step"].to_list(), part["eval_loss"].to_list()


def _band_of(df: pl.DataFrame) -> dict[int, float]:
    runs = set(df["run"].unique().to_list())
    pair = [r for r in runs if r.endswith("_eager_order_B")]
    if not pair:
        return {}
    main = pair[0][: -len("_order_B")]
    if main not in runs:
        return {}
    steps, a = _curve(df, main)
    steps_b, b = _curve(df, pair[0])
    if steps != steps_b:
        return {}
    return {s: v for s, v in zip(steps, _noise_band(a, b), strict=False) if v is not None}


def _compare_e(base: pl.DataFrame, cur: pl.DataFrame) -> list[dict[str, Any]]:
    rows = []
    band_b, band_c = _band_of(base), _band_of(cur)
    for run in sorted(set(base["run"].unique().to_list()) | set(cur["run"].unique().to_list())):
        bs, bl = _curve(base, run)
        cs, cl = _curve(cur, run)
        if not bs or not cs:
            rows.append(
                _row(
                    "E",
                    f"{run}/final_eval_loss",
                    "curve",
                    bl[-1] if bl else None,
                    cl[-1] if cl else None,
                    moved=True,
                    severity="WARN" if not bs else "ERROR",
                    status="not in baseline" if not bs else "not in current",
                )
            )
            continue
        common = [s for s in bs if s in set(cs)]
        bmap, cmap = dict(zip(bs, bl, strict=False)), dict(zip(cs, cl, strict=False))

        def band(step: int) -> float | None:
            vals = [v for v in (band_b.get(step), band_c.get(step)) if v is not None]
            return max(vals) if vals else None

        last = common[-1] if common else None
        tol = band(last) if last is not None else None
        if last is None or tol is None:
            rows.append(
                _row(
                    "E",
                    f"{run}/final_eval_loss",
                    "curve",
                    bl[-1],
                    cl[-1],
                    moved=True,
                    severity="WARN",
                    status="no common steps or no noise band (needs <main>_eager and <main>_eager_order_B)",
                )
            )
            continue
        delta = cmap[last] - bmap[last]
        rows.append(
            _row(
                "E",
                f"{run}/final_eval_loss@{last}",
                "curve",
                bmap[last],
                cmap[last],
                delta=delta,
                tol=tol,
                tol_source="E's data-order noise band (|eager - eager_order_B|, +-1 eval point, max of baseline and current)",
                moved=abs(delta) > tol,
                severity="ERROR" if delta > 0 else "WARN",
            )
        )
        outside = [s for s in common if (w := band(s)) is not None and abs(cmap[s] - bmap[s]) > w]
        rows.append(
            _row(
                "E",
                f"{run}/eval_points_outside_band",
                "curve",
                0,
                len(outside),
                delta=len(outside),
                tol=0.0,
                tol_source=f"{len(common)} common eval points; same band",
                moved=bool(outside),
                severity="WARN",
            )
        )
    return rows


def _compare_experiment(exp: str, base_dir: Path, cur_dir: Path, same_inputs: bool) -> list[dict[str, Any]]:
    if exp not in EXPERIMENTS:
        raise BaselineError(f"unknown experiment {exp!r} (baselines cover {', '.join(EXPERIMENTS)})")
    b = {a: read_value(base_dir / a) for a in EXPERIMENTS[exp]}
    c = {a: read_value(cur_dir / a) for a in EXPERIMENTS[exp]}
    if exp == "B":
        return _compare_b(b["accumulated_error_per_set"], c["accumulated_error_per_set"], same_inputs)
    if exp == "E":
        return _compare_e(b["training_curves"], c["training_curves"])
    by_tables = {"A": _compare_a, "C1": _compare_c1, "C2": _compare_c2, "C3": _compare_c3, "D": _compare_d}
    if exp not in by_tables:
        raise BaselineError(f"experiment {exp!r} has baseline tables but no comparison")
    return by_tables[exp](b, c)


#: An experiment's stored values by asset name, as read from a data folder.
Values = dict[str, Any]


def _compare_a(b: Values, c: Values) -> list[dict[str, Any]]:
    def md5s(df: pl.DataFrame) -> pl.DataFrame:
        return df.group_by("round", "dtype").agg(pl.col("md5").unique().sort().str.join(","))

    name = "determinism_runs"
    rows = _table_items("A", f"{name}/output_md5s", md5s(b[name]), md5s(c[name]), ["round", "dtype"], {"md5": "any"})
    rows += _table_items(
        "A",
        "determinism_summary",
        b["determinism_summary"],
        c["determinism_summary"],
        ["dtype", "round"],
        {"unique_output_hashes": "lower", "max_ulp_diff_across_runs": "lower"},
    )
    rows += _table_items(
        "A",
        "determinism_summary",
        b["determinism_summary"],
        c["determinism_summary"],
        ["dtype", "round"],
        {"code_sha256": "code"},
        kind="code",
    )
    return rows


def _compare_c1(b: Values, c: Values) -> list[dict[str, Any]]:
    return (
        _tensor_items("C1", "c1_path_outputs", b["c1_path_outputs"], c["c1_path_outputs"])
        + _table_items(
            "C1",
            "c1_ulp_distribution",
            b["c1_ulp_distribution"],
            c["c1_ulp_distribution"],
            ["comparison"],
            {"bit_equal": "any", "ulp1_pct": "any", "ulp_max": "any"},
        )
        + _table_items(
            "C1",
            "c1_error_vs_fp64",
            b["c1_error_vs_fp64"],
            c["c1_error_vs_fp64"],
            ["path"],
            {"ulp_max": "lower", "ulp_mean": "lower"},
        )
    )


def _compare_c2(b: Values, c: Values) -> list[dict[str, Any]]:
    return (
        _tensor_items("C2", "c2_version_outputs", b["c2_version_outputs"], c["c2_version_outputs"])
        + _table_items(
            "C2",
            "c2_error_vs_fp64",
            b["c2_error_vs_fp64"],
            c["c2_error_vs_fp64"],
            ["version", "output"],
            {"ulp_max": "lower", "within_band_fraction": "higher"},
        )
        + _table_items(
            "C2", "c2_versions", b["c2_versions"], c["c2_versions"], ["version"], {"self_deterministic": "higher"}
        )
        + _table_items(
            "C2",
            "c2_versions",
            b["c2_versions"],
            c["c2_versions"],
            ["version"],
            {"code_sha256": "code"},
            kind="code",
        )
    )


def _compare_c3(b: Values, c: Values) -> list[dict[str, Any]]:
    def keyed(df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.col("iterations").cast(pl.String).fill_null("-"))

    return _tensor_items("C3", "c3_path_outputs", b["c3_path_outputs"], c["c3_path_outputs"]) + _table_items(
        "C3",
        "c3_iteration_table",
        keyed(b["c3_iteration_table"]),
        keyed(c["c3_iteration_table"]),
        ["path", "iterations", "compute_dtype"],
        {"ulp_max": "lower", "correctly_rounded_fraction": "higher"},
    )


def _compare_d(b: Values, c: Values) -> list[dict[str, Any]]:
    return _table_items(
        "D",
        "data_movement_check_table",
        b["data_movement_check_table"],
        c["data_movement_check_table"],
        ["subgraph", "dtype", "shape", "layout"],
        {"bit_equal": "higher", "ulp_max": "lower"},
    )


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


def compare(base_dir: str | Path, profile: str, current_provenance: Callable[[str], dict[str, Any]]) -> Comparison:
    """Compare the stored tables of ``profile`` with its CURRENT baseline.

    ``current_provenance(experiment)`` returns the provenance the current tables of that experiment
    were produced under. Without a promoted baseline the table has one row saying so.
    """
    folder = current_version(base_dir, profile)
    if folder is None:
        reason = f"no baseline promoted for profile {profile!r} (expected {baselines_root(base_dir, profile)}/CURRENT)"
        table = pl.DataFrame(
            [_row("-", "baseline", "presence", None, None, status="no baseline", severity="WARN")], schema=COLUMNS
        )
        return Comparison(table, None, {}, reason)
    manifest = load_manifest(folder)
    cur_dir = Path(base_dir) / profile
    status = materialization_status(cur_dir)
    rows: list[dict[str, Any]] = []
    changed: dict[str, dict[str, tuple[Any, Any]]] = {}
    for exp in EXPERIMENTS:
        entry = manifest["experiments"].get(exp, {"status": "not in baseline"})
        in_base = entry.get("status") == "promoted"
        in_cur = not status[exp]
        if not in_base and not in_cur:
            rows.append(
                _row(
                    exp,
                    "(experiment)",
                    "presence",
                    None,
                    None,
                    status="not in baseline, not materialized",
                    severity="INFO",
                )
            )
            continue
        if not in_base:
            rows.append(
                _row(exp, "(experiment)", "presence", None, "materialized", status="not in baseline", severity="WARN")
            )
            continue
        if not in_cur:
            rows.append(
                _row(
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
            (f := stored_file(cur_dir, a)) is not None and _sha256(f) == t.get("sha256")
            for a, t in entry.get("tables", {}).items()
        )
        # Byte-identical tables are the baseline's own materialization: its recorded provenance holds.
        cur_prov = base_prov if same_files else current_provenance(exp)
        diff = provenance_changes(base_prov, cur_prov)
        if diff:
            changed[exp] = diff
        for key, (bv, cv) in diff.items():
            rows.append(_row(exp, f"provenance.{key}", "provenance", bv, cv, moved=True, severity="INFO"))
        same_inputs = str(base_prov.get("seed")) == str(cur_prov.get("seed")) or "seed" not in base_prov
        rows += _compare_experiment(exp, folder, cur_dir, same_inputs)
    return Comparison(pl.DataFrame(rows, schema=COLUMNS), manifest["version"], changed)
