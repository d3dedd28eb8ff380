"""Throwaway servers for the cluster tests: Postgres, Redis, Celery workers and a local S3 (moto).

Each listens on a free 127.0.0.1 port and keeps everything under one temporary folder;
:class:`Services` stops every one of them (servers, workers and their pool processes) and removes
the folder, also when the code between start and stop raised. :meth:`Services.leftovers` lists what
is still there after a stop (live pids, open ports, folders), which the fixtures and the teardown
test assert to be nothing.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The Celery queue of the heavy steps (pool compute_device) and the light ones (pipeline.cluster).
HEAVY_QUEUE, LIGHT_QUEUE = "compute_device", "dagster"
#: Worker names (Celery node names are NAME@host).
HEAVY_WORKER, LIGHT_WORKER = "heavy", "light"
#: Lines the tests report at the end of the session (run ids, per-worker step counts, durations).
SUMMARY: list[str] = []
#: Postgres refuses to run as root; the cluster runs as this user when the tests run as root.
PG_USER_WHEN_ROOT = "nobody"


class MissingServer(RuntimeError):
    """A server binary is not installed (the message names it and how to get it)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def postgres_bindir() -> Path:
    """The folder of ``initdb`` and ``pg_ctl``: on PATH, else Debian's newest ``/usr/lib/postgresql/*/bin``."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if candidates:
        return Path(candidates[-1]).parent
    raise MissingServer(
        "Postgres (initdb, pg_ctl) is not installed: apt-get install postgresql (make test-cluster does)"
    )


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if not found:
        raise MissingServer("redis-server is not installed: apt-get install redis-server (make test-cluster does)")
    return found


@dataclass
class Process:
    """A process this module started, in its own session (so its children die with it)."""

    name: str
    popen: subprocess.Popen
    port: int | None = None
    log: Path | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        """Signal the process group, wait, then SIGKILL whatever of it remains."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)
        # Pool children of a worker outlive their parent for a moment: kill what is left of the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)


def group_members(pgid: int) -> list[int]:
    """Live pids of process group ``pgid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


@dataclass
class Services:
    """Servers and workers under one temporary folder; a context manager that always stops them."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="fusion-cluster-")))
    processes: list[Process] = field(default_factory=list)
    pg_port: int | None = None
    pg_pid: int | None = None
    _pg_dir: Path | None = None
    #: Everything that :meth:`leftovers` checks after a stop: pids (and process groups), ports, folders.
    seen_pids: set[int] = field(default_factory=set)
    seen_ports: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        # The Postgres user (nobody, when running as root) must be able to reach its own folder.
        os.chmod(self.root, 0o711)

    def __enter__(self) -> Services:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- Postgres ---------------------------------------------------------------------------

    def _as_pg_user(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", PG_USER_WHEN_ROOT, "--", *argv] if os.geteuid() == 0 else argv

    def start_postgres(self) -> str:
        """A fresh cluster (database ``dagster``, user ``dagster``, trust auth on 127.0.0.1 only, the
        unix socket in its own folder); returns its URL."""
        bindir = postgres_bindir()
        pg_dir = self.root / "postgres"
        pg_dir.mkdir()
        if os.geteuid() == 0:
            shutil.chown(pg_dir, PG_USER_WHEN_ROOT)
        self._pg_dir = pg_dir
        data = pg_dir / "data"
        subprocess.run(
            self._as_pg_user(
                [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "dagster", "-E", "UTF8", "--no-sync"]
            ),
            check=True,
            capture_output=True,
            cwd=pg_dir,
        )
        for attempt in range(3):
            port = free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={pg_dir} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
            )
            done = subprocess.run(
                self._as_pg_user(
                    [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(pg_dir / "log"), "-w", "-o", options, "start"]
                ),
                capture_output=True,
                text=True,
                cwd=pg_dir,
            )
            if done.returncode == 0:
                break
            if attempt == 2:
                raise RuntimeError(f"postgres did not start: {done.stdout}{done.stderr}{(pg_dir / 'log').read_text()}")
        self.pg_port = port
        self.pg_pid = int((data / "postmaster.pid").read_text().split()[0])
        self.seen_pids.add(self.pg_pid)
        self.seen_ports.add(port)
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=port, user="dagster", dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE dagster")
        conn.close()
        return f"postgresql://dagster@127.0.0.1:{port}/dagster"

    def _stop_postgres(self) -> None:
        if self._pg_dir is None:
            return
        data = self._pg_dir / "data"
        if (data / "postmaster.pid").exists():
            subprocess.run(
                self._as_pg_user([str(postgres_bindir() / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                capture_output=True,
                cwd=self._pg_dir,
                timeout=60,
            )
        if self.pg_pid and pid_alive(self.pg_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pg_pid, signal.SIGKILL)

    # --- Redis, workers, S3 ------------------------------------------------------------------

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None, port: int | None = None) -> Process:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.root if port is not None else REPO_ROOT,
                start_new_session=True,
            )
        proc = Process(name, popen, port, log)
        self.processes.append(proc)
        self.seen_pids.add(popen.pid)
        if port is not None:
            self.seen_ports.add(port)
        return proc

    def start_redis(self) -> str:
        """A Redis without persistence on a free 127.0.0.1 port; returns its URL (database 0)."""
        binary = redis_binary()
        folder = self.root / "redis"
        folder.mkdir()
        port = free_port()
        argv = [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder), "--save", ""]
        argv += ["--appendonly", "no", "--protected-mode", "yes"]
        proc = self.spawn("redis", argv, port=port)
        wait_for(lambda: port_open(port) or proc.popen.poll() is not None, 20, "redis to listen")
        if proc.popen.poll() is not None:
            raise RuntimeError(f"redis-server exited: {proc.log.read_text() if proc.log else ''}")
        return f"redis://127.0.0.1:{port}"

    def start_s3(self) -> str:
        """moto's S3-compatible server on a free 127.0.0.1 port; returns its endpoint URL."""
        port = free_port()
        proc = self.spawn("s3", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port=port)
        wait_for(lambda: port_open(port) or proc.popen.poll() is not None, 60, "the S3 server to listen")
        if proc.popen.poll() is not None:
            raise RuntimeError(f"moto server exited: {proc.log.read_text() if proc.log else ''}")
        return f"http://127.0.0.1:{port}"

    def start_worker(self, name: str, queue: str, broker: str, backend: str, env: dict[str, str]) -> Process:
        """A Celery worker of dagster-celery's app on ``queue`` with one pool process (prefork), as
        ``dagster-celery worker start -q QUEUE`` starts it; its log says which steps it ran."""
        config_dir = self.root / f"celery-config-{name}"
        config_dir.mkdir()
        (config_dir / "dagster_celery_config.py").write_text(
            f"broker_url = {broker!r}\nresult_backend = {backend!r}\nworker_prefetch_multiplier = 1\n"
        )
        worker_env = {**env, "PYTHONPATH": os.pathsep.join([str(config_dir), env.get("PYTHONPATH", "")]).rstrip(":")}
        argv = [sys.executable, "-m", "celery", "-A", "dagster_celery.app", "worker", "-Q", queue, "-n", f"{name}@%h"]
        argv += ["--concurrency", "1", "--pool", "prefork", "--prefetch-multiplier", "1", "--loglevel", "INFO"]
        argv += ["--without-gossip", "--without-mingle"]
        return self.spawn(f"worker-{name}", argv, env=worker_env)

    # --- stopping ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every process (workers first, then the servers), then remove the folder."""
        errors = []
        for proc in sorted(self.processes, key=lambda p: p.port is not None):
            try:
                proc.stop()
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                errors.append(f"{proc.name}: {exc}")
        try:
            self._stop_postgres()
        except Exception as exc:  # noqa: BLE001
            errors.append(f"postgres: {exc}")
        shutil.rmtree(self.root, ignore_errors=True)
        if errors:
            raise RuntimeError("stopping the cluster services: " + "; ".join(errors))

    def leftovers(self) -> list[str]:
        """What is still there after :meth:`stop`: live pids or process groups, open ports, the folder."""
        left = [f"pid {p} alive" for p in sorted(self.seen_pids) if pid_alive(p)]
        left += [f"process group {p} has {group_members(p)}" for p in sorted(self.seen_pids) if group_members(p)]
        left += [f"port {p} open" for p in sorted(self.seen_ports) if port_open(p)]
        if self.root.exists():
            left.append(f"folder {self.root} exists")
        return left


@dataclass
class Cluster:
    """The running cluster: its instance folder, data folder, broker and workers."""

    services: Services
    home: Path
    data_root: Path
    postgres_url: str
    redis_url: str
    workers: dict[str, Process]
    worker_env: dict[str, str]

    @property
    def broker(self) -> str:
        return f"{self.redis_url}/0"

    @property
    def backend(self) -> str:
        return f"{self.redis_url}/1"

    def instance(self):
        import dagster as dg

        return dg.DagsterInstance.from_config(str(self.home))

    def run_config(self) -> dict:
        return {
            "execution": {"config": {"broker": self.broker, "backend": self.backend}},
            "resources": {"settings": {"config": {"profile": "smoke", "device": "cpu"}}},
        }

    def worker_pool_pids(self, name: str) -> set[int]:
        """The worker's main process and its pool processes (the ones that run the steps)."""
        return set(group_members(self.workers[name].pid))

    def ping(self) -> set[str]:
        """Names of the workers that answer a Celery ping."""
        from celery import Celery

        app = Celery(broker=self.broker, backend=self.backend)
        try:
            replies = app.control.ping(timeout=1.0) or []
        finally:
            app.close()
        return {name.partition("@")[0] for reply in replies for name in reply}


def instance_yaml(port: int) -> str:
    """The Dagster instance of ``deploy/dagster.yaml`` as far as one machine has it: its Postgres run,
    event-log and schedule storage (credentials from the same environment variables, the port of the
    throwaway cluster) and its pool granularity, with one ``compute_device`` slot (one CPU here) and
    telemetry off. Its k8s run launcher and queued coordinator are left out (no cluster here)."""
    import yaml

    deploy = yaml.safe_load((REPO_ROOT / "deploy" / "dagster.yaml").read_text())
    storage = deploy["storage"]
    storage["postgres"]["postgres_db"]["port"] = port
    pools = {**deploy["concurrency"]["pools"], "default_limit": 1}
    return yaml.safe_dump({"storage": storage, "concurrency": {"pools": pools}, "telemetry": {"enabled": False}})


#: The environment deploy/dagster.yaml reads the Postgres credentials from (trust auth on 127.0.0.1 here).
PG_ENV = {
    "DAGSTER_PG_HOST": "127.0.0.1",
    "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "unused",
    "DAGSTER_PG_DB": "dagster",
}
