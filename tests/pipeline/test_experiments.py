"""The registry of experiments is the one list the code location, baseline, report and deployment read,
and each experiment is one folder that declares everything about itself."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from pipeline.definitions import defs
from pipeline.experiments import EXPERIMENTS, PACKAGES, baseline_experiments, experiment
from pipeline.instruments.regression import baseline
from pipeline.instruments.regression import harness as planted_bug_harness
from pipeline.profiles import PROFILES
from pipeline.reporting import claims
from pipeline.reporting.pages import site_nav
from pipeline.sections import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
WINGS = ("experiments", "instruments")


def test_every_experiment_and_instrument_folder_is_one_registry_entry():
    folders = sorted(
        f"pipeline.{wing}.{p.name}"
        for wing in WINGS
        for p in (ROOT / "pipeline" / wing).iterdir()
        if (p / "__init__.py").is_file()
    )
    assert sorted(PACKAGES) == folders
    assert [e.load.__module__ for e in EXPERIMENTS] == list(PACKAGES)
    assert len({e.id for e in EXPERIMENTS}) == len(EXPERIMENTS)
    assert [e.id for e in EXPERIMENTS][-2:] == ["Diagnostics", "Regression"]  # the instruments come last
    # every asset module an experiment loads lives in its own folder
    for exp in EXPERIMENTS:
        folder = exp.load.__module__
        assert all(m.__name__.startswith(folder + ".") for m in exp.load_modules()), exp.id


def test_each_experiment_owns_its_group_and_no_other():
    for exp in EXPERIMENTS:
        groups = {a.group_names_by_key[k] for a in exp.assets() for k in a.keys}
        assert groups == {exp.group}, exp.id
    assert [e.id for e in EXPERIMENTS][:8] == ["S", "A", "C1", "C2", "C3", "D", "B", "E"]


def test_code_location_is_the_merge_of_the_experiments_and_the_report():
    graph = defs.resolve_asset_graph()
    from_registry = {k for exp in EXPERIMENTS for a in exp.assets() for k in a.keys}
    assert set(graph.get_all_asset_keys()) == from_registry | {dg.AssetKey("report_site")}
    checks = {k for exp in EXPERIMENTS for c in exp.checks() for k in c.check_keys}
    assert set(graph.asset_check_keys) == checks
    assert len(checks) >= 4 * len(EXPERIMENTS)  # every experiment judges itself


def test_baseline_and_report_read_membership_from_the_registry():
    assert claims.EXPERIMENTS is EXPERIMENTS
    assert baseline_experiments() == baseline.BASELINE_ASSETS
    assert list(baseline.BASELINE_ASSETS) == sorted(baseline.BASELINE_ASSETS)
    assert {"A", "B", "C1", "C2", "C3", "D", "E", "M"} <= set(baseline.BASELINE_ASSETS)
    assert baseline.BASELINE_ASSETS["C2"] == ("c2_version_outputs", "c2_versions", "c2_error_vs_fp64")
    for exp_id, stored in baseline.BASELINE_ASSETS.items():
        keys = {k.to_user_string() for a in experiment(exp_id).assets() for k in a.keys}
        assert set(stored) <= keys, exp_id
    assert all(s in SECTIONS for exp in EXPERIMENTS for s in exp.sections)
    # the claim map is derived: each section lists the experiments that name it, in registry order
    assert dict(claims.CLAIM_EVIDENCE)["3.2"][:2] == ("B", "E")
    assert {e for _, ids in claims.CLAIM_EVIDENCE for e in ids} == {e.id for e in EXPERIMENTS if e.sections}


def test_every_experiment_has_typed_sizes_for_every_profile_or_none():
    for exp in EXPERIMENTS:
        if not exp.sizes:
            continue
        assert set(exp.sizes) == set(PROFILES), exp.id
        kinds = {type(s) for s in exp.sizes.values()}
        assert len(kinds) == 1 and dataclasses.is_dataclass(kinds.pop()), exp.id
    assert experiment("C2").sizes_for("smoke").length == 4096
    with pytest.raises(ValueError, match="experiment B has no sizes for profile 'smoke'"):
        experiment("B").sizes_for("smoke")


def test_an_asset_reads_its_sizes_through_the_settings_from_the_record_that_declares_them():
    from pipeline.resources import ExperimentSettings

    smoke, seed = ExperimentSettings(profile="smoke"), ExperimentSettings(profile="seed")
    assert smoke.sizes("C2") is experiment("C2").sizes["smoke"] and smoke.sizes("C2").length == 4096
    assert seed.sizes("A").runs == 1000 and seed.sizes("S").ffn_shape == (8, 2048, 4096)
    with pytest.raises(ValueError, match=r"no experiment 'F' declares sizes \(those that do: A, C1, C2, C3, D, "):
        smoke.sizes("F")
    with pytest.raises(ValueError, match="no experiment 'B' declares sizes"):
        smoke.sizes("B")  # B's input sets are S's pools: it declares no sizes of its own


def test_no_experiment_or_instrument_indexes_a_sizes_table_by_the_runs_profile():
    """Sizes come from ``settings.sizes(ID)`` (the record's declaration), never from a spec's table indexed
    by the run's profile, nor does the template a new experiment starts from; the cost each
    declares (its cost.py), which plans every profile, is not an asset."""
    import re

    indexed = re.compile(r"SIZES\[\s*\w+\.profile\s*\]")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in (
            ROOT / "pipeline" / "experiments",
            ROOT / "pipeline" / "instruments",
            ROOT / "tests" / "fixtures",
        )
        for path in sorted(folder.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if indexed.search(line)
    ]
    assert found == []


def test_k8s_steps_follow_the_registry():
    """Every heavy step (the compute_device pool) of every experiment gets a GPU pod in the k8s run config."""
    script = ROOT / "scripts" / "k8s_run_config.py"
    out = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout
    steps = yaml.safe_load((ROOT / "deploy" / "run_config.k8s.yaml").read_text())["execution"]["config"]
    heavy = {a.op.name for exp in EXPERIMENTS for a in exp.assets() if a.op.pool == "compute_device"}
    assert set(steps["per_step_k8s_config"]) == heavy
    assert {"determinism", "fuzz_outcomes", "input_pool_ffn"} <= heavy


def test_site_navigation_follows_the_registry():
    nav = site_nav()
    experiments = next(item["Experiments"] for item in nav if "Experiments" in item)
    pages = [next(iter(entry.values())) for entry in experiments]
    assert pages[:8] == [f"results/{experiment(i).slug}.md" for i in ("S", "A", "C1", "C2", "C3", "D", "B", "E")]
    everywhere = {v for item in nav for v in ([item] if isinstance(item, str) else item.values()) if isinstance(v, str)}
    assert {f"results/{e.slug}.md" for e in EXPERIMENTS} <= everywhere | set(pages)


def test_reading_the_registry_loads_no_asset_code():
    """The report reads the registry; the registry must not import any experiment's assets."""
    code = (
        "import sys, pipeline.experiments, pipeline.reporting.pages, pipeline.reporting.asset\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('pipeline.experiments.') and m.count('.') == 3)\n"
        "print(' '.join(m.rsplit('.', 1)[1] for m in loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert set(out.stdout.split()) <= {"spec", "report", "rules"}, out.stdout


def test_matrix_loads_toolkit_and_the_chosen_experiment():
    defs_list, unavailable = planted_bug_harness.matrix_definitions(["D"])
    assert unavailable == []
    groups = {
        a.group_names_by_key[k]
        for a in defs_list
        if isinstance(a, dg.AssetsDefinition) and not isinstance(a, dg.AssetChecksDefinition)
        for k in a.keys
    }
    assert groups == {"S_toolkit", "D_data_movement"}
    judged = ", ".join(sorted(e.id for e in EXPERIMENTS if e.matrix == "judged"))  # the records' say
    with pytest.raises(ValueError, match=f"choose from {judged}"):
        planted_bug_harness.matrix_definitions(["E"])


def test_unknown_experiment_names_the_known_ones():
    with pytest.raises(KeyError, match="no experiment 'Z'; known: S, A, C1"):
        experiment("Z")
