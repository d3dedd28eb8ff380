"""scripts/compiler_torch_matrix.py: the row a compiler gets with this interpreter's torch.

The probe runs in this process (its release mode, which builds a venv per torch release, is not run
here). No error value is asserted: the worst errors depend on the CPU's vector ISA.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("compiler_torch_matrix", ROOT / "scripts" / "compiler_torch_matrix.py")
assert _spec and _spec.loader
matrix = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(matrix)

ROW_FIELDS = {
    "compiler",
    "torch",
    "compiler_version",
    "packages",
    "status",
    "reason",
    "programs",
    "install",
    "python",
    "cpu_capability",
    "date",
}
# OpenVINO's torch frontend is built on TorchScript decorators that torch deprecates
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning")
PROGRAM_FIELDS = {"units", "fused_units", "bit_equal_to_eager", "abs_max", "eager_abs_max"}


def checked_row(compiler: str, tmp_path: Path) -> dict:
    out = tmp_path / "rows.jsonl"
    assert matrix.main([compiler, "--out", str(out)]) == 0
    (line,) = out.read_text().splitlines()
    row = json.loads(line)
    assert set(row) == ROW_FIELDS
    assert (row["compiler"], row["status"], row["reason"]) == (compiler, "works", "")
    assert row["torch"] == torch.__version__
    assert set(row["programs"]) == {"layer_norm_gelu", "softmax_affine"}
    for program in row["programs"].values():
        assert set(program) == PROGRAM_FIELDS
        assert program["units"] >= 1
        assert isinstance(program["bit_equal_to_eager"], bool)
        assert program["abs_max"] >= 0 and program["eager_abs_max"] >= 0
    return row


def test_inductor_works_with_this_torch(tmp_path):
    row = checked_row("inductor", tmp_path)
    assert row["packages"] == {"torch": torch.__version__}
    assert row["compiler_version"] == torch.__version__


def test_openvino_fuses_both_programs(tmp_path):
    pytest.importorskip("openvino")
    row = checked_row("openvino", tmp_path)
    assert row["compiler_version"] == row["packages"]["openvino"] == importlib.metadata.version("openvino")
    assert all(p["fused_units"] >= 1 for p in row["programs"].values())


def test_iree_fuses_both_programs(tmp_path):
    pytest.importorskip("iree.turbine")
    row = checked_row("iree", tmp_path)
    assert set(row["packages"]) == {"iree-turbine", "iree-base-compiler", "iree-base-runtime"}
    assert all(p["fused_units"] >= 1 for p in row["programs"].values())


def test_an_unknown_compiler_is_refused_with_status_2(capsys):
    with pytest.raises(SystemExit) as stopped:
        matrix.main(["inductor", "tvm"])
    assert stopped.value.code == 2
    assert "unknown compiler 'tvm'; compilers: inductor, openvino, iree" in capsys.readouterr().err


def test_release_mode_refuses_a_root_inside_the_repository(capsys):
    with pytest.raises(SystemExit) as stopped:
        matrix.main(["--torch", "2.7", "--root", str(ROOT / "build")])
    assert stopped.value.code == 2
    assert "is inside the repository" in capsys.readouterr().err


def test_the_requirements_are_the_project_extras():
    assert matrix.requirements("inductor") == []
    assert matrix.requirements("openvino") == ["openvino==2026.4.1"]
    assert matrix.requirements("iree") == [
        "iree-turbine==3.9.0",
        "iree-base-compiler==3.13.0",
        "iree-base-runtime==3.13.0",
    ]
