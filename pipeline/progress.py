"""Progress of long loops (runs, input sets, training steps, fuzzer graphs) and of a whole run.

Inside an asset: ``for item in track(items, context.log.info, "runs"): ...`` logs
``runs 120/300 (40%) 1m 02s elapsed, ETA 1m 33s`` at most every ``every`` seconds, the first and
last item always. The lines go to the Dagster run log (the UI shows them) and, through
:func:`progress_logger`, to the terminal of ``python -m pipeline.cli report``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import dagster as dg

T = TypeVar("T")


def fmt_seconds(seconds: float) -> str:
    """``7.3s``, ``4m 05s``, ``1h 02m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)  # noqa: RUF046 - a numpy float rounds to a float
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


class Progress:
    """Counts the finished items of a loop of known length and reports rate-limited lines."""

    def __init__(
        self,
        log: Callable[[str], None] | None,
        what: str,
        total: int,
        every: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total < 0:
            raise ValueError(f"progress total must be >= 0, got {total}")
        self.log, self.what, self.total, self.every, self.clock = log, what, total, every, clock
        self.done = 0
        self.start = clock()
        self._last: float | None = None

    def line(self, note: str = "") -> str:
        elapsed = self.clock() - self.start
        pct = 100.0 * self.done / self.total if self.total else 100.0
        text = f"{self.what} {self.done}/{self.total} ({pct:.0f}%) {fmt_seconds(elapsed)} elapsed"
        if 0 < self.done < self.total:
            text += f", ETA {fmt_seconds(elapsed / self.done * (self.total - self.done))}"
        return text + (f" - {note}" if note else "")

    def advance(self, n: int = 1, note: str = "") -> None:
        self.done += n
        now = self.clock()
        due = self._last is None or now - self._last >= self.every or self.done >= self.total
        if due and self.log is not None:
            self._last = now
            self.log(self.line(note))


def track(
    items: Iterable[T], log: Callable[[str], None] | None, what: str, total: int | None = None, every: float = 15.0
) -> Iterator[T]:
    """Yield ``items``, reporting progress after each (``total`` defaults to ``len(items)``)."""
    if total is None:
        total = len(items)  # type: ignore[arg-type]
    progress = Progress(log, what, total, every)
    for item in items:
        yield item
        progress.advance()


# --- the terminal view of a run ---------------------------------------------------------------


class _RunLines(logging.Handler):
    """One line per step start and finish with the run's elapsed time, the assets' own INFO
    lines (progress) indented under them, warnings and errors; Dagster's DEBUG chatter dropped."""

    def __init__(self, stream=None) -> None:
        super().__init__(logging.DEBUG)  # step events are DEBUG records; emit() picks what to show
        self.stream = stream or sys.stdout
        self.t0 = time.monotonic()
        self.started: dict[str, float] = {}

    def _write(self, text: str) -> None:
        self.stream.write(f"[{fmt_seconds(time.monotonic() - self.t0):>8}] {text}\n")
        self.stream.flush()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            meta = getattr(record, "dagster_meta", None) or {}
            event = meta.get("dagster_event")
            step = meta.get("step_key") or ""
            if event is None:
                if record.levelno >= logging.INFO and step:
                    self._write(f"    {step}: {meta.get('orig_message', record.getMessage())}")
                return
            kind = event.event_type_value
            if kind == "STEP_START":
                self.started[step] = time.monotonic()
                self._write(f"start  {step}")
            elif kind == "STEP_SUCCESS":
                took = time.monotonic() - self.started.pop(step, time.monotonic())
                self._write(f"done   {step} in {fmt_seconds(took)}")
            elif kind == "STEP_FAILURE":
                took = time.monotonic() - self.started.pop(step, time.monotonic())
                error = getattr(event.event_specific_data, "error", None)
                message = (getattr(error, "message", "") or "").strip().splitlines()
                self._write(f"FAILED {step} after {fmt_seconds(took)}: {message[-1] if message else 'see the run log'}")
            elif kind == "STEP_SKIPPED":
                self._write(f"skip   {step} (an upstream step did not produce its output)")
        except Exception:  # noqa: BLE001 - a display problem must never fail a run
            self.handleError(record)


@dg.logger(
    config_schema=None,
    description="Compact terminal progress: one line per step start/finish, asset progress lines, no DEBUG.",
)
def progress_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger = logging.Logger("fusion_progress", level=logging.DEBUG)
    logger.addHandler(_RunLines())
    return logger
