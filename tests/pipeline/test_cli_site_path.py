"""The report command names the site it built: the checkout's ``site/build`` by default, or the folder of
its own that ``FUSION_SITE_DIR`` gives a report (scripts/healthy_sweep.py runs reports side by side that way)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.cli.run_report import built_site_index
from pipeline.resources import REPO_ROOT


def test_the_default_site_is_the_checkouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FUSION_SITE_DIR", raising=False)
    assert built_site_index() == REPO_ROOT / "site" / "build" / "index.html"


def test_a_site_folder_of_its_own_is_the_one_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FUSION_SITE_DIR", str(tmp_path / "run-1"))
    assert built_site_index() == tmp_path / "run-1" / "build" / "index.html"
