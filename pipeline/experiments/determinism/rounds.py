"""Task A's rounds: round 1 in this process, the cold-start rounds in fresh processes.

Round 1 compiles the FFN first half in this process and runs it N times per dtype; each cold-start
round is a fresh Python process (:mod:`pipeline.experiments.determinism.worker`) whose compiler cache
is a new, empty and disabled folder. :func:`run_rounds` runs them and returns one :class:`Round` each.
The thread-count round is a CPU round: on an accelerator it is not planned
(:func:`thread_round_skipped`).
"""

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ...backends import registrar
from ...progress import Progress
from ...resources import REPO_ROOT, ExperimentSettings
from ...workloads import WORKLOADS
from .worker import cold_cache_env, format_runs, run_round

DETERMINISM_DTYPES = ("float16", "bfloat16", "float32")  # fp16 is the seed's headline row
#: runs of the thread-count round: a cheap extra, not part of the seed's table
THREAD_ROUND_RUNS = 25
WORKER_TIMEOUT_S = 3600


def thread_round_skipped(device_type: str) -> str | None:
    """Why the thread-count round does not run on ``device_type`` (``None`` on the CPU, where it runs)."""
    if device_type == "cpu":
        return None
    return (
        f"not run on {device_type}: the round changes torch's CPU thread count, and on {device_type} the "
        "compiled kernels run on the device, whose results that count does not reach; the cold round "
        "already covers the fresh process"
    )


def other_thread_count(default: int) -> int:
    """The thread count of the extra round: 1, or 2 where the default already is 1."""
    return 1 if default > 1 else 2


def _fresh_round(
    inputs_file: Path, out_dir: Path, runs: Mapping[str, int], threads: int, settings: ExperimentSettings
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
        format_runs(runs),
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
        "--register",
        registrar(settings.backend) or "",
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


def cold_rounds(
    runs: Mapping[str, int], default_threads: int, device_type: str = "cpu"
) -> list[tuple[str, int, dict[str, int]]]:
    """(name, threads, runs per dtype) of the cold-start rounds: the seed's, with the default thread
    count, and on the CPU the cheaper one with another thread count (:func:`thread_round_skipped`)."""
    rounds = [("round2_cold", default_threads, dict(runs))]
    if thread_round_skipped(device_type) is None:
        alt = other_thread_count(default_threads)
        rounds.append((f"cold_threads_{alt}", alt, {d: min(n, THREAD_ROUND_RUNS) for d, n in runs.items()}))
    return rounds


def run_rounds(
    inputs: dict[str, torch.Tensor],
    runs: Mapping[str, int],
    cold: list[tuple[str, int, dict[str, int]]],
    settings: ExperimentSettings,
    folder: Path,
    log: Callable[[str], None] | None,
) -> tuple[dict[str, Round], dict[str, float]]:
    """Round 1 in this process (``runs`` per dtype), then the ``cold`` rounds side by side in fresh
    processes (files under ``folder``); returns the rounds by name and each one's wall-clock seconds."""
    start = time.perf_counter()
    r1_records, r1_distinct = run_round(
        inputs,
        list(DETERMINISM_DTYPES),
        dict(runs),
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
