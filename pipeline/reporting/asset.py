"""The report site: reads finished tables, writes Markdown + Vega-Lite specs, builds MkDocs."""

import datetime as dt
import os
from pathlib import Path

import dagster as dg
from pydantic import Field

from ..resources import ExperimentSettings
from .claims import EXPERIMENTS
from .pages import all_pages
from .render import REPO_ROOT, Report, mkdocs_build, prepare_docs_dir, vendor_javascript, write_page


class ReportConfig(dg.Config):
    main_document_url: str = Field(
        default_factory=lambda: os.environ.get("FUSION_MAIN_DOCUMENT_URL", ""),
        description="Base URL of the main document; claims link to its section anchors. Empty: a local page lists the sections.",
    )
    docs_dir: str = Field(default="site/docs", description="where pages and chart specs are written (relative to the repo)")
    build_dir: str = Field(default="site/build", description="where mkdocs builds the static site (git-ignored)")


def build_report_asset(upstream: list[dg.AssetKey]) -> dg.AssetsDefinition:
    """The report asset, downstream of ``upstream`` (every experiment asset), so that in a run
    that materializes everything it renders last."""

    @dg.asset(
        group_name="report",
        deps=upstream,
        description="The report site: overview of claims and evidence, one page per experiment, built offline with MkDocs-Material.",
        kinds={"mkdocs"},
        # The IO manager is needed for its data folder, which cannot be a typed parameter.
        required_resource_keys={"io_manager", "settings"},
    )
    def report_site(context: dg.AssetExecutionContext, config: ReportConfig) -> dict:
        settings: ExperimentSettings = context.resources.settings
        root = REPO_ROOT
        docs_dir = Path(config.docs_dir) if Path(config.docs_dir).is_absolute() else root / config.docs_dir
        build_dir = Path(config.build_dir) if Path(config.build_dir).is_absolute() else root / config.build_dir
        data_dir = Path(context.resources.io_manager.base_dir)
        data_dir = (data_dir if data_dir.is_absolute() else Path.cwd() / data_dir) / settings.profile
        from ..definitions import defs  # the whole code location: every experiment and check

        report = Report(
            context.instance, defs.resolve_asset_graph(), data_dir, docs_dir, settings.profile, config.main_document_url,
            str(settings.torch_device()),
        )
        prepare_docs_dir(docs_dir)
        vendor_javascript(docs_dir)
        pages = all_pages(report)
        for relative, text in pages.items():
            write_page(docs_dir, relative, text)
        provenance = {
            **settings.provenance(),
            "built_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        }
        index = mkdocs_build(docs_dir, build_dir, provenance)
        outcomes = {exp.id: report.outcome(exp.group) for exp in EXPERIMENTS}
        verdicts = {k: (o.verdict if o else "not yet run") for k, o in outcomes.items()}
        context.add_output_metadata(
            {
                "site_index": dg.MetadataValue.path(str(index)),
                "pages": len(pages),
                "experiments_not_yet_run": sum(o is None for o in outcomes.values()),
                **{f"validity.{k}": (o.validity if o else "not yet run") for k, o in outcomes.items()},
                **{f"verdict.{k}": v for k, v in verdicts.items()},
                **{f"findings.{k}": (o.findings if o else 0) for k, o in outcomes.items()},
            }
        )
        return {"index": str(index), "verdicts": verdicts, "provenance": provenance}

    return report_site
