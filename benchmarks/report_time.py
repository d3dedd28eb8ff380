"""Wall time of a whole ``report`` run, per step, against the profile's budget. Prints the table; asserts nothing.

Runs ``python -m pipeline.cli report --all`` in a child process with its own temporary data folder
and Dagster instance (so nothing stored before is reused), by default on the slow 16-bit matmul
path of an AVX2-only CPU (``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``) and with an empty
Inductor cache of its own, then prints where the time went, read from that instance's event log.
The default profile is budgeted at 20 minutes on a 2-core CPU (pipeline/profiles.py). The report
site is built where ``make report`` builds it (``site/build``), from the temporary run's results.

    .venv/bin/python benchmarks/report_time.py                     # default profile, slow path, cold cache
    .venv/bin/python benchmarks/report_time.py --native --warm-cache  # this CPU's own ISA, the shared cache
    .venv/bin/python benchmarks/report_time.py --profile smoke --keep  # keep the temporary folder
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Restricts oneDNN and ATen to AVX2: fp16/bf16 matmul then takes the slow path.
SLOW_PATH = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}

Runner = Callable[..., "subprocess.CompletedProcess[bytes]"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    from pipeline.profiles import PROFILES

    ap = argparse.ArgumentParser(prog="benchmarks/report_time.py", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="default", choices=sorted(PROFILES))
    ap.add_argument("--native", action="store_true", help="this CPU's own ISA instead of the AVX2 slow path")
    ap.add_argument(
        "--warm-cache", action="store_true", help="use the usual Inductor cache instead of an empty one of its own"
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary data folder and Dagster instance")
    return ap.parse_args(argv)


def child_env(args: argparse.Namespace, work: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: a data folder and Dagster home under ``work``, the ISA restriction
    unless ``--native``, an empty Inductor cache under ``work`` unless ``--warm-cache``."""
    env = dict(os.environ if base is None else base)
    env.update(DAGSTER_HOME=str(work / "home"), FUSION_DATA_DIR=str(work / "data"), DAGSTER_DISABLE_TELEMETRY="1")
    if not args.native:
        env.update(SLOW_PATH)
    if not args.warm_cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor")
    return env


def prepare_home(home: Path) -> None:
    """The instance settings of the repository's own Dagster home (one step and one run at a time)."""
    home.mkdir(parents=True, exist_ok=True)
    config = REPO_ROOT / ".dagster_home" / "dagster.yaml"
    if config.is_file():
        shutil.copyfile(config, home / "dagster.yaml")


def report_command(profile: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "report", "--profile", profile, "--all"]


def time_table(home: Path, profile: str) -> tuple[str, int]:
    """The table of the profile's last run in the instance at ``home`` (and 0), or why not (and 2)."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    from pipeline.timing import last_run, table_for_run, text_table

    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        record = last_run(instance, profile)
        table = table_for_run(instance, record.dagster_run.run_id, profile) if record is not None else None
    if table is None:
        return f"report-time: the run recorded nothing in {home}", 2
    return text_table(table), 0


def main(argv: Sequence[str] | None = None, runner: Runner = subprocess.run) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="report-time-"))
    try:
        env = child_env(args, work)
        prepare_home(work / "home")
        path = "native ISA" if args.native else "slow path (AVX2)"
        cache = "usual Inductor cache" if args.warm_cache else "empty Inductor cache"
        print(f"report-time: profile {args.profile}, {path}, {cache}, data and instance in {work}", flush=True)
        done = runner(report_command(args.profile), env=env, cwd=REPO_ROOT, check=False)
        text, status = time_table(work / "home", args.profile)
        print(text)
        if done.returncode != 0:
            print(f"report-time: the report exited with status {done.returncode}", file=sys.stderr)
        return status or done.returncode
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
