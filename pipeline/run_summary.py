"""What the command line prints after a run: each failed step's root cause, the experiments those
failures belong to (for the report's "failed: <reason>"), and the table of outcomes per experiment."""

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import dagster as dg

from .resources import REPO_ROOT


class RootCause(NamedTuple):
    """The innermost exception of a failed step: its type, message and the deepest frame of this project."""

    error: str
    message: str
    frame: str

    def text(self) -> str:
        where = f" (at {self.frame})" if self.frame else ""
        return f"{self.error}: {self.message}{where}"


_PROJECT_DIRS = (str(REPO_ROOT / "pipeline"), str(REPO_ROOT / "precisionkit"))


def root_cause(error: Any) -> RootCause:
    """Follow a serialized error's causes (Dagster wraps the user's exception in "Error occurred while
    executing op") to the innermost, and find its deepest frame in this project's code."""
    while getattr(error, "cause", None) is not None:
        error = error.cause
    frame = ""
    for entry in error.stack or ():
        first = entry.strip().splitlines()[0] if entry.strip() else ""
        m = re.match(r'File "([^"]+)", line (\d+), in (.+)', first)
        if m and any(m.group(1).startswith(d) for d in _PROJECT_DIRS):
            frame = f"{m.group(1).replace(str(REPO_ROOT) + '/', '')}:{m.group(2)} in {m.group(3)}"
    # The first line states the error ("module.Class: what"); later lines are hints and context
    # (Dynamo's "Set TORCHDYNAMO_VERBOSE=1 ...").
    message = [line.strip() for line in (error.message or "").strip().splitlines() if line.strip()]
    text = message[0] if message else ""
    if text.endswith(" raised:") and len(message) > 1:
        # Dynamo's BackendCompilerFailed: "backend='...' raised:", the compiler's own error on the next line
        text = f"{text} {message[1]}"
    if ": " in text and text.split(": ", 1)[0].endswith(error.cls_name or "\0"):
        text = text.split(": ", 1)[1]
    return RootCause(error.cls_name or "Error", text, frame)


def interrupted(causes: dict[str, RootCause]) -> list[str]:
    """The steps that failed because the run was interrupted, not because of their own error."""
    from .interrupts import is_interrupt

    return [step for step, cause in causes.items() if is_interrupt(cause.error)]


def step_failures(result: Any) -> dict[str, RootCause]:
    """Every failed step of a run with the root exception it raised."""
    out = {}
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE" and event.step_key:
            data = event.step_failure_data
            if data is not None and data.error is not None:
                out[event.step_key] = root_cause(data.error)
    return out


def step_owners() -> dict[str, str]:
    """Step (op) name -> the id of the experiment whose asset or check it runs."""
    from .experiments import EXPERIMENTS

    return {d.op.name: exp.id for exp in EXPERIMENTS for d in (*exp.assets(), *exp.checks())}


def failed_experiments(causes: dict[str, RootCause]) -> dict[str, str]:
    """Experiment id -> why its step failed (the first failed step of each), for the report's "failed: <reason>"."""
    owners = step_owners()
    out: dict[str, str] = {}
    for step, cause in causes.items():
        if step in owners:
            out.setdefault(owners[step], f"step {step}: {cause.error}: {cause.message}")
    return out


def stored_bytes(materializations: Sequence[Any]) -> int:
    """Bytes a run wrote to the data folder: the sum of the ``bytes`` the IO manager recorded for each
    materialization (:class:`pipeline.storage.PrecisionIOManager`; an asset that stored no value records none)."""
    total = 0
    for event in materializations:  # DagsterEvents of ASSET_MATERIALIZATION
        value = event.materialization.metadata.get("bytes")
        total += int(getattr(value, "value", value) or 0)
    return total


def outcome_table(
    defs: dg.Definitions, evaluations: Sequence[dg.AssetCheckEvaluation], failed_steps: Sequence[str]
) -> str:
    """Experiment x run validity x claim verdict x findings, from one run's check evaluations,
    followed by every check that did not pass (contradicted / invalid first), then the finding
    checks with observations to read (they pass: a finding is not a failure)."""
    from .experiments import EXPERIMENTS
    from .verdicts import check_outcome, summarize

    graph = defs.resolve_asset_graph()
    by_group: dict[str, list] = {}
    lines_failed = []
    lines_read: list[str] = []
    for e in evaluations:
        spec = graph.get_check_spec(e.asset_check_key)
        outcome = check_outcome(
            f"{e.asset_key.to_user_string()}:{e.check_name}",
            e.passed,
            e.severity,
            e.metadata,
            (spec.metadata or {}).get("outcome"),
        )
        by_group.setdefault(graph.get(e.asset_key).group_name, []).append(outcome)
        if outcome.to_read:
            lines_read.append(f"  {outcome.findings or '':<13} {outcome.key}")
        elif not outcome.passed and not outcome.not_applicable:
            label = outcome.verdict if outcome.outcome == "claim" else "invalid"
            lines_failed.append((not outcome.is_error, f"  {label:<13} {outcome.key}"))
    owners = step_owners()
    steps_by_exp: dict[str, list[str]] = {}
    for step in failed_steps:
        if step in owners:
            steps_by_exp.setdefault(owners[step], []).append(step)
    rows = [f"{'experiment':<13} {'run validity':<14} {'claim verdict':<26} findings"]
    for exp in EXPERIMENTS:
        outcomes = by_group.get(exp.group)
        if outcomes is None and exp.id not in steps_by_exp:
            continue
        o = summarize(outcomes or [], steps_by_exp.get(exp.id, ()), not_applicable=True)
        rows.append(f"{exp.id:<13} {o.validity:<14} {o.verdict:<26} {o.findings}")
    detail = [text for _, text in sorted(lines_failed)]
    read = ["findings to read (observations, not failures):", *sorted(lines_read)] if lines_read else []
    return "\n".join(rows + (["checks that did not pass:", *detail] if detail else []) + read)
