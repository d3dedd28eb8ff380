"""A worker process of the planted-bug matrix: runs whole matrix runs on request.

Started by :class:`pipeline.instruments.regression.matrix_parallel.MatrixWorker` as::

    python -m pipeline.instruments.regression.matrix_worker --fd FD --threads T --experiments B,C2,D

``FD`` is this process's end of a socket pair. The worker sets torch's CPU thread count, loads the
experiments' definitions once and sends ``("ready", pid)``; then, for every request
``(run, base_dir, settings, prune)`` it receives, it sends ``("ok", MatrixRun)`` or
``("error", traceback)``, until it receives ``None`` or the other end closes (a parent that
stopped: the worker then exits after the run it is in).
"""

import argparse
import os
import sys
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ...pipe_worker import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="this end of the socket pair")
    parser.add_argument("--threads", type=int, required=True, help="torch CPU threads")
    parser.add_argument("--experiments", required=True, help="comma-separated matrix experiments")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    conn = Connection(args.fd)
    from ...interrupts import exit_with_parent

    exit_with_parent()  # an interrupted or killed parent never leaves this worker running a matrix run
    try:
        import torch

        from ...resources import ExperimentSettings
        from .matrix_runs import PlannedRun, matrix_definitions, run_experiments
        from .planted_bugs import register_planted_backends

        torch.set_num_threads(args.threads)
        register_planted_backends()  # a fresh interpreter knows only torch's own backends
        defs, _ = matrix_definitions([e for e in args.experiments.split(",") if e])
    except Exception:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", traceback.format_exc()))
        return 1
    conn.send(("ready", os.getpid()))

    def run(request: tuple[tuple[Any, ...], str, dict[str, Any], bool]) -> Any:
        fields, base_dir, like, prune = request
        planned = PlannedRun(*fields)
        return run_experiments(
            planned.backend,
            defs,
            Path(base_dir),
            ExperimentSettings(**like),
            seed=planned.seed,
            prune=prune,
            only=tuple(planned.only),
        )

    return serve(conn, run)


if __name__ == "__main__":
    sys.exit(main())
