"""Baselines are keyed by compiler: each compiler's stored values are promoted to, and compared with, baselines
recorded with that compiler alone (synthetic stored tables: no compiles)."""

import json

import polars as pl
import pytest
from test_regression import _b_table, _d_table, _e_table  # tests/pipeline is on sys.path

from pipeline import storage
from pipeline.instruments.regression import baseline

ENV = {"seed": 1, "torch_version": "2.13"}


def _store(root, compiler, d):
    folder = root / "smoke" / "compilers" / compiler if compiler != "inductor" else root / "smoke"
    tables = {
        "accumulated_error_per_set": _b_table(),
        "accumulated_error_summary": pl.DataFrame({"chain": ["softmax"], "fused_not_worse": [True]}),
        "data_movement_check_table": d,
        "training_curves": _e_table(),
    }
    for name, value in tables.items():
        storage.write_value(value, folder / name)


def _compare(root, compiler):
    return baseline.compare(root, "smoke", lambda exp: ENV, compiler=compiler)


def _moved(result):
    t = result.table
    return t.filter((pl.col("moved") == "yes") & (pl.col("kind") != "provenance"))


def test_a_baseline_recorded_with_inductor_is_never_compared_with_openvinos_values(tmp_path):
    _store(tmp_path, "inductor", _d_table())
    _store(tmp_path, "openvino", _d_table(broken=True))  # OpenVINO's D differs from Inductor's
    promoted = baseline.promote(tmp_path, "smoke", allow_partial=True, environment=ENV)
    assert promoted.folder.parent == tmp_path / "baselines" / "smoke"  # Inductor's baselines keep their place
    assert baseline.load_manifest(promoted.folder)["compiler"] == "inductor"

    # OpenVINO has no baseline of its own: nothing is compared, however Inductor's baseline differs.
    result = _compare(tmp_path, "openvino")
    assert result.baseline_version is None
    assert result.table["status"].to_list() == ["no baseline"]
    assert result.reason.startswith("no baseline promoted for profile 'smoke' with openvino (expected ")
    assert result.reason.endswith("baselines/smoke/compilers/openvino/CURRENT)")
    assert _moved(_compare(tmp_path, "inductor")).height == 0

    # OpenVINO's own baseline holds OpenVINO's values: its broken-looking D is its own state, unchanged.
    ov = baseline.promote(tmp_path, "smoke", allow_partial=True, environment=ENV, compiler="openvino")
    assert ov.folder.parent == tmp_path / "baselines" / "smoke" / "compilers" / "openvino" and ov.previous is None
    manifest = baseline.load_manifest(ov.folder)
    assert manifest["compiler"] == "openvino" and manifest["source_dir"].endswith("smoke/compilers/openvino")
    assert baseline.list_versions(tmp_path, "smoke", "openvino") == [ov.version]
    assert baseline.list_versions(tmp_path, "smoke") == [promoted.version]
    result = _compare(tmp_path, "openvino")
    assert result.baseline_version == ov.version and _moved(result).height == 0

    # Inductor's values move against Inductor's baseline only; OpenVINO's comparison does not see it.
    _store(tmp_path, "inductor", _d_table(broken=True))
    assert set(_moved(_compare(tmp_path, "inductor"))["experiment"]) == {"D"}
    assert _moved(_compare(tmp_path, "openvino")).height == 0


def test_a_baseline_whose_manifest_names_another_compiler_is_refused(tmp_path):
    _store(tmp_path, "inductor", _d_table())
    _store(tmp_path, "openvino", _d_table())
    promoted = baseline.promote(tmp_path, "smoke", allow_partial=True, environment=ENV)
    # Inductor's version folder put where OpenVINO's baselines are (a copy by hand, say).
    root = baseline.baselines_root(tmp_path, "smoke", "openvino")
    root.mkdir(parents=True)
    (root / promoted.version).mkdir()
    for f in promoted.folder.iterdir():
        (root / promoted.version / f.name).write_bytes(f.read_bytes())
    (root / "CURRENT").write_text(promoted.version + "\n")
    with pytest.raises(baseline.BaselineError, match=r"recorded with inductor: it is never compared with openvino"):
        _compare(tmp_path, "openvino")
    # A manifest from before baselines named their compiler is Inductor's.
    manifest = json.loads((promoted.folder / "manifest.json").read_text())
    del manifest["compiler"]
    assert baseline.manifest_compiler(manifest) == "inductor"


def test_promoting_a_compiler_with_nothing_stored_names_its_folder(tmp_path):
    _store(tmp_path, "inductor", _d_table())
    with pytest.raises(baseline.BaselineError, match=r"no stored data for profile 'smoke' at .*smoke/compilers/iree"):
        baseline.promote(tmp_path, "smoke", allow_partial=True, environment=ENV, compiler="iree")


def test_a_compilers_baseline_leaves_out_the_experiments_that_do_not_apply_to_it(tmp_path, capsys):
    from pipeline.cli import main as cli_main
    from pipeline.instruments.regression.drift import baseline_covers_every_experiment

    _store(tmp_path, "openvino", _d_table())  # B, D and E stored; C1, C3 and E do not apply to OpenVINO
    skipped = baseline.not_applicable_here("openvino")
    assert sorted(skipped) == ["C1", "C3", "E"] and baseline.not_applicable_here("inductor") == {}
    assert all(why.startswith("not applicable to OpenVINO: ") for why in skipped.values())
    # What is missing for OpenVINO is what applies to it and is not stored: never C1, C3 or E.
    with pytest.raises(baseline.BaselineError) as refused:
        baseline.promote(tmp_path, "smoke", environment=ENV, compiler="openvino")
    named = str(refused.value).split("openvino: ", 1)[1]
    assert [part.split(":")[0] for part in named.split("; ")] == ["A", "C2", "M"]

    args = ["promote-baseline", "--profile", "smoke", "--data-dir", str(tmp_path), "--backend", "openvino"]
    assert cli_main([*args, "--allow-partial"]) == 0
    out = capsys.readouterr().out
    assert "promoted B, D of profile smoke" in out
    assert "left out by design: C1 (not applicable to OpenVINO: " in out
    assert "not materialized (left out): A: " in out and "C1:" not in out.split("not materialized")[1]
    folder = baseline.current_version(tmp_path, "smoke", "openvino")
    assert folder is not None
    entries = baseline.load_manifest(folder)["experiments"]
    assert entries["E"] == {"status": "not applicable", "reason": skipped["E"]}
    assert entries["A"]["status"] == "not materialized" and entries["D"]["status"] == "promoted"

    result = _compare(tmp_path, "openvino")
    presence = result.table.filter(pl.col("kind") == "presence")
    status = dict(zip(presence["experiment"], presence["status"], strict=True))
    assert {e: status[e] for e in ("C1", "C3", "E")} == skipped
    assert status["A"] == "not in baseline, not materialized"
    check = baseline_covers_every_experiment(result.table)
    assert check.metadata["not_applicable_to_compiler"].value == "C1, C3, E"
    gaps = check.metadata["gaps"].value
    assert "A: not in baseline" in gaps and "C1" not in gaps and "E:" not in gaps
