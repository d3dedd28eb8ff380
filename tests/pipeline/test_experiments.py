"""The registry of experiments is the one list the code location, baseline and report read."""

from pathlib import Path

import dagster as dg
import pytest

from pipeline.definitions import defs
from pipeline.experiments.regression import baseline
from pipeline.experiments.regression import harness as planted_bug_harness
from pipeline.registry import ASSETS_PACKAGE, EXPERIMENTS, experiment
from pipeline.reporting import claims


def test_every_asset_module_belongs_to_exactly_one_experiment_folder():
    package = Path(__file__).resolve().parents[2] / ASSETS_PACKAGE.replace(".", "/")
    on_disk = {str(p.relative_to(package).with_suffix("")).replace("/", ".") for p in package.glob("*/*.py")}
    listed = [m for exp in EXPERIMENTS for m in exp.modules]
    assert len(listed) == len(set(listed)) and set(listed) <= on_disk
    for exp in EXPERIMENTS:
        assert len({m.split(".")[0] for m in exp.modules}) == 1, exp.id


def test_each_experiment_owns_its_group_and_no_other():
    for exp in EXPERIMENTS:
        groups = {a.group_names_by_key[k] for a in exp.assets() for k in a.keys}
        assert groups == {exp.group}, exp.id
    assert [e.id for e in EXPERIMENTS] == ["S", "A", "C1", "C2", "C3", "D", "B", "E", "Diagnostics", "Regression"]


def test_code_location_is_the_merge_of_the_experiments_and_the_report():
    graph = defs.resolve_asset_graph()
    from_registry = {k for exp in EXPERIMENTS for a in exp.assets() for k in a.keys}
    assert set(graph.get_all_asset_keys()) == from_registry | {dg.AssetKey("report_site")}
    assert set(graph.asset_check_keys) == {k for exp in EXPERIMENTS for c in exp.checks() for k in c.check_keys}
    assert len(graph.asset_check_keys) == 49


def test_baseline_and_report_read_membership_from_the_registry():
    assert claims.EXPERIMENTS is EXPERIMENTS
    assert list(baseline.EXPERIMENTS) == ["A", "B", "C1", "C2", "C3", "D", "E"]
    assert baseline.EXPERIMENTS["C2"] == ("c2_version_outputs", "c2_versions", "c2_error_vs_fp64")
    for exp_id, stored in baseline.EXPERIMENTS.items():
        keys = {k.to_user_string() for a in experiment(exp_id).assets() for k in a.keys}
        assert set(stored) <= keys, exp_id
    assert all(s in claims.SECTIONS for exp in EXPERIMENTS for s in exp.sections)


def test_matrix_loads_toolkit_and_the_chosen_experiment_from_the_registry():
    defs_list, unavailable = planted_bug_harness.matrix_definitions(["D"])
    assert unavailable == []
    groups = {
        a.group_names_by_key[k]
        for a in defs_list
        if isinstance(a, dg.AssetsDefinition) and not isinstance(a, dg.AssetChecksDefinition)
        for k in a.keys
    }
    assert groups == {"S_toolkit", "D_data_movement"}
    with pytest.raises(ValueError, match="choose from B, C2, D"):
        planted_bug_harness.matrix_definitions(["E"])


def test_unknown_experiment_names_the_known_ones():
    with pytest.raises(KeyError, match="no experiment 'Z'; known: S, A, C1"):
        experiment("Z")
