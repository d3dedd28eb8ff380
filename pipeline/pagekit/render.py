"""Build the report: Markdown pages + Vega-Lite specs (with SVG fallbacks) + ``mkdocs build``.

Everything here reads finished asset values and Dagster's records of materializations and check
evaluations. An experiment whose assets were not materialized with the report's profile is shown
as "not yet run", never with numbers from elsewhere.
"""

import copy
import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import altair as alt
import dagster as dg
import polars as pl

from .. import runs
from ..files import atomic_path
from ..resources import REPO_ROOT  # noqa: F401 - the site and the report asset read it from here
from ..runs import DEFAULT_BACKEND, evaluation_compiler
from ..sections import SECTIONS
from ..storage import compiler_folder, read_value, uses_fused_path
from ..tables import fmt, markdown_table  # noqa: F401 - re-exported for pages and charts
from ..verdicts import (
    CLAIM,
    INCONCLUSIVE,
    NOT_APPLICABLE,
    NOT_JUDGED,
    VALIDITY,
    CheckOutcome,
    ExperimentOutcome,
    check_outcome,
    not_applicable_reason,
    summarize,
)

if TYPE_CHECKING:
    # The record type the instance's check-history methods return; dagster does not export its name.
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecord


def check_evaluation(record: "AssetCheckExecutionRecord | None") -> dg.AssetCheckEvaluation | None:
    """The evaluation a check-history record holds, or ``None`` when it holds none: no record, or a
    "planned" event of a run stopped before the check ran (no result)."""
    event = record.event if record is not None else None
    data = event.dagster_event.event_specific_data if event is not None and event.dagster_event is not None else None
    return data if isinstance(data, dg.AssetCheckEvaluation) else None


def plain_value(value: Any) -> Any:
    """A metadata value as a plain Python value."""
    inner = getattr(value, "value", value)
    if isinstance(inner, (dict, list)):
        return json.dumps(inner, default=str)
    return inner


@dataclass
class AssetRecord:
    key: str
    description: str
    materialized: bool
    timestamp: dt.datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckRecord:
    asset: str
    name: str
    description: str
    state: str  # passed | failed | warned | not yet run
    metadata: dict[str, Any] = field(default_factory=dict)
    outcome: str = VALIDITY  # validity | claim | finding, from the check's definition
    spec_metadata: dict[str, Any] = field(default_factory=dict)  # the declared rule (claims)

    @property
    def key(self) -> str:
        return f"{self.asset}:{self.name}"

    def as_outcome(self) -> CheckOutcome | None:
        """This evaluation as the three outcomes see it (None when not yet run)."""
        if self.state == "not yet run":
            return None
        return check_outcome(
            self.key, self.state == "passed", "WARN" if self.state == "warned" else "ERROR", self.metadata, self.outcome
        )

    @property
    def label(self) -> str:
        """What the result means for its kind: valid / invalid, the claim's verdict, finding / none."""
        o = self.as_outcome()
        if o is None:
            return "not yet run"
        if o.not_applicable:
            return NOT_APPLICABLE
        if o.outcome == CLAIM:
            return o.verdict or INCONCLUSIVE
        if o.outcome == VALIDITY:
            return "valid" if o.passed else "invalid"
        return "finding" if o.to_read else "nothing to read"


class Report:
    """Context for rendering: instance records, stored values and where to write."""

    def __init__(
        self,
        instance: dg.DagsterInstance,
        asset_graph: Any,
        data_dir: Path,
        docs_dir: Path,
        profile: str,
        main_document_url: str,
        device: str = "cpu",
        device_label: str | None = None,
        imported: bool = False,
    ) -> None:
        self.instance = instance
        self.graph = asset_graph
        self.data_dir = data_dir
        self.docs_dir = docs_dir
        self.profile = profile
        self.main_document_url = main_document_url.rstrip("/")
        self.device = device
        #: Whose results this report shows: materializations naming this device label (None: any),
        #: made here (``imported`` False) or brought in from a results bundle (True).
        self.device_label = device_label
        self.imported = imported
        #: Added to page and chart names so several devices' pages live side by side.
        self.page_suffix = ""
        #: Reports of the other devices with imported results (bundles), shown beside this one.
        self.other_devices: list[Report] = []
        #: An imported bundle's notes file (``pipeline.bundle.read_notes``); empty for local results.
        self.notes: dict[str, Any] = {}
        #: Asset groups this report shows (empty: all); the others are shown as not run in it
        #: (``python -m pipeline.cli report --only B,D``).
        self.only: tuple[str, ...] = ()
        #: Asset group -> why its step failed in the run this report follows ("failed: <reason>").
        self.failed: dict[str, str] = {}
        #: The compiler of that run: another compiler's column (:meth:`for_compiler`) carries none of its failures.
        self.failed_backend: str | None = None
        #: The overview's "Where the time went" section (Markdown; empty: left out).
        self.time_section = ""
        #: The compiler (backend name) whose results this report shows (None: the latest of any). Set on
        #: the copies :func:`pipeline.reporting.side_by_side.compiler_reports` makes, one per compiler.
        self.compiler: str | None = None
        #: One copy of this report per compiler with results here, when more than one has them (the
        #: overview and experiment pages then show them side by side); empty otherwise.
        self.compilers: list[Report] = []
        self._assets: dict[str, list[AssetRecord]] = {}
        self._checks: dict[str, list[CheckRecord]] = {}
        self._run_settings: dict[str, dict[str, Any]] = {}

    def for_compiler(self, backend: str) -> "Report":
        """A copy of this report that reads only ``backend``'s records, with caches of its own."""
        r = copy.copy(self)
        r.compiler = backend
        r.compilers = []
        if self.failed_backend is not None and backend != self.failed_backend:
            r.failed = {}  # the run that failed was another compiler's; this one's own are in its records
        r.clear_caches()
        return r

    def clear_caches(self) -> None:
        """Forget the records read so far (the next read asks the instance again)."""
        self._assets, self._checks, self._run_settings = {}, {}, {}

    # --- records ------------------------------------------------------------------------------
    def assets_of(self, group: str) -> list[AssetRecord]:
        """Every asset of ``group`` with its latest materialization under this profile (cached)."""
        if group not in self._assets:
            self._assets[group] = self._load_assets(group)
        return self._assets[group]

    def shows(self, group: str) -> bool:
        """Whether this report shows ``group``'s results (``only`` leaves the others out)."""
        return not self.only or group in self.only or group == "report"

    def checks_of(self, group: str) -> list[CheckRecord]:
        """Every check on ``group``'s assets with its latest evaluation (cached)."""
        if group not in self._checks:
            self._checks[group] = self._load_checks(group)
        return self._checks[group]

    def _load_assets(self, group: str) -> list[AssetRecord]:
        out = []
        for key in sorted(self.graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
            node = self.graph.get(key)
            if node.group_name != group:
                continue
            record = AssetRecord(key.to_user_string(), node.description or "", False)
            if not self.shows(group):
                out.append(record)
                continue
            event = self._latest_materialization(key)
            if event is not None and event.asset_materialization is not None:
                meta = {k: plain_value(v) for k, v in event.asset_materialization.metadata.items()}
                if runs.matches(meta, self.profile):
                    record.materialized = True
                    record.timestamp = dt.datetime.fromtimestamp(event.timestamp, dt.UTC)
                    record.metadata = meta
            out.append(record)
        return out

    def _load_checks(self, group: str) -> list[CheckRecord]:
        out = []
        materialized = {a.key for a in self.assets_of(group) if a.materialized}
        for check_key in sorted(self.graph.asset_check_keys, key=lambda c: (c.asset_key.to_user_string(), c.name)):
            if self.graph.get(check_key.asset_key).group_name != group:
                continue
            spec = self.graph.get_check_spec(check_key)
            spec_meta = {k: plain_value(v) for k, v in (spec.metadata or {}).items()}
            record = CheckRecord(
                check_key.asset_key.to_user_string(),
                check_key.name,
                spec.description or "",
                "not yet run",
                outcome=spec_meta.get("outcome", VALIDITY),
                spec_metadata=spec_meta,
            )
            # A run stopped before the check ran leaves a "planned" event with no result: not yet run.
            evaluation = check_evaluation(self._latest_check_record(check_key))
            # A check of an experiment that does not apply to the run's compiler is stored without a
            # materialization of its asset (the run leaves those assets out): its record stands alone.
            stands_alone = evaluation is not None and bool(not_applicable_reason(evaluation.metadata))
            if evaluation is not None and (record.asset in materialized or stands_alone):
                if evaluation.passed:
                    record.state = "passed"
                else:
                    record.state = "warned" if evaluation.severity == dg.AssetCheckSeverity.WARN else "failed"
                record.metadata = {k: plain_value(v) for k, v in evaluation.metadata.items()}
            out.append(record)
        return out

    def _mine(self, metadata: Any, *, is_check: bool = False) -> bool:
        """Whether a record belongs to this report: made here or imported as the report says,
        with its profile and device. Local check evaluations carry neither (they follow the local
        run); imported ones carry both."""
        meta = runs.plain(metadata)
        origin: runs.Origin = "imported" if self.imported else "local"
        if is_check and not self.imported:
            return runs.matches(meta, origin=origin)
        return runs.matches(meta, self.profile, self.device_label, origin)

    def _latest_materialization(self, key: dg.AssetKey) -> Any:
        """The latest materialization of ``key`` by this report's device, or the latest of all
        local ones when no device is set (then the profile filter below applies as before). A value that
        depends on no fused path (S's pools, the planted-bug matrix) is stored once for every compiler:
        each compiler's copy of the report reads its latest, whichever compiler's run made it."""
        compiler = self.compiler if self._per_compiler(key) else None
        if self.device_label is None and not self.imported and compiler is None:
            return self.instance.get_latest_materialization_event(key)
        for r, mat, meta in runs.materializations(self.instance, key, limit=100):
            if compiler is not None and str(meta.get("provenance.backend") or DEFAULT_BACKEND) != compiler:
                continue
            if (self.device_label is None and not self.imported) or self._mine(mat.metadata):
                return r.event_log_entry
        return None

    def _latest_check_record(self, check_key: dg.AssetCheckKey) -> "AssetCheckExecutionRecord | None":
        """The latest evaluation of ``check_key`` for this report's device: imported evaluations
        carry their device label; local ones are everything not imported. A check of a value stored
        once for every compiler is read as that value is (:meth:`_latest_materialization`)."""
        compiler = self.compiler if self._per_compiler(check_key.asset_key) else None
        if self.device_label is None and not self.imported and compiler is None:
            return self.instance.get_latest_asset_check_evaluation_record(check_key)
        for r in self.instance.event_log_storage.get_asset_check_execution_history(check_key, limit=100):
            data = check_evaluation(r)
            if data is None or not self._mine(data.metadata, is_check=True):
                continue
            if compiler is not None:
                backend, _, _ = evaluation_compiler(
                    self.instance, check_key, r.run_id, data.metadata, self._run_settings
                )
                if backend != compiler:
                    continue
            return r
        return None

    def _per_compiler(self, key: dg.AssetKey) -> bool:
        """Whether ``key``'s value is stored per compiler (it depends on the fused path)."""
        return uses_fused_path(getattr(self.graph.get(key), "tags", None))

    def outcome(self, group: str) -> ExperimentOutcome | None:
        """The experiment's run validity, claim verdict and findings (None when nothing ran)."""
        checks = self.checks_of(group)
        if not any(a.materialized for a in self.assets_of(group)) and not any(
            c.label == NOT_APPLICABLE for c in checks
        ):
            return None
        evaluated = [o for o in (c.as_outcome() for c in checks) if o is not None]
        return summarize(evaluated, complete=all(c.state != "not yet run" for c in checks), not_applicable=True)

    def verdict(self, group: str) -> str:
        """The claim verdict alone: supported / contradicted / inconclusive, NOT_JUDGED for an
        invalid run, "no claim" for a diagnostic group, "not yet run"."""
        outcome = self.outcome(group)
        return "not yet run" if outcome is None else outcome.verdict

    def table(self, asset: str) -> pl.DataFrame | None:
        """A stored table, or ``None`` when the asset was not materialized with this profile."""
        value = self.value(asset)
        return value if isinstance(value, pl.DataFrame) else None

    def value(self, asset: str) -> Any:
        """Any stored value (JSON records included), or ``None`` when not materialized here."""
        node = self.graph.get(dg.AssetKey(asset))
        record = next((a for a in self.assets_of(node.group_name) if a.key == asset), None)
        if record is None or not record.materialized:
            return None
        try:
            return read_value(self.data_dir.joinpath(*self._compiler_folder(node, record), asset))
        except FileNotFoundError:
            if self.imported:  # a bundle may leave large tensor files out: the record stays, the values do not
                return None
            raise

    def _compiler_folder(self, node: Any, record: AssetRecord) -> tuple[str, ...]:
        """Where under the profile's folder the value of ``record`` lies: the folder of the compiler that
        computed it (this report's, else the one its materialization names), none for a value that
        depends on no fused path."""
        if not uses_fused_path(getattr(node, "tags", None)):
            return ()
        return compiler_folder(self.compiler or str(record.metadata.get("provenance.backend") or DEFAULT_BACKEND))

    # --- links and charts ---------------------------------------------------------------------
    def section_link(self, key: str, from_results: bool = True) -> str:
        section = SECTIONS[key]
        if self.main_document_url:
            return f"[{section.label}]({self.main_document_url}#{section.anchor})"
        prefix = "../" if from_results else ""
        return f"[{section.label}]({prefix}main-document.md#{section.anchor})"

    def chart(self, slug: str, name: str, chart: alt.TopLevelMixin, caption: str) -> str:
        """Write the chart's Vega-Lite spec and SVG fallback; return the HTML that embeds it."""
        import vl_convert as vlc

        spec = chart.to_dict()  # raises if a chart needs more rows than Altair's default limit
        spec.setdefault("$schema", "https://vega.github.io/schema/vega-lite/v5.json")
        charts_dir = self.docs_dir / "results" / "charts"
        charts_dir.mkdir(parents=True, exist_ok=True)
        stem = f"{slug}{self.page_suffix}-{name}"
        with atomic_path(charts_dir / f"{stem}.vl.json") as tmp:
            tmp.write_text(json.dumps(spec, indent=1))
        with atomic_path(charts_dir / f"{stem}.svg") as tmp:
            tmp.write_text(vlc.vegalite_to_svg(spec))
        inline = json.dumps(spec).replace("</", "<\\/")
        return (
            f'<figure class="vega-figure">\n<div class="vega-chart" id="chart-{stem}"></div>\n'
            f'<script type="application/json" data-vega-target="chart-{stem}">{inline}</script>\n'
            f'<noscript><img src="charts/{stem}.svg" alt="{caption}"></noscript>\n'
            f'<figcaption>{caption} (<a href="charts/{stem}.svg">SVG</a>, '
            f'<a href="charts/{stem}.vl.json">Vega-Lite spec</a>)</figcaption>\n</figure>\n'
        )

    def downloads(self, asset: str, table: pl.DataFrame) -> str:
        """Copy a stored table into the site (parquet, and CSV up to ``CSV_MAX_ROWS`` rows) and return
        Markdown links to the copies, relative to a page under ``results/``."""
        folder = self.docs_dir / "results" / "data"
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"{asset}{self.page_suffix}"
        with atomic_path(folder / f"{stem}.parquet") as tmp:
            table.write_parquet(tmp)
        links = [f"[parquet](data/{stem}.parquet)"]
        if table.height <= CSV_MAX_ROWS:
            with atomic_path(folder / f"{stem}.csv") as tmp:
                _flat(table).write_csv(tmp)
            links.append(f"[CSV](data/{stem}.csv)")
        return "Download: " + " · ".join(links) + f" ({table.height} rows x {table.width} columns)"


#: Larger tables are offered as parquet only (a CSV of them would dwarf the rest of the site).
CSV_MAX_ROWS = 100_000


def _flat(table: pl.DataFrame) -> pl.DataFrame:
    """``table`` with nested columns (lists, structs) as JSON text, which CSV cannot hold otherwise."""
    nested = [name for name, dtype in table.schema.items() if dtype.is_nested()]
    return table.with_columns(
        pl.col(name).map_elements(
            lambda v: json.dumps(v.to_list() if hasattr(v, "to_list") else v, default=str), return_dtype=pl.String
        )
        for name in nested
    )


def collapsed(title: str, body: str, kind: str = "abstract", open_: bool = False) -> str:
    """A collapsible block (pymdownx.details): closed by default, so long tables do not bury the page."""
    marker = "???+" if open_ else "???"
    indented = "\n".join(("    " + line) if line.strip() else "" for line in body.strip("\n").splitlines())
    return f'{marker} {kind} "{title}"\n\n{indented}\n'


def _badge(kind: str, text: str) -> str:
    return f'<span class="badge badge-{kind}">{text}</span>'


LABEL_MARK = {
    "valid": _badge("ok", "valid"),
    "invalid": _badge("bad", "invalid run"),
    "incomplete": _badge("none", "incomplete"),
    "supported": _badge("ok", "supported"),
    "contradicted": _badge("bad", "contradicted"),
    "inconclusive": _badge("warn", "inconclusive"),
    NOT_JUDGED: _badge("none", "not judged: invalid run"),
    "no claim": _badge("none", "no claim (diagnostic)"),
    "finding": _badge("warn", "finding"),
    "nothing to read": _badge("ok", "none"),
    "not yet run": _badge("none", "not yet run"),
    #: An experiment (or check) that does not apply to the run's compiler: neutral, never a pass.
    NOT_APPLICABLE: _badge("none", "not applicable"),
    "not run": _badge("none", "not run in this report"),
    "failed": _badge("bad", "failed"),
}


def verdict_mark(verdict: str) -> str:
    """A verdict as a table cell: its badge, or for a not-applicable experiment the badge and the stored
    reason ("not applicable to OpenVINO: <why>")."""
    if verdict.startswith(NOT_APPLICABLE):
        return f"{LABEL_MARK[NOT_APPLICABLE]} {fmt(verdict)}"
    return LABEL_MARK.get(verdict, verdict)
