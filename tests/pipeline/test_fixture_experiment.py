"""Adding an experiment is a folder and one line: the fixture experiment (tests/fixtures/experiment_template),
copied out of the repository and registered through ``FUSION_EXTRA_EXPERIMENTS`` alone, is materialized,
judged, counted in the plan's estimate, judged by the planted-bug matrix and shown on the site by an unchanged
checkout. If this test ever needs a second edit to pass, the
registry is no longer the one door."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.experiments import PACKAGES

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "tests" / "fixtures" / "experiment_template" / "fixture_scale"


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A smoke report of the fixture experiment alone, in folders of its own."""
    base = tmp_path_factory.mktemp("fixture_experiment")
    shutil.copytree(TEMPLATE, base / "packages" / "fixture_scale")
    (base / "home").mkdir()
    (base / "home" / "dagster.yaml").touch()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(base / "packages"), str(ROOT)]),
        "FUSION_EXTRA_EXPERIMENTS": "fixture_scale",  # the one line that registers it
        "DAGSTER_HOME": str(base / "home"),
        "FUSION_DATA_DIR": str(base / "data"),
        "FUSION_SITE_DIR": str(base / "site"),
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    cmd = [sys.executable, "-m", "pipeline.cli", "report", "--profile", "smoke", "--only", "F"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return {"base": base, "proc": proc, "env": env}


def test_the_template_is_a_complete_experiment_of_six_files():
    assert sorted(p.name for p in TEMPLATE.iterdir() if p.suffix == ".py") == [
        "__init__.py",
        "assets.py",
        "cost.py",
        "report.py",
        "repro_cases.py",
        "spec.py",
    ]


def test_one_line_registers_it_beside_the_others(fixture_run):
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pipeline.experiments import EXPERIMENTS; print(','.join(e.id for e in EXPERIMENTS))",
        ],
        cwd=ROOT,
        env=fixture_run["env"],
        capture_output=True,
        text=True,
        check=True,
    )
    ids = out.stdout.strip().split(",")
    assert ids[-1] == "F" and ids[:2] == ["S", "A"] and len(ids) == len(PACKAGES) + 1  # the registry's and F


def test_it_is_materialized_judged_and_on_the_site(fixture_run):
    proc = fixture_run["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    outcome = [line.split() for line in proc.stdout.splitlines() if line.startswith("F ")]
    assert outcome == [["F", "valid", "supported", "0"]]  # the run's outcome table: validity, verdict, findings
    # its validity is the check generated from its one-line fusion declaration
    assert "fixture_scale_ulp_shows_fusion" in proc.stdout
    base = fixture_run["base"]
    assert (base / "data" / "smoke" / "fixture_scale_ulp.parquet").is_file()
    page = (base / "site" / "docs" / "results" / "fixture-scale.md").read_text()
    assert "Fixture: x * 2 + 1 eager against fused" in page
    assert "supported" in page and "| float16 |" in page and "| float32 |" in page
    assert (base / "site" / "build" / "results" / "fixture-scale.html").is_file()
    overview = (base / "site" / "build" / "index.html").read_text()
    assert "F: Fixture" in overview  # in the navigation
    assert '<a href="results/fixture-scale.html">F: Fixture: x * 2 + 1 eager against fused</a>' in overview


def test_the_plan_counts_it_the_matrix_catches_its_planted_bug_and_its_case_reproduces_it(fixture_run):
    """Its cost.py puts it in the plan's estimate (the report's plan line counts its two compiles); the bug
    its record declares (a one-ULP rounding fault, which its bit-equality claim must catch) is caught at ERROR
    by that claim when the planted-bug matrix runs it alone; its reproducer case reproduces that bug."""
    plan_line = next(line for line in fixture_run["proc"].stdout.splitlines() if line.startswith("plan ("))
    assert plan_line.startswith("plan (estimated from the smoke profile's sizes before the run): 2 compiles, ")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from pipeline import plan\n"
        "from pipeline.instruments.regression import harness, matrix_runs\n"
        "from pipeline.resources import ExperimentSettings\n"
        "(row,) = [c for c in plan.costs('smoke', device_type='cpu') if c.experiment == 'F']\n"
        "print('row', row.name, row.compiles)\n"
        "print('judged', *matrix_runs.MATRIX_EXPERIMENTS)\n"
        "like = ExperimentSettings(profile='smoke', device='cpu')\n"
        "table, _ = harness.build_matrix(['planted_off_by_one_ulp'], ['F'], like, Path(sys.argv[1]), healthy_seeds=[7])\n"
        "for r in table.iter_rows(named=True):\n"
        "    print('matrix', r['caught'], r['caught_by'] or '-')\n"
        "from pipeline.experiments import experiment\n"
        "from precisionkit.repro import reproduces\n"
        "case = experiment('F').reproducers.load().spec_case(['float16', '256'], 'inductor')\n"
        "print('repro', case.id, reproduces(case)[0], reproduces(case, 'planted_off_by_one_ulp')[0])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(fixture_run["base"] / "matrix")],
        cwd=ROOT,
        env=fixture_run["env"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "row F fixture 2" in lines and "F" in next(line for line in lines if line.startswith("judged")).split()
    assert [line for line in lines if line.startswith("matrix")] == [
        "matrix clean -",  # the healthy run: no false alarm
        "matrix yes fixture_scale_ulp:fixture_scale_bit_equal (claim contradicted)",
    ]
    # its reproducer case (``repros --make f/float16/256``), read through the record: clean with Inductor,
    # reproducing with the planted bug
    assert "repro f-scale-float16-256 False True" in lines


def test_an_unregistered_package_or_one_without_a_record_is_refused(tmp_path):
    (tmp_path / "not_an_experiment").mkdir()
    (tmp_path / "not_an_experiment" / "__init__.py").write_text("X = 1\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    for extra, message in (
        ("not_an_experiment", "not_an_experiment is registered as an experiment but has no EXPERIMENT record"),
        (
            "no_such_package_here",
            "FUSION_EXTRA_EXPERIMENTS names 'no_such_package_here', which cannot be imported (is its folder on "
            "PYTHONPATH?)",
        ),
    ):
        proc = subprocess.run(
            [sys.executable, "-c", "import pipeline.experiments"],
            cwd=ROOT,
            env={**env, "FUSION_EXTRA_EXPERIMENTS": extra},
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 1 and message in proc.stderr, proc.stderr[-2000:]
