"""The plan-time estimate `report` prints before it starts, and its refusal when the disk is too small."""

from __future__ import annotations

import pytest
import torch

from pipeline import plan, plan_calibration
from pipeline.experiments.data_movement.spec import SIZES as D_SIZES
from pipeline.experiments.models.spec import SIZES as M_SIZES
from pipeline.experiments.toolkit.spec import SIZES as POOL_SIZES

CPU = torch.device("cpu")


def test_the_estimate_sums_the_experiments_that_run():
    every = plan.plan_estimate("smoke", CPU)
    assert every.compiles == sum(c.compiles for c in plan.costs("smoke"))
    assert every.disk_bytes == sum(c.disk_bytes for c in plan.costs("smoke")) > 0
    assert every.minutes is None and every.gpu is None  # no peak figures for a CPU
    # the compiles each spec declares, for D and M alone
    only = plan.plan_estimate("smoke", CPU, {"D", "M"})
    assert only.compiles == D_SIZES["smoke"].compiles + M_SIZES["smoke"].compiles == 81 + 6
    assert only.disk_bytes == 0  # neither stores a pool
    # B reads S's chain pools and references, so choosing B stores those, and not A's FFN pool
    rows = {c.experiment: c for c in plan.costs("smoke")}
    chains = sum(c.disk_bytes for name, c in rows.items() if name.startswith("S pool ") and name != "S pool ffn")
    assert plan.plan_estimate("smoke", CPU, {"B"}).disk_bytes == chains > 0


def test_only_a_plans_only_the_ffn_pool_it_needs_upstream():
    # `report --only A` at gpu sizes planned 42.2 GB (every pool and reference); A needs input_pool_ffn only
    rows = plan.selected_costs("gpu", {"A"})
    assert [c.experiment for c in rows] == [plan.START_UP, "S pool ffn", "A determinism"]
    # gpu and seed store a recipe in place of each pool and reference: S writes nothing, A its cold round's files
    assert rows[1].disk_bytes == rows[1].host_bytes == 0
    assert plan.plan_estimate("gpu", CPU, {"A"}).disk_bytes == plan.cost_a("gpu").disk_bytes
    assert plan.plan_estimate("gpu", CPU).disk_bytes < 5e9
    # where pools are stored (default): the FFN's inputs, weight and bias in fp64, every value once
    batch, seq, hidden = POOL_SIZES["default"].ffn_shape
    ffn = (batch * seq * hidden + hidden * 4 * hidden + 4 * hidden) * 8
    assert plan.selected_costs("default", {"A"})[1].disk_bytes == ffn


def test_only_diagnostics_counts_what_it_needs_upstream():
    # the CLI's own selection: B, C1, C2's reduction order, C3, D and B's pools, not C2's long reductions
    names = {c.experiment for c in plan.selected_costs("smoke", {"Diagnostics"})}
    assert {"Diagnostics", "B accumulated error", "C1", "C2 reduction order", "C3", "D data movement"} <= names
    assert "S pool softmax" in names and not names & {"S pool ffn", "C2 long reductions", "A determinism", "M models"}
    # C2's two rows cover C2's assets between them (a new C2 asset would fall between the rows otherwise)
    from pipeline.experiments import experiment

    c2 = {k.to_user_string() for a in experiment("C2").assets() for k in a.keys}
    assert plan.C2_ORDER_ASSETS | {"c2_long_reductions"} == c2


def _pretend_gpu(monkeypatch, name):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)


def test_minutes_come_from_the_peaks_of_a_known_gpu(monkeypatch):
    monkeypatch.delenv("FUSION_COMPILE_WORKERS", raising=False)
    _pretend_gpu(monkeypatch, "NVIDIA H200")
    cuda = torch.device("cuda")
    assert plan.gpu_of(cuda) is plan.GPUS[1]
    est = plan.plan_estimate("gpu", cuda)
    assert est.gpu == "H200" and est.minutes == pytest.approx(sum(c.minutes(plan.GPUS[1]) for c in plan.costs("gpu")))
    _pretend_gpu(monkeypatch, "NVIDIA A100-SXM4-80GB")
    assert plan.gpu_of(cuda) is None and plan.plan_estimate("gpu", cuda).minutes is None


#: How far the calibrated model may be from a step the H200 run timed: within 1.5x either way, the factor
#: the recalibration was asked to reach (it reaches 1.11x; the old model was off by up to 11x, B at smoke).
CALIBRATION_FACTOR = 1.5


def test_the_calibrated_model_is_near_each_step_the_h200_run_timed():
    h200 = plan.GPUS[1]
    assert len(plan_calibration.H200_MEASURED) == 16  # 14 of the first session, B and E of the second
    for m in plan_calibration.H200_MEASURED:
        ratio = plan_calibration.step_estimate(m, h200) / m.seconds
        assert 1 / CALIBRATION_FACTOR <= ratio <= CALIBRATION_FACTOR, (m.step, m.profile, ratio)
    # the figures derived from the logs
    assert pytest.approx(21.2) == plan.REPORT_START_S and pytest.approx(7.4) == plan.FIRST_GPU_S
    assert (
        plan.REPRO_MEASURED_S == 144.0
        and pytest.approx(107.0 - 29.4) == plan.REPRO_S  # the CPU ISA probe's estimated share left out
        and plan.LOCATE_S == 32.5
        and pytest.approx(15.8) == plan.B_GRAPH_S * 32
        and pytest.approx(143.0) == plan.B_SET_ROW_S * 36_000 + plan.B_GPU_GRAPH_S * 32
    )
    # A's cold round: the fresh process plus the model's round at gpu sizes is the measured 49.4 s
    one_round = plan.cost_a("gpu", rounds=1)
    assert plan.FRESH_PROCESS_S + one_round.compile_s + one_round.terms(h200)["device"] == pytest.approx(49.4)


def test_a_whole_run_pays_its_start_up_once(monkeypatch):
    monkeypatch.delenv("FUSION_COMPILE_WORKERS", raising=False)
    _pretend_gpu(monkeypatch, "NVIDIA H200")
    start = next(c for c in plan.costs("gpu") if c.experiment == plan.START_UP)
    assert start.fixed_s == pytest.approx(plan.REPORT_START_S + plan.FIRST_GPU_S)
    c_only = plan.plan_estimate("gpu", torch.device("cuda"), {"C1", "C2", "C3"})
    assert c_only.minutes is not None
    assert c_only.minutes * 60 == pytest.approx(start.fixed_s + 6.1 + 5.5 + 9.6 + 6.4)


def test_announce_prints_one_line_and_lets_the_run_start(tmp_path):
    lines: list[str] = []
    assert plan.announce("smoke", CPU, tmp_path / "data", out=lines.append) is None
    compiles = plan.plan_estimate("smoke", CPU).compiles
    assert len(lines) == 1 and lines[0].startswith(f"plan: {compiles} compiles, ")
    assert f"stored in {tmp_path / 'data'}" in lines[0] and "no peak figures for cpu" in lines[0]


def test_announce_refuses_in_one_line_when_the_disk_is_too_small(tmp_path, monkeypatch):
    need = plan.plan_estimate("default", CPU).disk_bytes
    monkeypatch.setattr(plan, "free_bytes", lambda folder: int(need) - 1)
    lines: list[str] = []
    assert plan.announce("default", CPU, tmp_path, out=lines.append) == 2
    assert len(lines) == 2 and lines[1].startswith(
        f"refusing to start: the default run stores about {plan._bytes(need)} in "
    )
    assert (
        lines[1].endswith(f"and its disk has {plan._bytes(need - 1)} free") and need > 1e9
    )  # GBs: pools and references
    monkeypatch.setattr(plan, "free_bytes", lambda folder: int(need))
    assert plan.announce("default", CPU, tmp_path, out=lines.append) is None


def test_free_bytes_of_a_folder_not_made_yet_is_its_parents_disk(tmp_path):
    import shutil

    assert plan.free_bytes(tmp_path / "not" / "yet") == pytest.approx(shutil.disk_usage(tmp_path).free, rel=0.01)
