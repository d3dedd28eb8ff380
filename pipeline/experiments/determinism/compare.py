"""Task A's tables from its rounds: the per-run log, the summary row per dtype x round and the
compiled artifacts per kernel, each compared with round 1, and where a hash is not the same, where
the difference was measured (which kernel, which source lines, which bytes: ``difference_source``).
"""

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import torch

from precisionkit import ulp_diff

from ...artifacts import describe_byte_difference, readable
from ...tables import markdown_table
from .rounds import DETERMINISM_DTYPES, Round
from .worker import artifact_file

_ARTIFACT_SCHEMA = {
    "round": pl.String,
    "dtype": pl.String,
    "threads": pl.Int64,
    "kernel": pl.String,
    "kind": pl.String,
    "artifact_sha256": pl.String,
    "file_sha256": pl.String,
    "bytes": pl.Int64,
    "autotune_choice": pl.String,
    "equal_to_round1": pl.String,
    "byte_difference": pl.String,
    "detail": pl.String,
}


_SUMMARY_COLUMNS = [
    "dtype",
    "round",
    "threads",
    "run_count",
    "unique_output_hashes",
    "max_ulp_diff_across_runs",
    "code_sha256",
    "kernel_hash_equal_across_cold_start",
    "artifact_sha256",
    "artifact_hash_equal_across_cold_start",
    "outputs_equal_round1",
    "kernel_count",
    "recompiles",
    "difference_source",
]


def _artifact_bytes(folder: Path, dtype: str, kernel: str) -> bytes | None:
    path = artifact_file(folder / dtype, kernel)
    return path.read_bytes() if path.is_file() else None


def artifacts_not_applicable(rec: dict[str, Any]) -> str:
    """Why a round's record has no compiled artifacts to compare ("not applicable to <compiler>: <why>",
    from the compiler's adapter: it exposes no binary per unit), or "" (a record before it was kept too)."""
    return str(rec.get("artifacts_not_applicable") or "")


def artifact_state(rec: dict[str, Any], r1_rec: dict[str, Any]) -> str:
    """``yes`` or ``no``: whether a round's compiled artifacts equal round 1's (H_k0); ``unknown``
    with the reason where either round's kernel binaries could not be read, so nothing is compared;
    "not applicable to <compiler>: <why>" where the compiler exposes no binaries at all (its compiled
    program is compared by the code hash alone)."""
    if not_applicable := artifacts_not_applicable(rec) or artifacts_not_applicable(r1_rec):
        return not_applicable
    unread = [
        f"{who}: {a['kernel']} ({a['kind']})"
        for who, r in (("round 1", r1_rec), ("this round", rec))
        for a in r["artifacts"]
        if not readable([a])
    ]
    if unread:
        return "unknown: kernel binary not read: " + ", ".join(unread)
    return "yes" if rec["artifact_sha256"] == r1_rec["artifact_sha256"] else "no"


def artifact_difference(
    ref: list[dict[str, Any]], other: list[dict[str, Any]], ref_dir: Path, other_dir: Path, dtype: str
) -> str:
    """Which kernels' artifacts differ between two rounds, and where their bytes differ (measured)."""
    by_ref = {a["kernel"]: a for a in ref}
    by_other = {a["kernel"]: a for a in other}
    parts = []
    for name in sorted(set(by_ref) | set(by_other)):
        a, b = by_ref.get(name), by_other.get(name)
        if a is None or b is None:
            parts.append(f"kernel {name} only in {'the other round' if a is None else 'round 1'}")
        elif (a["sha256"], a["autotune_choice"]) != (b["sha256"], b["autotune_choice"]):
            what = []
            if a["autotune_choice"] != b["autotune_choice"]:
                what.append(f"autotuning choice {a['autotune_choice'] or '-'} -> {b['autotune_choice'] or '-'}")
            if a["sha256"] != b["sha256"]:
                ba, bb = _artifact_bytes(ref_dir, dtype, name), _artifact_bytes(other_dir, dtype, name)
                what.append(
                    f"{a['kind']} bytes: "
                    + (
                        describe_byte_difference(ba, bb)
                        if ba is not None and bb is not None
                        else f"sha256 {a['sha256'][:12]} -> {b['sha256'][:12]}"
                    )
                )
            parts.append(f"kernel {name}: " + "; ".join(what))
    return "; ".join(parts)


def output_difference(distinct: dict[str, torch.Tensor], keys: list[str]) -> str:
    """Measured difference between the distinct outputs ``keys`` (vs the first): elements, max ULP."""
    known = [k for k in keys if k in distinct]
    if len(known) < 2:
        return f"{len(keys)} distinct outputs, fewer than two kept to compare"
    first = distinct[known[0]]
    parts = []
    for k in known[1:]:
        d = ulp_diff(first, distinct[k])
        changed = d > 0
        rows = changed.reshape(-1, first.shape[-1]).any(-1).nonzero().reshape(-1)
        parts.append(
            f"{int(changed.sum())} of {first.numel()} elements in {rows.numel()} rows differ (max {int(d.max())} ULP)"
        )
    return "; ".join(parts)


def _ulp(distinct: dict[str, torch.Tensor], key_a: str, key_b: str) -> int | None:
    """Max ULP distance between two stored outputs (0 when the keys, i.e. the hashes, agree)."""
    if key_a == key_b:
        return 0
    if key_a not in distinct or key_b not in distinct:
        return None  # beyond the distinct outputs the worker keeps
    return int(ulp_diff(distinct[key_a], distinct[key_b]).max())


def _code_diff(a: str, b: str, limit: int = 12) -> str:
    lines = [
        line
        for line in difflib.unified_diff(a.splitlines(), b.splitlines(), "H_k0", "other", n=0, lineterm="")
        if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    ]
    return "\n".join(lines[:limit]) + (f"\n... {len(lines) - limit} more" if len(lines) > limit else "")


def _run_rows(
    name: str, dtype: str, rnd: Round, r1: Round
) -> tuple[list[dict[str, Any]], list[int | None], list[int | None]]:
    """One row per run of ``rnd`` for ``dtype`` (its md5 and ULP distances to the round's first
    output and to round 1's), and both distance lists (``None`` where unknown)."""
    rec = rnd.records[dtype]
    hashes = rec["hashes"]
    first = f"{dtype}/{hashes[0]}"
    r1_md5 = r1.records[dtype]["hashes"][0]
    both = {**{f"r1:{k}": v for k, v in r1.distinct.items()}, **rnd.distinct}
    rows, ulps_round, ulps_r1 = [], [], []
    for i, h in enumerate(hashes):
        key = f"{dtype}/{h}"
        u_round = _ulp(rnd.distinct, key, first)
        u_r1 = 0 if h == r1_md5 else _ulp(both, key, f"r1:{dtype}/{r1_md5}")
        ulps_round.append(u_round)
        ulps_r1.append(u_r1)
        rows.append(
            {
                "round": name,
                "dtype": dtype,
                "threads": rec["threads"],
                "run": i,
                "md5": h,
                "ulp_vs_round_first": u_round,
                "ulp_vs_round1_first": u_r1,
            }
        )
    return rows, ulps_round, ulps_r1


def _output_change(dtype: str, rnd: Round, r1: Round, program_equal: bool | None) -> str:
    """How the outputs of ``rnd`` differ from round 1's, and whether the compiled program changed
    (``None``: the source is the same but a kernel binary was not read)."""
    rec, r1_rec = rnd.records[dtype], r1.records[dtype]
    extern = f"extern calls: {rec['extern_calls'] or 'none'}"
    if program_equal is None:
        cause = "with the same source (the kernel binaries were not compared)"
    elif not program_equal:
        cause = "after the compiled program changed"
    elif rec["threads"] != r1_rec["threads"]:
        threads = f"thread count {rec['threads']} vs {r1_rec['threads']}"
        cause = f"with the same source and artifacts, so the difference arises at run time ({threads}; {extern})"
    else:
        cause = f"with the same source and artifacts, so the difference arises at run time ({extern})"
    r1_md5 = r1_rec["hashes"][0]
    other = next(h for h in rec["hashes"] if h != r1_md5)
    r1_key, o_key = f"r1:{dtype}/{r1_md5}", f"{dtype}/{other}"
    candidates = ((r1_key, r1.distinct.get(f"{dtype}/{r1_md5}")), (o_key, rnd.distinct.get(o_key)))
    pair = {k: v for k, v in candidates if v is not None}
    return "outputs differ from round 1 " + cause + ": " + output_difference(pair, [r1_key, o_key])


def difference_sources(name: str, dtype: str, rnd: Round, r1: Round) -> tuple[list[str], str | None]:
    """Where ``rnd`` differs, measured: within the round, in the generated source, in the compiled
    artifacts and in the outputs against round 1; and the source diff against round 1 (``None``
    when the source is the same or ``rnd`` is round 1)."""
    rec, r1_rec = rnd.records[dtype], r1.records[dtype]
    hashes = rec["hashes"]
    sources = []
    unique = list(dict.fromkeys(hashes))
    if len(unique) > 1:
        sources.append(
            f"within the round, {len(unique)} distinct outputs from one program ({rec['recompiles']} recompiles): "
            + output_difference(rnd.distinct, [f"{dtype}/{h}" for h in unique])
        )
    if name == "round1":
        return sources, None
    code_equal = rec["code_sha256"] == r1_rec["code_sha256"]
    state = artifact_state(rec, r1_rec)
    artifact_equal = state == "yes"
    code_diff = None
    if not code_equal:
        code_diff = _code_diff(r1_rec["code"], rec["code"])
        sources.append("generated source differs from round 1: " + code_diff.replace("\n", " | "))
    if state.startswith("not applicable"):
        # no binary to compare: the compiled program is the code the compiler reports
        artifact_equal = True
    elif state.startswith("unknown"):
        sources.append("compiled artifact not compared with round 1's: " + state.removeprefix("unknown: "))
    elif not artifact_equal:
        sources.append(
            "compiled artifact differs from round 1: "
            + artifact_difference(r1_rec["artifacts"], rec["artifacts"], r1.artifacts, rnd.artifacts, dtype)
        )
    if set(hashes) != {r1_rec["hashes"][0]}:
        unread = state.startswith("unknown")
        sources.append(_output_change(dtype, rnd, r1, None if code_equal and unread else code_equal and artifact_equal))
    return sources, code_diff


def _artifact_rows(name: str, dtype: str, rnd: Round, r1: Round) -> list[dict[str, Any]]:
    """One row per compiled kernel of ``rnd`` for ``dtype``, compared with round 1's kernel of that name."""
    rec = rnd.records[dtype]
    rows = []
    for art in rec["artifacts"]:
        ref_art = next((a for a in r1.records[dtype]["artifacts"] if a["kernel"] == art["kernel"]), None)
        same = ref_art is not None and (ref_art["sha256"], ref_art["autotune_choice"]) == (
            art["sha256"],
            art["autotune_choice"],
        )
        same_file = ref_art is None or ref_art.get("file_sha256") == art.get("file_sha256")
        rows.append(
            {
                "round": name,
                "dtype": dtype,
                "threads": rec["threads"],
                "kernel": art["kernel"],
                "kind": art["kind"],
                "artifact_sha256": art["sha256"],
                "file_sha256": art.get("file_sha256", art["sha256"]),
                "bytes": art["size"],
                "autotune_choice": art["autotune_choice"],
                "equal_to_round1": "reference" if name == "round1" else ("yes" if same else "no"),
                "byte_difference": ""
                if name == "round1" or same_file
                else describe_byte_difference(
                    _artifact_bytes(r1.artifacts, dtype, art["kernel"]) or b"",
                    _artifact_bytes(rnd.artifacts, dtype, art["kernel"]) or b"",
                ),
                "detail": art["detail"],
            }
        )
    return rows


def _summary_row(
    name: str, dtype: str, rnd: Round, r1: Round, ulps: tuple[list[int | None], list[int | None]], sources: list[str]
) -> dict[str, Any]:
    """The ``determinism_summary`` row of ``rnd`` for ``dtype``; ``ulps`` the per-run distances to
    the round's first output and to round 1's."""
    rec, r1_rec = rnd.records[dtype], r1.records[dtype]
    hashes = rec["hashes"]
    known_round = [u for u in ulps[0] if u is not None]
    known_r1 = [u for u in ulps[1] if u is not None]
    reference = name == "round1"
    return {
        "dtype": dtype,
        "round": name,
        "process": rnd.process,
        "compiler_cache": rnd.compiler_cache,
        "threads": rec["threads"],
        "run_count": len(hashes),
        "unique_output_hashes": len(set(hashes)),
        "max_ulp_diff_across_runs": max(known_round) if len(known_round) == len(hashes) else None,
        "outputs_equal_round1": "yes" if set(hashes) == {r1_rec["hashes"][0]} else "no",
        "max_ulp_vs_round1": max(known_r1) if len(known_r1) == len(hashes) else None,
        "code_sha256": rec["code_sha256"],
        "kernel_hash_equal_across_cold_start": "reference (round 1 source)"
        if reference
        else ("yes" if rec["code_sha256"] == r1_rec["code_sha256"] else "no"),
        "artifact_sha256": rec["artifact_sha256"],
        "artifact_hash_equal_across_cold_start": (artifacts_not_applicable(rec) or "reference (H_k0)")
        if reference
        else artifact_state(rec, r1_rec),
        "artifact_kinds": ", ".join(sorted({a["kind"] for a in rec["artifacts"]})) or "none",
        "autotune_choice": " | ".join(a["autotune_choice"] for a in rec["artifacts"] if a["autotune_choice"])
        or "none (no autotuning)",
        "difference_source": "; ".join(sources) or "none",
        "kernel_count": rec["kernel_count"],
        "extern_calls": rec["extern_calls"],
        "graph_breaks": rec["graph_breaks"],
        "recompiles": rec["recompiles"],
        # the precisions the compiler's units ran in ("" where it does not say; a record before it was kept)
        "precisions": rec.get("precisions", ""),
        # why the compiler did not fuse this dtype's FFN (it ran it in torch after failing it); null when fused
        "not_fused": rec.get("not_fused"),
        "compile_seconds": round(rec["compile_seconds"], 3),
        "ms_per_run": round(1000 * rec["seconds_all_runs"] / len(hashes), 3),
    }


@dataclass(frozen=True)
class DeterminismTables:
    """The three tables of task A, and the generated-source diffs against round 1 by ``<round>/<dtype>``."""

    runs: pl.DataFrame
    summary: pl.DataFrame
    artifacts: pl.DataFrame
    code_diffs: dict[str, str]


def determinism_tables(rounds: dict[str, Round]) -> DeterminismTables:
    """Per dtype and round (round 1 first): the run log, the summary row and the artifact rows. Reads
    the rounds' artifact files, so it runs while their folders exist."""
    run_rows: list[dict[str, Any]] = []
    summary_rows: list[dict[str, Any]] = []
    artifact_rows: list[dict[str, Any]] = []
    diffs: dict[str, str] = {}
    r1 = rounds["round1"]
    for dtype in DETERMINISM_DTYPES:
        for name, rnd in rounds.items():
            rows, ulps_round, ulps_r1 = _run_rows(name, dtype, rnd, r1)
            run_rows += rows
            sources, code_diff = difference_sources(name, dtype, rnd, r1)
            if code_diff is not None:
                diffs[f"{name}/{dtype}"] = code_diff
            artifact_rows += _artifact_rows(name, dtype, rnd, r1)
            summary_rows.append(_summary_row(name, dtype, rnd, r1, (ulps_round, ulps_r1), sources))
    summary = pl.DataFrame(summary_rows, schema_overrides={"not_fused": pl.String})
    return DeterminismTables(
        pl.DataFrame(run_rows), summary, pl.DataFrame(artifact_rows, schema=_ARTIFACT_SCHEMA), diffs
    )


def summary_metadata(
    summary: pl.DataFrame, diffs: dict[str, str], wall: dict[str, float], default_threads: int, alt_threads: int
) -> dict[str, Any]:
    """Metadata of ``determinism_summary``: the fp16 headline of round 1 and the cold round, the
    thread-count round's outcome, the source diffs, wall-clock seconds and the table."""
    cold = summary.filter((pl.col("dtype") == "float16") & (pl.col("round") == "round2_cold"))
    # Without a cold round (a profile that skips it) its fields read "not run".
    headline: dict[str, Any] = cold.row(0, named=True) if cold.height else {}
    r1_fp16 = summary.filter((pl.col("dtype") == "float16") & (pl.col("round") == "round1")).row(0, named=True)
    alt_rows = summary.filter(pl.col("round").str.starts_with("cold_threads")).iter_rows(named=True)
    return {
        "cold_start_rounds": "run" if cold.height else "not run (the profile skips them)",
        "fp16_run_count": int(r1_fp16["run_count"]),
        "fp16_unique_output_hashes_round1": int(r1_fp16["unique_output_hashes"]),
        "fp16_unique_output_hashes_round2": int(headline["unique_output_hashes"]) if headline else "not run",
        # -1: some outputs were beyond the distinct ones kept, so the distance is unknown
        "fp16_max_ulp_diff_across_runs": -1
        if r1_fp16["max_ulp_diff_across_runs"] is None
        else int(r1_fp16["max_ulp_diff_across_runs"]),
        "fp16_kernel_hash_equal_across_cold_start": headline.get("kernel_hash_equal_across_cold_start", "not run"),
        "fp16_artifact_hash_equal_across_cold_start": headline.get("artifact_hash_equal_across_cold_start", "not run"),
        "fp16_outputs_equal_across_cold_start": headline.get("outputs_equal_round1", "not run"),
        # H_k0; where the compiler exposes no binary, why there is none
        "H_k0_fp16": r1_fp16["artifact_sha256"] or r1_fp16["artifact_hash_equal_across_cold_start"],
        "source_sha256_round1_fp16": r1_fp16["code_sha256"],
        "artifact_kinds": ", ".join(sorted(set(summary["artifact_kinds"].to_list()))),
        "default_threads": default_threads,
        "alt_threads": alt_threads,
        "outputs_equal_with_alt_threads": ", ".join(f"{r['dtype']}={r['outputs_equal_round1']}" for r in alt_rows),
        "code_differs_from_H_k0": dg.MetadataValue.md(
            "\n\n".join(f"**{k}**\n```\n{v}\n```" for k, v in diffs.items()) or "no round generated other code"
        ),
        **{f"wall_seconds.{k}": round(v, 2) for k, v in wall.items()},
        "table": dg.MetadataValue.md(markdown_table(summary.select(_SUMMARY_COLUMNS))),
    }
