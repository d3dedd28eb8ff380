"""benchmarks/gpu_budget.py runs and prints its estimate for the gpu and seed profiles."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_budget.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_budget", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_prints_a_table_per_profile_with_totals(capsys):
    budget = _load()
    assert budget.main([]) == 0
    out = capsys.readouterr().out
    for profile in ("gpu", "seed"):
        assert f"### profile `{profile}`" in out
    assert out.count("| **total** |") == 2
    assert "H100 min | H200 min" in out and "datasheets" in out
    # assumed figures are listed as such, apart from the peaks and the figures taken from the H200 run
    assumed = out.split("Assumed, not measured:")[1].split("From the H200 run")[0]
    assert "s per cold Triton graph" in assumed and "us of host time" in assumed and "GB/s" in assumed
    assert re.search(r"Against each profile's stated budget .*gpu: 10 min, estimate ", out)
    for exp in ("A determinism", "B accumulated error", "D data movement", "E training", "M models", "Diagnostics"):
        assert out.count(f"| {exp} |") == 2, exp
    totals = re.search(r"Totals: gpu: ([0-9.]+) min on an H100, ([0-9.]+) min on an H200; seed: ([0-9.]+)", out)
    assert totals is not None
    gpu_h100, gpu_h200, seed_h200 = (float(x) for x in totals.groups())
    assert 0 < gpu_h200 <= gpu_h100 and gpu_h200 < seed_h200  # the gpu profile is the smaller one


def test_costs_follow_the_sizes():
    budget = _load()
    # D compiles every subgraph x dtype x shape x layout: 117 combinations at the seed's three shapes
    assert budget.cost_d("seed").compiles == 117 == budget.cost_d("gpu").compiles
    # A's gpu profile runs fp32 ten times less than seed; its 16-bit rows are the same
    assert budget.cost_a("gpu").fp32_flops * 10 == budget.cost_a("seed").fp32_flops
    assert budget.cost_a("gpu").flops == budget.cost_a("seed").flops
    assert budget.cost_diagnostics("gpu").compiles == 200


def test_pool_sizes_come_from_the_workloads():
    budget = _load()
    # B's chains in its two dtypes: fused, fused_emulate and the prediction per chain and dtype
    assert budget.cost_b("seed").compiles == 8 * 2 * 3
    # The inputs of S's attention pool at seed sizes (fp16 and bf16, 2 distributions, 1000 sets) as the
    # H200 run stored them: 2359297240 bytes of safetensors, its header included.
    inputs, _, dists = budget._chain_elements("seed")["attention"]
    assert 0 <= 2359297240 - 1000 * dists * inputs * (2 + 2) < 4096
