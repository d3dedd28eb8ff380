"""Healthy-compiler sweep: the whole report under several seeds, thread counts and CPU ISAs, each run in its
own data folder and Dagster home, then every experiment's verdict and every test's smallest p-value.

A healthy compiler must contradict nothing at any seed, thread count or ISA; a verdict that flips with the
thread count is a false alarm. Each run is ``python -m pipeline.cli report --profile P --seed S`` with
``OMP_NUM_THREADS`` and, for ``--isa avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2`` and an
Inductor cache of its own (shared by the runs of one ISA). Runs of one thread each go side by side, one per
core (``--parallel``). Usage:

    .venv/bin/python scripts/healthy_sweep.py --seeds 1 2 --threads 1 --isa native avx2 --out /tmp/sweep
    .venv/bin/python scripts/healthy_sweep.py --out /tmp/sweep --summary   # the table of runs already made
    .venv/bin/python scripts/healthy_sweep.py --seeds 4 5 --threads 1 --only A,B,D,E --out /tmp/sweep-t1  # some

A run stopped before it printed its outcome table (at ``--timeout``, or killed) is still recorded: its
outcomes are read from every check evaluation its Dagster instance holds (``outcomes_from`` says which).
Prints, per run, its wall time, each experiment's validity and verdict, and per stored table every
p-value column's minimum (``p_holm``, ``*_p_holm``, ``p_value``, ``p_*``), the evidence that nothing came
near rejection. Records land in ``<out>/<run>/sweep.json``.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl

REPO = Path(__file__).resolve().parents[1]
P_COLUMN = re.compile(r"(^|_)p(_holm|_value|_adjusted)?$|^p_")
OUTCOME_ROW = re.compile(r"^(\S+)\s+(valid|invalid|incomplete|not yet run|failed)\s+(.+?)\s{2,}(\d+)\s*$")


def run_name(seed: int, threads: int, isa: str) -> str:
    return f"seed{seed}-t{threads}-{isa}"


def run_env(out: Path, seed: int, threads: int, isa: str) -> dict[str, str]:
    folder = out / run_name(seed, threads, isa)
    env = {
        **os.environ,
        "FUSION_SEED": str(seed),
        "OMP_NUM_THREADS": str(threads),
        "DAGSTER_HOME": str(folder / "dagster_home"),
        "FUSION_DATA_DIR": str(folder / "data"),
        "FUSION_SITE_DIR": str(folder / "site"),  # runs side by side must not share the checkout's site/
        "TORCHINDUCTOR_CACHE_DIR": str(out / f"inductor-{isa}"),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": str(REPO),
    }
    slow = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    if isa == "avx2":
        return env | slow
    return {k: v for k, v in env.items() if k not in slow}  # native: whatever the calling shell set


def min_p_values(data: Path) -> dict[str, float]:
    """Per stored table and p-value column (``table.column``), its smallest value."""
    found: dict[str, float] = {}
    for path in sorted(data.rglob("*.parquet")):
        try:
            table = pl.read_parquet(path)
        except (OSError, pl.exceptions.PolarsError):
            continue
        for col in table.columns:
            if P_COLUMN.search(col) and table[col].dtype.is_numeric() and table[col].drop_nulls().len():
                found[f"{path.stem}.{col}"] = float(table[col].drop_nulls().min())  # type: ignore[arg-type]
    return found


def outcomes(stdout: str) -> dict[str, dict[str, str]]:
    """The report's closing outcome table: experiment -> validity, verdict, findings."""
    rows = {}
    for line in stdout.splitlines():
        m = OUTCOME_ROW.match(line.strip())
        if m and m.group(1) != "experiment":
            rows[m.group(1)] = {"validity": m.group(2), "verdict": m.group(3).strip(), "findings": m.group(4)}
    return rows


def recorded_outcome_table(instance: Any) -> str:
    """The outcome table of every check evaluation ``instance`` recorded (the last of each check), as the
    report prints it: also for a run stopped before it printed its own (at the sweep's cap, or killed)."""
    import dagster as dg

    from pipeline.definitions import defs
    from pipeline.run_summary import outcome_table

    last: dict[Any, Any] = {}
    for rec in sorted(instance.get_run_records(), key=lambda r: r.create_timestamp):
        for entry in instance.all_logs(rec.dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
            evaluation = entry.dagster_event.event_specific_data
            last[evaluation.asset_check_key] = evaluation
    known = defs.resolve_asset_graph().asset_check_keys  # a check renamed since the run is left out
    return outcome_table(defs, [e for k, e in last.items() if k in known], [])


def _collect(folder: Path, env: dict[str, str]) -> dict[str, dict[str, str]]:
    """A stopped run's outcomes, read from its own Dagster instance in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, __file__, "--collect"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    (folder / "collected.log").write_text(proc.stdout + proc.stderr)
    return outcomes(proc.stdout)


def report_command(profile: str, seed: int, only: str = "") -> list[str]:
    """The report one run makes: the whole profile, or with ``only`` (``report --only``'s comma list of
    experiment ids) those experiments, what they need upstream and the site."""
    cmd = [sys.executable, "-m", "pipeline.cli", "report", "--profile", profile, "--seed", str(seed)]
    return [*cmd, "--only", only] if only else cmd


def one_run(
    out: Path, profile: str, seed: int, threads: int, isa: str, timeout: float, only: str = ""
) -> dict[str, Any]:
    folder = out / run_name(seed, threads, isa)
    (folder / "dagster_home").mkdir(parents=True, exist_ok=True)
    (folder / "dagster_home" / "dagster.yaml").touch()
    t0 = time.perf_counter()
    cmd = report_command(profile, seed, only)
    try:
        proc = subprocess.run(
            cmd, cwd=REPO, env=run_env(out, seed, threads, isa), capture_output=True, text=True, timeout=timeout
        )
        log, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        parts = [p.decode(errors="replace") if isinstance(p, bytes) else (p or "") for p in (exc.stdout, exc.stderr)]
        log, rc = "".join(parts) + f"\n(stopped at {timeout:.0f} s)", -1
    (folder / "report.log").write_text(log)
    found = outcomes(log)
    stopped = not found  # no outcome table printed: stopped at the cap, or killed
    record = {
        "run": folder.name,
        "profile": profile,
        "only": only or "every experiment",
        "seed": seed,
        "threads": threads,
        "isa": isa,
        "returncode": rc,
        "seconds": round(time.perf_counter() - t0, 1),
        "outcomes": _collect(folder, run_env(out, seed, threads, isa)) if stopped else found,
        "outcomes_from": "the run's Dagster instance (no outcome table printed)" if stopped else "the report",
        "min_p": min_p_values(folder / "data" / profile),
    }
    (folder / "sweep.json").write_text(json.dumps(record, indent=1))
    return record


def summary(records: list[dict[str, Any]]) -> str:
    lines = ["| run | experiments | rc | minutes | contradicted | verdicts |", "|---|---|---|---|---|---|"]
    for r in records:
        bad = [e for e, o in r["outcomes"].items() if "contradicted" in o["verdict"]]
        verdicts = ", ".join(f"{e} {o['verdict']}" for e, o in r["outcomes"].items())
        lines.append(
            f"| {r['run']} | {r.get('only', 'every experiment')} | {r['returncode']} | {r['seconds'] / 60:.1f} "
            f"| {', '.join(bad) or 'none'} | {verdicts} |"
        )
    merged: dict[str, list[float]] = {}
    for r in records:
        for k, v in r["min_p"].items():
            merged.setdefault(k, []).append(v)
    lines += ["", "| table.column | smallest p over the runs | runs |", "|---|---|---|"]
    lines += [f"| {k} | {min(v):.3g} | {len(v)} |" for k, v in sorted(merged.items(), key=lambda kv: min(kv[1]))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/healthy_sweep.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder for every run's data, Dagster home and log")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--isa", nargs="+", choices=("native", "avx2"), default=["native"])
    ap.add_argument("--parallel", type=int, default=0, help="runs at once (0: one per core for 1-thread runs, else 1)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    ap.add_argument("--only", default="", help="report --only's comma list of experiment ids (default: every one)")
    ap.add_argument("--summary", action="store_true", help="only print the table of the runs recorded under --out")
    ap.add_argument(
        "--collect", action="store_true", help="print the outcome table recorded in $DAGSTER_HOME's instance (internal)"
    )
    ns = ap.parse_args(argv)
    if ns.collect:
        from pipeline.cli import local

        print(recorded_outcome_table(local.local_instance()))
        return 0
    if ns.out is None:
        ap.error("--out is required")
    if ns.summary:
        records = [json.loads(p.read_text()) for p in sorted(ns.out.glob("*/sweep.json"))]
        print(summary(records) if records else f"no runs recorded under {ns.out}")
        return 0
    plan = [(s, t, i) for i in ns.isa for t in ns.threads for s in ns.seeds]
    width = ns.parallel or (max(1, (os.cpu_count() or 1) // max(ns.threads)))
    with cf.ThreadPoolExecutor(width) as pool:
        futures = [pool.submit(one_run, ns.out, ns.profile, s, t, i, ns.timeout, ns.only) for s, t, i in plan]
        records = []
        for f in cf.as_completed(futures):
            records.append(f.result())
            r = records[-1]
            print(f"{r['run']}: rc {r['returncode']} in {r['seconds'] / 60:.1f} min", flush=True)
    print(summary(sorted(records, key=lambda r: r["run"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
