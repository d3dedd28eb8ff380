"""Planted-bug backends (each does the damage it claims) and the planted-bug matrix."""

import dagster as dg
import polars as pl
import pytest
import torch

from pipeline import planted_bugs, storage
from pipeline.assets import regression
from precisionkit import FusionError, fused, ulp_diff


def test_registration_is_idempotent():
    from torch._dynamo import list_backends

    names = planted_bugs.register_planted_backends()
    assert planted_bugs.register_planted_backends() == names
    registered = set(list_backends(exclude_tags=()))
    assert set(names) <= registered and len(names) == 7


def _softmax(x):
    return torch.softmax(x, -1)


def _row_sum(x):
    return x.sum(-1, dtype=torch.float32)


def _move(x, y):
    return torch.cat([x.transpose(1, 2), y.transpose(1, 2)], dim=-1)


@pytest.fixture(scope="module")
def inputs():
    planted_bugs.register_planted_backends()
    g = torch.Generator().manual_seed(0)
    return {"x": torch.randn(4, 32, generator=g).half(), "row": torch.rand(1, 4096, generator=g).half(),
            "a": torch.randn(2, 8, 16, generator=g).half(), "b": torch.randn(2, 8, 16, generator=g).half()}


def test_output_faults_do_what_they_claim(inputs):
    a, b = inputs["a"], inputs["b"]
    ref = _move(a, b)
    out = fused(_move, "planted_drop_channel")(a, b)
    assert torch.equal(out[..., :-1], ref[..., :-1]) and (out[..., -1] == 0).all()
    swapped = fused(_move, "planted_layout_swap")(a, b)
    assert swapped.shape == ref.shape and torch.equal(swapped, ref.transpose(-1, -2).reshape(ref.shape))
    bumped = fused(_move, "planted_off_by_one_ulp")(a, b)
    d = ulp_diff(bumped, ref)
    assert int(d.max()) == 1 and bool((d[ref != 0] == 1).all()) and bool((bumped.abs() >= ref.abs()).all())


def test_nondeterministic_bug_varies_per_call_only_for_reductions(inputs):
    x, a, b = inputs["x"], inputs["a"], inputs["b"]
    fn = fused(_softmax, "planted_nondeterministic_reduction")
    outs = [fn(x) for _ in range(3)]
    assert any(not torch.equal(outs[0], o) for o in outs[1:])
    assert int(ulp_diff(outs[0], _softmax(x)).max()) == 1
    move = fused(_move, "planted_nondeterministic_reduction")  # no reduction: left alone
    assert torch.equal(move(a, b), _move(a, b)) and torch.equal(move(a, b), _move(a, b))


def test_graph_faults_damage_reductions(inputs):
    x, row = inputs["x"], inputs["row"]
    wrong = fused(_softmax, "planted_wrong_axis")
    out = wrong(x)
    assert wrong.evidence.kernel_count >= 1  # still looks fused

    def walk(t):  # the planted fault: rows read column-major
        return t.T.contiguous().reshape(t.shape)

    xf = x.float()
    m = walk(xf).amax(-1, keepdim=True)
    e = torch.exp(xf - m)
    expected = (e / walk(e).sum(-1, keepdim=True)).half()
    assert int(ulp_diff(out, expected).max()) <= 2
    assert int(ulp_diff(out, _softmax(x)).max()) > 100
    acc = fused(_row_sum, "planted_fp16_accumulation")
    total = acc(row)
    exact = row.double().sum(-1)
    healthy_err = float((_row_sum(row).double() - exact).abs())
    assert float((total.double() - exact).abs()) > 10 * max(healthy_err, 1e-6)


def test_fallback_bug_raises_fusion_error(inputs):
    with pytest.raises(FusionError, match="no fused kernel"):
        fused(_softmax, "planted_fallback_to_eager")(inputs["x"])


def _run(checks, failures=()):
    return {"checks": {k: {"level": v, "metadata": {"k": k}} for k, v in checks.items()}, "failures": list(failures), "seconds": 1.0}


def test_compare_to_healthy_counts_turned_red_only():
    healthy = _run({"x:a": 0, "x:b": 1, "x:c": 2, "x:d": 0})
    bug = _run({"x:a": 1, "x:b": 2, "x:c": 2, "x:d": 0},
               [{"step": "s", "error": "FusionError", "message": "no kernel", "fusion": True}])
    caught, first, meta = regression.compare_to_healthy(healthy, bug)
    assert caught == ["x:a (pass -> WARN)", "x:b (WARN -> ERROR)", "fusion evidence check (FusionError in s)"]
    assert first == "x:a" and '"k": "x:a"' in meta
    assert regression.compare_to_healthy(healthy, healthy)[0] == []
    crash = _run({}, [{"step": "t", "error": "ValueError", "message": "m", "fusion": False}])
    assert regression.compare_to_healthy(healthy, crash)[0] == ["asset raised ValueError in t"]


def test_matrix_catches_bugs_with_no_false_alarm(tmp_path, smoke_resources):
    """The asset end to end on C2 (the cheapest experiment) with three bugs it must catch."""
    bugs = ["planted_drop_channel", "planted_fallback_to_eager", "planted_nondeterministic_reduction"]
    result = dg.materialize(
        [regression.planted_bug_matrix, regression.every_planted_bug_caught, regression.healthy_backend_no_false_alarms],
        resources=smoke_resources,
        run_config={"ops": {"planted_bug_matrix": {"config": {"bugs": bugs, "experiments": ["C2"]}}}},
    )
    assert result.success
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert checks["every_planted_bug_caught"].passed and checks["healthy_backend_no_false_alarms"].passed
    table = storage.read_value(tmp_path / "smoke" / "planted_bug_matrix")
    by_bug = {r["bug"]: r for r in table.iter_rows(named=True)}
    assert by_bug["inductor (healthy control re-run)"]["caught"] == "no"
    assert "c2_versions_self_deterministic (pass -> ERROR)" in by_bug["planted_nondeterministic_reduction"]["caught_by"]
    assert "fusion evidence check (FusionError in c2_reduction_order)" == by_bug["planted_fallback_to_eager"]["caught_by"]
    assert "c2_versions_within_fp64_band (pass -> ERROR)" in by_bug["planted_drop_channel"]["caught_by"]
    assert all(by_bug[b]["first_failure_metadata"] for b in bugs)
    assert table.schema == pl.Schema(regression.MATRIX_SCHEMA)
