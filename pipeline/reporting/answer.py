"""The answer first: does fusion change numerics, and is it worse than eager? In words, per fused
backend and device, from the stored verdicts of every claim check (no number here is written by hand).

Each claim check answers one of three questions, read from its declaration: whether fusion changes bits
where the main document says it does not (or not where it says it does), whether it is *worse than
eager*, and whether it gave *wrong results* on generated programs. A claim that is inconclusive, not
judged or not yet run is counted and said as such, never as good."""

import re
from dataclasses import dataclass
from typing import Any

from ..compilers import compiler_title
from ..experiment import Experiment
from ..pagekit.render import Report
from ..verdicts import CLAIM, CONTRADICTED, INCONCLUSIVE, NOT_APPLICABLE, NOT_JUDGED, SUPPORTED, not_applicable_reason
from .claims import EXPERIMENTS

BITS, WORSE, WRONG = "bits", "worse than eager", "wrong results"
#: Sections of the main document whose claims say when fusion changes bits, and those that say it is
#: no worse than eager.
BITS_SECTIONS = ("1.2-2", "1.2-3", "1.2-4", "2", "3.3")
ACCURACY_SECTIONS = ("3.2", "6.1")
_ACCURACY_TEXT = re.compile(r"(worse|less accurate|as accurately as|learns)\b.*\beager", re.I)
#: States that are not a verdict on the claim: counted apart and never read as good.
NOT_RUN, FAILED = "not yet run", "failed"


@dataclass(frozen=True)
class ClaimState:
    """One claim check of one device's report, with the question it answers."""

    exp: Experiment
    name: str
    question: str
    #: supported | contradicted | inconclusive | not judged (invalid run) | not applicable | not yet run | failed
    state: str
    reason: str
    metadata: dict[str, Any]


def question_of(exp: Experiment, name: str, claim_text: str) -> str | None:
    """Which question a claim check answers (None: none of the three, e.g. the pipeline's own drift)."""
    if "wrong" in name or "wrong result" in claim_text.lower():
        return WRONG
    if any(s in ACCURACY_SECTIONS for s in exp.sections) or _ACCURACY_TEXT.search(claim_text):
        return WORSE
    if any(s in BITS_SECTIONS for s in exp.sections):
        return BITS
    return None


def claim_states(report: Report) -> list[ClaimState]:
    """Every claim check of the report's experiments that answers one of the questions, with its state."""
    out = []
    for exp in EXPERIMENTS:
        outcome = report.outcome(exp.group) if report.shows(exp.group) else None
        for c in report.checks_of(exp.group):
            if c.outcome != CLAIM:
                continue
            question = question_of(exp, c.name, str(c.spec_metadata.get("rule.claim", "")))
            if question is None:
                continue
            reason = str(c.metadata.get("reason", ""))
            if exp.group in report.failed:
                state, reason = FAILED, report.failed[exp.group]
            elif outcome is None or c.state == "not yet run":
                state = NOT_RUN
            elif outcome.validity == NOT_APPLICABLE or c.label == NOT_APPLICABLE:
                state, reason = NOT_APPLICABLE, not_applicable_reason(c.metadata) or outcome.verdict
            elif outcome.validity == "invalid":
                state = NOT_JUDGED
            else:
                state = c.label
            out.append(ClaimState(exp, c.name, question, state, reason, c.metadata))
    return out


def newest_provenance(report: Report) -> dict[str, Any]:
    """The metadata (``provenance.*`` among it) of the report's newest materialization, any experiment."""
    newest: dict[str, Any] = {}
    stamp = None
    for exp in EXPERIMENTS:
        for a in report.assets_of(exp.group):
            if a.materialized and (stamp is None or (a.timestamp and a.timestamp > stamp)):
                stamp, newest = a.timestamp, a.metadata
    return newest


def backend_name(backend: str) -> str:
    """The compiler's name for people (:func:`pipeline.compilers.compiler_title`: ``OpenVINO``); a plain
    ``torch.compile`` backend that compiles through Inductor's adapter (``aot_eager``) as recorded."""
    title = compiler_title(backend)
    if backend != "inductor" and title == compiler_title("inductor"):
        return f"`{backend}`"
    return title


def where(report: Report, prov: dict[str, Any]) -> str:
    """The device in words: "this CPU (AMD EPYC, ATen CPU ISA AVX512)" or "the NVIDIA H200 (cuda)"."""
    this = "the imported" if report.imported else "this"
    device = str(prov.get("provenance.device") or report.device)
    if device.startswith("cpu"):
        name = str(prov.get("provenance.cpu_model") or prov.get("provenance.device_name") or device)
        isa = prov.get("provenance.cpu_capability")
        return f"{this} CPU ({name}" + (f", ATen CPU ISA {isa}" if isa else "") + ")"
    name = str(prov.get("provenance.device_name") or report.device_label or device)
    return f"{this} {name} (`{device}`)"


def _count(states: list[ClaimState], state: str) -> int:
    return sum(s.state == state for s in states)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _kind(s: ClaimState) -> str:
    return "fuzzed graphs" if "graph" in s.name else "generated programs"


def _wrong_results(states: list[ClaimState], reproducers: list[str], link: str) -> str:
    """What the generated-program testers found, from their stored counts: "gave wrong results in 3 of 10
    generated programs (...); no wrong result in 6 fuzzed graphs, too few to say (inconclusive)"."""
    parts = []
    pending = []
    for s in states:
        compared, wrong = s.metadata.get("compared"), s.metadata.get("mismatches")
        if s.state in (NOT_RUN, FAILED, NOT_JUDGED, NOT_APPLICABLE) or compared is None:
            pending.append(f"{_kind(s)} ({s.state})")
        elif s.state == CONTRADICTED:
            if reproducers:
                shown = ", ".join(f"`{r}`" for r in reproducers[:4])
                more = f" and {len(reproducers) - 4} more" if len(reproducers) > 4 else ""
                where = f"reproducers: {shown}{more}, [on the diagnostics page]({link.split('#')[0]}#reproducers)"
            else:
                where = f"each listed [on the diagnostics page]({link})"
            parts.append(f"**wrong results in {wrong} of {compared} {_kind(s)}** ({where})")
        elif s.state == SUPPORTED:
            parts.append(f"no wrong result in {compared} {_kind(s)}")
        else:
            parts.append(f"no wrong result in {compared} {_kind(s)}, too few to say ({s.state})")
    text = "gave " + "; ".join(parts) if parts else ""
    if pending:
        text += ("; " if text else "") + "has no verdict yet on " + " or ".join(pending)
    return text


def _judged(states: list[ClaimState]) -> list[ClaimState]:
    return [s for s in states if s.state in (SUPPORTED, CONTRADICTED, INCONCLUSIVE)]


def _question(states: list[ClaimState], verb: str, claims: str, topic: str) -> str:
    """ "``verb`` N of M ``claims``"; without any verdict yet, "has no verdict yet on ``topic``"."""
    judged = _judged(states)
    if not judged:
        return f"has no verdict yet on {topic} ({len(states)} claims, none judged)"
    open_ = len(states) - len(judged)
    rest = f" ({open_} of them without a verdict yet)" if open_ else ""
    return f"{verb} **{_count(states, CONTRADICTED)} of {len(states)}** {claims}{rest}"


def _reproducers(report: Report) -> list[str]:
    table = report.table("reproducers") if report.shows("diagnostics") else None
    return [] if table is None or "id" not in table.columns else [str(x) for x in table["id"].to_list()]


#: The generated finding of each fusion-evidence table (:func:`pipeline.fusion_checks.precision_check`).
PRECISION_FINDING = "_computes_in_workload_dtype"


def lower_precision(report: Report) -> str:
    """What the precision findings say in words: "It ran 6 fused rows (A, B) below their workload's dtype
    (float32 workload ran in bfloat16): their errors are that precision's, and their verdicts stand as
    judged." ("" when no compiler-reported precision is below a row's dtype)."""
    rows, where, example = 0, [], ""
    for exp in EXPERIMENTS:
        for c in report.checks_of(exp.group):
            if not c.name.endswith(PRECISION_FINDING):
                continue
            n = int(c.metadata.get("rows_in_lower_precision") or 0)
            if n:
                rows += n
                where.append(exp.id)
                example = example or str(c.metadata.get("details", "")).split("; ")[0].split(": ", 1)[-1]
    if not rows:
        return ""
    shown = f" ({example})" if example else ""
    return (
        f" It ran **{_plural(rows, 'fused row')}** ({', '.join(dict.fromkeys(where))}) below the workload's "
        f"dtype{shown}: those rows' errors are that precision's, and their verdicts stand as judged."
    )


def sentence(report: Report, states: list[ClaimState], prefix: str = "", profile: str = "") -> str:
    """One backend on one device: the answer in one sentence, then what is not counted as good; a report
    of another profile than ``profile`` names its own (its sizes and counts differ)."""
    prov = newest_provenance(report)
    backend = str(report.compiler or prov.get("provenance.backend") or "the fused backend")
    bits = [s for s in states if s.question == BITS]
    worse = [s for s in states if s.question == WORSE]
    wrong = [s for s in states if s.question == WRONG]
    clauses = []
    if bits:
        clauses.append(
            _question(
                bits, "contradicts", "of the main document's claims about when it changes bits", "when it changes bits"
            )
        )
    if worse:
        clauses.append(_question(worse, "is worse than eager in", "accuracy claims", "whether it is worse than eager"))
    if wrong:
        diagnostics = next(e for e in EXPERIMENTS if e.group == wrong[0].exp.group)
        link = f"{prefix}results/{diagnostics.slug}{report.page_suffix}.md#differential-tester"
        clauses.append(_wrong_results(wrong, _reproducers(report), link))
    joined = ", ".join(clauses[:-1]) + (", and " if len(clauses) > 1 else "") + clauses[-1] if clauses else ""
    other = f" with the {report.profile} profile" if profile and report.profile != profile else ""
    head = f"On {where(report, prov)}{other}, {backend_name(backend)}'s fusion {joined}." if joined else ""
    counted = [s for s in states if s.question != WRONG]
    unsure = [
        f"{_count(counted, st)} {label}"
        for st, label in (
            (INCONCLUSIVE, "inconclusive"),
            (NOT_JUDGED, "not judged (invalid run)"),
            (FAILED, "failed"),
            (NOT_APPLICABLE, "not applicable"),
            (NOT_RUN, "not yet run"),
        )
        if _count(counted, st)
    ]
    good = _count(counted, SUPPORTED)
    tail = f" {good} of {len(counted)} claims are supported"
    tail += f"; not counted as good: {', '.join(unsure)}." if unsure else "."
    return head + tail + lower_precision(report)


def claim_list(report: Report, states: list[ClaimState], prefix: str = "") -> str:
    """The claims that are not supported, each with its reason, linked to its page."""
    lines = []
    for s in states:
        if s.state == SUPPORTED:
            continue
        reason = s.reason if len(s.reason) <= 220 else s.reason[:219] + "…"
        page = f"{prefix}results/{s.exp.slug}{report.page_suffix}.md"
        why = f": {reason}" if reason and s.state not in (NOT_RUN, NOT_APPLICABLE) else ""
        state = reason if s.state == NOT_APPLICABLE and reason else s.state
        lines.append(f"- *{state}* ({s.question}): [{s.exp.id}]({page}) `{s.name}`{why}")
    return "\n".join(lines)


def answer_section(report: Report) -> str:
    """The overview's first screen: one sentence per backend and device, then the claims not supported."""
    parts = [
        '<div class="verdict-line answer" markdown>\n',
        "**Does automatic operator fusion change numerics, and is it worse than eager execution?**\n",
    ]
    details = []
    for r in [*(report.compilers or [report]), *report.other_devices]:
        states = claim_states(r)
        if not states:
            continue
        parts.append(sentence(r, states, profile=report.profile) + "\n")
        listed = claim_list(r, states)
        if listed:
            details.append((r, listed))
    if len(parts) == 2:
        parts.append("No claim has been judged yet: every experiment is not yet run with this profile.\n")
    parts.append("</div>\n")
    for r, listed in details:
        by = f" with {backend_name(r.compiler)}" if r.compiler else ""
        title = f"Claims not supported{by} on {where(r, newest_provenance(r))}"
        parts.append(f'??? note "{title}"\n\n' + "\n".join("    " + x for x in listed.splitlines()) + "\n")
    return "\n".join(parts)


def short_answer(report: Report) -> str:
    """The answer for this device in one plain-text sentence (for pages that are not generated)."""
    states = claim_states(report)
    text = sentence(report, states) if states else "No claim has been judged yet."
    return re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text).replace("**", "").replace("`", "")
