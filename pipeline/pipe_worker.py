"""A warm worker interpreter that answers requests over a socket pair: the shared mechanism of the
compile pool (:mod:`pipeline.compile_pool`) and the planted-bug matrix's workers
(:mod:`pipeline.instruments.regression.matrix_parallel`).

The worker is ``python -m <module> --fd N ...``, a subprocess rather than multiprocessing (which
would re-import the caller's main module, which a script need not guard). It inherits this process's
environment unless told otherwise, so it shares the Inductor cache folder. Its protocol: it first
sends ``("ready", detail)`` or ``("error", detail)``, then answers each request with ``("ok", value)``
or ``(status, detail)``, and exits when it receives ``None``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from precisionkit._isolated import serve

from .resources import REPO_ROOT

__all__ = ["PipeWorker", "serve"]  # serve: the worker's side, shared with precisionkit's isolated runner


class PipeWorker:
    """One worker interpreter running ``module`` with ``args``; ``what`` names it in errors."""

    def __init__(self, module: str, args: Sequence[str], what: str, env: Mapping[str, str] | None = None) -> None:
        here, there = multiprocessing.Pipe()  # a socket pair on POSIX
        cmd = [sys.executable, "-m", module, "--fd", str(there.fileno()), *args]
        self.what = what
        self.proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, pass_fds=(there.fileno(),), env=None if env is None else dict(env)
        )
        there.close()
        self.conn = here

    def _receive(self) -> Any:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            code = self.proc.wait()
            raise RuntimeError(f"{self.what} (pid {self.proc.pid}) exited with status {code}") from None

    def ready(self) -> None:
        """Wait until the worker has loaded what it needs."""
        status, detail = self._receive()
        if status != "ready":
            raise RuntimeError(f"{self.what} failed to start: {detail}")

    def request(self, message: Any) -> tuple[str, Any]:
        """Send one request and return the worker's ``(status, value)``."""
        self.conn.send(message)
        status, value = self._receive()
        return status, value

    def close(self, kill: bool = False, wait: bool = True) -> None:
        """Stop the worker: ask it to exit (``kill``: kill it), then wait for it to exit, or with
        ``wait=False`` leave that to a background thread (an interpreter that has used Inductor
        takes a second or two to shut down, and nothing depends on it any more)."""
        if kill:
            self.proc.kill()
        else:
            with contextlib.suppress(OSError):  # already gone: nothing to tell it
                self.conn.send(None)
        if wait:
            self._reap()
        else:
            threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.conn.close()
