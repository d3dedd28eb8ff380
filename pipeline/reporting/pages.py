"""The report's pages: overview (claim -> evidence), one page per experiment, toolkit page."""

from typing import Any

import polars as pl

from ..pagekit.render import Report, collapsed, markdown_table
from ..verdicts import NOT_APPLICABLE
from .answer import answer_section, newest_provenance
from .claims import CLAIM_EVIDENCE, EXPERIMENTS, SECTIONS, Experiment
from .history import history_page
from .outcomes import checks_section, experiment_header, materializations_section, outcome_cells, verdict_section
from .side_by_side import claims_header, compilers_section, verdict_cell
from .side_by_side import title as compiler_column

#: Tables longer than this are not printed on the page (only offered for download).
LONG_TABLE_ROWS = 120
#: What an opened stored table shows; the download has everything.
STORED_TABLE_ROWS = 60
STORED_TABLE_COLUMNS = 12


def overview(report: Report) -> str:
    by_id = {e.id: e for e in EXPERIMENTS}
    lines = [
        "# Fusion precision report\n",
        answer_section(report),
        "## Claims and evidence\n",
        "Each row below is a claim of the main document, the experiment that gives it evidence, and "
        "three separate outcomes of that experiment's latest materialization: whether the run was *valid* "
        "(it did what it claims: fused with evidence, inputs as recorded, nothing non-finite where the plan says "
        "finite), the claim's *verdict* (supported / contradicted / inconclusive, by a rule stated before the "
        "data: threshold, confidence, sample size, shown on each page) and how many *findings* a human should "
        "read. An invalid run is never shown as a verdict on the claim.\n",
        f"Profile **{report.profile}**, device **{report.device_label or report.device}** (`{report.device}`). "
        "Experiments that were not materialized with this profile are marked *not yet run*.\n",
    ]
    if report.compilers:
        lines.append(
            f"{len(report.compilers)} compilers have results here: each column is one compiler's verdict "
            "from its own latest records (run validity and findings on each experiment's page).\n"
        )
        lines += claims_header(report, ("claim", "main document", "evidence"))
    else:
        lines += [
            "| claim | main document | evidence | run validity | verdict | findings |",
            "|---|---|---|---|---|---|",
        ]
    for section_key, exp_ids in CLAIM_EVIDENCE:
        section = SECTIONS[section_key]
        for exp_id in exp_ids:
            exp = by_id[exp_id]
            head = (
                f"| {section.claim} | {report.section_link(section_key, from_results=False)} | "
                f"[{exp.id}: {exp.title}](results/{exp.slug}.md) | "
            )
            if report.compilers:
                lines.append(head + " | ".join(verdict_cell(r, exp.group) for r in report.compilers) + " |")
                continue
            validity, verdict, findings = outcome_cells(report, exp.group)
            lines.append(head + f"{validity} | {verdict} | {findings} |")
    others = report.other_devices
    if others:
        lines.append(
            f"Results of {len(others)} more device(s) are imported: see [devices side by side](results/devices.md).\n"
        )
    else:
        lines.append("The device and CPU class of every result: [devices](results/devices.md).\n")
    if not report.device.startswith("cuda") and not any(
        o.device.split(":")[0] in ("cuda", "xpu", "npu", "mps") for o in others
    ):
        lines.append(
            '!!! note "Measured on the CPU only"\n    Every number here comes from the CPU: the fused path is '
            "Inductor's generated C++. The same pipeline runs on CUDA (Triton kernels) with "
            "`device: cuda`, but no GPU result is part of this build, so nothing here says how fusion "
            "behaves on a GPU.\n"
        )
    lines.append("\n## Experiments\n")
    lines.append("Each experiment's page opens with what the test plan asks it to deliver, in the plan's form.\n")
    if report.compilers:
        lines += claims_header(report, ("experiment", "opens with (the plan's deliverable)"))
    else:
        lines.append(
            "| experiment | opens with (the plan's deliverable) | run validity | verdict | findings |\n|---|---|---|---|---|"
        )
    for exp in EXPERIMENTS:
        validity, verdict, findings = outcome_cells(report, exp.group)
        opens = exp.plan_deliverable or f"no plan deliverable (asset group `{exp.group}`)"
        if report.compilers:
            cells = " | ".join(verdict_cell(r, exp.group) for r in report.compilers)
            lines.append(f"| [{exp.id}: {exp.title}](results/{exp.slug}.md) | {opens} | {cells} |")
            continue
        lines.append(
            f"| [{exp.id}: {exp.title}](results/{exp.slug}.md) | {opens} | {validity} | {verdict} | {findings} |"
        )
    lines.append(
        "\nHow each claim's key figures moved over past runs: [history](results/history.md). "
        "Definitions of every statistic are on the [methodology](methodology.md) page.\n"
    )
    if report.time_section:
        lines.append(report.time_section)
    return "\n".join(lines)


def stored_tables(report: Report, exp: Experiment) -> str:
    """Every stored table of the experiment, collapsed, with its parquet / CSV download."""
    parts = [
        "## Stored tables\n",
        "Each table as the experiment stored it; open one to read it here (first "
        f"{STORED_TABLE_ROWS} rows), or download it whole.\n",
    ]
    for asset in report.assets_of(exp.group):
        table = report.table(asset.key)
        if not isinstance(table, pl.DataFrame):
            continue
        links = report.downloads(asset.key, table)
        if table.height > LONG_TABLE_ROWS:  # per-run / per-set logs: summarized above
            body = f"{links}\n\n_Too long to read on a page: {table.height} rows._"
        else:
            body = f"{links}\n\n" + markdown_table(table, max_rows=STORED_TABLE_ROWS, max_columns=STORED_TABLE_COLUMNS)
        parts.append(
            f"### `{asset.key}`\n\n{asset.description}\n\n" + collapsed(f"{asset.key}: {table.height} rows", body)
        )
    return "\n".join(parts)


def experiment_page(report: Report, exp: Experiment) -> str:
    """Deliverable first (the plan's own form), then the verdict and its rules, then the details."""
    intro = experiment_header(report, exp)
    side = compilers_section(report, exp)
    if side:
        intro = f"{intro}\n{side}"
    elsewhere = other_devices_section(report, exp)
    if not any(a.materialized for a in report.assets_of(exp.group)):
        return "\n".join(x for x in (intro, elsewhere) if x)
    parts = [intro]
    deliverable = exp.deliverable
    if deliverable is not None:
        parts.append(deliverable(report, exp))
    parts.append(verdict_section(report, exp))
    if elsewhere:
        parts.append(elsewhere)
    parts.append("## Details\n\nCharts and tables behind the deliverable, every check's result, the stored tables.\n")
    builder = exp.details
    if builder is not None:
        parts.append(builder(report, exp))
    parts.append(checks_section(report, exp))
    parts.append(stored_tables(report, exp))
    parts.append(materializations_section(report, exp))
    return "\n".join(parts)


PROVENANCE_ROWS = (
    ("device", "torch device"),
    ("device_name", "hardware"),
    ("backend", "fused backend"),
    ("torch_version", "torch"),
    ("cuda_runtime", "CUDA runtime"),
    ("driver", "driver"),
    ("compute_capability", "compute capability"),
    ("cpu_capability", "ATen CPU ISA"),
    ("git_commit", "commit"),
)


def _commits(report: Report) -> str:
    """The source commit(s) of the device's materializations: one, or (results merged from sessions on
    different sources) each with the experiments it made, newest first."""
    made: dict[str, tuple[str, list[str]]] = {}
    for exp in EXPERIMENTS:
        for a in report.assets_of(exp.group):
            commit = str(a.metadata.get("provenance.git_commit") or "") if a.materialized else ""
            if commit:
                stamp, ids = made.get(commit, ("", []))
                when = str(a.timestamp or "")  # a datetime: its ISO text sorts as it does
                made[commit] = (max(stamp, when), ids if exp.id in ids else [*ids, exp.id])
    if len(made) < 2:
        return ""
    ordered = sorted(made.items(), key=lambda kv: kv[1][0], reverse=True)
    return ", ".join(f"{c[:12]} ({', '.join(ids)})" for c, (_, ids) in ordered)


def device_column(report: Report, profile: str) -> str:
    """A device's column title: its label (with the compiler's name when compilers are side by side:
    ``OpenVINO · cpu``), and its profile where that is not ``profile``."""
    label = compiler_column(report) if report.compiler else report.device_label or report.device
    return label if report.profile == profile else f"{label} ({report.profile})"


def _fixes(report: Report, key: str) -> bool:
    """Whether the device's notes correct its recorded ``key`` (the correction is then what is shown)."""
    return bool(report.notes.get("provenance_corrections", {}).get(key))


def _corrected(report: Report, key: str, recorded: Any) -> str:
    """A provenance value as shown: the notes' correction, when they have one, beside the recorded value."""
    if not _fixes(report, key):
        return str(recorded or "—")
    fix = report.notes["provenance_corrections"][key]
    return f"{fix['actual']} (recorded {str(fix.get('recorded') or recorded)[:12]}: wrong)"


def device_notes(report: Report, column: str) -> str:
    """A device's notes file on the devices page: what did not finish there and why, and which
    recorded provenance is wrong ('' without notes)."""
    notes = report.notes
    if not notes:
        return ""
    lines = [f"### {notes.get('title') or column}\n"]
    if notes.get("summary"):
        lines.append(f"{notes['summary']}\n")
    unfinished = notes.get("did_not_finish", {})
    if unfinished:
        lines.append(f"Did not finish on {column}, so there is no verdict from it:\n")
        lines += [f"- **{exp_id}**: {why}" for exp_id, why in unfinished.items()]
        lines.append("")
    reviewed = notes.get("verdict_notes", {})
    if reviewed:
        lines.append(f"Verdicts from {column} to read with a note (stored judgments are not re-judged):\n")
        lines += [f"- **{exp_id}**: {note}" for exp_id, note in reviewed.items()]
        lines.append("")
    for key, fix in notes.get("provenance_corrections", {}).items():
        recorded = fix.get("recorded") or "—"
        why = f" {fix['why']}" if fix.get("why") else ""
        lines.append(
            f'!!! warning "Recorded {key} is wrong"\n    Its results record `{key}` = `{recorded}`; the right '
            f"value is `{fix['actual']}`.{why}\n"
        )
    return "\n".join(lines)


def devices_page(reports: list[Report]) -> str:
    """Every device with results, side by side: outcomes per experiment, then provenance, then each
    imported device's notes. Devices whose profile is not the first report's are marked with theirs."""
    profile = reports[0].profile
    labels = [device_column(r, profile) for r in reports]
    mixed = any(r.profile != profile for r in reports)
    lines = [
        "# Devices side by side\n",
        devices_verdict_line(reports, labels),
        f"Profile **{profile}**. Each column is one device's latest materialization of each experiment "
        "(run validity / claim verdict / findings), judged by the same rules; the first column is this checkout's "
        "own run, the others come from imported results bundles. Devices named: "
        + ", ".join(f"**{x}**" for x in labels)
        + ".\n",
    ]
    if mixed:
        lines.append(
            "A column with a profile in parentheses ran that profile, whose sizes and counts differ: compare its "
            "verdicts with the others, not its figures.\n"
        )
    lines += ["| experiment | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for exp in EXPERIMENTS:
        cells = []
        for r in reports:
            validity, verdict, findings = outcome_cells(r, exp.group)
            page = f"{exp.slug}{r.page_suffix}.md"
            if r.imported and exp.group in r.failed:
                cells.append(f"{validity} did not finish ([why]({page}))")
            else:
                read = f" {findings}&nbsp;finding(s)" if findings != "—" else ""
                cells.append(f"[{verdict}]({page}) {validity}{read}")
        name = exp.short or exp.title
        lines.append(f"| {exp.id if name == exp.id else f'{exp.id}: {name}'} | " + " | ".join(cells) + " |")
    lines.append(cpu_classes(reports, labels))
    lines += ["\n## Provenance\n", "| | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    provs = [newest_provenance(r) for r in reports]
    for key, title in PROVENANCE_ROWS:
        values = [_corrected(r, key, p.get(f"provenance.{key}")) for r, p in zip(reports, provs, strict=True)]
        if key == "git_commit":  # a merged bundle's sessions ran different sources: name each
            values = [v if _fixes(r, key) else _commits(r) or v for r, v in zip(reports, values, strict=True)]
        lines.append(f"| {title} | " + " | ".join(values) + " |")
    lines.append(
        "| imported from | " + " | ".join(str(p.get("bundle.imported_from", "this checkout")) for p in provs) + " |"
    )
    notes = [device_notes(r, label) for r, label in zip(reports, labels, strict=True) if r.notes]
    if notes:
        lines += ["\n## Notes on imported results\n", *notes]
    return "\n".join(lines) + "\n"


def devices_verdict_line(reports: list[Report], labels: list[str]) -> str:
    """The devices page's verdict line: each device's experiment verdicts, counted."""
    parts = []
    for r, label in zip(reports, labels, strict=True):
        verdicts = [r.verdict(e.group) if e.group not in r.failed else "failed" for e in EXPERIMENTS]
        verdicts = [NOT_APPLICABLE if v.startswith(NOT_APPLICABLE) else v for v in verdicts]
        counts = ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts))
        parts.append(f"{label}: {counts}")
    return "**Verdicts by device** (experiments): " + "; ".join(parts) + ".\n{: .verdict-line }\n"


#: Provenance entries that name a CPU class: model, ATen's CPU capability, Inductor's vector ISA.
CPU_CLASS_KEYS = (
    ("cpu_model", "CPU model"),
    ("cpu_capability", "ATen CPU ISA"),
    ("inductor_vec_isa", "Inductor vector ISA"),
)


def cpu_classes(reports: list[Report], labels: list[str]) -> str:
    """Every CPU class the reports' results ran on (from each stored materialization's provenance), with
    the device column and experiments that ran there."""
    found: dict[tuple[str, ...], dict[str, list[str]]] = {}
    for r, label in zip(reports, labels, strict=True):
        for exp in EXPERIMENTS:
            for a in r.assets_of(exp.group):
                if not a.materialized:
                    continue
                meta = a.metadata
                model = meta.get("provenance.cpu_model") or (
                    meta.get("provenance.device_name")
                    if str(meta.get("provenance.device", "")).startswith("cpu")
                    else None
                )
                if not model:
                    continue
                key = (str(model), *(str(meta.get(f"provenance.{k}") or "—") for k, _ in CPU_CLASS_KEYS[1:]))
                ids = found.setdefault(key, {}).setdefault(label, [])
                if exp.id not in ids:
                    ids.append(exp.id)
    lines = ["\n## CPU classes\n"]
    if not found:
        lines.append("No stored result records a CPU model.\n")
        return "\n".join(lines)
    lines.append(
        "Every CPU class the results above ran on, from the provenance stored with each result (the host CPU "
        "runs the fused path's generated C++ on a CPU device, and compiles for every device).\n"
    )
    lines += ["| " + " | ".join(t for _, t in CPU_CLASS_KEYS) + " | results of |", "|---|---|---|---|"]
    for key, where in found.items():
        ran = "; ".join(f"{label}: {', '.join(ids)}" for label, ids in where.items())
        lines.append("| " + " | ".join(key) + f" | {ran} |")
    return "\n".join(lines) + "\n"


def other_devices_section(report: Report, exp: Experiment) -> str:
    """The experiment's outcome on every imported device, each linked to its own page ('' when none)."""
    others = report.other_devices
    if not others:
        return ""
    lines = [
        "## On other devices\n",
        "The same experiment from imported results bundles, judged by the same rules "
        "([devices side by side](devices.md)).\n",
        "| device | profile | run validity | claim verdict | findings |",
        "|---|---|---|---|---|",
    ]
    for o in others:
        validity, verdict, findings = outcome_cells(o, exp.group)
        page = f"{exp.slug}{o.page_suffix}.md"
        if exp.group in o.failed:
            verdict, findings = "did not finish", "—"
        lines.append(f"| [{o.device_label or o.device}]({page}) | {o.profile} | {validity} | {verdict} | {findings} |")
    notes = [(o, o.notes.get("verdict_notes", {}).get(exp.id)) for o in others]
    lines += [f"\n**Note on {o.device_label or o.device} ({o.profile}):** {note}" for o, note in notes if note]
    return "\n".join(lines) + "\n"


def all_pages(report: Report) -> dict[str, str]:
    pages = {"index.md": overview(report)}
    for exp in EXPERIMENTS:
        pages[f"results/{exp.slug}.md"] = experiment_page(report, exp)
    pages["results/history.md"] = history_page(report)
    others = report.other_devices
    # Devices x compilers: this checkout's device once per compiler with results, then the imported ones.
    pages["results/devices.md"] = devices_page([*(report.compilers or [report]), *others])
    if others:
        for other in others:
            for exp in EXPERIMENTS:
                pages[f"results/{exp.slug}{other.page_suffix}.md"] = experiment_page(other, exp)
    return pages


def site_nav() -> list[dict[str, Any]]:
    """The site's navigation, from the registry: the experiments that judge a claim of the main
    document (or go beyond the plan) under "Experiments", the history of the claims, the other
    experiments (diagnostics, regression) on their own, then the hand-written pages."""
    judged = [e for e in EXPERIMENTS if e.sections or e.plan_deliverable or e.beyond_plan]
    return [
        {"Overview": "index.md"},
        {"Experiments": [{f"{e.id}: {e.short or e.title}": f"results/{e.slug}.md"} for e in judged]},
        {"History of the claims": "results/history.md"},
        {"Devices": "results/devices.md"},
        *({e.short or e.title: f"results/{e.slug}.md"} for e in EXPERIMENTS if e not in judged),
        {"Methodology": "methodology.md"},
        {"Main document sections": "main-document.md"},
    ]
