"""Building the site: the docs folder, the vendored Vega bundle, the pages and ``mkdocs build --strict``."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..files import atomic_path
from ..tables import fmt, markdown_table  # noqa: F401 - re-exported for pages and charts

if TYPE_CHECKING:
    # The record type the instance's check-history methods return; dagster does not export its name.
    pass

from ..pagekit.render import REPO_ROOT

STATIC_DOCS = REPO_ROOT / "site" / "docs"
#: Files the report writes into the docs folder (everything else there is hand-written).
GENERATED = ("index.md", "results", "assets/vendor")

BUNDLE_CACHE = REPO_ROOT / "site" / ".cache"

#: Modules the site build needs beyond the pipeline (the ``site`` extra), each with its package.
SITE_MODULES = {"mkdocs": "mkdocs", "material": "mkdocs-material", "vl_convert": "vl-convert-python"}


def missing_site_tools() -> list[str]:
    """The packages of :data:`SITE_MODULES` that cannot be imported here (a GPU node often lacks them)."""
    missing = []
    for module, package in SITE_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken install, or a module set to None in sys.modules
            found = False
        if not found:
            missing.append(package)
    return missing


def site_skipped(profile: str) -> str | None:
    """One line saying the site cannot be built here and how to build it elsewhere from a results
    bundle; None when every site package is installed."""
    missing = missing_site_tools()
    if not missing:
        return None
    return (
        f"report site skipped: {', '.join(missing)} not installed here (the results are stored and judged as "
        f"usual); to build it at home: python -m pipeline.cli export-bundle --profile {profile} --out <folder>, "
        "carry <folder> to a checkout with the site extra, python -m pipeline.cli import-bundle <folder>, make report"
    )


def vendor_javascript(docs_dir: Path, cache_dir: Path = BUNDLE_CACHE) -> None:
    """Put vl-convert's Vega / Vega-Lite / vega-embed bundle into the site, from ``cache_dir``
    when this vl-convert version has built it before."""
    import vl_convert as vlc

    cached = cache_dir / f"vega-bundle-{vlc.__version__}.js"  # type: ignore[attr-defined]
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(cached) as tmp:
            # The stub declares ``snippet`` required; at run time it defaults to the snippet that puts
            # vegaEmbed, vegaLite and vega on ``window``, which the pages use.
            tmp.write_text(vlc.javascript_bundle())  # type: ignore[call-arg]
    target = docs_dir / "assets" / "vendor" / "vega-bundle.js"
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        shutil.copyfile(cached, tmp)


def prepare_docs_dir(docs_dir: Path) -> None:
    """Start from the hand-written sources; drop previously generated files."""
    if docs_dir.resolve() != STATIC_DOCS.resolve():
        if docs_dir.exists():
            shutil.rmtree(docs_dir)
        shutil.copytree(STATIC_DOCS, docs_dir, ignore=shutil.ignore_patterns(*GENERATED))
    else:
        for name in GENERATED:
            path = docs_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    (docs_dir / "results").mkdir(parents=True, exist_ok=True)


def write_page(docs_dir: Path, relative: str, text: str) -> None:
    target = docs_dir / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def mkdocs_build(
    docs_dir: Path,
    build_dir: Path,
    provenance: dict[str, Any],
    nav: list[dict[str, Any]] | None = None,
    answer: str = "",
) -> Path:
    """``mkdocs build --strict`` with the repository's mkdocs.yml, this run's folders and provenance, and
    the navigation ``nav`` (the report derives it from the registry of experiments) and the report's
    ``answer`` in one sentence (shown under the title of the pages that have no verdict line of their own)."""
    # One config per process: two reports building at once must not read each other's folders.
    config = REPO_ROOT / f".mkdocs.report.{os.getpid()}.yml"
    staging = build_dir.with_name(build_dir.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    body: dict[str, Any] = {
        "INHERIT": "mkdocs.yml",
        "docs_dir": str(docs_dir.resolve()),
        "site_dir": str(staging.resolve()),
        "extra": {"provenance": provenance, "answer": answer},
    }
    if nav is not None:
        body["nav"] = nav
    with atomic_path(config) as tmp:
        tmp.write_text(json.dumps(body, indent=1))  # JSON is valid YAML
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(config)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
        )
    finally:
        config.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}")
    # Swap the finished build in: a failed build never leaves a half-written site behind.
    old = build_dir.with_name(build_dir.name + ".old")
    if build_dir.exists():
        build_dir.rename(old)
    staging.rename(build_dir)
    if old.exists():
        shutil.rmtree(old)
    return build_dir / "index.html"
