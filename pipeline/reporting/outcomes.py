"""The parts of an experiment page that state its outcomes: the header, verdict and rules, every check's
result and the materializations behind them."""

import json
from typing import TYPE_CHECKING, Any

from ..experiment import Experiment
from ..tables import fmt, markdown_table  # noqa: F401 - re-exported for pages and charts
from ..verdicts import (
    CLAIM,
    NOT_APPLICABLE,
)

if TYPE_CHECKING:
    # The record type the instance's check-history methods return; dagster does not export its name.
    pass

from ..pagekit.power import power_block, verdict_note
from ..pagekit.render import LABEL_MARK, CheckRecord, Report, collapsed, verdict_mark

OUTCOME_TITLE = {"validity": "Run validity", "claim": "Claim verdicts", "finding": "Findings"}
RULE_FIELDS = (
    ("claim", "claim"),
    ("metric", "metric"),
    ("decision", "decision"),
    ("threshold", "materiality threshold"),
    ("unit", "unit"),
    ("confidence", "confidence"),
    ("sample_size", "sample size"),
    ("derivation", "derivation"),
)


def outcome_cells(report: "Report", group: str) -> tuple[str, str, str]:
    """Badges for validity, verdict and findings of one experiment (for overview tables)."""
    if group in report.failed:
        return LABEL_MARK["failed"], f"failed: {report.failed[group]}", "—"
    o = report.outcome(group)
    if o is None:
        none = LABEL_MARK["not yet run" if report.shows(group) else "not run"]
        return none, none, "—"
    findings = f"{o.findings}" if o.findings else "0"
    if o.validity == NOT_APPLICABLE:
        return LABEL_MARK[NOT_APPLICABLE], fmt(o.verdict), "—"
    return LABEL_MARK[o.validity], verdict_mark(o.verdict), findings


def readable_value(value: Any) -> str:
    """A metadata value as text for a table cell: JSON objects and lists (stored as text) become
    ``key: value`` pairs and comma-separated items instead of raw JSON."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            value = json.loads(value)
        except ValueError:
            return fmt(value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {readable_value(v)}" for k, v in value.items()) or "—"
    if isinstance(value, list):
        return ", ".join(readable_value(v) for v in value) or "—"
    return fmt(value)


def _details(c: CheckRecord) -> str:
    skip = {"outcome", "verdict", "validity"} | {k for k in c.metadata if k.startswith("rule.")}
    shown = [(k, v) for k, v in c.metadata.items() if k not in skip and not str(v).startswith(("|", "- "))]
    text = "; ".join(f"{k}: {readable_value(v)}" for k, v in shown[:3]) or "—"
    return text + ("; … (every entry below)" if len(shown) > 3 else "")


def distinct_part(name: str, names: list[str]) -> str:
    """What tells check ``name`` apart from the others of ``names`` that share a prefix with it (whole
    ``_``-separated words): ``softmax`` for ``fused_not_worse_than_eager_softmax`` beside the other chains'
    checks; the whole name when it shares no prefix."""
    tokens = name.split("_")
    shared = []
    for other in names:
        if other == name:
            continue
        n = 0
        for a, b in zip(tokens, other.split("_"), strict=False):
            if a != b:
                break
            n += 1
        if n:
            shared.append(min(n, len(tokens) - 1))
    return "_".join(tokens[min(shared) :]) if shared else name


def distinct_heading(name: str, names: list[str]) -> str:
    """A heading for check ``name`` among ``names`` whose distinct part comes first, so that headings
    that share a long prefix (B's ``fused_not_worse_than_eager_<chain>``) stay distinct when a contents
    sidebar truncates them: ``softmax: `fused_not_worse_than_eager_softmax```."""
    rest = distinct_part(name, names)
    return f"`{name}`" if rest == name else f"{rest}: `{name}`"


def rules_section(report: "Report", group: str) -> str:
    """Every claim check's declared rule, parameter by parameter."""
    claims = [c for c in report.checks_of(group) if c.outcome == CLAIM]
    if not claims:
        return ""
    lines = [
        "## Decision rules\n",
        "Each claim is judged by a rule declared with its check, before the data is seen (the same parameters "
        "are shown in the Dagster UI on the check's definition).\n",
    ]
    names = [c.name for c in claims]
    for c in claims:
        lines.append(f"### {distinct_heading(c.name, names)}\n")
        lines.append("| parameter | value |\n|---|---|")
        for key, title in RULE_FIELDS:
            value = c.spec_metadata.get(f"rule.{key}")
            if value is not None:
                lines.append(f"| {title} | {fmt(value)} |")
        lines.append(f"| result | {LABEL_MARK.get(c.label, c.label)} {fmt(c.metadata.get('reason', ''))} |\n")
        lines.append(power_block(c))
    return "\n".join(lines)


def device_line(report: Report) -> str:
    """The device whose results a page shows, named on every page."""
    label = report.device_label or report.device
    origin = "imported from a results bundle" if report.imported else "run in this checkout"
    return f"Device: **{label}** (`{report.device}`, {origin}); profile **{report.profile}**.\n"


def _names(names: list[str], limit: int = 3, among: list[str] | None = None) -> str:
    """Check names for a sentence; among others that share a long prefix, only their distinct parts
    (a long identifier in running text would wrap inside itself on a phone)."""
    shown = ", ".join(
        f"`{n}`" if among is None or distinct_part(n, among) == n else f"`…{distinct_part(n, among)}`"
        for n in names[:limit]
    )
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def verdict_words(report: Report, exp: Experiment) -> str:
    """The experiment's outcome in words, from its stored checks: supported / contradicted / inconclusive
    (with its reason) / not judged / not yet run."""
    group = exp.group
    if group in report.failed:
        return f"**Verdict: none**, the experiment failed: {report.failed[group]}."
    if not report.shows(group):
        return "**Verdict: not run** in this report (it was built for some experiments only)."
    o = report.outcome(group)
    if o is None:
        return f"**Verdict: not yet run** with the `{report.profile}` profile."
    if o.validity == NOT_APPLICABLE:
        return f"**Verdict: none**, {o.verdict}."
    if o.validity == "invalid":
        return (
            f"**Verdict: not judged**: the run is invalid ({_names(list(o.invalid_checks))} failed), so its claim "
            "is not judged."
        )
    claims = [c for c in report.checks_of(group) if c.outcome == CLAIM]
    findings = f" {o.findings} finding(s) to read." if o.findings else ""
    if not claims:
        return f"**No claim of its own** (a diagnostic); run validity: {o.validity}.{findings}"
    by: dict[str, list[str]] = {}
    for c in claims:
        by.setdefault(c.label, []).append(c.name)
    parts = []
    for label in ("contradicted", "inconclusive", "not yet run", "supported"):
        names = by.get(label, [])
        if not names:
            continue
        if label == "supported" and len(names) == len(claims):
            parts.append(f"all {len(claims)} claim check(s) supported")
        elif label == "supported":
            parts.append(f"{len(names)} supported")
        else:
            parts.append(f"{len(names)} of {len(claims)} {label} ({_names(names, 3, [c.name for c in claims])})")
    text = f"**Verdict: {o.verdict}**: " + "; ".join(parts) + "."
    unsure = next((c for c in claims if c.label in ("contradicted", "inconclusive")), None)
    if unsure is not None:
        reason = " ".join(fmt(unsure.metadata.get("reason", "")).split())
        reason = reason if len(reason) <= 160 else reason[:159] + "…"
        if reason:
            text += f" First {unsure.label}: {reason}"
    if o.validity == "incomplete":
        text += " Some checks have not run yet."
    return text + findings


def verdict_line(report: Report, exp: Experiment) -> str:
    """The line directly under a page's title: the claim's outcome in words."""
    return f"{verdict_words(report, exp)}{verdict_note(report, exp)}\n{{: .verdict-line }}\n"


def experiment_header(report: Report, exp: Experiment) -> str:
    """Title, the verdict in words, device, the main-document sections fed, or a "not yet run" warning."""
    lines = [f"# {exp.id}: {exp.title}\n", verdict_line(report, exp), device_line(report)]
    if exp.sections:
        links = ", ".join(report.section_link(s) for s in exp.sections)
        lines.append(f"Feeds the main document's {links}.\n")
    if exp.group in report.failed:
        lines.append(
            f'!!! failure "Failed"\n    failed: {report.failed[exp.group]}. What this experiment stored before, if '
            "anything, is shown below; fix the cause and run the report again.\n"
        )
    elif not report.shows(exp.group):
        lines.append(
            f'!!! warning "Not run"\n    This report was built for some experiments only (`--only`); '
            f"`{exp.id}` was not among them. Run `python -m pipeline.cli report` without `--only` for every one.\n"
        )
    elif not any(a.materialized for a in report.assets_of(exp.group)):
        lines.append(
            f'!!! warning "Not yet run"\n    No asset of this experiment was materialized with the '
            f"`{report.profile}` profile. Materialize group `{exp.group}` in the Dagster UI, then "
            "re-materialize `report_site`.\n"
        )
    elif note := report.notes.get("verdict_notes", {}).get(exp.id):
        lines.append(f'!!! warning "Read this verdict with a note"\n    {note}\n')
    return "\n".join(lines)


def verdict_section(report: Report, exp: Experiment) -> str:
    """The three outcomes, then every claim's declared rule."""
    validity, verdict, findings = outcome_cells(report, exp.group)
    lines = [
        "## Verdict\n",
        "| run validity | claim verdict | findings to read |\n|---|---|---|",
        f"| {validity} | {verdict} | {findings} |\n",
        "*Run validity* says whether the run did what it claims (fused with evidence, inputs as recorded, nothing "
        "non-finite where the plan says finite); an invalid run's claim is not judged. The *claim verdict* comes "
        "from the decision rules below; *findings* are observations for a human that do not decide the claim.\n",
    ]
    for c in report.checks_of(exp.group):
        if c.outcome == CLAIM and c.state != "not yet run":
            lines.append(f"- `{c.name}`: {LABEL_MARK.get(c.label, c.label)} {fmt(c.metadata.get('reason', ''))}")
    lines.append("")
    lines.append(rules_section(report, exp.group))
    return "\n".join(lines)


def _check_details(c: CheckRecord) -> str:
    """Every result entry of a check as a two-column table (long text wraps; Markdown entries are shown as text)."""
    skip = {"outcome", "verdict", "validity"} | {k for k in c.metadata if k.startswith("rule.")}
    rows = [(k, v) for k, v in c.metadata.items() if k not in skip]
    if not rows:
        return "No result metadata."
    body = ["| entry | value |", "|---|---|"]
    for k, v in rows:
        text = readable_value(v)
        if text.startswith(("|", "- ")):  # a Markdown table or list: too long for a cell, summarize its size
            text = f"({len(str(v).splitlines())} lines; see the check in the Dagster UI)"
        body.append(f"| {k} | {text} |")
    return "\n".join(body)


def checks_section(report: Report, exp: Experiment) -> str:
    """One table per outcome kind (asset, check, result, short details), each check's full result collapsed below."""
    lines = ["## Asset checks\n"]
    for kind in ("validity", "claim", "finding"):
        checks = [c for c in report.checks_of(exp.group) if c.outcome == kind]
        if not checks:
            continue
        lines.append(f"### {OUTCOME_TITLE[kind]}\n")
        lines.append("| check | asset | result | details |\n|---|---|---|---|")
        for c in checks:
            lines.append(
                f"| {fmt(c.description or c.name)} | `{c.asset}` | {LABEL_MARK.get(c.label, c.label)} | {_details(c)} |"
            )
        lines.append("")
        for c in checks:
            if c.metadata:
                lines.append(collapsed(f"{c.name}: every result entry", _check_details(c), kind="info"))
    return "\n".join(lines)


def materializations_section(report: Report, exp: Experiment) -> str:
    lines = ["## Materializations\n", "| asset | materialized (UTC) | commit | torch | device |\n|---|---|---|---|---|"]
    for a in report.assets_of(exp.group):
        when = a.timestamp.strftime("%Y-%m-%d %H:%M") if a.timestamp else LABEL_MARK["not yet run"]
        lines.append(
            f"| `{a.key}` | {when} | {fmt(a.metadata.get('provenance.git_commit', '—'))[:12]} | "
            f"{fmt(a.metadata.get('provenance.torch_version', '—'))} | {fmt(a.metadata.get('provenance.device_name', '—'))} |"
        )
    lines.append("")
    return "\n".join(lines)


#: Built JavaScript bundles, one per vl-convert version (git-ignored): bundling takes about a second
#: and gives the same file for the same vl-convert.
