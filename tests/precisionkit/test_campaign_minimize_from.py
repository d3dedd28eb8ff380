"""A campaign's findings written as found (``--finish-from``) are minimized later, in place:
benchmarks/difftest_campaign.py --minimize-from regenerates each from its generator and seed, minimizes
it in a worker interpreter and writes its folder and index row as the main loop does. A fault backend
(one element of each float output wrong) stands in for the compiler: no compile, no IREE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from repro_backends import SETUP
from test_campaign_compilers_campaign import _campaign

from precisionkit import difftest
from precisionkit.repro import for_backend, write

SEED = 2  # typed-2-float32: 16 lines, float32 outputs


def _as_found(klass: str, case_id: str, **extra: Any) -> dict[str, Any]:
    message = "output 0: 1 of 45 elements wrong; at (4, 8): eager 1.0, fused (pk_test_garbage_one) 1001.0, fp64 1.0"
    return {"id": case_id, "class": klass, "rule": "fp64", "value_class": "finite value", "message": message,
            "minimized_message": message, "minimized": False, "lines_before": 16, "lines_after": 16,
            "minimize_seconds": 0.0, "rerun": "reproduces", "rerun_returncode": 1, "rerun_line": "",
            "verdict": "real defect: not removed", **extra}  # fmt: skip


def test_findings_written_as_found_are_minimized_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = _campaign()
    generate = difftest.generate
    # the fault backend is registered by the case's own setup lines, in the worker and in the reproducer
    monkeypatch.setattr(difftest, "generate", lambda seed, gen: generate(seed, gen).with_(setup=SETUP))
    case = for_backend(difftest.generate(SEED, "typed"), "pk_test_garbage_one")
    as_found = write(case, tmp_path / case.id, "as found").read_text()
    done = {**_as_found("mismatch", "typed-1-bfloat16"), "minimized": True, "lines_after": 3}
    crash = _as_found("crash", "typed-3-float16", message="fused run: the interpreter died (SIGSEGV)")
    found = _as_found("mismatch", case.id, precision_knob="knob: reproduces", flush_denormal="reproduces")
    index = {"backend": "pk_test_garbage_one", "findings": [done, found, crash], "findings_reproduced": "3 of 4"}
    (tmp_path / "index.json").write_text(json.dumps(index))
    reruns = {r["id"]: {"flush_denormal": "reproduces"} for r in (done, found)}
    (tmp_path / "reruns.json").write_text(json.dumps(reruns))

    assert c.minimize_unminimized(tmp_path, "pk_test_garbage_one", 6) == 0

    index = json.loads((tmp_path / "index.json").read_text())
    first, row, last = index["findings"]
    assert first == done and last == crash  # minimized already; a crash is not minimized
    assert row["id"] == case.id and row["minimized"] is True and row["minimize_seconds"] > 0
    assert row["lines_before"] == case.source.count("\n") > row["lines_after"]
    assert row["message"] == found["message"] and "elements wrong" in row["minimized_message"]
    assert row["rerun"] == "reproduces" and row["verdict"] == ""  # the classifier judges the new file
    assert "precision_knob" not in row and "flush_denormal" not in row and "program_changed" not in row
    assert json.loads((tmp_path / "reruns.json").read_text()) == {done["id"]: reruns[done["id"]]}
    assert index["findings_reproduced"] == "3 of 4 (2 minimized)"
    small = json.loads((tmp_path / case.id / "case.json").read_text())
    assert small["source"].count("\n") == row["lines_after"]
    assert (tmp_path / case.id / "repro.py").read_text() != as_found

    # a second pass finds nothing left to minimize
    before = (tmp_path / "index.json").read_text()
    assert c.minimize_unminimized(tmp_path, "pk_test_garbage_one", 6) == 0
    assert (tmp_path / "index.json").read_text() == before


def test_a_program_the_generator_now_writes_otherwise_is_told_apart(tmp_path: Path) -> None:
    c = _campaign()
    case = for_backend(difftest.generate(SEED, "typed"), "pk_test_garbage_one")
    assert not c._program_changed(case, tmp_path / "none" / "case.json")
    path = write(case, tmp_path / case.id).with_name("case.json")
    assert not c._program_changed(case, path)
    found = json.loads(path.read_text())
    path.write_text(json.dumps({**found, "source": found["source"].replace("\n    return", " + 0.0\n    return", 1)}))
    assert c._program_changed(case, path)
