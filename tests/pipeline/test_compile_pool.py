"""The warm compile pool: sizing, task order, errors, and the same results in a worker as here."""

from __future__ import annotations

import functools
import math
import os

import polars as pl
import pytest
import torch

from pipeline import compile_pool
from pipeline.compile_pool import pool_size, run_tasks
from pipeline.experiments.data_movement import assets as data_movement
from pipeline.resources import ExperimentSettings

CPU = torch.device("cpu")


def test_pool_size_follows_the_device_the_cores_and_the_override(monkeypatch):
    monkeypatch.delenv(compile_pool.WORKERS_ENV, raising=False)
    # A CPU run compiles in-process: the kernels already use every core.
    assert pool_size(CPU, tasks=21, cores=16) == 1
    # Compile-bound tasks (the fuzzer's, the tester's) on a CPU: a worker per core, each with ten tasks or more.
    assert pool_size(CPU, tasks=48, cores=2, compile_bound=True) == 2
    assert pool_size(CPU, tasks=21, cores=16, compile_bound=True) == 2
    assert pool_size(CPU, tasks=19, cores=2, compile_bound=True) == 1  # too few to pay for a second process
    assert pool_size(CPU, tasks=6, cores=2, compile_bound=True) == 1  # the smoke profile's fuzzer
    # D's tasks are an input draw each, several subgraphs apiece: the default profile's 15 draws of 81 compiles
    # pay for two
    assert pool_size(CPU, tasks=15, cores=2, compile_bound=True) == 1
    assert pool_size(CPU, tasks=15, cores=2, compile_bound=True, compiles_per_task=81 / 15) == 2
    # An accelerator: one worker per core, never more than there are tasks.
    assert pool_size(torch.device("cuda"), tasks=21, cores=16) == 16
    assert pool_size(torch.device("cuda"), tasks=4, cores=16) == 4
    assert pool_size(torch.device("cuda"), tasks=0, cores=16) == 1
    # Device memory caps it: nine tenths of it over each task's bytes and a worker's context.
    per_worker = 4 * 2**30 + compile_pool.CONTEXT_BYTES
    assert pool_size(torch.device("cuda"), tasks=21, cores=16, task_bytes=4 * 2**30, device_bytes=10 * per_worker) == 9
    assert pool_size(torch.device("cuda"), tasks=21, cores=16, task_bytes=2**40, device_bytes=2**30) == 1
    # A request (argument, else the environment) wins, capped by the tasks.
    assert pool_size(CPU, tasks=21, requested=3) == 3
    monkeypatch.setenv(compile_pool.WORKERS_ENV, "2")
    assert pool_size(CPU, tasks=21) == 2 and pool_size(CPU, tasks=1) == 1
    monkeypatch.setenv(compile_pool.WORKERS_ENV, "many")
    with pytest.raises(ValueError, match="FUSION_COMPILE_WORKERS must be an integer >= 1, got 'many'"):
        pool_size(CPU, tasks=3)
    with pytest.raises(ValueError, match="at least 1, got 0"):
        pool_size(CPU, tasks=3, requested=0)


def test_device_lanes_follow_the_device_the_cores_the_memory_and_the_override(monkeypatch):
    monkeypatch.delenv(compile_pool.LANES_ENV, raising=False)
    cuda, lanes = torch.device("cuda"), compile_pool.device_lanes
    assert lanes(CPU, tasks=18, cores=16) == 1  # a CPU run's kernels use every core already
    assert lanes(cuda, tasks=18, cores=16) == compile_pool.DEVICE_LANES == 4
    assert lanes(cuda, tasks=3, cores=16) == 3 and lanes(cuda, tasks=0, cores=16) == 1
    assert lanes(cuda, tasks=18, cores=2) == 2  # a lane is a host core issuing kernels
    per_lane = 4 * 2**30 + compile_pool.CONTEXT_BYTES
    assert lanes(cuda, tasks=18, cores=16, task_bytes=4 * 2**30, device_bytes=3 * per_lane) == 2  # nine tenths
    assert lanes(torch.device("mps"), tasks=18, cores=16, task_bytes=2**40) == 4  # no free-memory query there
    monkeypatch.setenv(compile_pool.LANES_ENV, "8")
    assert lanes(cuda, tasks=18, cores=16) == 8 and lanes(CPU, tasks=18, cores=16) == 1
    for bad in ("0", "two"):
        monkeypatch.setenv(compile_pool.LANES_ENV, bad)
        with pytest.raises(ValueError, match=f"FUSION_DEVICE_LANES must be an integer >= 1, got '{bad}'"):
            lanes(cuda, tasks=18, cores=16)


def test_in_process_runs_tasks_in_order_and_reports_each():
    seen = []
    out = run_tasks(math.pow, [(2, i) for i in range(4)], CPU, workers=1, on_result=lambda i, r: seen.append((i, r)))
    assert out == [1.0, 2.0, 4.0, 8.0] and seen == list(enumerate(out))
    with pytest.raises(ValueError, match="module-level function"):
        run_tasks(lambda x: x, [(1,)], CPU)
    with pytest.raises(ValueError, match="at least 1, got 0"):
        run_tasks(math.pow, [(2, 1)], CPU, workers=0)


@pytest.mark.skipif(os.name != "posix", reason="workers are POSIX subprocesses")
def test_a_worker_returns_results_in_task_order_and_raises_a_tasks_error():
    seen = []
    out = run_tasks(
        math.pow, [(3, i) for i in range(5)], CPU, workers=1, on_result=lambda i, r: seen.append(i), here=False
    )
    assert out == [1.0, 3.0, 9.0, 27.0, 81.0] and seen == [0, 1, 2, 3, 4]
    # A task that raises in a worker: its traceback comes back, naming the task.
    with pytest.raises(RuntimeError, match=r"compile task math.log failed in worker [0-9]+:(.|\n)*math domain error"):
        run_tasks(math.log, [(1,), (0,), (2,)], CPU, workers=1, here=False)


@pytest.mark.skipif(os.name != "posix", reason="workers are POSIX subprocesses")
def test_d_combinations_give_the_same_rows_in_a_worker_as_here():
    # Two input keys (bf16 RoPE with its NaN payloads, fp16 scalar-scale counterexample), a few graphs each.
    settings = ExperimentSettings(profile="smoke", device="cpu")
    combos = [
        ("transpose_concat", "bfloat16", (2, 8, 16), "contiguous"),
        ("rope_rotate_half", "bfloat16", (2, 8, 16), "contiguous"),
        ("scaled_add_concat", "float16", (1, 7, 24), "contiguous"),
        ("promote_broadcast_concat", "float16", (1, 7, 24), "contiguous"),
    ]
    args = (combos, settings.derived_seed, CPU, "inductor", {})
    here, localized_here = data_movement.check_table(*args, workers=1)
    pooled, localized_pooled = data_movement.check_table(*args, workers=1, here=False)
    timing = ["compile_seconds"]  # wall time, the one column that may differ
    assert here.height == 4 and localized_here == localized_pooled
    assert here.drop(timing).equals(pooled.drop(timing))
    assert here["subgraph"].to_list() == [c[0] for c in combos]  # plan order
    scaled = here.filter(pl.col("subgraph") == "scaled_add_concat").row(0, named=True)
    assert scaled["ulp_max"] > 0  # the comparison found the double rounding in both processes alike


@pytest.mark.skipif(os.name != "posix", reason="workers are POSIX subprocesses")
def test_an_m_architecture_gives_the_same_run_in_a_worker_as_here():
    import numpy as np

    from pipeline.experiments.models import compute
    from pipeline.experiments.models.zoo import zoo_workloads

    settings = ExperimentSettings(profile="smoke", device="cpu")
    w = zoo_workloads(("vit",), "tiny", seq_len=8, image_size=32)[0]
    task = (w, ("float32",), "cpu", 1, 2, "inductor", {}, compute.model_seeds(w.name, 1, settings.derived_seed))
    (here,) = run_tasks(compute.run_architecture, [task], CPU)[0]
    (there,) = run_tasks(compute.run_architecture, [task], CPU, here=False)[0]
    assert here.error == there.error == "" and here.parameters == there.parameters > 0
    assert here.evidence["code_sha256"] == there.evidence["code_sha256"]
    assert len(here.outputs) == len(there.outputs) >= 1
    for a, b in zip(here.outputs, there.outputs, strict=True):
        assert np.array_equal(a.eager_units, b.eager_units) and np.array_equal(a.fused_units, b.fused_units)


@pytest.mark.skipif(os.name != "posix", reason="workers are POSIX subprocesses")
def test_a_fuzzer_graph_gives_the_same_outcome_in_a_worker_as_here(tmp_path):
    from pipeline.instruments.diagnostics.fuzzing import fuzz_one

    tasks = [(seed, "inductor", {}, tmp_path, "cpu") for seed in (915256, 915257)]
    here = run_tasks(fuzz_one, tasks, CPU, workers=1)
    pooled = run_tasks(fuzz_one, tasks, CPU, workers=1, here=False)
    timing = ("compile_seconds",)  # wall time, the one field that may differ
    rows = [[{k: v for k, v in o.row().items() if k not in timing} for o in run] for run in (here, pooled)]
    assert rows[0] == rows[1] and [r["seed"] for r in rows[0]] == [915256, 915257]


@pytest.mark.skipif(os.name != "posix", reason="workers are POSIX subprocesses")
def test_b_chains_on_lanes_give_the_same_rows_and_worst_sets_as_one_after_another(tmp_path, monkeypatch):
    """On an accelerator B's (chain, dtype) pairs run on lanes: here and in a worker, handed the settings'
    fields and the pools and references as recipes (rebuilt there). The rows, the evidence and the worst
    sets are those of the chain run here one dtype after the other."""
    from pipeline.experiments.accumulated_error import chain_runs
    from pipeline.experiments.toolkit.assets import as_recipe, pool_stream, reference_stream
    from pipeline.set_storage import RegeneratedSets
    from pipeline.storage import read_value, write_value
    from pipeline.workloads import WORKLOADS

    settings = ExperimentSettings(profile="smoke", device="cpu")
    w = WORKLOADS["layernorm"]
    write_value(as_recipe("input_pool", w, settings, pool_stream(w, settings)), tmp_path / "pool")
    pool = read_value(tmp_path / "pool")
    write_value(as_recipe("fp64_reference", w, settings, reference_stream(w, pool, "cpu")), tmp_path / "ref")
    refs = read_value(tmp_path / "ref")
    assert isinstance(pool, RegeneratedSets) and isinstance(refs, RegeneratedSets)
    ([alone], one) = chain_runs.run_chains(settings, {"layernorm": pool}, {"layernorm": refs})  # read here first
    lines: list[str] = []
    monkeypatch.setattr(chain_runs, "device_lanes", lambda *a, **k: 2)  # as on an accelerator
    # every pair in a worker (here, this process could take both before a worker is ready)
    monkeypatch.setattr(chain_runs, "run_tasks", functools.partial(run_tasks, here=False))
    (laned, lanes) = chain_runs.run_chains(settings, {"layernorm": pool}, {"layernorm": refs}, lines.append)
    assert (one, lanes, len(laned)) == (1, 2, 2)  # one run per (chain, dtype) pair
    assert len(alone.rows) == 2 * 2 * pool.n_sets * 3  # two dtypes, two distributions, three paths
    assert pl.DataFrame([r for run in laned for r in run.rows]).equals(pl.DataFrame(alone.rows))
    timing = ["path_seconds", "sets_per_second", "compile_seconds"]
    evidence = pl.DataFrame([e for run in laned for e in run.evidence]).drop(timing)
    assert evidence.equals(pl.DataFrame(alone.evidence).drop(timing))
    worst = {k: v for run in laned for k, v in run.worst.items()}
    assert sorted(worst) == sorted(alone.worst) and all(torch.equal(worst[k], alone.worst[k]) for k in worst)
    # what the pairs logged comes back to the run's log: their outcome lines, not the sets' progress
    assert lines[0] == "2 chain x dtype pairs on 2 lanes" and sum("sets/s" in line for line in lines) == 2
    assert not any("input sets" in line for line in lines)
