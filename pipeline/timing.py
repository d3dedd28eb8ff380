"""Where a run's time went: each step's wall time and share of the run, against the profile's budget.

Everything comes from Dagster's event log (step start, success and failure events, with the assets
and checks each step recorded), so the table of any past run costs one query:
``python -m pipeline.cli times --profile default`` prints it for the profile's last run, ``report``
prints it for the run it just made, and the site's overview shows it.

A step is one op: an asset (or several, for a multi-asset) or a separate check. Time outside every
step (run start-up, waits between steps) is its own row, so that the shares add up to the run. When
steps ran side by side (a multiprocess executor), the shares are of the summed step time instead.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import dagster as dg

from .profiles import PROFILES, Budget
from .progress import fmt_seconds

#: The row for time spent outside every step.
OUTSIDE_STEPS = "(outside steps)"
#: The report's asset: a run that materialized only it (the CLI rebuilding the site after a failure)
#: says nothing about where an experiment's time went, so the last run of a profile skips it.
REPORT_ASSET = dg.AssetKey("report_site")
#: How many recent runs are searched for the last one of a profile.
RUNS_SEARCHED = 200

_STEP_EVENTS = {
    dg.DagsterEventType.STEP_START: "start",
    dg.DagsterEventType.STEP_SUCCESS: "success",
    dg.DagsterEventType.STEP_FAILURE: "failure",
    dg.DagsterEventType.ASSET_MATERIALIZATION: "asset",
    dg.DagsterEventType.ASSET_CHECK_EVALUATION: "check",
}


@dataclass(frozen=True)
class StepEvent:
    """One event of a step: ``kind`` is start, success, failure, asset (``label``: the asset key it
    materialized) or check (``label``: asset:check it evaluated); ``timestamp`` in epoch seconds."""

    kind: str
    step: str
    timestamp: float
    label: str = ""


@dataclass(frozen=True)
class Row:
    step: str
    what: str
    seconds: float
    share: float  # percent of the table's total
    status: str  # done | failed | running | unfinished (the run ended without the step's end) | ""


@dataclass(frozen=True)
class TimeTable:
    run_id: str
    profile: str
    wall: float  # the run's wall time in seconds (first to last event when the run record has none)
    total: float  # what the shares are of: the wall time, or the summed step time when steps overlapped
    rows: tuple[Row, ...]  # steps, longest first, then the time outside steps
    budget: Budget | None
    in_progress: bool = False

    def budget_line(self) -> str:
        if self.budget is None:
            return f"budget: none set for profile {self.profile}"
        used = 100.0 * self.wall / self.budget.seconds
        gap = self.budget.seconds - self.wall
        where = f"{fmt_seconds(gap)} under" if gap >= 0 else f"OVER by {fmt_seconds(-gap)}"
        return (
            f"budget of profile {self.profile}: {fmt_seconds(self.budget.seconds)}; this run took "
            f"{fmt_seconds(self.wall)} ({used:.0f} % of it), {where}"
        )


def _what(labels: list[str]) -> str:
    shown = ", ".join(labels[:3])
    return shown + (f" +{len(labels) - 3} more" if len(labels) > 3 else "")


def build_table(
    events: list[StepEvent],
    run_id: str,
    profile: str,
    run_start: float | None = None,
    run_end: float | None = None,
    now: float | None = None,
) -> TimeTable:
    """The time table of one run from its step events. A step with no end yet counts until
    ``run_end`` (else ``now``); the run spans ``run_start``..``run_end``, defaulting to its events."""
    now = time.time() if now is None else now
    starts: dict[str, float] = {}
    ends: dict[str, tuple[float, str]] = {}
    assets: dict[str, list[str]] = {}
    checks: dict[str, list[str]] = {}
    for e in sorted(events, key=lambda e: e.timestamp):
        if e.kind == "start":
            starts.setdefault(e.step, e.timestamp)  # a retried step counts from its first start
        elif e.kind in ("success", "failure"):
            ends[e.step] = (e.timestamp, "done" if e.kind == "success" else "failed")
        elif e.kind == "asset":
            assets.setdefault(e.step, []).append(e.label)
        elif e.kind == "check":
            checks.setdefault(e.step, []).append(e.label)
    stamps = [e.timestamp for e in events]
    first = run_start if run_start is not None else min(stamps, default=now)
    last = run_end if run_end is not None else (max(stamps, default=first) if not _open(starts, ends) else now)
    steps = []
    for step, began in starts.items():
        end, status = ends.get(step, (last, "running" if run_end is None else "unfinished"))
        what = _what(assets.get(step) or [f"check {c}" for c in checks.get(step, [])])
        steps.append((step, what, max(0.0, end - began), status))
    steps.sort(key=lambda s: (-s[2], s[0]))
    wall = max(0.0, last - first)
    busy = sum(s[2] for s in steps)
    total = max(wall, busy)
    if wall > busy:
        steps.append((OUTSIDE_STEPS, "start-up, waits between steps", wall - busy, ""))
    rows = tuple(Row(s, w, sec, 100.0 * sec / total if total else 0.0, st) for s, w, sec, st in steps)
    budget = PROFILES[profile].budget if profile in PROFILES else None
    return TimeTable(run_id, profile, wall, total, rows, budget, in_progress=run_end is None and _open(starts, ends))


def _open(starts: dict[str, float], ends: dict[str, Any]) -> bool:
    return any(step not in ends for step in starts)


def step_events(instance: dg.DagsterInstance, run_id: str) -> list[StepEvent]:
    """The run's step events from the event log, as :class:`StepEvent`."""
    out = []
    for entry in instance.all_logs(run_id, of_type=set(_STEP_EVENTS)):
        event = entry.dagster_event
        if event is None or not entry.step_key:
            continue
        kind = _STEP_EVENTS[event.event_type]
        label = ""
        if kind == "asset" and event.asset_key is not None:
            label = event.asset_key.to_user_string()
        elif kind == "check":
            data = event.event_specific_data
            if isinstance(data, dg.AssetCheckEvaluation):
                label = f"{data.asset_key.to_user_string()}:{data.check_name}"
        out.append(StepEvent(kind, entry.step_key, entry.timestamp, label))
    return out


def run_profile(run: Any) -> str | None:
    """The profile a run's config names for the ``settings`` resource (None: not set there)."""
    settings = ((run.run_config or {}).get("resources") or {}).get("settings") or {}
    profile = (settings.get("config") or {}).get("profile")
    return str(profile) if profile else None


def report_only(run: Any) -> bool:
    """Whether the run only rebuilt the report (materialized nothing else and ran no check): its one
    step is the report's (an in-process subset), or its selection is the report alone (a launched run)."""
    steps = set(run.step_keys_to_execute or ())
    if steps:
        return steps == {REPORT_ASSET.to_user_string()}
    return set(run.asset_selection or ()) == {REPORT_ASSET} and not run.asset_check_selection


def last_run(instance: dg.DagsterInstance, profile: str, before: str | None = None) -> Any:
    """The newest run record of ``profile`` that did more than rebuild the report, or None; with
    ``before``, only runs created before that run."""
    records = instance.get_run_records(limit=RUNS_SEARCHED)
    seen_before = before is None
    for record in records:  # newest first
        run = record.dagster_run
        if not seen_before:
            seen_before = run.run_id == before
            continue
        if run_profile(run) == profile and not report_only(run):
            return record
    return None


def table_for_run(instance: dg.DagsterInstance, run_id: str, profile: str | None = None) -> TimeTable | None:
    """The time table of run ``run_id`` (None when the instance has no such run)."""
    record = instance.get_run_record_by_id(run_id)
    if record is None:
        return None
    profile = profile or run_profile(record.dagster_run) or "unknown"
    run_end = record.end_time if record.dagster_run.is_finished else None
    return build_table(step_events(instance, run_id), run_id, profile, record.start_time, run_end)


def text_table(table: TimeTable) -> str:
    """The table for a terminal: one line per step, the total, then the budget line."""
    state = " (still running)" if table.in_progress else ""
    head = f"where the time went: run {table.run_id} (profile {table.profile}), {fmt_seconds(table.wall)}{state}"
    name_w = max([len("step"), *(len(r.step) for r in table.rows)])
    what_w = min(60, max([len("asset(s)"), *(len(r.what) for r in table.rows)]))
    lines = [head, f"  {'step':<{name_w}}  {'asset(s)':<{what_w}}  {'wall time':>9}  {'share':>7}"]
    for r in table.rows:
        status = f"  {r.status}" if r.status not in ("done", "") else ""
        what = r.what if len(r.what) <= what_w else r.what[: what_w - 1] + "…"
        lines.append(f"  {r.step:<{name_w}}  {what:<{what_w}}  {fmt_seconds(r.seconds):>9}  {r.share:>6.1f}%{status}")
    share = sum(r.share for r in table.rows)
    lines.append(f"  {'total':<{name_w}}  {'':<{what_w}}  {fmt_seconds(table.total):>9}  {share:>6.1f}%")
    lines.append(table.budget_line())
    return "\n".join(lines)


#: Steps the site's table shows, longest first; the others are summed in one row.
SITE_ROWS = 10


def markdown_section(table: TimeTable | None, profile: str, top: int = SITE_ROWS) -> str:
    """The site's "Where the time went" section (a note when no run of the profile is recorded): the
    ``top`` longest steps, one row for the rest, the time outside steps and the total."""
    lines = ["## Where the time went\n"]
    if table is None:
        lines.append(f"No run of profile **{profile}** is recorded in this checkout's Dagster instance.\n")
        return "\n".join(lines)
    # The report's own step builds this page, so it is always running here: only other open steps
    # mean the run was still going.
    running = [r.step for r in table.rows if r.status == "running"]
    others = [s for s in running if s != REPORT_ASSET.to_user_string()]
    if others:
        state = f" {len(others)} step(s) besides the report's were still running when this page was built."
    elif running:
        state = " Every other step had ended; the report's own step is counted until this page was built."
    else:
        state = ""
    steps = [r for r in table.rows if r.step != OUTSIDE_STEPS]
    outside = [r for r in table.rows if r.step == OUTSIDE_STEPS]
    shown, rest = steps[:top], steps[top:]
    lines.append(
        f"Run `{table.run_id}` of profile **{table.profile}**: the {len(shown)} longest of its {len(steps)} steps, "
        f"each with its wall time and its share of the run, from Dagster's event log.{state}\n"
    )
    lines += ["| step | asset(s) | wall time | share | status |", "|---|---|---:|---:|---|"]
    for r in shown:
        lines.append(f"| `{r.step}` | {r.what} | {fmt_seconds(r.seconds)} | {r.share:.1f} % | {r.status} |")
    if rest:
        seconds = sum(r.seconds for r in rest)
        share = sum(r.share for r in rest)
        failed = sum(r.status == "failed" for r in rest)
        status = f"{failed} failed" if failed else ""
        lines.append(f"| *the rest* | {len(rest)} more steps | {fmt_seconds(seconds)} | {share:.1f} % | {status} |")
    for r in outside:
        lines.append(f"| *{r.step}* | {r.what} | {fmt_seconds(r.seconds)} | {r.share:.1f} % | {r.status} |")
    lines.append(f"| **total** | | **{fmt_seconds(table.total)}** | 100 % | |\n")
    budget = table.budget_line()
    why = f" Why this budget: {table.budget.reason}." if table.budget is not None else ""
    lines.append(f"{budget[:1].upper()}{budget[1:]}.{why}")
    return "\n".join(lines) + "\n"


def site_table(instance: dg.DagsterInstance, run_id: str, profile: str) -> TimeTable | None:
    """The table the site shows: the run building it, unless that run only rebuilds the report;
    then the profile's last run before it."""
    record = instance.get_run_record_by_id(run_id)
    if record is not None and not report_only(record.dagster_run):
        return table_for_run(instance, run_id, profile)
    previous = last_run(instance, profile, before=run_id if record is not None else None)
    return table_for_run(instance, previous.dagster_run.run_id, profile) if previous is not None else None


def print_times(instance: dg.DagsterInstance, profile: str) -> int:
    """``python -m pipeline.cli times``: the table of the profile's last run; exit status 2 when none."""
    record = last_run(instance, profile)
    if record is None:
        home = os.environ.get("DAGSTER_HOME", "the default Dagster home")
        print(
            f"times: no run of profile {profile} recorded in the Dagster instance at {home}; "
            f"make one with: python -m pipeline.cli report --profile {profile}",
            file=sys.stderr,
        )
        return 2
    table = table_for_run(instance, record.dagster_run.run_id, profile)
    assert table is not None  # the record was just read
    print(text_table(table))
    return 0
