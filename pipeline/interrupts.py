"""Stopping a run the way a batch scheduler or Kubernetes asks: SIGTERM first.

Python ends a process on SIGTERM without unwinding it, and Dagster routes it to its interrupt
handling only when its own command line set that up. :func:`terminate_as_interrupt` makes SIGTERM
do exactly what Ctrl-C does (the step in progress stops with Dagster's interrupted error, the run is
marked failed, stored values stay, and the next ``make report`` resumes). A nested materialization
(the planted-bug matrix runs its own) must not swallow that interrupt: :func:`raise_if_interrupted`.
A worker process follows its parent out: :func:`exit_with_parent`.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable, Mapping
from types import FrameType


def _as_interrupt(signum: int, frame: FrameType | None) -> None:
    handler = signal.getsignal(signal.SIGINT)  # Dagster's, while a run executes; else Python's default
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt(f"signal {signum}")


def terminate_as_interrupt() -> bool:
    """SIGTERM does what Ctrl-C does, from now on in this process. Only the main thread can set a
    signal handler: elsewhere nothing changes and False is returned."""
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(signal.SIGTERM, _as_interrupt)
    return True


#: The class names of errors that mean "interrupted", not "this step is wrong".
INTERRUPT_ERRORS = ("DagsterExecutionInterruptedError", "KeyboardInterrupt")


def is_interrupt(error_class: str) -> bool:
    """Whether an error's class name (qualified or not) means the run was interrupted."""
    return error_class.split(".")[-1] in INTERRUPT_ERRORS


def raise_if_interrupted(failures: Iterable[Mapping[str, object]]) -> None:
    """Re-raise an interrupt that a nested run (``dg.materialize(..., raise_on_error=False)``)
    turned into step failures, so the run around it stops too instead of going on."""
    hit = [f for f in failures if is_interrupt(str(f.get("error", "")))]
    if hit:
        raise KeyboardInterrupt(f"interrupted during nested step {hit[0].get('step', '?')}")


def exit_with_parent(poll_seconds: float = 1.0) -> threading.Thread:
    """Exit this process (status 143, as SIGTERM would) once the process that started it is gone,
    so a worker never outlives an interrupted or killed run (the toolkit's own worker does the same)."""
    from precisionkit._isolated import exit_with_parent as watch

    return watch(poll_seconds)
