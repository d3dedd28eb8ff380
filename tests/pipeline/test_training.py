"""Task E: corpus, GPT training loop (resume, determinism), the replicate/control rule and the
E_training assets in smoke size."""

import itertools
import math

import dagster as dg
import numpy as np
import polars as pl
import pytest
import torch

from pipeline.experiments.toolkit import assets as toolkit
from pipeline.experiments.training import assets as training
from pipeline.experiments.training import curves as curve_tables
from pipeline.experiments.training import judge as judging
from pipeline.experiments.training import rules, runs
from pipeline.experiments.training.config import TrainConfig
from pipeline.experiments.training.corpus import EVAL_FRACTION, load_corpus
from pipeline.experiments.training.gpt import GPT, nudge_one_ulp
from pipeline.experiments.training.loop import TrainingInterrupted, _StepStats, train
from pipeline.experiments.training.spec import SIZES
from pipeline.resources import ExperimentSettings
from pipeline.storage import read_value
from pipeline.verdicts import CLAIM, CONTRADICTED, FINDING, INCONCLUSIVE, SUPPORTED, VALIDITY


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def smoke_config(corpus, **kwargs) -> TrainConfig:
    return TrainConfig.from_profile(
        SIZES["smoke"].model(), **{"corpus_sha256": corpus.sha256, "init_seed": 1, "data_seed": 2, **kwargs}
    )


def test_corpus_is_deterministic_and_split(corpus):
    again = load_corpus()
    assert again.sha256 == corpus.sha256 and again.n_bytes == corpus.n_bytes > 500_000
    assert corpus.train.numel() + corpus.eval.numel() == corpus.n_bytes
    assert corpus.eval.numel() == pytest.approx(corpus.n_bytes * EVAL_FRACTION, abs=1)
    assert corpus.train.dtype == torch.uint8


def test_corpus_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no_such_module\.py"):
        load_corpus(files=("no_such_module.py",), stdlib=tmp_path)


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="path"):
        TrainConfig(1, 1, 8, 8, 1, 1, 1, 1, path="compiled")
    with pytest.raises(ValueError, match=r"train\.steps"):
        TrainConfig(1, 1, 8, 8, 1, 0, 1, 1)
    with pytest.raises(ValueError, match="divisible"):
        GPT(1, 3, 8, 8)


def test_lr_schedule_warms_up_then_decays():
    cfg = TrainConfig(1, 1, 8, 8, 1, 100, 10, 1)
    factors = [cfg.lr_factor(s) for s in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(factors[10:]))
    assert factors[-1] == pytest.approx(cfg.min_lr_ratio, abs=1e-3)


def test_interrupted_run_resumes_bit_for_bit(corpus, tmp_path):
    cfg = smoke_config(corpus)
    reference = train(cfg, corpus)
    with pytest.raises(TrainingInterrupted):
        train(cfg, corpus, checkpoint_dir=tmp_path, stop_after=12)
    ckpt = tmp_path / cfg.key() / "checkpoint.pt"
    assert ckpt.exists()
    # A changed config must not pick up that checkpoint: it starts from step 0.
    other = smoke_config(corpus, data_seed=3, steps=5)
    assert train(other, corpus, checkpoint_dir=tmp_path).resumed_from_step == 0
    resumed = train(cfg, corpus, checkpoint_dir=tmp_path)
    assert resumed.resumed_from_step == 10  # last checkpoint before the stop at step 12
    assert resumed.rows == reference.rows  # every float identical, not just close
    assert not ckpt.exists()  # a completed run leaves no checkpoint to skip training with
    assert reference.rows[-1]["eval_loss"] < reference.rows[0]["eval_loss"]
    # A different data order gives a different curve (the noise run is a real perturbation).
    assert train(smoke_config(corpus, data_seed=3), corpus).rows[-1]["eval_loss"] != reference.rows[-1]["eval_loss"]


def test_fp32_eager_path_learns(corpus):
    result = train(smoke_config(corpus, precision="float32"), corpus)
    losses = [r["eval_loss"] for r in result.rows]
    assert losses[-1] < losses[0] < math.log(256) + 0.1


def test_ulp_nudge_moves_every_weight_by_exactly_one_ulp():
    torch.manual_seed(0)
    model = GPT(1, 2, 16, 8)
    before = [p.detach().clone() for p in model.parameters()]
    changed = nudge_one_ulp(model, seed=7)
    assert changed == sum(p.numel() for p in model.parameters())
    ups = 0
    for old, new in zip(before, model.parameters(), strict=False):
        direction = torch.where(new > old, torch.full_like(old, math.inf), torch.full_like(old, -math.inf))
        assert torch.equal(torch.nextafter(old, direction), new.detach())  # one step, no more
        ups += int((new > old).sum())
    assert 0.4 < ups / changed < 0.6  # seeded random directions: no systematic bias


def test_control_run_differs_from_eager_only_by_rounding(corpus):
    eager = train(smoke_config(corpus), corpus)
    control = train(smoke_config(corpus, init_ulp_nudge=True), corpus)
    assert control.nudged_elements == control.n_params and eager.nudged_elements == 0
    assert smoke_config(corpus).key() != smoke_config(corpus, init_ulp_nudge=True).key()
    e, c = ([r["eval_loss"] for r in x.rows] for x in (eager, control))
    assert e != c  # the perturbation takes ...
    assert max(abs(a - b) for a, b in zip(e, c, strict=False)) < 1e-3  # ... and stays rounding-sized over a smoke run


def test_run_plan_has_replicates_with_distinct_orders_and_a_control_on_the_fused_order():
    plan = {r["run"]: r for r in runs.run_plan(ExperimentSettings(profile="smoke", device="cpu"))}
    replicates = [r for r in plan.values() if r["role"] == "replicate"]
    assert len(replicates) == len(rules.REPLICATE_ORDERS) >= 3
    assert len({r["data_order"] for r in replicates}) == len(replicates)
    assert all(r["path"] == "eager" and not r["init_ulp_nudge"] for r in replicates)
    fused, control = plan["bfloat16_fused"], plan["bfloat16_eager_ulp_nudge"]
    assert fused["data_order"] == control["data_order"] == plan["bfloat16_eager"]["data_order"] == "A"
    assert control["path"] == "eager" and control["init_ulp_nudge"] and control["role"] == "control"
    assert "bfloat16_eager_order_B" in plan  # the regression baseline's band still finds its pair


# --- the rule as a pure function on synthetic curves -------------------------------------------

STEPS = [0, 10, 20, 30, 40]
# Four replicates: identical at step 0 (shared init), spread 0.1 at every judged point.
REPS = [
    [5.0, 3.00, 2.50, 2.20, 2.00],
    [5.0, 3.10, 2.60, 2.30, 2.10],
    [5.0, 3.05, 2.55, 2.25, 2.05],
    [5.0, 3.02, 2.52, 2.22, 2.02],
]


def judge(fused, reps=REPS, steps=STEPS):
    return judging.judge_fused_curve(steps, reps, reps[0], fused)


def test_rule_supports_a_fused_curve_inside_the_widened_envelope():
    # Outside [min, max] at two points but within 2 spreads of it: not a contradiction.
    j = judge([5.0, 3.01, 2.75, 2.43, 2.01])
    assert j.verdict == SUPPORTED and j.points_outside == 0 and j.judged_points == 4
    assert j.final_spread == pytest.approx(0.1) and j.final_fused_minus_eager == pytest.approx(0.01)


def test_rule_contradicts_when_fused_leaves_the_envelope_at_most_points():
    # 2.0 + 0.1 + 2 x 0.1 = 2.3 is the upper edge at step 40; 3 of 4 points beyond it.
    j = judge([5.0, 3.05, 2.95, 2.65, 2.31])
    assert j.verdict == CONTRADICTED and j.points_outside == 3 and j.first_outside_step == 20
    assert "3/4" in j.reason
    # Exactly half the points outside is not "more than half"; the final gap 0.05 is within 3 spreads.
    assert judge([5.0, 3.05, 2.55, 2.65, 2.35]).verdict == CONTRADICTED  # final 0.35 > 3 x 0.1
    assert judge([5.0, 3.45, 2.95, 2.25, 2.05]).verdict == SUPPORTED


def test_rule_contradicts_on_the_final_difference_alone():
    j = judge([5.0, 3.0, 2.5, 2.2, 2.31])  # final fused - eager 0.31 > 3 x 0.1; only 1 point outside
    assert j.verdict == CONTRADICTED and j.points_outside == 1 and "final" in j.reason
    assert judge([5.0, 3.0, 2.5, 2.2, 2.29]).verdict == SUPPORTED  # 0.29 <= 0.30: inside both tests
    assert judge([5.0, 3.0, 2.5, 2.2, float("nan")]).verdict == CONTRADICTED  # non-finite fused


def test_rule_is_inconclusive_without_measured_variation_or_enough_data():
    flat = [list(REPS[0]) for _ in range(4)]  # replicates identical: spread 0
    assert judge(REPS[0], reps=flat).verdict == INCONCLUSIVE
    assert judge([5.0, 3.0, 2.5, 2.2, 2.0], reps=REPS[:3]).verdict == INCONCLUSIVE  # 3 replicates < 4
    short = [r[:4] for r in REPS]  # 3 judged points < 4
    j = judging.judge_fused_curve(STEPS[:4], short, short[0], [5.0, 9.0, 9.0, 9.0])
    assert j.verdict == INCONCLUSIVE and "3 judged" in j.reason
    with pytest.raises(ValueError, match="one value per eval step"):
        judge([5.0, 3.0])


def test_envelope_point_widens_by_two_spreads_and_judges_only_judged_points():
    env, outside = curve_tables._envelope_point([2.0, 2.1, 2.05, 1.95], 2.44, judged=True)
    assert env["replicate_min"] == 1.95 and env["replicate_max"] == 2.1
    assert env["replicate_spread"] == pytest.approx(0.15) and env["envelope_hi"] == pytest.approx(2.4)
    assert env["envelope_lo"] == pytest.approx(1.65) and outside is True
    assert curve_tables._envelope_point([2.0, 2.1, 2.05, 1.95], 2.39, judged=True)[1] is False
    assert curve_tables._envelope_point([2.0, 2.1, 2.05, 1.95], float("nan"), judged=True)[1] is True
    assert curve_tables._envelope_point([2.0, 2.1, 2.05, 1.95], 9.0, judged=False)[1] is None  # step 0
    env, outside = curve_tables._envelope_point([2.0, None, 2.05, 1.95], 2.0, judged=True)
    assert outside is None and set(env.values()) == {None}
    assert curve_tables._minus(2.5, 2.0) == 0.5 and curve_tables._minus(float("inf"), 2.0) is None


def test_control_finding_compares_rms_deviation_with_a_stated_factor():
    assert judging.control_findings([0.003, -0.003], [0.001, 0.001]) == []  # exactly 3x: not above
    assert judging.control_findings([0.0031, -0.0031], [0.001, 0.001])
    assert judging.control_findings([0.0, 0.0], [0.0, 0.0]) == []
    assert "did not move" in judging.control_findings([0.01], [0.0])[0]


def test_rule_false_alarm_figures_follow_from_their_derivation():
    """The rule's per-point and final-point false-alarm probabilities (least favourable null: fused an
    independent replicate, iid normal) and the <= 0.05 bound stated in its derivation."""
    rng = np.random.default_rng(123)
    r = len(rules.REPLICATE_ORDERS)
    x = rng.standard_normal((400_000, r + 1))
    reps, fused = x[:, :r], x[:, r]
    lo, hi = reps.min(1), reps.max(1)
    s = hi - lo
    w, c = rules.ENVELOPE_WIDENING, rules.FINAL_SPREAD_MULTIPLE
    per_point = ((fused < lo - w * s) | (fused > hi + w * s)).mean()
    final = (np.abs(fused - reps[:, 0]) > c * s).mean()
    assert per_point == pytest.approx(rules.PER_POINT_FALSE_ALARM, abs=0.0015)
    assert final == pytest.approx(rules.FINAL_FALSE_ALARM, abs=0.0012)
    bound = rules.PER_POINT_FALSE_ALARM / rules.MAX_OUTSIDE_FRACTION + rules.FINAL_FALSE_ALARM
    assert bound <= 1 - rules.RULE.confidence


# --- the assets in smoke size -------------------------------------------------------------------


def test_training_assets_smoke(smoke_resources, tmp_path):
    """Replicates, fused and control train a few smoke steps through the assets: curves, evidence,
    final table, deviation frame, and the three kinds of check."""
    assets = [
        toolkit.toolkit_selfcheck,
        training.training_curves,
        training.training_final_metrics,
        training.training_deviation,
    ]
    checks = [
        training.training_runs_valid,
        training.fused_learns_like_eager,
        training.fused_deviation_vs_rounding_control,
    ]
    # Every E check declares its outcome kind, and the claim its rule, before any data.
    for check, kind in zip(checks, (VALIDITY, CLAIM, FINDING), strict=False):
        (spec,) = check.check_specs
        assert spec.metadata["outcome"] == kind
    (claim_spec,) = training.fused_learns_like_eager.check_specs
    assert {k: v for k, v in claim_spec.metadata.items() if k.startswith("rule.")} == rules.RULE.metadata()
    result = dg.materialize([*assets, *checks], resources=smoke_resources)
    assert result.success

    curves = read_value(tmp_path / "smoke" / "training_curves")
    assert set(curves["run"].unique()) == {
        "bfloat16_eager",
        "bfloat16_fused",
        "bfloat16_eager_ulp_nudge",
        "bfloat16_eager_order_B",
        "bfloat16_eager_order_C",
        "bfloat16_eager_order_D",
    }
    first = {r["run"]: r for r in curves.filter(pl.col("step") == 0).iter_rows(named=True)}
    replicate_seeds = {r["data_seed"] for r in first.values() if r["role"] == "replicate"}
    assert len(replicate_seeds) == len(rules.REPLICATE_ORDERS)  # distinct data orders
    assert len({r["init_seed"] for r in first.values()}) == 1  # one init for every run
    control, fused, eager = first["bfloat16_eager_ulp_nudge"], first["bfloat16_fused"], first["bfloat16_eager"]
    assert control["data_seed"] == fused["data_seed"] == eager["data_seed"]
    assert control["nudged_elements"] == control["n_params"] and eager["nudged_elements"] == 0
    # Step 0: replicates share the init, so they agree exactly; the control already differs (nudged weights).
    assert len({r["eval_loss"] for r in first.values() if r["role"] == "replicate"}) == 1
    assert control["eval_loss"] != eager["eval_loss"]
    steps = SIZES["smoke"].steps
    for run, part in curves.group_by("run"):
        part = part.sort("step")
        assert part["step"].to_list() == list(range(0, steps + 1, 5))
        assert part["eval_loss"][-1] < part["eval_loss"][0], run
        assert part["perplexity"].to_list() == pytest.approx([math.exp(v) for v in part["eval_loss"]])
    f = curves.filter(pl.col("path") == "fused")
    assert f["graph_breaks"].unique().to_list() == [0]
    assert f["fwd_kernels"][0] > 0 and f["bwd_kernels"][0] > 0 and len(f["bwd_code_sha256"][0]) == 64
    assert (
        curves.filter(pl.col("path") == "eager")["fwd_kernels"].null_count()
        == curves.filter(pl.col("path") == "eager").height
    )

    final = read_value(tmp_path / "smoke" / "training_final_metrics")
    assert set(final["metric"]) == {"train_loss", "eval_loss", "perplexity", "grad_norm", "wall_seconds"}
    ev = final.filter(pl.col("metric") == "eval_loss").row(0, named=True)
    assert ev["fused_minus_eager"] == pytest.approx(ev["fused"] - ev["eager"])
    assert ev["control_minus_eager"] == pytest.approx(ev["control"] - ev["eager"]) and ev["control_minus_eager"] != 0
    last = curves.filter(pl.col("step") == steps)
    rep_final = last.filter(pl.col("role") == "replicate")["eval_loss"]
    assert ev["replicate_spread"] == pytest.approx(rep_final.max() - rep_final.min()) and ev["replicate_spread"] > 0

    dev = read_value(tmp_path / "smoke" / "training_deviation")
    assert set(dev["metric"]) == set(curve_tables.DEVIATION_METRICS)
    judged = dev.filter(pl.col("judged") & (pl.col("metric") == "eval_loss"))
    assert judged.height == steps // 5
    widening = (judged["envelope_hi"] - judged["replicate_max"]).to_list()
    assert widening == pytest.approx((rules.ENVELOPE_WIDENING * judged["replicate_spread"]).to_list())
    assert (judged["replicate_spread"] > 0).all()

    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert evaluations["training_runs_valid"].passed
    claim = evaluations["fused_learns_like_eager"]
    meta = {k: getattr(v, "value", v) for k, v in claim.metadata.items()}
    assert meta["outcome"] == CLAIM and meta["verdict"] in (SUPPORTED, CONTRADICTED, INCONCLUSIVE)
    assert {k: v for k, v in meta.items() if k.startswith("rule.")} == rules.RULE.metadata()
    assert meta["judged_points"] == steps // 5 and meta["replicates"] == len(rules.REPLICATE_ORDERS)
    assert meta["verdict"] == curve_tables.judge_frame(dev, "bfloat16").verdict
    assert claim.passed == (meta["verdict"] == SUPPORTED)
    finding = evaluations["fused_deviation_vs_rounding_control"]
    fmeta = {k: getattr(v, "value", v) for k, v in finding.metadata.items()}
    assert fmeta["outcome"] == FINDING and fmeta["control_factor"] == rules.CONTROL_FACTOR
    assert finding.passed
    assert (fmeta["findings"] == 0) == (fmeta["fused_rms_dev"] <= rules.CONTROL_FACTOR * fmeta["control_rms_dev"])
    assert not list((tmp_path / "smoke" / "checkpoints").rglob("*.pt"))


def test_invalid_runs_are_named():
    plan = runs.run_plan(ExperimentSettings(profile="smoke", device="cpu"))
    rows = []
    for p in plan:
        for step, loss in ((0, 5.0), (5, 4.0)):
            rows.append(
                {
                    **p,
                    "data_seed": 1 if p["role"] != "replicate" else ord(p["data_order"]),
                    "init_seed": 9,
                    "nudged_elements": 10 if p["init_ulp_nudge"] else 0,
                    "n_params": 10,
                    "step": step,
                    "eval_loss": loss,
                    "train_loss": None if step == 0 else 4.5,
                    "grad_norm": None if step == 0 else 1.0,
                    "graph_breaks": 0 if p["path"] == "fused" else None,
                    "recompiles": 0 if p["path"] == "fused" else None,
                    "fwd_kernels": 3 if p["path"] == "fused" else None,
                    "bwd_kernels": 3 if p["path"] == "fused" else None,
                }
            )
    curves = pl.DataFrame(rows)
    problems = curve_tables.run_problems(curves, plan)
    assert any("bit-identical" in p for p in problems)  # the control equals eager: it controls nothing
    assert any("data order or init" in p for p in problems)  # control data seed 1 vs eager's
    nan = curves.with_columns(
        pl.when(pl.col("run") == "bfloat16_fused").then(float("nan")).otherwise(pl.col("grad_norm")).alias("grad_norm")
    )
    assert any("bfloat16_fused: non-finite grad_norm" in p for p in curve_tables.run_problems(nan, plan))
    assert any(
        "runs missing: bfloat16_eager_order_D" in p
        for p in curve_tables.run_problems(curves.filter(pl.col("run") != "bfloat16_eager_order_D"), plan)
    )


def test_a_checkpoint_is_loaded_without_unpickling_code(tmp_path):
    """Checkpoints are read with ``weights_only=True``: a file that would run code when unpickled
    (here an object whose ``__reduce__`` calls a function) is refused, not executed."""
    import pickle

    from pipeline.experiments.training.checkpoint import load_checkpoint

    ran = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (ran.touch, ())

    ckpt = tmp_path / "checkpoint.pt"
    torch.save({"config_key": Payload()}, ckpt)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        load_checkpoint(ckpt, None, None, torch.device("cpu"))  # type: ignore[arg-type]
    assert not ran.exists()


def test_grad_norm_of_a_curve_point_leaves_out_skipped_steps():
    # GradScaler skips a step whose unscaled gradient overflowed: its norm is inf and no update was
    # applied, so it must not make the point's mean inf (it did on CUDA fp16 at the first steps).

    stats = _StepStats().add(5.0, float("inf"), True).add(4.0, 2.0, False).add(3.0, 4.0, False)
    assert stats.steps == 3 and stats.skipped == 1
    assert stats.mean_norm() == 3.0
    assert stats.loss == 12.0
    assert _StepStats().add(5.0, float("nan"), True).mean_norm() is None
