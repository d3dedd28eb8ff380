"""What each experiment's spec declares it compiles, against the fusion evidence of the session's smoke run
(``smoke_everything``), and against the cost model that reads the declaration. D's and M's counts are held
by their own tests (test_data_movement.py, test_models.py)."""

from __future__ import annotations

import polars as pl
from _smoke_run import failed_steps

from pipeline import plan
from pipeline.experiments.accumulated_error.rules import DTYPES_B
from pipeline.experiments.accumulated_error.spec import COMPILED_PATHS, compiles
from pipeline.workloads import CHAINS


def test_b_compiles_what_its_spec_declares_once_each(smoke_everything):
    assert not [s for s in failed_steps(smoke_everything) if s.startswith("accumulated_error")]
    evidence = pl.read_parquet(smoke_everything["data"] / "accumulated_error_fusion_evidence.parquet")
    compiled = evidence.filter(pl.col("graph_count") > 0)
    assert compiles(len(CHAINS), len(DTYPES_B)) == 32 == compiled.height
    assert set(compiled["path"]) == set(COMPILED_PATHS)
    # one graph per chain, dtype and compiled path, never recompiled, never broken
    assert compiled.group_by("chain", "dtype", "path").len()["len"].to_list() == [1] * 32
    assert set(compiled["graph_count"]) == {1} and set(compiled["recompiles"]) == {0}
    assert set(compiled["graph_breaks"]) == {0}
    assert evidence.filter(pl.col("path") == "eager")["graph_count"].sum() == 0  # eager compiles nothing


def test_the_cost_model_plans_the_compiles_b_declares():
    for profile in ("smoke", "default", "gpu", "seed"):
        assert plan.cost_b(profile).compiles == compiles(len(CHAINS), len(DTYPES_B)), profile
