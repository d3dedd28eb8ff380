"""The campaign classifier (benchmarks/difftest_classify.py) tells a compiler's flushing of subnormals
apart from a wrong value, and judges a crash by its fresh reruns.

A backend that flushes subnormal results to zero (as IREE's CPU workers do) is caught by the diff
rule against eager's subnormal; rerun with subnormals flushed in the whole interpreter, eager flushes
too and the finding is gone: the classifier calls it by design (flush-to-zero), not a defect."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from precisionkit.repro import Case, Input, run_script, write

ROOT = Path(__file__).resolve().parents[2]


def _classify() -> Any:
    spec = importlib.util.spec_from_file_location("difftest_classify", ROOT / "benchmarks" / "difftest_classify.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("difftest_classify", module)
    spec.loader.exec_module(module)
    return module


#: a backend that runs the graph as it is, then flushes each subnormal float result to zero (its sign kept)
FLUSHING_BACKEND = """import torch
from torch._dynamo import register_backend

def _flush(t):
    if not (isinstance(t, torch.Tensor) and t.is_floating_point()):
        return t
    return torch.where(t.abs() < torch.finfo(t.dtype).tiny, t * 0.0, t)

def _flushing(gm, example_inputs):
    def run(*args):
        out = gm(*args)
        return type(out)(_flush(o) for o in out) if isinstance(out, (tuple, list)) else _flush(out)
    return run

register_backend(name="pk_test_flush_subnormals")(_flushing)
"""


def _row(**changes: object) -> dict:
    row = {
        "id": "typed-1-float32",
        "class": "mismatch",
        "rule": "fp64",
        "value_class": "finite value",
        "message": "output 0: 1 of 1 elements wrong; at (0, 0): eager 1e-44, fused (x) 0.0, fp64 1e-44",
        "minimized_message": "output 0: 1 of 1 elements wrong; at (0, 0): eager 1e-44, fused (x) 0.0, fp64 1e-44",
        "rerun": "reproduces",
        "rerun_returncode": 1,
        "rerun_line": "REPRODUCES: ...",
    }
    return {**row, **changes}


def test_a_finding_the_flush_rerun_removes_is_by_design() -> None:
    c = _classify()
    assert c.verdict(_row(), "reproduces", "knob", "clean").startswith("by design (flush-to-zero): ")
    assert c.verdict(_row(), "reproduces", "knob", "reproduces").startswith("real defect: ")
    # the precision knob is asked first: what it removes is the precision setting's
    assert c.verdict(_row(), "clean", "knob", "clean").startswith("by design: knob removes it")


def test_a_crash_is_judged_by_its_fresh_reruns() -> None:
    c = _classify()
    crash = _row(**{"class": "crash", "rule": "crash", "value_class": "crash", "rerun": "clean", "rerun_returncode": 0})
    assert c.crash_verdict({**crash, "crash_reruns": [0, 0, 0, 0]}).startswith(
        "unconfirmed crash: none of 5 fresh interpreters crashed"
    )
    assert c.crash_verdict({**crash, "crash_reruns": [0, -11, 0, 0]}) == (
        "real defect: a flaky native crash of the compiler, again in 1 of 5 fresh interpreters"
    )
    every = {**crash, "rerun": "error", "rerun_returncode": -11, "crash_reruns": [-11, -11]}
    assert (
        c.crash_verdict(every) == "real defect: the compiler's native code crashed, again in 3 of 3 fresh interpreters"
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flush-to-zero is set through the x86 MXCSR here")
def test_the_flush_rerun_clears_a_backend_that_flushes_subnormals(tmp_path: Path) -> None:
    """exp(x - 100) is a float32 subnormal (about 1e-44) for the seed's x: the backend's 0 is wrong against
    eager as found, and clean once eager flushes too; the classifier records both reruns and says why."""
    if not __import__("torch").set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals")
    __import__("torch").set_flush_denormal(False)
    case = Case(
        id="flush-1-float32",
        source="def graph(f0):\n    v1 = torch.exp(f0 - 100.0)\n    return v1\n",
        inputs=(Input("f0", (1, 1), "float32", 1917102207),),
        backend="pk_test_flush_subnormals",
        rule="diff",
        setup=FLUSHING_BACKEND,
        extra={"reduction": 1},
    )
    script = write(case, tmp_path / case.id, "a backend that flushes subnormal results")
    found = run_script(script, timeout=300, cwd=script.parent)
    assert found.status == "reproduces", found.output[-2000:]
    c = _classify()
    row = _row(id=case.id, rerun=found.status, rerun_returncode=found.returncode, minimized_message=found.last_line)
    c.rerun_finding(tmp_path, row, None, "", 0)
    assert row["flush_denormal"] == "clean"
    assert c.verdict(row, "", "", row["flush_denormal"]).startswith("by design (flush-to-zero): ")


def test_the_flush_rerun_is_run_where_the_message_shows_a_zero_or_a_subnormal() -> None:
    c = _classify()
    assert c.near_zero("output 0: 1 of 1 elements wrong; at (0, 0): eager 1.26e-44, fused (x) 0.0, fp64 1.25e-44")
    assert c.near_zero("output 0: 2 of 9 elements wrong; at (1,): eager 0.5, fused (x) 0.0, fp64 0.5")
    faithful = "at (0, 4): eager inf, fused (x) 3e-39, dtype-faithful inf, fp64 65504.0"
    assert c.near_zero("output 0: 3 of 189 elements change class against the dtype-faithful reference; " + faithful)
    assert not c.near_zero("output 0: 8 of 8 elements wrong; at (0, 0): eager 3.0, fused (x) 1.0, fp64 3.0")
    assert not c.near_zero("output 2: shape or dtype differs: eager [((3, 64), 'torch.bfloat16')]")


def test_a_reviewed_verdict_replaces_the_classifiers_and_is_marked(tmp_path: Path) -> None:
    import json

    c = _classify()
    index = {
        "backend": "eager",
        "torch_compile_backend": "eager",
        "base_seed": 1,
        "programs": 1,
        "seeds": "1..1",
        "classes": {"mismatch": 1},
        "warm_programs_per_minute": 1.0,
        # the first with its reruns recorded, the second without: not classified
        "findings": [_row(precision_knob="knob: reproduces", flush_denormal="reproduces"), _row(id="typed-2-float32")],
    }
    (tmp_path / "index.json").write_text(json.dumps(index))
    reason = "false alarm: eager's zero sign contradicts torch's documentation"
    (tmp_path / c.REVIEW).write_text(json.dumps({"typed-1-float32": reason}))
    assert c.main([str(tmp_path), "--no-knob"]) == 0
    row, unrun = json.loads((tmp_path / "index.json").read_text())["findings"]
    assert row["verdict"] == reason
    assert unrun["verdict"].startswith("not classified: ")
    assert row["auto_verdict"].startswith("real defect: ")
    table = (tmp_path / "index.md").read_text()
    assert "| fp64 | finite value | false alarm | 1 |" in table
    assert f"{reason} (reviewed) |" in table


def test_a_findings_class_of_value_is_read_at_the_element_its_message_names() -> None:
    """eager's value against fused's: a fused NaN is not a finite value (the fp64 value was read in its
    place), and -0.0029 against 0.0 is not a signed zero (the text '-0.0' was searched for)."""
    _classify()  # puts benchmarks/ on the path
    from difftest_campaign import value_class  # type: ignore[import-not-found]

    at = "output 0: 1 of 33 elements wrong; at (0, 1): "
    assert value_class(at + "eager 2.0, fused (openvino) nan, fp64 2.0") == "inf or NaN"
    assert value_class(at + "eager -0.0029296875, fused (turbine_cpu) 0.0, fp64 -0.0029296875") == "finite value"
    assert value_class(at + "eager -0.0, fused (openvino) 0.0, fp64 -0.0") == "signed zero"
    assert value_class(at + "eager False, fused (openvino) True, fp64 False") == "bool"
    faithful = "eager inf, fused (openvino) 65504.0, dtype-faithful inf, fp64 65504.0"
    assert (
        value_class(
            "output 0: 3 of 189 elements change class against the dtype-faithful reference; at (0, 4): " + faithful
        )
        == "inf or NaN"
    )
