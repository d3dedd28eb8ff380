"""The report site: reads finished tables, writes Markdown + Vega-Lite specs, builds MkDocs."""

import datetime as dt
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field

from ..bundle import device_slug, imported_results, read_notes
from ..experiments import EXPERIMENTS, experiment
from ..pagekit.render import REPO_ROOT, Report
from ..resources import ExperimentSettings
from ..runs import records
from ..storage import DataFolder
from ..timing import markdown_section, site_table
from ..verdicts import ExperimentOutcome
from .answer import short_answer
from .pages import all_pages, site_nav
from .side_by_side import compiler_reports, compilers_with_results
from .site import mkdocs_build, prepare_docs_dir, site_skipped, vendor_javascript, write_page

#: A folder for this report's pages and build instead of the checkout's ``site/``: reports that run at
#: once (scripts/healthy_sweep.py) each write their own, so none reads another's half-written page.
SITE_DIR_ENV = "FUSION_SITE_DIR"


def site_folder(part: str) -> str:
    """``site/<part>``, or ``$FUSION_SITE_DIR/<part>`` when that is set."""
    root = os.environ.get(SITE_DIR_ENV, "").strip()
    return str(Path(root) / part) if root else f"site/{part}"


class ReportConfig(dg.Config):
    main_document_url: str = Field(
        default_factory=lambda: os.environ.get("FUSION_MAIN_DOCUMENT_URL", ""),
        description="Base URL of the main document; claims link to its section anchors. Empty: a local page lists the sections.",
    )
    docs_dir: str = Field(
        default_factory=lambda: site_folder("docs"),
        description="where pages and chart specs are written (relative to the repo); default site/docs, or "
        "$FUSION_SITE_DIR/docs",
    )
    build_dir: str = Field(
        default_factory=lambda: site_folder("build"),
        description="where mkdocs builds the static site (git-ignored); default site/build, or $FUSION_SITE_DIR/build",
    )
    failed: dict[str, str] = Field(
        default_factory=dict,
        description="experiment id -> why its step failed in the run this report follows (the CLI fills it when a "
        "step failed); shown as 'failed: <reason>' on the overview and the experiment's page",
    )
    only: list[str] = Field(
        default_factory=list,
        description="experiment ids this report shows (empty: every one); the others are marked 'not run' "
        "(python -m pipeline.cli report --only B,D sets it)",
    )


def device_reports(
    instance: dg.DagsterInstance, graph: Any, data_root: Path, docs_dir: Path, profile: str, main_document_url: str
) -> list[Report]:
    """One report per device and profile imported from a results bundle, reading its own data folder:
    those of ``profile`` first, then those of other profiles (whose page names carry the profile).
    Each carries the notes file of its bundle, if any: what did not finish there (shown as failed,
    with the reason) and provenance known to be wrong."""
    out = []
    found = imported_results(instance, graph)
    for label, other in sorted(found, key=lambda lp: (lp[1] != profile, lp[1], lp[0])):
        folder = data_root / "devices" / device_slug(label) / other
        first: dict[str, Any] = next(iter(_any_imported(instance, graph, other, label)), {})
        r = Report(
            instance,
            graph,
            folder,
            docs_dir,
            other,
            main_document_url,
            str(first.get("provenance.device", "unknown")),
            device_label=label,
            imported=True,
        )
        r.page_suffix = f"--{device_slug(label)}" + ("" if other == profile else f"--{other}")
        r.notes = read_notes(folder)
        unfinished = r.notes.get("did_not_finish", {})
        r.failed = {e.group: unfinished[e.id] for e in EXPERIMENTS if e.id in unfinished}
        out.append(r)
    return out


def _any_imported(instance: dg.DagsterInstance, graph: Any, profile: str, label: str) -> Any:
    for key in graph.get_all_asset_keys():
        for _, _, meta in records(instance, key, profile, label, origin="imported", limit=20):
            yield meta


def build_report_asset(
    experiment_assets: Sequence[dg.AssetsDefinition], experiment_checks: Sequence[dg.AssetChecksDefinition]
) -> dg.AssetsDefinition:
    """The report asset over ``experiment_assets`` and ``experiment_checks`` (every experiment of the
    code location). It depends on every experiment asset, so that in a run that materializes
    everything it renders last, and it reads the asset graph (groups, descriptions, check specs)
    from the definitions it is given rather than from the code location that holds it."""
    upstream = [key for a in experiment_assets for key in a.keys]

    @dg.asset(
        group_name="report",
        deps=upstream,
        description="The report site: overview of claims and evidence, one page per experiment, built offline with MkDocs-Material.",
        kinds={"mkdocs"},
    )
    def report_site(
        context: dg.AssetExecutionContext, config: ReportConfig, settings: ExperimentSettings, data: DataFolder
    ) -> dict:
        skipped = site_skipped(settings.profile)
        if skipped is not None:
            raise dg.Failure(description=skipped)
        root = REPO_ROOT
        docs_dir = Path(config.docs_dir) if Path(config.docs_dir).is_absolute() else root / config.docs_dir
        build_dir = Path(config.build_dir) if Path(config.build_dir).is_absolute() else root / config.build_dir
        data_dir = data.profile_dir(settings.profile)
        data_dir = data_dir if data_dir.is_absolute() else Path.cwd() / data_dir
        site_defs = dg.Definitions(
            assets=[*experiment_assets, report_site],
            asset_checks=experiment_checks,
            resources={"settings": settings, "data": data},
        )
        graph = site_defs.resolve_asset_graph()
        report = Report(
            context.instance,
            graph,
            data_dir,
            docs_dir,
            settings.profile,
            config.main_document_url,
            str(settings.torch_device()),
            device_label=settings.device_key(),
        )
        report.only = tuple(experiment(i).group for i in config.only)
        report.failed = {experiment(i).group: why for i, why in config.failed.items()}
        report.failed_backend = settings.backend
        report.time_section = markdown_section(
            site_table(context.instance, context.run.run_id, settings.profile), settings.profile
        )
        # Several compilers with results here: one column (and one answer sentence) per compiler.
        report.compilers = compiler_reports(
            report, compilers_with_results(site_defs, context.instance, settings.profile)
        )
        report.other_devices = device_reports(
            context.instance, graph, data_dir.parent, docs_dir, settings.profile, config.main_document_url
        )
        provenance = {
            **settings.provenance(),
            "built_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        }
        index, pages = build_site(report, build_dir, provenance)
        outcomes = {exp.id: report.outcome(exp.group) for exp in EXPERIMENTS}
        verdicts = {k: (o.verdict if o else "not yet run") for k, o in outcomes.items()}
        context.add_output_metadata(
            {"site_index": dg.MetadataValue.path(str(index)), "pages": pages, **outcome_metadata(outcomes)}
        )
        return {"index": str(index), "verdicts": verdicts, "provenance": provenance}

    return report_site


def build_site(report: Report, build_dir: Path, provenance: dict[str, Any]) -> tuple[Path, int]:
    """Write every page of ``report`` into its docs folder and build the site into ``build_dir``;
    the built index page and the number of pages written."""
    prepare_docs_dir(report.docs_dir)
    vendor_javascript(report.docs_dir)
    pages = all_pages(report)
    for relative, text in pages.items():
        write_page(report.docs_dir, relative, text)
    index = mkdocs_build(report.docs_dir, build_dir, provenance, site_nav(), answer=short_answer(report))
    return index, len(pages)


def outcome_metadata(outcomes: dict[str, ExperimentOutcome | None]) -> dict[str, Any]:
    """The report's metadata per experiment id: run validity, claim verdict and findings (None: not yet run)."""
    return {
        "experiments_not_yet_run": sum(o is None for o in outcomes.values()),
        **{f"validity.{k}": (o.validity if o else "not yet run") for k, o in outcomes.items()},
        **{f"verdict.{k}": (o.verdict if o else "not yet run") for k, o in outcomes.items()},
        **{f"findings.{k}": (o.findings if o else 0) for k, o in outcomes.items()},
    }
