"""The worker interpreter of :class:`precisionkit.difftest.Isolated`.

Started as ``python -m precisionkit._isolated --fd FD`` (``FD``: its end of a socket pair). It
receives ``("setup", source)`` first, then ``("run", case, backend, threads)`` and
``("minimize", case, max_checks)`` requests, answering ``("ok", result)`` or ``("error",
traceback)``, with ``("stage", "fused")`` before a run compiles; ``None`` or a closed socket ends
it, and so does its parent's exit.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any


def exit_with_parent(poll_seconds: float = 1.0) -> threading.Thread:
    """Exit this process (status 143, as SIGTERM would) once the process that started it is gone:
    a worker never outlives the run that started it."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent:
                os._exit(143)

    t = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    t.start()
    return t


def _handle(conn: Connection, request: tuple[Any, ...]) -> Any:
    from . import difftest
    from .minimize import minimize, predicate_for
    from .repro import reproduces

    kind = request[0]
    if kind == "setup":
        if request[1]:
            exec(compile(request[1], "<difftest worker setup>", "exec"), {})
        return os.getpid()
    if kind == "run":
        _, case, backend, threads = request
        return difftest.run(case, backend, threads, on_stage=lambda s: conn.send(("stage", s)))
    if kind == "minimize":
        _, case, max_checks = request
        small = minimize(case, predicate_for(None), max_checks=max_checks).case
        return small, reproduces(small)[1]
    raise ValueError(f"unknown request {kind!r}")


def serve(conn: Connection, handle: Callable[[Any], Any]) -> int:
    """A worker's side of its socket pair: answer each request with ``("ok", handle(request))`` or
    ``("error", traceback)`` until ``None`` arrives or the parent goes away (a stopped run: nobody
    waits for the result); the worker's exit status. The pipeline's workers serve the same way."""
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return 0
        if request is None:
            return 0
        try:
            reply: tuple[str, Any] = ("ok", handle(request))
        except Exception:  # noqa: BLE001 - reported to the parent, which raises it
            reply = ("error", traceback.format_exc())
        try:
            conn.send(reply)
        except OSError:
            return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    conn = Connection(args.fd)
    exit_with_parent()
    return serve(conn, lambda request: _handle(conn, request))


if __name__ == "__main__":
    sys.exit(main())
