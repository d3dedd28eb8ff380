import dagster as dg
import polars as pl
import pytest
import torch

from pipeline import storage
from pipeline._determinism_worker import cold_cache_env, output_md5, run_round
from pipeline.assets import determinism, toolkit
from pipeline.profiles import PROFILES
from pipeline.verdicts import CLAIM, CONTRADICTED, FINDING, INCONCLUSIVE, SUPPORTED, VALIDITY


def test_output_md5_sees_every_bit_and_handles_bfloat16():
    x = torch.randn(4, 5).to(torch.bfloat16)
    y = x.clone()
    assert output_md5(x) == output_md5(y)
    y.view(torch.int16)[2, 3] ^= 1  # flip the lowest mantissa bit of one element
    assert output_md5(x) != output_md5(y)
    # The hash covers the values in C order, not the memory layout of a view.
    assert output_md5(x.t().contiguous().t()) == output_md5(x)


def test_cold_cache_env_turns_caches_off_and_points_at_the_folder():
    env = cold_cache_env("/tmp/empty_cache", base={"PATH": "/bin"})
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/empty_cache"
    assert env["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "0" and env["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "0"
    assert env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] == "1" and env["PATH"] == "/bin"


def test_s_pool_is_upstream_and_the_tables_are_assets():
    assert dg.AssetKey("input_pool_ffn") in determinism.determinism.dependency_keys
    assert {k.to_user_string() for k in determinism.determinism.keys} == {
        "determinism_runs",
        "determinism_summary",
        "determinism_artifacts",
    }


def test_run_round_rejects_bad_inputs():
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        run_round({}, ["float8"], 2, torch.device("cpu"))
    with pytest.raises(ValueError, match="inputs lack float16/w, float16/b"):
        run_round({"float16/x": torch.zeros(1, 2, 4, dtype=torch.float16)}, ["float16"], 2, torch.device("cpu"))
    with pytest.raises(ValueError, match="runs must be at least 1"):
        run_round({}, ["float16"], 0, torch.device("cpu"))
    assert determinism.other_thread_count(2) == 1 and determinism.other_thread_count(1) == 2


CHECKS = [
    determinism.one_output_hash_per_round,
    determinism.zero_ulp_within_round,
    determinism.cold_start_reproduces_round1,
    determinism.no_recompiles_during_runs,
    determinism.thread_count_output_comparison,
]
#: Outcome kind each check declares: the §3.3 claims, the run's validity, the thread-count finding.
KINDS = {
    "one_output_hash_per_round": CLAIM,
    "zero_ulp_within_round": CLAIM,
    "cold_start_reproduces_round1": CLAIM,
    "no_recompiles_during_runs": VALIDITY,
    "thread_count_output_comparison": FINDING,
}


def _specs(checks):
    return {spec.name: spec.metadata for c in checks for spec in c.check_specs}


def test_checks_declare_their_outcome_and_rule():
    specs = _specs(CHECKS)
    assert {name: meta["outcome"] for name, meta in specs.items()} == KINDS
    for name, meta in specs.items():
        if KINDS[name] == CLAIM:
            # Exact claims: deterministic rules with threshold 0, stated before any data.
            assert meta["rule.threshold"] == 0.0 and meta["rule.confidence"] == "deterministic"
            assert meta["rule.claim"].startswith("§3.3") and meta["rule.decision"] and meta["rule.sample_size"]
        else:
            assert not any(k.startswith("rule.") for k in meta)


def _v(result, key):
    """A result's metadata value (direct invocation wraps values in MetadataValue)."""
    return result.metadata[key].value


def _summary(rows):
    base = {
        "dtype": "float16",
        "round": "round1",
        "threads": 2,
        "run_count": 3,
        "unique_output_hashes": 1,
        "max_ulp_diff_across_runs": 0,
        "outputs_equal_round1": "yes",
        "max_ulp_vs_round1": 0,
        "kernel_hash_equal_across_cold_start": "reference (H_k0)",
        "kernel_count": 2,
        "graph_breaks": 0,
        "recompiles": 0,
    }
    return pl.DataFrame([{**base, **r} for r in rows], infer_schema_length=None)


def test_claim_rules_on_synthetic_summaries():
    # Rules, not measurements: the verdict each table implies on any device.
    cold = {"round": "round2_cold", "kernel_hash_equal_across_cold_start": "yes"}
    good = _summary([{}, cold])
    for check in (determinism.one_output_hash_per_round, determinism.zero_ulp_within_round):
        assert _v(check(good), "verdict") == SUPPORTED
    assert _v(determinism.cold_start_reproduces_round1(good), "verdict") == SUPPORTED

    two_hashes = determinism.one_output_hash_per_round(_summary([{}, {**cold, "unique_output_hashes": 2}]))
    assert _v(two_hashes, "verdict") == CONTRADICTED and two_hashes.severity == dg.AssetCheckSeverity.ERROR
    assert _v(two_hashes, "rule.threshold") == 0.0
    one_ulp = determinism.zero_ulp_within_round(_summary([{}, {**cold, "max_ulp_diff_across_runs": 1}]))
    assert _v(one_ulp, "verdict") == CONTRADICTED
    unknown = determinism.zero_ulp_within_round(_summary([{}, {**cold, "max_ulp_diff_across_runs": None}]))
    assert _v(unknown, "verdict") == INCONCLUSIVE and unknown.severity == dg.AssetCheckSeverity.WARN
    code_moved = determinism.cold_start_reproduces_round1(
        _summary([{}, {**cold, "kernel_hash_equal_across_cold_start": "no"}])
    )
    assert _v(code_moved, "verdict") == CONTRADICTED
    assert _v(determinism.cold_start_reproduces_round1(_summary([{}])), "verdict") == INCONCLUSIVE

    # Another thread count changing the bits is a finding (WARN), never a contradiction.
    threads = determinism.thread_count_output_comparison(
        _summary([{}, cold, {"round": "cold_threads_1", "outputs_equal_round1": "no", "max_ulp_vs_round1": 1}])
    )
    assert not threads.passed and threads.severity == dg.AssetCheckSeverity.WARN
    assert _v(threads, "outcome") == FINDING


def test_smoke_determinism_rounds(smoke_resources, tmp_path):
    pool_ffn = next(a for a in toolkit.input_pools if a.key == dg.AssetKey("input_pool_ffn"))
    result = dg.materialize([pool_ffn, determinism.determinism, *CHECKS], resources=smoke_resources)
    assert result.success
    runs = PROFILES["smoke"].determinism_runs
    summary = storage.read_value(tmp_path / "smoke" / "determinism_summary")
    log = storage.read_value(tmp_path / "smoke" / "determinism_runs")
    assert set(summary["dtype"]) == set(determinism.DETERMINISM_DTYPES)
    assert set(summary["round"]) == {
        "round1",
        "round2_cold",
        f"cold_threads_{determinism.other_thread_count(torch.get_num_threads())}",
    }
    # The per-run log has one md5 per run and round; the summary counts them.
    for r in summary.iter_rows(named=True):
        sub = log.filter((pl.col("round") == r["round"]) & (pl.col("dtype") == r["dtype"]))
        assert sub.height == r["run_count"] and sub["md5"].n_unique() == r["unique_output_hashes"]
    main = summary.filter(pl.col("round").is_in(["round1", "round2_cold"]))
    assert (main["run_count"] == runs).all()

    evals = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert {name: e.metadata["outcome"].value for name, e in evals.items()} == KINDS
    # Validity: the harness did what it says (every planned run, fused, no recompile) on any device.
    assert evals["no_recompiles_during_runs"].passed, evals["no_recompiles_during_runs"].metadata
    # Each claim's verdict follows its rule applied to the table, whatever the device measured.
    verdicts = {name: e.metadata["verdict"].value for name, e in evals.items() if KINDS[name] == CLAIM}
    assert verdicts["one_output_hash_per_round"] == (
        SUPPORTED if (summary["unique_output_hashes"] == 1).all() else CONTRADICTED
    )
    for name in verdicts:
        assert evals[name].metadata["rule.threshold"].value == 0.0
        assert evals[name].passed == (verdicts[name] == SUPPORTED)
    # The thread-count comparison is a finding: WARN when the outputs differ, never ERROR.
    threads = evals["thread_count_output_comparison"]
    alt = summary.filter(pl.col("round").str.starts_with("cold_threads"))
    assert threads.passed == bool((alt["outputs_equal_round1"] == "yes").all())
    assert threads.severity == dg.AssetCheckSeverity.WARN

    # CPU-specific: what this CPU measured (Inductor's C++ kernels with a fixed thread count). A GPU
    # build (atomics, autotuning) may legitimately contradict a claim, so the conclusion is pinned
    # only where the smoke run is on the CPU.
    if smoke_resources["settings"].torch_device().type != "cpu":
        pytest.skip("CPU-specific: §3.3's claims measured supported on the CPU backend")
    assert (main["unique_output_hashes"] == 1).all() and (main["max_ulp_diff_across_runs"] == 0).all()
    cold = summary.filter(pl.col("round") == "round2_cold")
    assert (cold["kernel_hash_equal_across_cold_start"] == "yes").all() and (
        cold["outputs_equal_round1"] == "yes"
    ).all()
    r1 = summary.filter(pl.col("round") == "round1").sort("dtype")
    assert cold.sort("dtype")["code_sha256"].to_list() == r1["code_sha256"].to_list()
    assert set(verdicts.values()) == {SUPPORTED}, {n: evals[n].metadata["reason"].value for n in verdicts}
