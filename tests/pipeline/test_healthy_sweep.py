"""scripts/healthy_sweep.py: its runs' settings, its reading of the report's outcome table, of stored
p-values, and of a stopped run's outcomes from its Dagster instance."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import dagster as dg
import polars as pl

from pipeline.definitions import build_resources
from pipeline.experiments import experiment
from pipeline.resources import ExperimentSettings

_SPEC = importlib.util.spec_from_file_location(
    "healthy_sweep", Path(__file__).resolve().parents[2] / "scripts" / "healthy_sweep.py"
)
assert _SPEC is not None and _SPEC.loader is not None
sweep = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sweep)


def test_each_run_has_its_own_folders_seed_threads_and_on_the_slow_path_its_own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # a shell left on the slow path: native runs drop it
    native, slow = sweep.run_env(tmp_path, 3, 1, "native"), sweep.run_env(tmp_path, 3, 1, "avx2")
    assert (native["FUSION_SEED"], native["OMP_NUM_THREADS"]) == ("3", "1")
    assert native["DAGSTER_HOME"] == str(tmp_path / "seed3-t1-native" / "dagster_home")
    assert slow["FUSION_DATA_DIR"] == str(tmp_path / "seed3-t1-avx2" / "data")
    assert slow["FUSION_SITE_DIR"] == str(tmp_path / "seed3-t1-avx2" / "site")
    assert (slow["ONEDNN_MAX_CPU_ISA"], slow["ATEN_CPU_CAPABILITY"]) == ("AVX2", "avx2")
    assert native["TORCHINDUCTOR_CACHE_DIR"] != slow["TORCHINDUCTOR_CACHE_DIR"]
    assert "ATEN_CPU_CAPABILITY" not in native and "ONEDNN_MAX_CPU_ISA" not in native


def test_a_run_reports_the_whole_profile_or_only_the_experiments_asked_for():
    whole, some = sweep.report_command("default", 4), sweep.report_command("default", 4, "A,B,D,E")
    assert whole[1:] == ["-m", "pipeline.cli", "report", "--profile", "default", "--seed", "4"]
    assert some == [*whole, "--only", "A,B,D,E"]


def test_the_smallest_value_of_every_p_value_column(tmp_path):
    pl.DataFrame({"p_holm": [0.5, 0.03], "fused_sign_test_p": [1.0, 0.2], "top": [0.0, 0.0]}).write_parquet(
        tmp_path / "summary.parquet"
    )
    pl.DataFrame({"p_value": [None, 0.7], "groups": [1, 2]}).write_parquet(tmp_path / "other.parquet")
    assert sweep.min_p_values(tmp_path) == {
        "summary.p_holm": 0.03,
        "summary.fused_sign_test_p": 0.2,
        "other.p_value": 0.7,
    }


def test_a_stopped_runs_outcomes_come_from_its_instance_as_the_report_prints_them(tmp_path):
    settings = ExperimentSettings(profile="smoke", device="cpu")
    s = experiment("S")
    with dg.DagsterInstance.ephemeral() as instance:
        result = dg.materialize(
            [*s.assets(), *s.checks()], resources=build_resources(settings, base_dir=str(tmp_path)), instance=instance
        )
        assert result.success
        table = sweep.recorded_outcome_table(instance)
    assert sweep.outcomes(table) == {"S": {"validity": "valid", "verdict": "no claim", "findings": "0"}}
    assert sweep.outcomes("experiment    run validity   claim verdict              findings\n") == {}


def test_a_report_writes_its_site_under_fusion_site_dir_when_set(tmp_path, monkeypatch):
    from pipeline.reporting.asset import ReportConfig

    monkeypatch.delenv("FUSION_SITE_DIR", raising=False)
    assert (ReportConfig().docs_dir, ReportConfig().build_dir) == ("site/docs", "site/build")
    monkeypatch.setenv("FUSION_SITE_DIR", str(tmp_path / "run" / "site"))
    config = ReportConfig()
    assert config.docs_dir == str(tmp_path / "run" / "site" / "docs")
    assert config.build_dir == str(tmp_path / "run" / "site" / "build")
