"""benchmarks/gpu_budget.py runs and prints its estimate for the gpu and seed profiles."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_budget.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_budget", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_prints_a_table_per_profile_with_totals(capsys, monkeypatch):
    monkeypatch.delenv("FUSION_COMPILE_WORKERS", raising=False)
    budget = _load()
    assert budget.main([]) == 0
    out = capsys.readouterr().out
    for profile in ("gpu", "seed"):
        assert f"### profile `{profile}`" in out
    assert out.count("| **total** |") == 2
    assert "| compiles | workers |" in out and "H100 min | H200 min" in out and "datasheets" in out
    # assumed figures are listed as such, apart from the peaks and the figures taken from the H200 run
    assumed = out.split("Assumed, not measured:")[1].split("From the H200 run")[0]
    assert "us of host time" in assumed and "GB/s" in assumed and "16 compile workers at most" in assumed
    assert (
        "the regression matrix never ran on a GPU" in assumed
        and "pools drawn on the device, about 10 kernels per fp64 reference call" in assumed
    )
    # the lanes' gain is an assumption, said as one, with what the totals would be without it
    assert "each lane beyond the first adds 75% of one lane's throughput" in assumed
    assert "B and E were measured one at a time" in assumed
    # the per-compile, per-program and per-process figures come from the H200 run's logs
    logs = out.split("From the H200 run of 2026-11-27")[1]
    assert "21.2 s per report invocation before its first step, 7.4 s for its process's first GPU work" in logs
    assert (
        "tester 17.5 s warm-up + 0.87 s per program, fuzzer 0.62 s per graph" in logs and "144 s per reproducer" in logs
    )
    # the calibration table: every step the H200 run timed, measured beside the new and old estimates
    calib = out.split("### measured vs estimated: the H200 run of 2026-11-27")[1].split("Totals:")[0]
    assert "| determinism | gpu | call1 --only A | 84.0 | 91.2 | 1.09 | 71.6 |" in calib
    assert "| accumulated_error_runs | smoke | call2 smoke | 15.8 | 16.0 | 1.01 | 177.7 |" in calib
    assert calib.count("| gpu |") == 10 and calib.count("| smoke |") == 6
    assert "| accumulated_error_runs | gpu | session 2 call1 --only B | 143.0 | 143.0 | 1.00 | - |" in calib
    no_gain = re.search(r"What-if, not the code: gpu at ([0-9.]+) min on an H200 if lanes gained nothing", out)
    assert no_gain is not None and float(no_gain.group(1)) > 10  # the budget rests on the lanes' gain
    assert re.search(r"within its budget while each extra lane adds at least [0-9]+% of a lane", out)
    assert re.search(r"Against each profile's stated budget .*gpu: 10 min, estimate ", out)
    for exp in ("A determinism", "B accumulated error", "D data movement", "E training", "M models", "Diagnostics"):
        assert out.count(f"| {exp} |") == 2, exp
    totals = re.search(r"Totals: gpu: ([0-9.]+) min on an H100, ([0-9.]+) min on an H200; seed: ([0-9.]+)", out)
    assert totals is not None
    gpu_h100, gpu_h200, seed_h200 = (float(x) for x in totals.groups())
    assert 0 < gpu_h200 <= gpu_h100 and gpu_h200 < seed_h200  # the gpu profile is the smaller one
    # the gpu profile's H200 total is the model's sum over its rows, the start-up included
    from pipeline import costmodel, plan

    assert gpu_h200 == round(sum(c.minutes(costmodel.GPUS[1]) for c in plan.costs("gpu")), 1)
    assert "| start-up | 0 | 1 |" in out


def test_costs_follow_the_sizes(monkeypatch):
    monkeypatch.delenv("FUSION_COMPILE_WORKERS", raising=False)
    from pipeline import costmodel as plan
    from pipeline.experiments.data_movement.cost import D_TASK_S, cost_d
    from pipeline.experiments.determinism.cost import cost_a
    from pipeline.experiments.models.cost import MODEL_COMPILE_S, MODEL_WORKER_READY_S, cost_m
    from pipeline.instruments.diagnostics.cost import cost_diagnostics

    # D compiles every subgraph x dtype x shape x layout: 117 combinations at the seed's three shapes, 21
    # pool tasks (one per input draw). A task holds up to 128 B per element of [8, 2048, 4096] (8.6 GB),
    # so the GPU's memory sizes the pool: 0.9 x 80 GB // (8.6 GB + a 0.5 GiB context) = 7 processes on an
    # H100, 0.9 x 141 GB // 9.1 GB = 13 on an H200 (16 cores would allow 16).
    d = cost_d("gpu")
    assert d.compiles == 117 == cost_d("seed").compiles
    assert (d.pool["H100"][0], d.pool["H200"][0], d.workers) == (7, 13, 13)
    # On the H200 this process takes two tasks before the 12 workers are ready, they take the next 12 and
    # end the last tasks in their second round: a task is its draw and six compiles.
    task = D_TASK_S + 6 * plan.COMPILE_S
    assert 2 * task > plan.WORKER_READY_S > task
    assert d.compile_s == pytest.approx(plan.WORKER_READY_S + 2 * task) == d.pool["H200"][1]
    assert d.pool["H100"][1] > d.compile_s
    # M: one task per architecture (both dtypes), 4 at gpu: three go to workers
    m = cost_m("gpu")
    assert (m.compiles, m.workers) == (8, 4)
    assert m.compile_s == pytest.approx(MODEL_WORKER_READY_S + 2 * MODEL_COMPILE_S) == pytest.approx(55.8)
    # A's gpu profile runs fp32 ten times less than seed; its 16-bit rows are the same
    assert cost_a("gpu").fp32_flops * 10 == cost_a("seed").fp32_flops
    assert cost_a("gpu").flops == cost_a("seed").flops
    assert cost_diagnostics("gpu").compiles == 200


def test_b_and_e_share_their_launch_bound_work_out_on_the_device_lanes(monkeypatch):
    monkeypatch.delenv("FUSION_DEVICE_LANES", raising=False)
    from pipeline import costmodel as plan
    from pipeline.experiments.accumulated_error.cost import cost_b
    from pipeline.experiments.training.cost import cost_e

    h100, h200 = plan.GPUS
    b, e, e_seed = cost_b("gpu"), cost_e("gpu"), cost_e("seed")
    # 16 chain x dtype pairs and 15 runs on the default four lanes; a seed-size run (18.9 GiB estimated)
    # leaves room for three on an H100's 80 GB, four on an H200's 141 GB
    assert b.lanes == e.lanes == {"H100": 4, "H200": 4} and e_seed.lanes == {"H100": 3, "H200": 4}
    assert plan.lane_speedup(1) == 1 and plan.lane_speedup(4) == 1 + 3 * plan.LANE_EFFICIENCY == 3.25
    assert plan.workers_text(b) == "4" and plan.workers_text(e_seed) == "3 / 4"  # the table's processes
    # the host-bound terms are shared out and a worker's start added; the device's own work is not shared
    alone = plan.Cost("x", compile_s=30.0, fixed_s=120.0, flops=1e15)
    laned = plan.Cost("x", compile_s=30.0, fixed_s=120.0, flops=1e15, lanes={"H200": 4})
    one, four = alone.terms(h200), laned.terms(h200)
    assert four["compile"] == pytest.approx(30.0 / 3.25) and four["device"] == one["device"] > 0
    assert four["fixed"] == pytest.approx(120.0 / 3.25 + plan.WORKER_READY_S)
    assert laned.terms(h100) == one  # no lanes named for this GPU: one at a time
    # the measured B and E steps ran one at a time, and the calibration compares them so
    assert b.seconds(h200) < 0.5 * dataclasses.replace(b, lanes={}).seconds(h200)


def test_pool_sizes_come_from_the_workloads():
    from pipeline.experiments.accumulated_error.cost import cost_b
    from pipeline.experiments.toolkit.spec import chain_elements

    # B's chains in its two dtypes: fused, fused_emulate and the prediction per chain and dtype
    assert cost_b("seed").compiles == 8 * 2 * 2  # chains x dtypes x (fused, fused_emulate)
    # The inputs of S's attention pool at seed sizes (fp16 and bf16, 2 distributions, 1000 sets) as the
    # H200 run stored them: 2359297240 bytes of safetensors, its header included.
    inputs, _, dists = chain_elements("seed")["attention"]
    assert 0 <= 2359297240 - 1000 * dists * inputs * (2 + 2) < 4096


def test_pool_seconds_shares_tasks_in_order_among_the_warm_workers():
    from pipeline import costmodel as plan

    warm = plan.WORKER_READY_S
    assert plan.pool_seconds([], 4) == 0.0
    assert plan.pool_seconds([5.0, 5.0, 5.0], 1) == 15.0  # in-process: one after another
    # two processes: this one runs the first task from 0; the worker is ready at ``warm``
    assert plan.pool_seconds([100.0, 10.0], 2) == pytest.approx(max(100.0, warm + 10.0))
    # three 30 s tasks on two: here 0-30, the worker warm-30+warm, the third here again 30-60
    assert warm < 30 and plan.pool_seconds([30.0, 30.0, 30.0], 2) == pytest.approx(60.0)


def test_bad_arguments_are_refused(capsys):
    budget = _load()
    for argv, message in (
        (["--workers", "0"], "--workers must be at least 1"),
        (["--compile-s", "0"], "--compile-s must be positive"),
        (["--profiles", "gpu,huge"], "unknown profiles ['huge']"),
    ):
        with pytest.raises(SystemExit):
            budget.main(argv)
        assert message in capsys.readouterr().err
