"""What each experiment's spec declares it compiles, against the fusion evidence of the session's smoke run
(``smoke_everything``), and against the cost model that reads the declaration: B's and E's here, D's and
M's in their own tests (test_data_movement.py, test_models.py)."""

from __future__ import annotations

import polars as pl
from _smoke_run import RunPart

from pipeline.experiments import experiment
from pipeline.experiments.accumulated_error.cost import cost_b
from pipeline.experiments.accumulated_error.rules import DTYPES_B
from pipeline.experiments.accumulated_error.spec import COMPILED_PATHS, compiles
from pipeline.experiments.training.cost import cost_e
from pipeline.experiments.training.spec import FUSED_RUN_GRAPHS as E_GRAPHS
from pipeline.experiments.training.spec import SIZES as E_SIZES
from pipeline.experiments.training.spec import compiles as e_compiles
from pipeline.workloads import CHAINS


def test_b_compiles_what_its_spec_declares_once_each(smoke_everything):
    RunPart(smoke_everything, [*experiment("B").assets(), *experiment("B").checks()])
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
        assert cost_b(profile).compiles == compiles(len(CHAINS), len(DTYPES_B)), profile


def test_e_compiles_what_its_spec_declares_once_per_precision(smoke_everything):
    RunPart(smoke_everything, [*experiment("E").assets(), *experiment("E").checks()])
    curves = pl.read_parquet(smoke_everything["data"] / "training_curves.parquet")
    fused = curves.filter(pl.col("path") == "fused").unique("run")
    assert fused.height == 5  # one fused run per data order
    # each fused run: the training loss's graph (its backward comes with it) and the evaluation loss's
    assert set(fused["graphs"]) == {2} and set(fused["recompiles"]) == {0} and set(fused["graph_breaks"]) == {0}
    # every fused run compiled the same three graphs: one precision's worth of distinct code
    codes = {(c, h) for c in ("fwd_code_sha256", "bwd_code_sha256", "eval_code_sha256") for h in fused[c]}
    assert len(codes) == len(E_GRAPHS) == e_compiles(E_SIZES["smoke"]) == 3
    assert (
        curves.filter(pl.col("path") == "eager")["graphs"].null_count()
        == curves.filter(pl.col("path") == "eager").height
    )


def test_the_cost_model_plans_the_compiles_e_declares():
    for profile in ("smoke", "default", "gpu", "seed"):
        assert cost_e(profile).compiles == e_compiles(E_SIZES[profile]), profile
    assert e_compiles(E_SIZES["seed"]) == 6  # the seed profile also trains the fp32 pair
