"""Task E: corpus, GPT training loop (resume, determinism) and the E_training assets in smoke size."""

import math

import dagster as dg
import polars as pl
import pytest
import torch

from pipeline.assets import toolkit, training
from pipeline.corpus import EVAL_FRACTION, load_corpus
from pipeline.gpt import GPT, TrainConfig, TrainingInterrupted, train
from pipeline.profiles import get_profile
from pipeline.storage import read_value


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def smoke_config(corpus, **kwargs) -> TrainConfig:
    return TrainConfig.from_profile(get_profile("smoke").train, **{"corpus_sha256": corpus.sha256, "init_seed": 1, "data_seed": 2, **kwargs})


def test_corpus_is_deterministic_and_split(corpus):
    again = load_corpus()
    assert again.sha256 == corpus.sha256 and again.n_bytes == corpus.n_bytes > 500_000
    assert corpus.train.numel() + corpus.eval.numel() == corpus.n_bytes
    assert corpus.eval.numel() == pytest.approx(corpus.n_bytes * EVAL_FRACTION, abs=1)
    assert corpus.train.dtype == torch.uint8


def test_corpus_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no_such_module.py"):
        load_corpus(files=("no_such_module.py",), stdlib=tmp_path)


def test_bad_config_is_rejected():
    with pytest.raises(ValueError, match="path"):
        TrainConfig(1, 1, 8, 8, 1, 1, 1, 1, path="compiled")
    with pytest.raises(ValueError, match="train.steps"):
        TrainConfig(1, 1, 8, 8, 1, 0, 1, 1)
    with pytest.raises(ValueError, match="divisible"):
        GPT(1, 3, 8, 8)


def test_lr_schedule_warms_up_then_decays():
    cfg = TrainConfig(1, 1, 8, 8, 1, 100, 10, 1)
    factors = [cfg.lr_factor(s) for s in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))
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


def test_noise_band_takes_window_max():
    assert training.noise_band([0.0, 0.5, 0.1, None, 0.2]) == [0.5, 0.5, 0.5, 0.2, 0.2]


def test_training_assets_smoke(smoke_resources, tmp_path):
    """Both paths train a few smoke steps through the assets: curves, evidence, deviation, checks."""
    assets = [toolkit.toolkit_selfcheck, training.training_curves, training.training_final_metrics, training.training_deviation]
    checks = [training.fused_final_eval_loss_within_noise, training.training_runs_learned_and_fused]
    result = dg.materialize([*assets, *checks], resources=smoke_resources)
    assert result.success

    curves = read_value(tmp_path / "smoke" / "training_curves")
    assert set(curves["run"].unique()) == {"bfloat16_eager", "bfloat16_fused", "bfloat16_eager_order_B"}
    steps = get_profile("smoke").train["steps"]
    for run, part in curves.group_by("run"):
        part = part.sort("step")
        assert part["step"].to_list() == list(range(0, steps + 1, 5))
        assert part["eval_loss"][-1] < part["eval_loss"][0], run
        assert part["train_loss"][-1] < part["train_loss"][1], run
        assert part["perplexity"].to_list() == pytest.approx([math.exp(v) for v in part["eval_loss"]])
    fused = curves.filter(pl.col("path") == "fused")
    assert fused["graph_breaks"].unique().to_list() == [0]
    assert fused["fwd_kernels"][0] > 0 and fused["bwd_kernels"][0] > 0 and len(fused["bwd_code_sha256"][0]) == 64
    assert curves.filter(pl.col("path") == "eager")["fwd_kernels"].null_count() == curves.filter(pl.col("path") == "eager").height

    final = read_value(tmp_path / "smoke" / "training_final_metrics")
    assert set(final["metric"]) == {"train_loss", "eval_loss", "perplexity", "grad_norm", "wall_seconds"}
    ev = final.filter(pl.col("metric") == "eval_loss").row(0, named=True)
    assert ev["fused_minus_eager"] == pytest.approx(ev["fused"] - ev["eager"])

    dev = read_value(tmp_path / "smoke" / "training_deviation")
    assert set(dev["metric"]) == set(training.DEVIATION_METRICS)
    assert (dev.drop_nulls("noise_band")["noise_band"] >= dev.drop_nulls("noise_band")["noise_abs_diff"]).all()

    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert evaluations["training_runs_learned_and_fused"].passed
    within = evaluations["fused_final_eval_loss_within_noise"]
    summary = [s for s in training.deviation_summary(dev) if s["metric"] == "eval_loss"][0]
    assert within.passed == summary["final_within_band"]
    assert not list((tmp_path / "smoke" / "checkpoints").rglob("*.pt"))
