"""The local Dagster instance this command records its runs in, and the runs it left behind."""

import os
import platform
from pathlib import Path

import dagster as dg

from ..resources import REPO_ROOT

#: Tags on runs this command starts: which process ran them, on which machine.
CLI_PID_TAG, CLI_HOST_TAG = "fusion/cli_pid", "fusion/cli_host"


#: The project's instance settings: telemetry off, one heavy step and one run at a time.
PROJECT_INSTANCE_YAML = REPO_ROOT / ".dagster_home" / "dagster.yaml"


def local_instance() -> dg.DagsterInstance:
    """The instance under ``$DAGSTER_HOME`` (``<repo>/.dagster_home`` when unset), so the runs show in the UI."""
    os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT / ".dagster_home"))
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    home = Path(os.environ["DAGSTER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    settle_instance_yaml(home / "dagster.yaml")
    return dg.DagsterInstance.get()


def settle_instance_yaml(path: Path) -> None:
    """Telemetry stays off in any instance this command uses: Dagster reads it from ``dagster.yaml``
    alone (the environment variable only stops uploads). A missing or empty file gets the project's
    settings (telemetry off, the one-step-at-a-time pools); a file of someone's own settings that
    says nothing of telemetry gets ``telemetry: enabled: false`` appended; one that does is kept."""
    text = path.read_text() if path.is_file() else ""
    if not text.strip():
        if path.resolve() != PROJECT_INSTANCE_YAML.resolve():
            path.write_text(PROJECT_INSTANCE_YAML.read_text())
    elif not any(line.startswith("telemetry:") for line in text.splitlines()):
        path.write_text(
            text.rstrip("\n")
            + "\n\n# Added by the pipeline's CLI: no usage statistics leave this machine.\ntelemetry:\n  enabled: false\n"
        )


def run_tags() -> dict[str, str]:
    """The tags a run this process starts carries (:func:`release_interrupted_runs` reads them)."""
    return {CLI_PID_TAG: str(os.getpid()), CLI_HOST_TAG: platform.node()}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"pipeline.cli" in f.read()
    except OSError:
        if not Path("/proc").is_dir():  # no procfs: ask the OS whether the pid exists
            try:
                os.kill(pid, 0)
                return True
            except OSError:
                return False
        return False


def release_interrupted_runs(instance: dg.DagsterInstance) -> list[str]:
    """Runs this command started whose process is gone (killed, crashed) still read as in
    progress and still hold their slots of the one-step-at-a-time pool, so the next run would wait
    for them forever: mark them failed and free their slots. Returns their run ids."""
    statuses = [
        dg.DagsterRunStatus.STARTED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.NOT_STARTED,
        dg.DagsterRunStatus.CANCELING,
    ]
    released = []
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=statuses, tags={CLI_HOST_TAG: platform.node()}))
    for run in runs:
        pid = int(run.tags.get(CLI_PID_TAG, "0") or 0)
        if pid and pid != os.getpid() and _alive(pid):
            continue
        instance.report_run_failed(run, f"interrupted: the command that ran it (pid {pid}) is gone")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        released.append(run.run_id)
    return released
