"""Planted-bug backends (each does the damage it claims) and the planted-bug matrix."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

import dagster as dg
import polars as pl
import pytest
import torch

from pipeline import storage
from pipeline.instruments.regression import drift as regression
from pipeline.instruments.regression import harness, matrix_parallel, matrix_runs, planted_bugs, rules
from pipeline.instruments.regression import matrix as matrix_asset
from pipeline.instruments.regression.planted_bugs import PLANTED_BUGS
from pipeline.instruments.regression.spec import SIZES
from pipeline.resources import ExperimentSettings
from pipeline.verdicts import check_outcome
from precisionkit import FusionError, fused, ulp_diff


def test_registration_is_idempotent():
    from torch._dynamo import list_backends

    names = planted_bugs.register_planted_backends()
    assert planted_bugs.register_planted_backends() == names
    registered = set(list_backends(exclude_tags=()))
    assert set(names) <= registered and len(names) == 13
    assert all(b.fault_class and b.description for b in planted_bugs.PLANTED_BUGS.values())
    # each bug is declared by the experiment whose claim is built to catch it, or caught by any run
    assert all(all(matrix_runs.designed(name).values()) for name in planted_bugs.PLANTED_BUGS)


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
    return {
        "x": torch.randn(4, 32, generator=g).half(),
        "row": torch.rand(1, 4096, generator=g).half(),
        "a": torch.randn(2, 8, 16, generator=g).half(),
        "b": torch.randn(2, 8, 16, generator=g).half(),
    }


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


def _plain_sum(x):
    """C2's operation: the fp16 sum and the same sum accumulated into fp32."""
    return x.sum(-1), x.sum(-1, dtype=torch.float32)


def _rows(length, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(2, length, generator=g, dtype=torch.float64) * 2 - 1).half()


def test_long_reduction_bug_fires_only_above_its_threshold():
    planted_bugs.register_planted_backends()
    long_rows, short_rows = _rows(4096), _rows(planted_bugs.LONG_REDUCTION_THRESHOLD)  # C2 smoke length; at threshold
    fn = fused(_plain_sum, "planted_long_reduction_bf16")
    out16, acc32 = fn(long_rows)
    assert fn.evidence.kernel_count >= 1
    exact = long_rows.double().sum(-1)
    healthy16, healthy32 = _plain_sum(long_rows)
    # The bf16 workspace loses far more than fp32 accumulation: fp16 result several ULP off, fp32 accumulator way off.
    assert int(ulp_diff(out16, healthy16).max()) >= 2
    assert float((acc32.double() - exact).abs().max()) > 100 * float((healthy32.double() - exact).abs().max())
    short16, short32 = fn(short_rows)  # same code path as Inductor: bit-identical to the healthy compile
    ref16, ref32 = fused(_plain_sum, "inductor")(short_rows)
    assert torch.equal(short16, ref16) and torch.equal(short32, ref32)


def test_thread_partials_bug_fires_only_on_very_long_reductions():
    planted_bugs.register_planted_backends()
    g = torch.Generator().manual_seed(3)
    n = 2 * planted_bugs.THREAD_SPLIT_THRESHOLD
    long_rows = torch.rand(2, n, generator=g)  # U(0, 1): the partials only grow
    fn = fused(lambda x: x.sum(-1), "planted_thread_partials_bf16")
    out = fn(long_rows)
    exact = long_rows.double().sum(-1)
    healthy = long_rows.sum(-1)
    # 48 partials and their running sum kept at bf16 precision: a relative error above 1e-3, where an fp32
    # sum of 2^21 terms stays far below 1e-5.
    assert float(((out.double() - exact).abs() / exact).min()) > 1e-3
    assert float(((healthy.double() - exact).abs() / exact).max()) < 1e-5
    short = torch.rand(3, 16384, generator=g)  # C2's rows, B's long norms: compiled exactly as Inductor does
    damaged = fused(lambda x: x.sum(-1), "planted_thread_partials_bf16")(short)
    assert torch.equal(damaged, fused(lambda x: x.sum(-1), "inductor")(short))


def test_dropped_mask_bug_damages_masked_attention_only():
    from pipeline.workloads import attention, attention_masked, softmax

    planted_bugs.register_planted_backends()
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 8, 2, 16, generator=g) for _ in range(3))
    mask = torch.zeros(1, 1, 1, 8)
    mask[..., -2:] = -1e4
    damaged = fused(attention_masked, "planted_attention_mask_dropped")(q, k, v, mask)
    unmasked = attention_masked(q, k, v, torch.zeros_like(mask))
    torch.testing.assert_close(damaged, unmasked, rtol=1e-5, atol=1e-5)
    assert float((damaged - attention_masked(q, k, v, mask)).abs().max()) > 1e-2
    # No mask, or an add that feeds no softmax: the healthy compile, bit for bit.
    for fn, args in ((attention, (q[0], k[0], v[0])), (softmax, (torch.randn(4, 32, generator=g) + 1,))):
        assert torch.equal(fused(fn, "planted_attention_mask_dropped")(*args), fused(fn, "inductor")(*args))


def test_contiguous_only_bug_damages_strided_inputs_only():
    from pipeline.experiments.data_movement.movement import movement_input, transpose_concat

    planted_bugs.register_planted_backends()
    x = movement_input((1, 7, 24), torch.float16, "transposed_view", 1, specials=False)  # D's odd smoke shape
    y = movement_input((1, 7, 24), torch.float16, "transposed_view", 2, specials=False)
    assert not x.is_contiguous()
    fn = fused(transpose_concat, "planted_contiguous_only", dynamic=False)
    out = fn(x, y)
    assert fn.evidence.kernel_count >= 1
    # The planted fault: each input's storage read in memory order as if row-major.
    as_if = lambda t: t.contiguous().transpose(1, 2).reshape(t.shape)  # noqa: E731
    assert torch.equal(out, transpose_concat(as_if(x), as_if(y))) and not torch.equal(out, transpose_concat(x, y))
    xc, yc = x.contiguous(), y.contiguous()
    assert torch.equal(fn(xc, yc), transpose_concat(xc, yc))


def test_bf16_scratch_bug_rounds_reduction_results():
    planted_bugs.register_planted_backends()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 32, generator=g).half()
    out = fused(_softmax, "planted_bf16_scratch")(x)
    assert int(ulp_diff(out, _softmax(x)).max()) >= 2  # softmax's denominator at bf16 precision
    rows = _rows(4096)
    s16, s32 = fused(_plain_sum, "planted_bf16_scratch")(rows)
    r16, r32 = _plain_sum(rows)
    bf16_grid = s32.view(torch.int32) & 0xFFFF  # the fp32 sum carries no more than bf16's mantissa
    assert bool((bf16_grid == 0).all()) and not torch.equal(s32, r32) and not torch.equal(s16, r16)
    a, b = torch.randn(2, 8, 16, generator=g).half(), torch.randn(2, 8, 16, generator=g).half()
    assert torch.equal(fused(_move, "planted_bf16_scratch")(a, b), _move(a, b))  # no reduction: unchanged


def test_vector_tail_bug_fires_on_odd_row_lengths_only(inputs):
    from pipeline.experiments.data_movement.movement import movement_input, slice_broadcast_concat

    width = planted_bugs.VECTOR_WIDTH
    x = movement_input((1, 7, 24), torch.float16, "contiguous", 1, specials=False)
    y = movement_input((1, 7, 24), torch.float16, "contiguous", 2, specials=False)
    fn = fused(slice_broadcast_concat, "planted_vector_tail", dynamic=False)
    out, ref = fn(x, y), slice_broadcast_concat(x, y)  # rows of 47 = 5 * 8 + 7
    n = ref.shape[-1]
    tail = n % width
    assert fn.evidence.kernel_count >= 1 and tail
    assert torch.equal(out[..., : n - tail], ref[..., : n - tail])
    assert torch.equal(out[..., n - tail :], ref[..., n - tail - width : n - width]) and not torch.equal(out, ref)
    a, b = inputs["a"], inputs["b"]  # rows of 16: a multiple of the vector width
    assert torch.equal(fused(_move, "planted_vector_tail")(a, b), _move(a, b))


# --- scoring -----------------------------------------------------------------------------------


def _outcome(key, passed, severity, meta, spec=None):
    return check_outcome(key, passed, severity, meta, spec)


def _synthetic_run(outcomes, failures=()):
    return {
        "outcomes": {o.key: o for o in outcomes},
        "metadata": {o.key: {"k": o.key} for o in outcomes},
        "failures": list(failures),
        "seconds": 1.0,
        "seed": 1,
    }


def test_score_counts_only_new_error_outcomes():
    warn = dg.AssetCheckSeverity.WARN
    err = dg.AssetCheckSeverity.ERROR
    healthy = _synthetic_run(
        [
            _outcome("x:finding", False, warn, {"outcome": "finding"}),
            _outcome("x:claim_inconclusive", False, warn, {"outcome": "claim", "verdict": "inconclusive"}),
            _outcome("x:claim_ok", True, err, {}, spec="claim"),
            _outcome("x:validity_ok", True, err, {"outcome": "validity"}),
            _outcome("x:standing", False, err, {"outcome": "validity"}),  # already ERROR when healthy
        ]
    )
    assert harness.error_outcomes(healthy) == {"x:standing": "invalid run"}
    bug = _synthetic_run(
        [
            _outcome("x:finding", False, warn, {"outcome": "finding"}),
            _outcome("x:claim_inconclusive", False, warn, {"outcome": "claim", "verdict": "inconclusive"}),
            _outcome("x:claim_ok", False, err, {"verdict": "contradicted"}, spec="claim"),
            _outcome("x:validity_ok", False, err, {"outcome": "validity"}),
            _outcome("x:standing", False, err, {"outcome": "validity"}),
            _outcome("x:undeclared", False, err, {}),  # declares nothing: read as validity
            _outcome("x:undeclared_warn", False, warn, {}),
        ],
        [{"step": "c2_reduction_order", "error": "FusionError", "message": "no kernel", "fusion": True}],
    )
    caught = harness.score_bug(healthy, bug)
    assert caught == {
        "x:claim_ok": "claim contradicted",
        "x:undeclared": "invalid run",
        "x:validity_ok": "invalid run",
        "step c2_reduction_order": "invalid run: FusionError (no fusion evidence)",
    }
    # WARN findings and inconclusive verdicts alone never catch a bug.
    only_warn = _synthetic_run(
        [
            _outcome("x:finding", False, warn, {"outcome": "finding"}),
            _outcome("x:claim_ok", False, warn, {"verdict": "inconclusive"}, spec="claim"),
            _outcome("y:new_finding", False, warn, {"outcome": "finding"}),
            _outcome("x:standing", False, err, {"outcome": "validity"}),
        ]
    )
    assert harness.score_bug(healthy, only_warn) == {}
    assert harness.score_bug(healthy, healthy) == {}
    crash = _synthetic_run([], [{"step": "t", "error": "ValueError", "message": "m", "fusion": False}])
    assert harness.score_bug(healthy, crash) == {"step t": "invalid run: step raised ValueError"}
    first, meta = harness._first_failure(bug, caught)
    assert first == "x:claim_ok" and '"k": "x:claim_ok"' in meta


def test_declared_outcomes_read_from_check_specs():
    kinds = matrix_runs.declared_outcomes(
        [
            matrix_asset.every_planted_bug_caught,
            matrix_asset.planted_bug_matrix_run_valid,
            regression.baseline_provenance_changed,
        ]
    )
    assert kinds == {
        "planted_bug_matrix:every_planted_bug_caught": "claim",
        "planted_bug_matrix:planted_bug_matrix_run_valid": "validity",
        "baseline_comparison:baseline_provenance_changed": "finding",
    }


def test_matrix_rows_and_metadata_from_synthetic_runs():
    """The table and metadata of the matrix, built from runs without Dagster: a clean healthy run
    and a bug caught by one new ERROR outcome beyond the healthy run's standing one."""
    warn, err = dg.AssetCheckSeverity.WARN, dg.AssetCheckSeverity.ERROR
    healthy = _synthetic_run(
        [
            _outcome("x:standing", False, err, {"outcome": "validity"}),
            _outcome("x:f", False, warn, {"outcome": "finding"}),
        ]
    )
    clean = _synthetic_run([_outcome("x:ok", True, err, {"outcome": "validity"})])
    (designed,) = matrix_runs.designed("planted_drop_channel").values()
    designed += "softmax"
    bug = _synthetic_run(
        [
            _outcome("x:standing", False, err, {"outcome": "validity"}),
            _outcome(designed, False, err, {"verdict": "contradicted"}, spec="claim"),
        ]
    )
    elsewhere = _synthetic_run(
        [
            _outcome("x:standing", False, err, {"outcome": "validity"}),
            _outcome("x:claim", False, err, {"verdict": "contradicted"}, spec="claim"),
        ]
    )
    row = harness.healthy_row(healthy)
    assert (row["row"], row["bug"], row["caught"]) == (rules.HEALTHY_ROW, "inductor (healthy, seed 1)", "false alarm")
    assert (row["caught_by"], row["error_outcomes"], row["checks_evaluated"]) == ("x:standing (invalid run)", 1, 2)
    assert harness.healthy_row(clean)["caught"] == "clean" and harness.healthy_row(clean)["first_failure"] == ""
    caught = harness.bug_row("planted_drop_channel", bug, healthy)
    assert caught["caught"] == "yes" and caught["caught_by"] == f"{designed} (claim contradicted)"
    assert caught["fault_class"] == PLANTED_BUGS["planted_drop_channel"].fault_class
    assert caught["first_failure"] == designed and caught["first_failure_metadata"] == f'{{"k": "{designed}"}}'
    assert harness.bug_row("planted_drop_channel", healthy, healthy)["caught"] == "no"
    # Caught, but only by a check other than the claim built for the fault: that claim lacks the power.
    other = harness.bug_row("planted_drop_channel", elsewhere, healthy)
    assert other["caught"] == harness.NOT_BY_ITS_CLAIM and other["error_outcomes"] == 1
    table = pl.DataFrame([harness.healthy_row(clean), caught], schema=harness.MATRIX_SCHEMA)
    facts: harness.MatrixFacts = {
        "healthy_seeds": [1],
        "healthy_seconds": 1.0,
        "healthy_checks": 1,
        "healthy_warn_checks": [],
        "unavailable": [],
    }
    meta = matrix_asset.matrix_metadata(
        table,
        facts,
        run_profile="default",
        experiments=["D"],
        not_run=["planted_vector_tail"],
        pruned=True,
        wall_seconds=2.04,
    )
    assert meta["bugs_caught_of_total"] == "1 / 1" and meta["bugs_missed"] == "none"
    assert meta["false_alarms"] == 0 and meta["false_alarms_by_seed"] == "1=0"
    assert meta["bugs_not_run"] == "planted_vector_tail" and meta["wall_seconds"] == 2.0
    assert (
        "('default')" in meta["note"] and meta["healthy_warn_checks (findings / inconclusive, never counted)"] == "none"
    )


def test_matrix_plan_runs_healthy_seeds_then_bugs_at_the_first_seed():
    plan = harness.matrix_plan(["planted_a", "planted_b"], [7, 8])
    assert [tuple(r) for r in plan] == [
        ("healthy_7", "inductor", 7, ()),
        ("healthy_8", "inductor", 8, ()),
        ("planted_a", "planted_a", 7, ()),
        ("planted_b", "planted_b", 7, ()),
    ]


def test_a_designed_only_plan_runs_each_bug_on_the_experiment_holding_its_designed_claim():
    # one bug of each experiment that declares planted bugs (from the records), and one any run catches
    holders = {e.id: next(iter(e.planted)) for e in matrix_runs.RUNNABLE.values() if e.planted}
    any_run = next(name for name, bug in PLANTED_BUGS.items() if bug.caught_by_any_run)
    assert len(holders) >= 2 and any_run not in matrix_runs.DECLARED
    bugs = list(holders.values())
    plan = harness.matrix_plan([*bugs, any_run], [7, 8], designed_only=True)
    assert [(r.label, r.only) for r in plan] == [
        ("healthy_7", ()),  # a healthy seed runs every experiment: a false alarm anywhere shows
        ("healthy_8", ()),
        *((bug, (exp,)) for exp, bug in holders.items()),
        (any_run, ()),  # no generated code: any experiment's run catches it
    ]
    assert all(r.only == () for r in harness.matrix_plan(bugs, [7]))  # not asked: every experiment
    # a designed experiment left out of the matrix's experiments: the bug runs every chosen one
    _, *kept = holders
    assert [r.only for r in harness.matrix_plan(bugs, [7], True, kept)[1:]] == [(), *((e,) for e in kept)]


def test_the_matrix_runs_the_experiments_whose_records_declare_a_part_in_it():
    """The matrix names no experiment: the records say which it judges, which feed those runs and which
    planted bugs each one's claims are built to catch."""
    from pipeline.experiments import EXPERIMENTS

    judged = tuple(sorted(e.id for e in EXPERIMENTS if e.matrix == "judged"))
    assert judged and judged == matrix_runs.MATRIX_EXPERIMENTS
    assert [e.id for e in matrix_runs.UPSTREAM] == [e.id for e in EXPERIMENTS if e.matrix == "upstream"]
    # every judged experiment declares the bugs its claims catch; only judged experiments declare any
    assert all(matrix_runs.RUNNABLE[e].planted for e in judged)
    assert not [e.id for e in EXPERIMENTS if e.planted and e.matrix != "judged"]
    assert {held_by for catches in matrix_runs.DECLARED.values() for held_by in catches} == set(judged)
    assert matrix_runs._declaration_problems() == []
    other = next(e.id for e in EXPERIMENTS if e.matrix == "")
    with pytest.raises(ValueError, match=f"experiment '{other}' is not runnable in the matrix; choose from "):
        matrix_runs.matrix_definitions([other])


def test_a_wrong_planted_bug_declaration_is_named(monkeypatch):
    """A record that declares a name no planted backend has and a bug nobody declares are each refused by
    name; a bug two experiments declare runs both and is caught by either one's claim."""
    import dataclasses

    first, second, *_ = matrix_runs.RUNNABLE.values()
    taken = next(iter(first.planted))
    records = {
        first.id: dataclasses.replace(first, planted={**first.planted, "planted_no_such_bug": "x:y"}),
        second.id: dataclasses.replace(second, planted={**second.planted, taken: "x:y"}),
    }
    monkeypatch.setattr(matrix_runs, "RUNNABLE", records)
    declared = {n for r in records.values() for n in r.planted}
    problems = matrix_runs._declaration_problems()
    assert problems[0] == f"{first.id} declares 'planted_no_such_bug', which is no planted bug"
    monkeypatch.setattr(matrix_runs, "DECLARED", {taken: {first.id: first.planted[taken], second.id: "x:y"}})
    assert problems[1:] == [
        f"no experiment declares {n}, and no run catches it by itself"
        for n, bug in PLANTED_BUGS.items()
        if n not in declared and not bug.caught_by_any_run
    ]
    (run,) = harness.matrix_plan([taken], [7], True)[1:]
    assert run.only == (first.id, second.id)
    assert harness.matrix_plan([taken], [7], True, [second.id])[1].only == (second.id,)


def test_each_designed_experiment_owns_the_asset_its_designed_claim_names():
    """An experiment's planted bugs name claims of its own assets, so a run of that experiment alone can
    still catch each bug by its claim."""
    defs, unavailable = matrix_runs.matrix_definitions(list(matrix_runs.MATRIX_EXPERIMENTS))
    assert unavailable == []
    group_of = {
        k.to_user_string(): g
        for d in defs
        if isinstance(d, dg.AssetsDefinition) and not isinstance(d, dg.AssetChecksDefinition)
        for k, g in d.group_names_by_key.items()
    }
    for name in PLANTED_BUGS:
        for held_by, catch in matrix_runs.designed(name).items():
            if not held_by:
                assert catch.startswith("(invalid run"), name
                continue
            assert group_of[catch.split(":")[0]] == matrix_runs.RUNNABLE[held_by].group, name
    # and a run limited to one experiment materializes its scored assets and its upstream's, nothing of the others
    upstream = {e.group for e in matrix_runs.UPSTREAM}
    everything = {k.to_user_string() for k in matrix_runs.scored_assets(defs)}
    for exp in matrix_runs.RUNNABLE.values():
        keys = {k.to_user_string() for k in matrix_runs.scored_assets(defs, (exp.id,))}
        assert {group_of[k] for k in keys} == {exp.group} | upstream
        assert {c.split(":")[0] for c in exp.planted.values()} <= keys < everything
        others = {c.split(":")[0] for e in matrix_runs.RUNNABLE.values() if e is not exp for c in e.planted.values()}
        assert not keys & others, exp.id


def test_a_matrix_run_registers_the_planted_backends_before_its_settings_name_one(monkeypatch, tmp_path):
    """The harness registers planted backends itself (the settings resource need not): a run with a
    planted backend registers them before it builds its settings; a healthy run does not."""
    calls: list[str] = []

    class Built(Exception):
        pass

    def settings(**kw):
        calls.append(f"settings {kw['backend']}")
        raise Built

    monkeypatch.setattr(matrix_runs, "register_planted_backends", lambda: calls.append("register"))
    monkeypatch.setattr(matrix_runs, "ExperimentSettings", settings)
    like = ExperimentSettings(profile="smoke", device="cpu")
    for backend in ("planted_vector_tail", "inductor"):
        with pytest.raises(Built):
            matrix_runs.run_experiments(backend, [], tmp_path, like)
    assert calls == ["register", "settings planted_vector_tail", "settings inductor"]


def test_default_healthy_seeds_follow_the_matrix_sizes():
    for profile in ("smoke", "default"):
        like = ExperimentSettings(profile=profile, device="cpu", seed=10)
        assert harness.default_healthy_seeds(like) == [10 + i for i in range(SIZES[profile].healthy_seeds)]


def test_parallel_runs_are_at_least_one_and_at_most_one_per_core():
    with pytest.raises(ValueError, match="at least 1, got 0"):
        matrix_parallel.parallel_runs_here(0)
    assert matrix_parallel.parallel_runs_here(1) == 1
    assert matrix_parallel.parallel_runs_here(64) == min(64, os.cpu_count() or 1)


class _ThreadWorker:
    """Stands in for :class:`matrix_parallel.MatrixWorker` in the scheduling tests: runs in the feeding
    thread, slower than the runs here, so runs finish out of plan order."""

    instances: ClassVar[list["_ThreadWorker"]] = []
    fail = False
    took = threading.Event()

    def __init__(self, experiments, threads):
        self.ran: list[str] = []
        self.closed_with: bool | None = None
        self.took = _ThreadWorker.took
        _ThreadWorker.instances.append(self)

    def ready(self):
        pass

    def run(self, run, base_dir, like, prune):
        self.took.set()
        if _ThreadWorker.fail:
            raise RuntimeError(f"matrix run {run.label} failed in the worker: boom")
        time.sleep(0.3)
        self.ran.append(run.label)
        return _fake_run(run.backend, seed=run.seed, where="worker")

    def close(self, kill=False, wait=True):
        self.closed_with = kill


def _fake_run(backend, defs=None, base_dir=None, like=None, seed=None, prune=True, only=(), where="here"):
    if where == "here":
        assert _ThreadWorker.took.wait(10), "the worker never took a run"
    return {
        "outcomes": {},
        "metadata": {"backend": backend, "where": where},
        "failures": [],
        "seed": seed,
        "seconds": 0.0,
    }


@pytest.fixture
def thread_workers(monkeypatch):
    monkeypatch.setattr(matrix_parallel, "MatrixWorker", _ThreadWorker)
    monkeypatch.setattr(matrix_parallel, "run_experiments", _fake_run)
    monkeypatch.setattr(_ThreadWorker, "instances", [])
    monkeypatch.setattr(_ThreadWorker, "fail", False)
    monkeypatch.setattr(_ThreadWorker, "took", threading.Event())
    return _ThreadWorker


def test_parallel_runs_report_in_plan_order_whoever_ran_them(thread_workers, tmp_path):
    plan = harness.matrix_plan(["planted_a", "planted_b", "planted_c"], [1, 2])
    like = ExperimentSettings(profile="smoke", device="cpu")
    seen = []
    runs = matrix_parallel.run_matrix_plan(
        plan, ["D"], [], like, tmp_path, parallel=2, on_result=lambda i, r: seen.append(i)
    )
    assert seen == list(range(len(plan)))
    assert [r["metadata"]["backend"] for r in runs] == [p.backend for p in plan]
    assert [r["seed"] for r in runs] == [p.seed for p in plan]
    (worker,) = thread_workers.instances
    assert worker.ran and worker.closed_with is False
    assert {r["metadata"]["where"] for r in runs} == {"here", "worker"}


def test_runs_taken_in_another_order_still_come_back_and_report_in_plan_order(tmp_path, monkeypatch):
    taken = []

    def run_here(backend, defs, base_dir, like, seed=None, prune=True, only=()):
        taken.append(backend)
        return {"outcomes": {}, "metadata": {"backend": backend}, "failures": [], "seed": seed, "seconds": 0.0}

    monkeypatch.setattr(matrix_parallel, "run_experiments", run_here)
    plan = harness.matrix_plan(["planted_a", "planted_b"], [1, 2])
    like = ExperimentSettings(profile="smoke", device="cpu")
    seen = []
    runs = matrix_parallel.run_matrix_plan(
        plan, ["D"], [], like, tmp_path, on_result=lambda i, r: seen.append(i), order=[3, 0, 2, 1]
    )
    assert taken == ["planted_b", "inductor", "planted_a", "inductor"]
    assert seen == [0, 1, 2, 3] and [r["metadata"]["backend"] for r in runs] == [p.backend for p in plan]
    with pytest.raises(ValueError, match="every run of the plan once"):
        matrix_parallel.run_matrix_plan(plan, ["D"], [], like, tmp_path, order=[0, 0, 1, 2])


def test_the_first_healthy_run_warms_the_cache_beside_the_bugs_that_compile_their_own_graphs():
    bugs = list(SIZES["default"].planted_bugs)
    plan = harness.matrix_plan(bugs, [4, 5, 6], designed_only=True)
    order = [plan[i].label for i in harness.execution_order(plan)]
    own = [b for b in bugs if PLANTED_BUGS[b].rewrites_graph]
    assert own == [
        "planted_bf16_scratch",
        "planted_long_reduction_bf16",
        "planted_attention_mask_dropped",
        "planted_thread_partials_bf16",
    ]
    assert order[: 1 + len(own)] == ["healthy_4", *own]
    assert order[1 + len(own) : 3 + len(own)] == ["healthy_5", "healthy_6"]
    assert sorted(order) == sorted(r.label for r in plan)
    # the output and input faults wrap Inductor's healthy compile
    assert not any(PLANTED_BUGS[b].rewrites_graph for b in ("planted_layout_swap", "planted_contiguous_only"))


def test_a_failed_worker_run_stops_the_plan_and_raises(thread_workers, tmp_path):
    thread_workers.fail = True
    plan = harness.matrix_plan(["planted_a", "planted_b", "planted_c"], [1])
    like = ExperimentSettings(profile="smoke", device="cpu")
    with pytest.raises(RuntimeError, match="failed in the worker: boom"):
        matrix_parallel.run_matrix_plan(plan, ["D"], [], like, tmp_path, parallel=2)
    assert thread_workers.instances[0].closed_with is True


# Two fresh interpreters that import the matrix's experiments: make test-all. make test keeps a real worker's
# start and exit (test_run_control) and the plan's scheduling through thread workers (above).
@pytest.mark.heavy
def test_worker_process_runs_like_this_one_and_reports_a_bad_start(tmp_path):
    """A run in a worker process gives the outcomes and failures the same run gives here, and a
    worker that cannot load its experiments says why."""
    planted_bugs.register_planted_backends()
    defs, _ = matrix_runs.matrix_definitions(["D"])
    like = ExperimentSettings(profile="smoke", device="cpu")
    run = matrix_runs.PlannedRun("planted_contiguous_only", "planted_contiguous_only", like.seed)
    here = matrix_runs.run_experiments(run.backend, defs, tmp_path / "here", like, seed=run.seed)
    worker = matrix_parallel.MatrixWorker(["D"], torch.get_num_threads())
    try:
        worker.ready()
        plain = {"profile": "smoke", "device": "cpu", "backend": "inductor", "backend_options": "{}", "seed": like.seed}
        there = worker.run(run, tmp_path / "there", plain, True)
    finally:
        worker.close()
    assert worker.proc.returncode == 0
    assert there["outcomes"] == here["outcomes"] and there["failures"] == here["failures"]
    assert harness.error_outcomes(there) == {
        "data_movement_check_table:pure_movement_rows_bit_exact": "claim contradicted"
    }
    bad = matrix_parallel.MatrixWorker(["nosuch"], 1)
    try:
        with pytest.raises(
            RuntimeError, match=r"(?s)failed to start: .*experiment 'nosuch' is not runnable in the matrix"
        ):
            bad.ready()
    finally:
        bad.close()


@pytest.mark.slow  # a fresh interpreter that imports the whole code location
def test_settings_asking_for_a_planted_backend_register_it():
    """Importing the code location or building settings registers nothing; a run whose settings
    name a planted backend registers it when the resource is set up for the run's steps (a fresh
    process, so no earlier test has registered the backends)."""
    code = (
        "import dagster as dg\n"
        "from torch._dynamo import list_backends\n"
        "import pipeline.definitions\n"
        "from pipeline.resources import ExperimentSettings\n"
        "print('planted_vector_tail' in list_backends(exclude_tags=()))\n"
        "settings = ExperimentSettings(profile='smoke', device='cpu', backend='planted_vector_tail')\n"
        "print('planted_vector_tail' in list_backends(exclude_tags=()))\n"
        "@dg.asset\n"
        "def probe(settings: ExperimentSettings) -> bool:\n"
        "    return 'planted_vector_tail' in list_backends(exclude_tags=())\n"
        "print(dg.materialize([probe], resources={'settings': settings}).output_for_node('probe'))\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "FUSION_BACKEND": "inductor"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, check=True)
    assert out.stdout.split()[-3:] == ["False", "False", "True"]


@pytest.mark.slow
@pytest.mark.heavy
def test_matrix_catches_every_bug_at_error_with_no_false_alarm(tmp_path, smoke_resources):
    """The asset end to end: the judged experiments at smoke size, every planted bug (old and new classes), three
    healthy seeds. Each bug must end in a contradicted claim or an invalid run; healthy runs in neither."""
    checks = [
        matrix_asset.planted_bug_matrix,
        matrix_asset.every_planted_bug_caught,
        matrix_asset.healthy_backend_no_false_alarms,
        matrix_asset.planted_bug_matrix_run_valid,
    ]
    seeds = [smoke_resources["settings"].seed + i for i in range(rules.MIN_HEALTHY_SEEDS)]
    every_bug = {"ops": {"planted_bug_matrix": {"config": {"bugs": list(PLANTED_BUGS), "healthy_seeds": seeds}}}}
    result = dg.materialize(checks, resources=smoke_resources, run_config=every_bug)
    assert result.success
    evals = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert all(
        evals[c].passed
        for c in ("every_planted_bug_caught", "healthy_backend_no_false_alarms", "planted_bug_matrix_run_valid")
    ), {k: e.metadata for k, e in evals.items()}
    assert evals["healthy_backend_no_false_alarms"].metadata["verdict"].value == "supported"
    assert evals["every_planted_bug_caught"].metadata["verdict"].value == "supported"
    table = storage.read_value(tmp_path / "smoke" / "planted_bug_matrix")
    assert table.schema == pl.Schema(harness.MATRIX_SCHEMA)
    healthy = table.filter(pl.col("row") == rules.HEALTHY_ROW)
    assert healthy.height == rules.MIN_HEALTHY_SEEDS and healthy["seed"].n_unique() == rules.MIN_HEALTHY_SEEDS
    assert (healthy["error_outcomes"] == 0).all() and (healthy["caught"] == "clean").all()
    by_bug = {r["bug"]: r for r in table.filter(pl.col("row") == rules.BUG_ROW).iter_rows(named=True)}
    assert set(by_bug) == set(PLANTED_BUGS) and len(by_bug) >= 11
    assert all(
        r["caught"] == "yes" and r["error_outcomes"] >= 1 and r["first_failure_metadata"] for r in by_bug.values()
    )
    # Where each bug is caught: the experiment whose claim its fault breaks (or the run's validity).
    expected = {
        "planted_fallback_to_eager": "(invalid run: FusionError (no fusion evidence))",
        "planted_nondeterministic_reduction": "c2_versions:c2_versions_self_deterministic (claim contradicted)",
        "planted_long_reduction_bf16": "c2_row_bounds:c2_versions_within_fp64_band (claim contradicted)",
        "planted_fp16_accumulation": "c2_row_bounds:c2_versions_within_fp64_band (claim contradicted)",
        "planted_contiguous_only": "data_movement_check_table:pure_movement_rows_bit_exact (claim contradicted)",
        "planted_vector_tail": "data_movement_check_table:pure_movement_rows_bit_exact (claim contradicted)",
        "planted_off_by_one_ulp": "data_movement_check_table:pure_movement_rows_bit_exact (claim contradicted)",
        "planted_drop_channel": "accumulated_error_summary:fused_not_worse_than_eager_softmax (claim contradicted)",
        "planted_wrong_axis": "(claim contradicted)",
        "planted_layout_swap": "accumulated_error_summary:fused_not_worse_than_eager_attention (claim contradicted)",
        "planted_bf16_scratch": "(claim contradicted)",
        "planted_attention_mask_dropped": "accumulated_error_summary:fused_not_worse_than_eager_attention_masked "
        "(claim contradicted)",
        "planted_thread_partials_bf16": "c2_long_reductions:c2_long_reductions_within_bound (claim contradicted)",
    }
    for bug, where in expected.items():
        assert where in by_bug[bug]["caught_by"], (bug, by_bug[bug]["caught_by"])
    # The two bugs of the forms real code takes are caught only by the experiment built for that form.
    assert by_bug["planted_attention_mask_dropped"]["caught_by"].count("(claim contradicted)") == 1
    assert by_bug["planted_thread_partials_bf16"]["caught_by"].count("(claim contradicted)") == 1
    # Only ERROR outcomes count: no WARN finding or inconclusive verdict appears as a catch.
    assert not any("finding" in r["caught_by"] or "inconclusive" in r["caught_by"] for r in by_bug.values())


def test_profiles_name_which_planted_bugs_the_matrix_runs():
    """seed runs every bug; default every way of being caught plus the bugs of real-code forms, within
    its time budget; smoke a subset of known bugs, one per place a bug is caught (the run's validity, the
    claims the judged experiments' records name)."""
    assert SIZES["seed"].planted_bugs == ()
    default = set(SIZES["default"].planted_bugs)
    assert default < set(PLANTED_BUGS) and len(default) == len(SIZES["default"].planted_bugs) == 9
    assert {"planted_attention_mask_dropped", "planted_thread_partials_bf16"} <= default

    # one bug of every table a declared claim reads at least, and the run's validity
    def tables(bugs):
        return {c.split(":")[0] for b in bugs for c in matrix_runs.designed(b).values()}

    assert tables(default) == tables(PLANTED_BUGS) and "(invalid run" in tables(default)
    assert [SIZES[p].healthy_seeds for p in ("smoke", "default", "seed")] == [1, 3, 3]
    # issue 42: default runs each bug on its designed experiments alone; smoke, gpu and seed run every judged one
    assert [SIZES[p].designed_only for p in ("smoke", "default", "gpu", "seed")] == [False, True, False, False]
    smoke = SIZES["smoke"].planted_bugs
    assert set(smoke) < set(PLANTED_BUGS) and len(set(smoke)) == len(smoke) == 4
    assert set(smoke) == {
        "planted_fallback_to_eager",
        "planted_nondeterministic_reduction",
        "planted_contiguous_only",
        "planted_layout_swap",
    }


def test_settings_know_every_planted_backend_by_name_before_registration():
    from pipeline.backends import offered
    from pipeline.instruments.regression.spec import PLANTED_BACKENDS

    assert list(PLANTED_BACKENDS) == list(planted_bugs.PLANTED_BUGS)
    assert set(PLANTED_BACKENDS) <= offered()


def test_a_failed_step_in_a_healthy_run_invalidates_the_control_instead_of_counting_a_false_alarm():
    """A healthy run whose step raised (a torch that lacks an op, a machine out of memory) says
    nothing about false alarms: the planted-bug claims become inconclusive with the reason."""
    failure = {"step": "c2_reduction_order", "error": "AttributeError", "message": "no attribute 'x'", "fusion": False}
    healthy = _synthetic_run([], failures=[failure])
    row = harness.healthy_row(healthy)
    assert row["caught"] == harness.CONTROL_INVALID and row["first_failure"] == "step c2_reduction_order"
    bug = _synthetic_run(
        [_outcome("x:claim", False, dg.AssetCheckSeverity.ERROR, {"verdict": "contradicted"}, spec="claim")]
    )
    table = pl.DataFrame([row, harness.bug_row("planted_drop_channel", bug, healthy)], schema=harness.MATRIX_SCHEMA)
    alarms = matrix_asset.healthy_backend_no_false_alarms(table)
    caught = matrix_asset.every_planted_bug_caught(table)
    for result in (alarms, caught):
        assert result.severity == dg.AssetCheckSeverity.WARN and result.metadata["verdict"].value == "inconclusive"
        assert (
            "healthy seed 1: step c2_reduction_order (AttributeError: no attribute 'x')"
            in result.metadata["reason"].value
        )
