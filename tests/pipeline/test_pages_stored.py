"""Pages format what was stored: the reproducer files a page links to, and C2's accuracy section,
whose level is the one the claim stored with its verdict (the page loads no check module)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.experiments import experiment
from pipeline.experiments.reduction_order.report import c2_accuracy_section
from pipeline.pagekit.render import CheckRecord
from pipeline.pagekit.repro_page import publish_repro
from pipeline.verdicts import CLAIM, CONTRADICTED


def test_a_reproducer_is_copied_beside_the_pages_and_a_missing_one_gives_no_link(tmp_path: Path):
    folder = tmp_path / "data" / "repros" / "d-transpose-1"
    folder.mkdir(parents=True)
    (folder / "repro.py").write_text("print('repro')\n")
    (folder / "report.md").write_text("# report\n")
    (folder / "scratch.bin").write_bytes(b"\0")
    report = SimpleNamespace(data_dir=tmp_path / "data", docs_dir=tmp_path / "docs")
    assert publish_repro(report, "d-transpose-1") == "repros/d-transpose-1"  # type: ignore[arg-type]
    copied = tmp_path / "docs" / "results" / "repros" / "d-transpose-1"
    assert sorted(p.name for p in copied.iterdir()) == ["report.md", "repro.py"]
    assert (copied / "repro.py").read_text() == "print('repro')\n"
    (tmp_path / "data" / "repros" / "no-script").mkdir()
    assert publish_repro(report, "no-script") is None  # type: ignore[arg-type]
    assert publish_repro(report, "never-built") is None  # type: ignore[arg-type]


def _c2_report(metadata: dict) -> SimpleNamespace:
    record = CheckRecord(
        "c2_row_bounds", "c2_fused_not_less_accurate_than_eager", "", "failed", metadata, outcome=CLAIM
    )
    return SimpleNamespace(checks_of=lambda group: [record])


def test_c2_accuracy_section_states_the_stored_level_without_loading_the_check_module(monkeypatch):
    monkeypatch.delitem(sys.modules, "pipeline.experiments.reduction_order.accuracy", raising=False)
    stored = {
        "verdict": CONTRADICTED,
        "reason": "tile64 worse than eager on 9 of 10 rows",
        "rule.confidence": 0.99,
        "eager_median_ulp": 0.5,
        "bound_ulp_median": 4.0,
        "table": "| version |\n|---|\n| tile64 |",
    }
    section = c2_accuracy_section(_c2_report(stored), experiment("C2"))  # type: ignore[arg-type]
    assert "**contradicted**: tile64 worse than eager on 9 of 10 rows" in section
    assert "(contradicted at 0.01)" in section and section.endswith("| tile64 |")
    assert "eager's median error: 0.5 ULP, its bound's median: 4 ULP" in section
    assert "pipeline.experiments.reduction_order.accuracy" not in sys.modules
    older = c2_accuracy_section(_c2_report({**stored, "rule.confidence": None}), experiment("C2"))  # type: ignore[arg-type]
    assert "(contradicted at the rule's level)" in older


@pytest.mark.parametrize("level", [0.95, 0.999])
def test_c2_accuracy_level_follows_the_stored_rule(level):
    section = c2_accuracy_section(_c2_report({"rule.confidence": level}), experiment("C2"))  # type: ignore[arg-type]
    assert f"(contradicted at {1 - level:g})" in section
