"""The plan-time estimate `report` prints before it starts, and its refusal when the disk is too small."""

from __future__ import annotations

import pytest
import torch

from pipeline import plan
from pipeline.experiments.data_movement.spec import SIZES as D_SIZES
from pipeline.experiments.models.spec import SIZES as M_SIZES

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
    # B reads S's pools, so choosing B stores them too
    pools = next(c for c in plan.costs("smoke") if c.experiment == "S pools").disk_bytes
    assert plan.plan_estimate("smoke", CPU, {"B"}).disk_bytes == pools > 0


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
