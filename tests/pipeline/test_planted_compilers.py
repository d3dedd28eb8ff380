"""The planted bugs around another compiler than Inductor: which bugs apply, how a run names its bug and
compiler, the faults wrapped around OpenVINO's own backend, and a subset of the matrix on OpenVINO catching
each bug as it does on Inductor (OpenVINO tests skipped where it is not installed)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import precisionkit
from pipeline.instruments.regression.harness import CANNOT_JUDGE, execution_order, matrix_plan
from pipeline.instruments.regression.planted_bugs import PLANTED_BUGS
from pipeline.instruments.regression.planted_on import (
    not_applicable,
    planted_name,
    planted_on,
    run_backend,
    split_planted,
)
from pipeline.verdicts import NOT_APPLICABLE
from precisionkit import FusionError

needs_openvino = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None,
    reason="OpenVINO is not installed: pip install 'fusion-precision[openvino]'",
)
GRAPH_REWRITES = {n for n, b in PLANTED_BUGS.items() if b.rewrites_graph}


def test_graph_rewrites_do_not_apply_to_other_compilers_and_every_bug_applies_to_inductor():
    assert {
        "planted_wrong_axis",
        "planted_fp16_accumulation",
        "planted_long_reduction_bf16",
        "planted_bf16_scratch",
        "planted_attention_mask_dropped",
        "planted_thread_partials_bf16",
    } == GRAPH_REWRITES
    assert all(not_applicable(b, "inductor") is None for b in PLANTED_BUGS)
    for bug in PLANTED_BUGS:
        why = not_applicable(bug, "openvino")
        if bug in GRAPH_REWRITES:
            assert why is not None and why.startswith("not applicable to openvino: an FX rewrite of the ATen graph")
            assert "Inductor elides an fp32->fp16->fp32 cast pair" in why
        else:
            assert why is None
    with pytest.raises(ValueError, match="unknown planted bug 'planted_nothing'"):
        not_applicable("planted_nothing", "openvino")


def test_a_run_names_its_bug_and_compiler_and_runs_as_the_compiler():
    assert planted_name("planted_drop_channel", "inductor") == "planted_drop_channel"
    assert planted_name("planted_drop_channel", "openvino") == "planted_drop_channel@openvino"
    assert split_planted("planted_drop_channel@openvino") == ("planted_drop_channel", "openvino")
    assert split_planted("planted_drop_channel") is None and split_planted("openvino") is None
    assert (
        run_backend("planted_vector_tail@iree") == "iree"
        and run_backend("planted_vector_tail") == "planted_vector_tail"
    )
    with pytest.raises(ValueError, match="expected <planted bug>@<adapter>"):
        split_planted("relu@openvino")


def test_the_plan_on_another_compiler_runs_it_healthy_then_each_bug_planted_around_it():
    plan = matrix_plan(["planted_off_by_one_ulp", "planted_vector_tail"], [7, 8], compiler="openvino")
    assert [(r.label, r.backend, r.seed) for r in plan] == [
        ("healthy_7", "openvino", 7),
        ("healthy_8", "openvino", 8),
        ("planted_off_by_one_ulp", "planted_off_by_one_ulp@openvino", 7),
        ("planted_vector_tail", "planted_vector_tail@openvino", 7),
    ]
    # A graph rewrite compiles graphs of its own wherever it is planted: it goes beside the first healthy run.
    own = matrix_plan(["planted_off_by_one_ulp", "planted_wrong_axis"], [7, 8], compiler="iree")
    assert execution_order(own) == [0, 3, 1, 2]


def _relu_matmul():
    w = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
    return lambda a: torch.relu(a @ w + 1.0)


@needs_openvino
def test_output_faults_wrap_openvinos_own_backend_and_the_evidence_stays_openvinos():
    fn, x = _relu_matmul(), torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    with planted_on("openvino", "planted_drop_channel") as name:
        assert name == "openvino"
        damaged = precisionkit.fused(fn, backend="openvino")
        out = damaged(x)
    assert damaged.evidence.backend == "openvino" and damaged.evidence.kernel_count > 0  # OpenVINO's units
    assert torch.count_nonzero(out[:, -1]).item() == 0 and torch.count_nonzero(fn(x)[:, -1]).item() > 0
    healthy = precisionkit.fused(fn, backend="openvino")(x)  # the block restored OpenVINO's backend
    assert torch.count_nonzero(healthy[:, -1]).item() > 0
    with (
        planted_on("openvino", "planted_fallback_to_eager"),
        pytest.raises(FusionError, match="generated no fused unit"),
    ):
        precisionkit.fused(fn, backend="openvino")(x)
    wrong_axis = "planted bug 'planted_wrong_axis': not applicable to openvino"
    with pytest.raises(ValueError, match=wrong_axis), planted_on("openvino", "planted_wrong_axis"):
        pass


@needs_openvino
def test_a_matrix_subset_on_openvino_catches_each_bug_as_on_inductor(tmp_path):
    """D with two bugs caught in its two ways (a contradicted claim, an invalid run) and one graph rewrite,
    healthy and planted, on Inductor and on OpenVINO: each bug OpenVINO's D can judge has the same outcome on
    both, and one it cannot judge (no fused row for its claim) says so, never "no"."""
    from pipeline.instruments.regression.matrix_compare import compare_compilers, disagreements

    bugs = ["planted_off_by_one_ulp", "planted_fallback_to_eager", "planted_wrong_axis"]
    table = compare_compilers(bugs, ["D"], ["inductor", "openvino"], seed=20241223, work_dir=tmp_path)
    rows = {r["bug"]: r for r in table.iter_rows(named=True)}
    assert rows["(healthy)"]["caught_inductor"] == rows["(healthy)"]["caught_openvino"] == "clean"
    assert rows["planted_fallback_to_eager"]["caught_openvino"] == "yes", rows["planted_fallback_to_eager"]
    # A value one ULP off on D's pure-movement rows: Inductor fuses them and its claim catches it. OpenVINO
    # fuses some of them as single runtime nodes and leaves others to separate nodes; where its claim judges
    # a fused row it catches the bug as Inductor does, and where it judges none it says it cannot judge:
    # never a silent "no".
    off = rows["planted_off_by_one_ulp"]
    claim = "data_movement_check_table:pure_movement_rows_bit_exact"
    assert off["caught_inductor"] == "yes" and off["caught_by_inductor"] == f"{claim} (claim contradicted)", off
    assert off["caught_openvino"] in ("yes", CANNOT_JUDGE), off
    expected = f"{claim} (claim contradicted)" if off["caught_openvino"] == "yes" else f"{claim} is inconclusive"
    assert off["caught_by_openvino"].startswith(expected), off
    assert "FusionError" in rows["planted_fallback_to_eager"]["caught_by_openvino"]
    assert rows["planted_wrong_axis"]["caught_openvino"] == NOT_APPLICABLE
    assert disagreements(table, ["inductor", "openvino"]) == []


def test_a_bug_whose_claims_judged_nothing_in_the_healthy_run_cannot_be_judged():
    from pipeline.instruments.regression.harness import unjudged
    from pipeline.verdicts import CheckOutcome

    key = "data_movement_check_table:pure_movement_rows_bit_exact"

    def run(verdict: str):
        outcome = CheckOutcome(key, "claim", verdict == "supported", "WARN", verdict)
        return {"outcomes": {key: outcome}, "metadata": {}, "failures": [], "seed": 0, "seconds": 0.0}

    assert unjudged([key], run("inconclusive")) == f"{key} is inconclusive in the healthy run"
    assert unjudged([key], run("supported")) == ""  # judged: a bug it does not catch is a miss
    assert unjudged(["other_table:other_claim"], run("inconclusive")) == ""  # its claim did not run
