"""Task A: run-to-run and cold-start determinism of the fused FFN first half (main document §3.3).

Round 1 compiles in this process and runs N times; round 2 is a fresh process with an empty,
disabled compiler cache that recompiles and runs N times; a third, cheaper round repeats the cold
start with another CPU thread count (profiles with ``determinism_cold_start`` off, i.e. smoke, run
round 1 only). Every output is hashed (md5 of its raw bytes). Each round
records two hashes of what it compiled: the normalized generated *source* (``code_sha256``) and
the compiled *artifact* of every kernel (``artifact_sha256``: the shared object Inductor loads on
the CPU; the cubin/PTX and the autotuning choice of each Triton kernel on CUDA, see
:mod:`pipeline.artifacts`). Round 1's artifact hash is H_k0, the seed's fusion-kernel binary hash.
Where a hash is not the same, the row says where the difference was measured (which kernel,
which source lines, which bytes) in ``difference_source``.
"""

import difflib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import torch
from safetensors.torch import load_file, save_file

from precisionkit import ulp_diff

from ...artifacts import describe_byte_difference
from ...progress import Progress
from ...resources import REPO_ROOT, ExperimentSettings
from ...scalars import as_int
from ...tables import markdown_table
from ...verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    SUPPORTED,
    Rule,
    claim_check,
    claim_result,
    finding_check,
    finding_result,
    validity_check,
    validity_result,
)
from ...workloads import WORKLOADS
from .spec import GROUP
from .worker import cold_cache_env, run_round

DETERMINISM_DTYPES = ("float16", "bfloat16", "float32")  # fp16 is the seed's headline row
#: runs of the thread-count round: a cheap extra, not part of the seed's table
THREAD_ROUND_RUNS = 25
WORKER_TIMEOUT_S = 3600


def other_thread_count(default: int) -> int:
    """The thread count of the extra round: 1, or 2 where the default already is 1."""
    return 1 if default > 1 else 2


def _fresh_round(
    inputs_file: Path, out_dir: Path, runs: int, threads: int, settings: ExperimentSettings
) -> tuple[dict[str, Any], dict[str, torch.Tensor], float]:
    """Run one round in a new Python process whose compiler cache is a new empty folder."""
    cache = tempfile.mkdtemp(prefix="inductor_cold_", dir=out_dir)
    cmd = [
        sys.executable,
        "-m",
        "pipeline.experiments.determinism.worker",
        "--inputs",
        str(inputs_file),
        "--out",
        str(out_dir / f"round_t{threads}"),
        "--runs",
        str(runs),
        "--dtypes",
        ",".join(DETERMINISM_DTYPES),
        "--threads",
        str(threads),
        "--device",
        str(settings.torch_device()),
        "--backend",
        settings.backend,
        "--options",
        json.dumps(settings.options()),
    ]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, env=cold_cache_env(cache), cwd=REPO_ROOT, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"determinism worker failed (exit {proc.returncode}): {proc.stderr[-4000:]}")
    result = json.loads((out_dir / f"round_t{threads}" / "result.json").read_text())
    if result["cache_files_before_compile"]:
        raise RuntimeError(f"the cold-start cache {cache} was not empty before compiling")
    return result, load_file(str(out_dir / f"round_t{threads}" / "outputs.safetensors")), wall


def _artifact_bytes(folder: Path, dtype: str, kernel: str) -> bytes | None:
    path = folder / dtype / f"{kernel}.bin"
    return path.read_bytes() if path.is_file() else None


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


@dataclass(frozen=True)
class Round:
    """One round: per dtype the worker's record (hashes, code, artifacts, fusion evidence; see
    :func:`pipeline.experiments.determinism.worker.run_round`), the distinct outputs it kept (key
    ``<dtype>/<md5>``), the process and compiler cache it ran with, and its artifact folder."""

    records: dict[str, dict[str, Any]]
    distinct: dict[str, torch.Tensor]
    process: str
    compiler_cache: str
    artifacts: Path


def determinism_inputs(pool: Any) -> dict[str, torch.Tensor]:
    """The first ``normal`` set of the FFN pool per dtype, keyed ``<dtype>/<argument>``."""
    names = WORKLOADS["ffn"].arg_names
    return {f"{d}/{a}": pool[f"normal/{d}/{a}"][0].contiguous() for d in DETERMINISM_DTYPES for a in names}


def cold_rounds(runs: int, default_threads: int) -> list[tuple[str, int, int]]:
    """(name, threads, runs) of the two cold-start rounds: the seed's, with the default thread count,
    and the cheaper one with another thread count."""
    alt = other_thread_count(default_threads)
    return [("round2_cold", default_threads, runs), (f"cold_threads_{alt}", alt, min(runs, THREAD_ROUND_RUNS))]


def run_rounds(
    inputs: dict[str, torch.Tensor],
    runs: int,
    cold: list[tuple[str, int, int]],
    settings: ExperimentSettings,
    folder: Path,
    log: Callable[[str], None] | None,
) -> tuple[dict[str, Round], dict[str, float]]:
    """Round 1 in this process, then the ``cold`` rounds side by side in fresh processes (files under
    ``folder``); returns the rounds by name and each one's wall-clock seconds."""
    start = time.perf_counter()
    r1_records, r1_distinct = run_round(
        inputs,
        list(DETERMINISM_DTYPES),
        runs,
        settings.torch_device(),
        settings.backend,
        settings.options(),
        artifact_dir=folder / "round1" / "artifacts",
        log=log,
    )
    wall = {"round1": time.perf_counter() - start}
    rounds = {"round1": Round(r1_records, r1_distinct, "in-process", "as configured", folder / "round1" / "artifacts")}
    if not cold:
        return rounds, wall
    inputs_file = folder / "inputs.safetensors"
    save_file(inputs, str(inputs_file))
    # The two fresh processes run side by side: each is mostly single-threaded import, tracing and
    # C++ compilation, and their outputs do not depend on the load (the thread count is set per process).
    progress = Progress(log, "cold-start rounds (fresh processes, concurrent)", len(cold), every=0.0)
    with ThreadPoolExecutor(max_workers=len(cold)) as pool_exec:
        futures = {
            name: pool_exec.submit(_fresh_round, inputs_file, folder, n, threads, settings) for name, threads, n in cold
        }
        for future in as_completed(futures.values()):
            progress.advance(note=next(k for k, f in futures.items() if f is future))
    for name, threads, _ in cold:
        result, distinct, seconds = futures[name].result()
        wall[name] = seconds
        process = f"fresh (pid {result['pid']})"
        rounds[name] = Round(
            result["records"], distinct, process, "empty, caches off", folder / f"round_t{threads}" / "artifacts"
        )
    return rounds, wall


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


def _output_change(dtype: str, rnd: Round, r1: Round, program_equal: bool) -> str:
    """How the outputs of ``rnd`` differ from round 1's, and whether the compiled program changed."""
    rec, r1_rec = rnd.records[dtype], r1.records[dtype]
    extern = f"extern calls: {rec['extern_calls'] or 'none'}"
    if not program_equal:
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
    artifact_equal = rec["artifact_sha256"] == r1_rec["artifact_sha256"]
    code_diff = None
    if not code_equal:
        code_diff = _code_diff(r1_rec["code"], rec["code"])
        sources.append("generated source differs from round 1: " + code_diff.replace("\n", " | "))
    if not artifact_equal:
        sources.append(
            "compiled artifact differs from round 1: "
            + artifact_difference(r1_rec["artifacts"], rec["artifacts"], r1.artifacts, rnd.artifacts, dtype)
        )
    if set(hashes) != {r1_rec["hashes"][0]}:
        sources.append(_output_change(dtype, rnd, r1, code_equal and artifact_equal))
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
        "artifact_hash_equal_across_cold_start": "reference (H_k0)"
        if reference
        else ("yes" if rec["artifact_sha256"] == r1_rec["artifact_sha256"] else "no"),
        "artifact_kinds": ", ".join(sorted({a["kind"] for a in rec["artifacts"]})) or "none",
        "autotune_choice": " | ".join(a["autotune_choice"] for a in rec["artifacts"] if a["autotune_choice"])
        or "none (no autotuning)",
        "difference_source": "; ".join(sources) or "none",
        "kernel_count": rec["kernel_count"],
        "extern_calls": rec["extern_calls"],
        "graph_breaks": rec["graph_breaks"],
        "recompiles": rec["recompiles"],
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
    return DeterminismTables(
        pl.DataFrame(run_rows), pl.DataFrame(summary_rows), pl.DataFrame(artifact_rows, schema=_ARTIFACT_SCHEMA), diffs
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
        "H_k0_fp16": r1_fp16["artifact_sha256"],
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


@dg.multi_asset(
    group_name=GROUP,
    pool="compute_device",
    ins={"pool": dg.AssetIn("input_pool_ffn")},
    outs={
        "determinism_runs": dg.AssetOut(
            description="Per-run output hash log of task A (round, dtype, threads, run index, md5, ULP distances).",
            kinds={"pytorch", "polars"},
            is_required=True,
        ),
        "determinism_summary": dg.AssetOut(
            description=(
                "Feeds main document §3.3. One row per dtype x round: run count / unique output hashes / "
                "max ULP across runs / generated-code hash equal across cold start, with fusion evidence."
            ),
            kinds={"polars"},
            is_required=True,
        ),
        "determinism_artifacts": dg.AssetOut(
            description="Feeds main document §3.3 (H_k0). One row per round x dtype x generated kernel: the compiled "
            "artifact that runs (CPU shared object; Triton cubin with its autotuning choice on CUDA), its sha256 and size, "
            "whether it equals round 1's (artifact_sha256: the loaded sections of a shared object; file_sha256: "
            "the whole file), and where the file's bytes differ when they do.",
            kinds={"polars"},
            is_required=True,
        ),
    },
)
def determinism(context: dg.AssetExecutionContext, settings: ExperimentSettings, pool: Any):  # lazy SetTensors
    """Round 1 in process, round 2 cold in a fresh process, round 3 cold with another thread count."""
    profile = settings.get_profile()
    runs = profile.determinism_runs
    inputs = determinism_inputs(pool)
    default_threads = torch.get_num_threads()
    cold = cold_rounds(runs, default_threads) if profile.determinism_cold_start else []
    _, alt_threads, thread_runs = cold[1] if cold else ("", other_thread_count(default_threads), 0)
    with tempfile.TemporaryDirectory(prefix="determinism_") as tmp:
        rounds, wall = run_rounds(inputs, runs, cold, settings, Path(tmp), context.log.info)
        tables = determinism_tables(rounds)
    context.add_output_metadata(
        {"rows": tables.runs.height, "runs_per_round": runs, "thread_round_runs": thread_runs},
        output_name="determinism_runs",
    )
    context.add_output_metadata(
        summary_metadata(tables.summary, tables.code_diffs, wall, default_threads, alt_threads),
        output_name="determinism_summary",
    )
    context.add_output_metadata(
        {
            "rows": tables.artifacts.height,
            "kernels_differing_from_round1": int((tables.artifacts["equal_to_round1"] == "no").sum()),
            "table": dg.MetadataValue.md(markdown_table(tables.artifacts.drop("detail"))),
        },
        output_name="determinism_artifacts",
    )
    return tables.runs, tables.summary, tables.artifacts


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


# --- checks -----------------------------------------------------------------------------------

SUMMARY = dg.AssetKey("determinism_summary")

_SAMPLE = (
    "one fixed seeded FFN input per dtype (fp16 headline, bf16 and fp32 extra rows); the profile's "
    "determinism_runs runs in round 1 and in the cold round (1000 in the seed profile), "
    f"min(determinism_runs, {THREAD_ROUND_RUNS}) in the thread-count round; the smoke profile runs no cold "
    "round (determinism_cold_start), so there the cold-start claim is inconclusive"
)

RULE_ONE_HASH = Rule(
    claim="§3.3: with compile-time and runtime inputs unchanged, every run of the fused FFN first half gives the same output bits",
    metric="distinct md5 hashes of the raw output bytes per dtype x round, minus one",
    decision="contradicted when any dtype x round (any process, any thread count) has more than one output hash; "
    "supported when every row has exactly one; inconclusive when the table has no row",
    threshold=0,
    unit="extra distinct output hashes",
    confidence=None,
    sample_size=_SAMPLE,
    derivation="the claim is exact (binary consistency), so any second hash contradicts it; no statistics: a "
    "single differing run is a counterexample",
)

RULE_ZERO_ULP = Rule(
    claim="§3.3: the runs of one round do not differ by even one ULP (the seed's table: max ULP diff 0)",
    metric="max ULP distance between each run's output and the round's first output, per dtype x round",
    decision="contradicted when any dtype x round has a max ULP distance above 0; inconclusive when some distance "
    "is unknown (more distinct outputs than the worker keeps) and none measured is above 0, or the table is "
    "empty; supported when every distance is 0",
    threshold=0,
    unit="ULP",
    confidence=None,
    sample_size=_SAMPLE,
    derivation="the seed's expected row is run count / 1 / 0: any non-zero distance contradicts an exact claim",
)

RULE_COLD_START = Rule(
    claim="§3.3: a cold start (fresh process, empty and disabled compiler caches, same threads) recompiles to the "
    "same kernel binaries (artifact hash H_k0) and reproduces round 1's output bits",
    metric="per dtype: sha256 of the compiled artifacts of the cold round vs H_k0 (round 1: CPU shared objects; "
    "Triton cubins and autotuning choices on CUDA), sha256 of the normalized generated source vs round 1's, and "
    "the output hash set vs round 1's",
    decision="contradicted when, for any dtype, the cold round's artifact hash differs from H_k0, its source hash "
    "differs from round 1's, or its outputs differ from round 1's; inconclusive when there is no cold round row; "
    "supported otherwise",
    threshold=0,
    unit="dtypes whose code hash or output bits changed across the cold start",
    confidence=None,
    sample_size=_SAMPLE,
    derivation="the seed's steps 1, 4-5: H_k0 is the fusion kernel binary hash, and the second round's kernel hash "
    "should equal it and its output md5 round 1's; all are exact equalities",
)


def _rows(frame: pl.DataFrame) -> str:
    return ", ".join(f"{r['dtype']}/{r['round']}" for r in frame.iter_rows(named=True)) or "none"


def _measured(frame: pl.DataFrame) -> str:
    """The measured source of every difference in ``frame``'s rows (``difference_source``)."""
    if "difference_source" not in frame.columns:
        return "not measured (no difference_source column)" if frame.height else "none"
    parts = [
        f"{r['dtype']}/{r['round']}: {r['difference_source']}"
        for r in frame.iter_rows(named=True)
        if r["difference_source"] not in (None, "none")
    ]
    return "; ".join(parts) or "none"


def _artifact_moved(frame: pl.DataFrame) -> pl.DataFrame:
    if "artifact_hash_equal_across_cold_start" not in frame.columns:
        return frame.clear()
    return frame.filter(pl.col("artifact_hash_equal_across_cold_start") != "yes")


@claim_check(
    rule=RULE_ONE_HASH,
    asset=SUMMARY,
    description="Claim (§3.3): each round (fresh or not, any thread count) produced exactly one output hash per dtype.",
)
def one_output_hash_per_round(determinism_summary: pl.DataFrame) -> dg.AssetCheckResult:
    bad = determinism_summary.filter(pl.col("unique_output_hashes") != 1)
    if determinism_summary.height == 0:
        verdict, reason = INCONCLUSIVE, "the summary has no row"
    elif bad.height:
        verdict, reason = CONTRADICTED, f"several output hashes in {_rows(bad)}"
    else:
        verdict, reason = SUPPORTED, f"one output hash in each of {determinism_summary.height} dtype x round rows"
    return claim_result(
        verdict,
        RULE_ONE_HASH,
        reason,
        {
            "rows_with_several_hashes": _rows(bad),
            "max_unique_hashes": as_int(determinism_summary["unique_output_hashes"].max() or 0, "unique_output_hashes"),
            "measured_source": _measured(bad),
        },
    )


@claim_check(
    rule=RULE_ZERO_ULP,
    asset=SUMMARY,
    description="Claim (§3.3): max ULP distance between runs of a round is 0 for every dtype and round.",
)
def zero_ulp_within_round(determinism_summary: pl.DataFrame) -> dg.AssetCheckResult:
    col = pl.col("max_ulp_diff_across_runs")
    above = determinism_summary.filter(col.is_not_null() & (col != 0))
    unknown = determinism_summary.filter(col.is_null())
    if above.height:
        verdict, reason = (
            CONTRADICTED,
            f"runs differ by up to {as_int(above['max_ulp_diff_across_runs'].max(), 'max_ulp_diff_across_runs')} ULP in {_rows(above)}",
        )
    elif unknown.height or determinism_summary.height == 0:
        verdict, reason = (
            INCONCLUSIVE,
            (
                f"ULP distance unknown in {_rows(unknown)} (more distinct outputs than kept)"
                if unknown.height
                else "the summary has no row"
            ),
        )
    else:
        verdict, reason = SUPPORTED, f"0 ULP between runs in each of {determinism_summary.height} dtype x round rows"
    return claim_result(
        verdict,
        RULE_ZERO_ULP,
        reason,
        {
            "rows_not_zero": _rows(above),
            "rows_unknown": _rows(unknown),
            "measured_source": _measured(pl.concat([above, unknown])),
        },
    )


@claim_check(
    rule=RULE_COLD_START,
    asset=SUMMARY,
    description="Claim (§3.3): cold start (fresh process, empty cache, same threads) recompiles to kernel binaries with "
    "artifact hash H_k0, the same generated source, and round 1's output bits.",
)
def cold_start_reproduces_round1(determinism_summary: pl.DataFrame) -> dg.AssetCheckResult:
    cold = determinism_summary.filter(pl.col("round") == "round2_cold")
    code_bad = cold.filter(pl.col("kernel_hash_equal_across_cold_start") != "yes")
    artifact_bad = _artifact_moved(cold)
    out_bad = cold.filter(pl.col("outputs_equal_round1") != "yes")
    if cold.height == 0:
        verdict, reason = INCONCLUSIVE, "no cold-start round in the summary"
    elif code_bad.height or artifact_bad.height or out_bad.height:
        verdict, reason = (
            CONTRADICTED,
            (
                f"artifact hash differs from H_k0: {_rows(artifact_bad)}; source hash differs from "
                f"round 1: {_rows(code_bad)}; outputs differ from round 1: {_rows(out_bad)}"
            ),
        )
    else:
        verdict, reason = (
            SUPPORTED,
            (f"artifact hash H_k0, round 1's source hash and output bits reproduced for {cold.height} dtypes"),
        )
    return claim_result(
        verdict,
        RULE_COLD_START,
        reason,
        {
            "cold_rows": cold.height,
            "artifact_hash_differs": _rows(artifact_bad),
            "code_hash_differs": _rows(code_bad),
            "outputs_differ": _rows(out_bad),
            "measured_source": _measured(cold),
        },
    )


@validity_check(
    asset=SUMMARY,
    description="Run validity: every round ran its planned number of runs through a fused program (kernels "
    "generated), with no recompilation during the runs and no graph break.",
)
def no_recompiles_during_runs(determinism_summary: pl.DataFrame, settings: ExperimentSettings) -> dg.AssetCheckResult:
    profile = settings.get_profile()
    runs = profile.determinism_runs
    planned = {"round1": runs}
    if profile.determinism_cold_start:
        planned.update({"round2_cold": runs, "cold_threads": min(runs, THREAD_ROUND_RUNS)})
    broken = determinism_summary.filter((pl.col("recompiles") != 0) | (pl.col("graph_breaks") != 0))
    unfused = determinism_summary.filter(pl.col("kernel_count") < 1)
    problems = []
    if broken.height:
        problems.append(f"recompiled or broken graph in {_rows(broken)}")
    if unfused.height:
        problems.append(f"no generated kernel in {_rows(unfused)}")
    for name, n in planned.items():
        got = determinism_summary.filter(pl.col("round").str.starts_with(name))
        short = got.filter(pl.col("run_count") != n)
        if got.height != len(DETERMINISM_DTYPES):
            problems.append(f"{name}: {got.height} dtype rows, planned {len(DETERMINISM_DTYPES)}")
        if short.height:
            problems.append(f"{name}: run counts {short['run_count'].to_list()} instead of {n} in {_rows(short)}")
    return validity_result(
        problems,
        {
            "rows_recompiled_or_broken": _rows(broken),
            "max_recompiles": as_int(determinism_summary["recompiles"].max() or 0, "recompiles"),
            "min_kernel_count": as_int(determinism_summary["kernel_count"].min() or 0, "kernel_count"),
            "planned_runs_per_round": runs,
            "planned_rounds": ", ".join(planned),
            "measured_source": _measured(broken),
        },
    )


@finding_check(
    asset=SUMMARY,
    description="Finding: outputs with another CPU thread count compared with round 1 bit for bit (WARN when they "
    "differ; §3.3 fixes the runtime, so another thread count is outside its claim).",
)
def thread_count_output_comparison(
    determinism_summary: pl.DataFrame, settings: ExperimentSettings
) -> dg.AssetCheckResult:
    alt = determinism_summary.filter(pl.col("round").str.starts_with("cold_threads"))
    differ = alt.filter(pl.col("outputs_equal_round1") != "yes")
    code_differs = alt.filter(pl.col("kernel_hash_equal_across_cold_start") != "yes")
    findings = []
    # A profile without cold-start rounds plans no thread-count round: nothing to report then.
    if alt.height == 0 and settings.get_profile().determinism_cold_start:
        findings.append("no thread-count round in the summary")
    if differ.height:
        findings.append(f"outputs differ from round 1 with another thread count: {_rows(differ)}")
    return finding_result(
        findings,
        {
            "rows": alt.height,
            "outputs_differ": _rows(differ),
            "max_ulp_vs_round1": ", ".join(f"{r['dtype']}={r['max_ulp_vs_round1']}" for r in alt.iter_rows(named=True)),
            "code_differs_from_round1": _rows(code_differs),
            "artifact_differs_from_H_k0": _rows(_artifact_moved(alt)),
            "measured_source": _measured(alt),
        },
    )
