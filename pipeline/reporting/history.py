"""History of every claim: its verdict and key figures over past materializations, from Dagster's event log.

A nightly run is the project's regression baseline; this page makes a run that moved something visible at a
glance. One point is one evaluation of a claim check, paired with the materialization of the checked asset it
judged (the latest one at or before the evaluation) for the commit and torch version. Only materializations of
the report's profile and device, made in this checkout (not imported from a bundle), are shown.
"""

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import dagster as dg
import polars as pl

from ..compilers import compiler_title
from ..experiments import EXPERIMENTS
from ..pagekit.render import LABEL_MARK, Report, check_evaluation, collapsed, fmt
from ..runs import DEFAULT_BACKEND, evaluation_compiler, plain, records
from ..verdicts import CLAIM
from .outcomes import distinct_heading

#: How many past evaluations of each claim the page reads.
HISTORY_POINTS = 50
#: How many key figures a claim's table shows (the chart's dropdown offers all of them).
TABLE_FIGURES = 8


@dataclass
class Point:
    """One evaluation of a claim check, with the provenance of the materialization it judged."""

    when: dt.datetime
    verdict: str
    commit: str
    torch: str
    run_id: str
    figures: dict[str, float] = field(default_factory=dict)
    #: The compiler (backend name) of the fused path the evaluation judged.
    compiler: str = DEFAULT_BACKEND


def key_figures(metadata: dict[str, Any]) -> dict[str, float]:
    """The numbers a claim's result reports (the rule's own parameters are constant and left out)."""
    return {
        k: float(v)
        for k, v in metadata.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not k.startswith("rule.")
    }


def _materializations(report: Report, key: dg.AssetKey) -> list[tuple[float, str, dict[str, Any]]]:
    """(timestamp, run id, metadata) of this report's materializations of ``key``, oldest first."""
    out = []
    found = records(report.instance, key, report.profile, report.device_label, "local", HISTORY_POINTS * 2)
    for r, _, meta in found:
        out.append((r.event_log_entry.timestamp, r.event_log_entry.run_id, meta))
    return sorted(out, key=lambda x: x[0])


def claim_history(report: Report, check_key: dg.AssetCheckKey, compiler: str | None = None) -> list[Point]:
    """Past evaluations of one claim check, oldest first, each paired with the materialization it judged;
    with ``compiler``, only the evaluations of that compiler's fused path (a history never mixes two
    compilers: a verdict that moved from Inductor's to OpenVINO's is no regression)."""
    mats = _materializations(report, check_key.asset_key)
    if not mats:
        return []
    points = []
    settings: dict[str, dict[str, Any]] = {}
    for r in report.instance.event_log_storage.get_asset_check_execution_history(check_key, limit=HISTORY_POINTS):
        data = check_evaluation(r)
        if r.event is None or data is None:
            continue  # planned but never evaluated
        meta = plain(data.metadata)
        if "bundle.imported_from" in meta:
            continue
        stamp = r.event.timestamp
        # The materialization the check judged: the one of the same run, else (a check run on its own)
        # the latest one before the evaluation.
        same_run = [m for _, run_id, m in mats if run_id == r.run_id]
        judged = same_run or [m for t, _, m in mats if t <= stamp + 1e-6]
        if not judged:
            continue
        prov = judged[-1]
        backend = str(
            prov.get("provenance.backend")
            or evaluation_compiler(report.instance, check_key, r.run_id, meta, settings)[0]
        )
        if compiler is not None and backend != compiler:
            continue
        points.append(
            Point(
                when=dt.datetime.fromtimestamp(stamp, dt.UTC),
                verdict=str(meta.get("verdict") or ("supported" if data.passed else "inconclusive")),
                commit=str(prov.get("provenance.git_commit", "—"))[:12],
                torch=str(prov.get("provenance.torch_version", "—")),
                run_id=r.run_id,
                figures=key_figures(meta),
                compiler=backend,
            )
        )
    return sorted(points, key=lambda p: p.when)


def moved(points: list[Point]) -> list[str]:
    """What changed between the last two points: the verdict and every key figure that differs."""
    if len(points) < 2:
        return []
    before, after = points[-2], points[-1]
    out = [f"verdict {before.verdict} → {after.verdict}"] if before.verdict != after.verdict else []
    for name, value in after.figures.items():
        old = before.figures.get(name)
        if old is None or old != value:
            out.append(f"{name} {fmt(old)} → {fmt(value)}")
    return out


def _claims(report: Report) -> list[tuple[str, dg.AssetCheckKey]]:
    """(experiment id, claim check) in the report's experiment order."""
    groups = {e.group: e.id for e in EXPERIMENTS}
    out = []
    for key in sorted(report.graph.asset_check_keys, key=lambda c: (c.asset_key.to_user_string(), c.name)):
        spec = report.graph.get_check_spec(key)
        if plain(spec.metadata).get("outcome") != CLAIM:
            continue
        group = report.graph.get(key.asset_key).group_name
        if group in groups:
            out.append((groups[group], key))
    order = [e.id for e in EXPERIMENTS]
    return sorted(out, key=lambda x: order.index(x[0]))


def _point_table(points: list[Point]) -> str:
    names = list(dict.fromkeys(n for p in points for n in p.figures))[:TABLE_FIGURES]
    lines = [
        "| materialized (UTC) | commit | torch | verdict | " + " | ".join(names) + " |",
        "|---|---|---|---|" + "---|" * len(names),
    ]
    previous: Point | None = None
    for p in points:
        cells = []
        for n in names:
            value = p.figures.get(n)
            changed = previous is not None and previous.figures.get(n) != value
            cells.append(f"**{fmt(value)}**" if changed else fmt(value))
        verdict = LABEL_MARK.get(p.verdict, p.verdict)
        lines.append(f"| {p.when:%Y-%m-%d %H:%M} | `{p.commit}` | {p.torch} | {verdict} | " + " | ".join(cells) + " |")
        previous = p
    return "\n".join(lines) + "\n"


#: (experiment id, claim check, its points oldest first) for every claim with at least one point.
Histories = list[tuple[str, dg.AssetCheckKey, list[Point]]]


def history_page(report: Report) -> str:
    """The history of every claim, one section per compiler when more than one has results here (each
    compiler's points apart: its own baseline)."""
    label = report.device_label or report.device
    compilers = [r.compiler for r in report.compilers if r.compiler] or [report.compiler or DEFAULT_BACKEND]
    lines = [
        "# History of the claims\n",
        "{verdict}",
        f"Profile **{report.profile}**, device **{label}**. Every claim's verdict and key figures over the past "
        f"materializations made in this checkout (up to {HISTORY_POINTS} each, oldest first), from Dagster's event "
        "log, with the commit and torch version of each point"
        + (", one section per compiler (each compiler's history is its own baseline)" if len(compilers) > 1 else "")
        + ". A figure that changed from the previous point is **bold**; the first table lists what the latest run "
        "moved.\n",
    ]
    by_compiler = {c: _histories(report, c) for c in compilers}
    latest = [points[-1].verdict for hs in by_compiler.values() for _, _, points in hs]
    total = sum(len(hs) for hs in by_compiler.values())
    counts = ", ".join(f"{latest.count(v)} {v}" for v in dict.fromkeys(latest))
    lines[1] = (
        f"**Latest verdicts:** {counts}, of {total} claim check(s) with a history.\n{{: .verdict-line }}\n"
        if total
        else "**Latest verdicts:** none yet: no claim has a history with this profile and device.\n{: .verdict-line }\n"
    )
    if not total:
        lines.append("No claim has been evaluated with this profile and device yet.\n")
        return "\n".join(lines)
    for compiler, histories in by_compiler.items():
        if len(compilers) > 1:
            lines.append(f"## {compiler_title(compiler)}\n")
        if not histories:
            lines.append(f"No claim has been evaluated with {compiler_title(compiler)} yet.\n")
            continue
        lines.extend(_compiler_history(report, histories, "" if compiler == compilers[0] else f"-{compiler}"))
    return "\n".join(lines)


def _histories(report: Report, compiler: str) -> Histories:
    histories = [(exp_id, key, claim_history(report, key, compiler)) for exp_id, key in _claims(report)]
    return [h for h in histories if h[2]]


def _compiler_history(report: Report, histories: Histories, suffix: str) -> list[str]:
    """One compiler's glance table, charts and per-claim tables (a level deeper under several compilers)."""
    nested = bool(suffix) or len(report.compilers) > 1
    lines = [glance_table(histories, report.page_suffix, "###" if nested else "##")]
    run_ids = {p.run_id for _, _, points in histories for p in points}
    labels = run_labels(histories, _run_starts(report, run_ids))
    lines.append(
        report.chart(
            "history",
            f"verdicts{suffix}",
            verdict_timeline(histories, labels),
            "Verdict of each claim over past runs (hover for commit and torch)",
        )
    )
    figures = figure_chart(histories, labels)
    if figures is not None:
        lines.append(report.chart("history", f"figures{suffix}", figures, "One key figure of one claim over past runs"))
    lines.append("### Every claim\n" if nested else "## Every claim\n")
    names = [key.name for _, key, _ in histories]
    level = "####" if nested else "###"
    for exp_id, key, points in histories:
        lines.append(f"{level} {exp_id}: {distinct_heading(key.name, names)}\n")
        title = f"{len(points)} point(s); latest {points[-1].verdict}"
        lines.append(collapsed(title, _point_table(points), kind="note", open_=bool(moved(points))))
    return lines


def glance_table(histories: Histories, page_suffix: str = "", level: str = "##") -> str:
    """One row per claim: points, latest verdict and what the latest run moved (under a heading of
    ``level``)."""
    slug = {e.id: e.slug for e in EXPERIMENTS}
    lines = [
        f"{level} At a glance\n",
        "| experiment | claim | points | latest | moved in the latest run |",
        "|---|---|---|---|---|",
    ]
    for exp_id, key, points in histories:
        change = "; ".join(moved(points)) or ("nothing" if len(points) > 1 else "— (first point)")
        lines.append(
            f"| [{exp_id}]({slug[exp_id]}{page_suffix}.md) | `{key.name}` | {len(points)} | "
            f"{LABEL_MARK.get(points[-1].verdict, points[-1].verdict)} | {fmt(change)} |"
        )
    lines.append("")
    return "\n".join(lines)


def _run_starts(report: Report, run_ids: set[str]) -> dict[str, dt.datetime]:
    """The recorded UTC start of each run that has one."""
    out = {}
    for run_id in run_ids:
        record = report.instance.get_run_record_by_id(run_id)
        if record is not None and record.start_time:
            out[run_id] = dt.datetime.fromtimestamp(record.start_time, dt.UTC)
    return out


def run_labels(histories: Histories, started: dict[str, dt.datetime]) -> dict[str, str]:
    """One column per run (a nightly run evaluates every claim): run id -> its label, oldest first. A run
    starts at its recorded start (``started``) or, without one, at its earliest point."""
    starts: dict[str, dt.datetime] = {}
    for _, _, points in histories:
        for p in points:
            starts[p.run_id] = min(starts.get(p.run_id, p.when), p.when)
    for run_id in starts:
        if run_id in started:
            starts[run_id] = started[run_id]
    return {r: f"{starts[r]:%m-%d %H:%M:%S}" for r in sorted(starts, key=lambda r: starts[r])}


def _run_axis(labels: dict[str, str]) -> alt.X:
    return alt.X(
        "run:O",
        sort=list(labels.values()),
        title="run (UTC start, oldest first)",
        axis=alt.Axis(labelAngle=-40, labelLimit=120),
    )


def verdict_timeline(histories: Histories, labels: dict[str, str]) -> alt.Chart:
    """Each claim's verdict at each run, coloured by verdict."""
    rows = [
        {
            "claim": f"{exp_id}: {key.name}",
            "run": labels[p.run_id],
            "verdict": p.verdict,
            "commit": p.commit,
            "torch": p.torch,
        }
        for exp_id, key, points in histories
        for p in points
    ]
    return (
        alt.Chart(pl.DataFrame(rows))
        .mark_point(filled=True, size=90)
        .encode(
            x=_run_axis(labels),
            y=alt.Y("claim:N", title=None, sort=[r["claim"] for r in rows]),
            color=alt.Color(
                "verdict:N",
                scale=alt.Scale(
                    domain=["supported", "inconclusive", "contradicted"], range=["#2e7d32", "#f9a825", "#c62828"]
                ),
            ),
            tooltip=["claim", "verdict", "run", "commit", "torch"],
        )
        .properties(
            width=min(420, 40 + 24 * len(labels)),
            height=max(120, 18 * len(histories)),
            title="Verdict of every claim at each run",
        )
    )


def figure_chart(histories: Histories, labels: dict[str, str]) -> alt.Chart | None:
    """One key figure of one claim over the runs, picked from a dropdown; ``None`` when no point has a figure."""
    figures = [
        {
            "series": f"{exp_id}: {key.name} · {name}",
            "run": labels[p.run_id],
            "value": value,
            "commit": p.commit,
            "torch": p.torch,
            "verdict": p.verdict,
        }
        for exp_id, key, points in histories
        for p in points
        for name, value in p.figures.items()
    ]
    if not figures:
        return None
    options = list(dict.fromkeys(f["series"] for f in figures))
    pick = alt.param(name="figure", value=options[0], bind=alt.binding_select(options=options, name="claim · figure "))
    return (
        alt.Chart(pl.DataFrame(figures))
        .mark_line(point=True)
        .encode(
            x=_run_axis(labels),
            y=alt.Y("value:Q", title="value (the figure's own unit)", scale=alt.Scale(zero=False)),
            tooltip=["series", "value", "run", "commit", "torch", "verdict"],
        )
        .add_params(pick)
        .transform_filter(alt.datum.series == pick)
        .properties(width=460, height=200, title="Key figure over past runs (pick the claim and figure below)")
    )
