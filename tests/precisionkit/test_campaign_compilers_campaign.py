"""A campaign stopped at its deadline keeps its findings: benchmarks/difftest_campaign.py --finish-from
reads the findings from the stopped campaign's log and writes those it had not minimized yet as found,
each rerun in a fresh interpreter and marked unminimized in index.json."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _campaign() -> Any:
    spec = importlib.util.spec_from_file_location("difftest_campaign", ROOT / "benchmarks" / "difftest_campaign.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("difftest_campaign", module)
    spec.loader.exec_module(module)
    return module


def test_the_findings_a_stopped_campaign_left_are_written_unminimized(tmp_path: Path) -> None:
    c = _campaign()
    done = {"id": "typed-907019-float16", "class": "mismatch"}
    (tmp_path / "index.json").write_text(json.dumps({"findings": [done]}))
    message = "output 0: 1 of 32 elements wrong; at (0, 15): eager 1.0, fused (eager) 0.0, fp64 1.0"
    log = tmp_path / "campaign.log"
    log.write_text(
        f"eager: 300 programs\n  20/300 typed-907019-float16: mismatch: {message}\n"
        f"  25/300 {{'mismatch': 2}}\n  30/300 typed-907029-bfloat16: mismatch: {message}\nwarm throughput: 1.0\n"
    )
    assert c.finish_unminimized(log, tmp_path, "eager") == 0
    index = json.loads((tmp_path / "index.json").read_text())
    assert [r["id"] for r in index["findings"]] == ["typed-907019-float16", "typed-907029-bfloat16"]
    row = index["findings"][1]
    assert row["minimized"] is False and row["lines_after"] == row["lines_before"]
    assert row["rerun"] == "clean"  # Dynamo's eager backend: the program as found is clean there
    assert index["findings_reproduced"] == "2 of 2 (1 minimized)"
    assert (tmp_path / "typed-907029-bfloat16" / "repro.py").exists()


def test_a_crashs_reproducer_compiles_with_the_campaigns_compiler(tmp_path: Path) -> None:
    """A crash's outcome holds the program as generated (backend Inductor): its reproducer was written
    so and reran Inductor, not the compiler that crashed (IREE's crashes read 'fused (inductor)')."""
    from types import SimpleNamespace

    from precisionkit import difftest

    c = _campaign()
    case = difftest.generate(908025, "typed")
    assert case.backend == "inductor"
    crash = SimpleNamespace(case=case, klass="crash", message="fused run: the interpreter died (SIGSEGV)")
    row = c._reproduce(None, crash, "eager", tmp_path, 0)
    assert row["class"] == "crash" and row["rerun"] == "clean"
    assert "(eager)" in row["rerun_line"]
    assert json.loads((tmp_path / case.id / "case.json").read_text())["backend"] == "eager"
