"""A reproducer on the site: its standalone script and issue-ready report copied beside the pages
that link to it (the diagnostics page lists every reproducer; D's page links each counterexample's)."""

import shutil

from .render import Report

#: The files of a reproducer's folder the site offers (``repro.py`` is required, ``report.md`` optional).
PUBLISHED_FILES = ("repro.py", "report.md")


def publish_repro(report: Report, repro_id: str) -> str | None:
    """Copy one reproducer's ``repro.py`` and ``report.md`` into the site; the folder's link
    relative to a page under ``results/`` (None when the reproducer's files are not here)."""
    src = report.data_dir / "repros" / repro_id
    if not (src / "repro.py").exists():
        return None
    dest = report.docs_dir / "results" / "repros" / repro_id
    dest.mkdir(parents=True, exist_ok=True)
    for name in PUBLISHED_FILES:
        if (src / name).exists():
            shutil.copyfile(src / name, dest / name)
    return f"repros/{repro_id}"
