import dataclasses
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import torch
from _smoke_run import RunPart  # tests/ is on sys.path (pytest rootdir import mode)

from pipeline import storage
from pipeline.experiments import experiment
from pipeline.experiments.determinism import assets, checks, compare, worker
from pipeline.experiments.determinism.rounds import (
    DETERMINISM_DTYPES,
    Round,
    cold_rounds,
    other_thread_count,
    thread_round_skipped,
)
from pipeline.experiments.determinism.spec import SIZES
from pipeline.experiments.determinism.worker import cold_cache_env, output_md5, run_round
from pipeline.experiments.toolkit import assets as toolkit
from pipeline.resources import ExperimentSettings
from pipeline.verdicts import CLAIM, CONTRADICTED, FINDING, INCONCLUSIVE, SUPPORTED, VALIDITY
from precisionkit import bit_equal


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
    assert dg.AssetKey("input_pool_ffn") in assets.determinism.dependency_keys
    assert {k.to_user_string() for k in assets.determinism.keys} == {
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
    assert other_thread_count(2) == 1 and other_thread_count(1) == 2


CHECKS = [
    checks.one_output_hash_per_round,
    checks.zero_ulp_within_round,
    checks.cold_start_reproduces_round1,
    checks.every_round_ran_its_planned_runs,
    checks.thread_count_output_comparison,
    *experiment("A").generated_checks(),
]
#: Outcome kind each check declares: the §3.3 claims, the run's validity, the thread-count finding.
KINDS = {
    "one_output_hash_per_round": CLAIM,
    "zero_ulp_within_round": CLAIM,
    "cold_start_reproduces_round1": CLAIM,
    "every_round_ran_its_planned_runs": VALIDITY,
    "determinism_summary_shows_fusion": VALIDITY,
    "determinism_summary_computes_in_workload_dtype": FINDING,
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
        "artifact_hash_equal_across_cold_start": "reference (H_k0)",
        "difference_source": "none",
        "kernel_count": 2,
        "graph_breaks": 0,
        "recompiles": 0,
    }
    return pl.DataFrame([{**base, **r} for r in rows], infer_schema_length=None)


def test_claim_rules_on_synthetic_summaries():
    # Rules, not measurements: the verdict each table implies on any device.
    cold = {
        "round": "round2_cold",
        "kernel_hash_equal_across_cold_start": "yes",
        "artifact_hash_equal_across_cold_start": "yes",
    }
    good = _summary([{}, cold])
    for check in (checks.one_output_hash_per_round, checks.zero_ulp_within_round):
        assert _v(check(good), "verdict") == SUPPORTED
    assert _v(checks.cold_start_reproduces_round1(good), "verdict") == SUPPORTED

    two_hashes = checks.one_output_hash_per_round(_summary([{}, {**cold, "unique_output_hashes": 2}]))
    assert _v(two_hashes, "verdict") == CONTRADICTED and two_hashes.severity == dg.AssetCheckSeverity.ERROR
    assert _v(two_hashes, "rule.threshold") == 0.0
    one_ulp = checks.zero_ulp_within_round(_summary([{}, {**cold, "max_ulp_diff_across_runs": 1}]))
    assert _v(one_ulp, "verdict") == CONTRADICTED
    unknown = checks.zero_ulp_within_round(_summary([{}, {**cold, "max_ulp_diff_across_runs": None}]))
    assert _v(unknown, "verdict") == INCONCLUSIVE and unknown.severity == dg.AssetCheckSeverity.WARN
    code_moved = checks.cold_start_reproduces_round1(
        _summary([{}, {**cold, "kernel_hash_equal_across_cold_start": "no"}])
    )
    assert _v(code_moved, "verdict") == CONTRADICTED
    binary_moved = checks.cold_start_reproduces_round1(
        _summary([{}, {**cold, "artifact_hash_equal_across_cold_start": "no"}])
    )
    assert _v(binary_moved, "verdict") == CONTRADICTED
    assert _v(binary_moved, "artifact_hash_differs") == "float16/round2_cold"
    # A kernel binary that could not be read is not compared: neither a contradiction nor support.
    unread = checks.cold_start_reproduces_round1(
        _summary([{}, {**cold, "artifact_hash_equal_across_cold_start": "unknown: kernel binary not read: round 1: k"}])
    )
    assert _v(unread, "verdict") == INCONCLUSIVE and _v(unread, "artifact_not_compared") == "float16/round2_cold"
    assert _v(checks.cold_start_reproduces_round1(_summary([{}])), "verdict") == INCONCLUSIVE

    # Another thread count changing the bits is a finding (WARN), never a contradiction.
    default = ExperimentSettings(profile="default", device="cpu")
    threads = checks.thread_count_output_comparison(
        _summary([{}, cold, {"round": "cold_threads_1", "outputs_equal_round1": "no", "max_ulp_vs_round1": 1}]),
        default,
    )
    assert threads.passed and _v(threads, "findings") == 1  # an observation, not a failure
    assert _v(threads, "outcome") == FINDING
    # A missing thread-count round is worth a finding only where the profile plans one.
    assert _v(checks.thread_count_output_comparison(_summary([{}]), default), "findings") == 1
    smoke = ExperimentSettings(profile="smoke", device="cpu")
    assert _v(checks.thread_count_output_comparison(_summary([{}]), smoke), "findings") == 0


def test_the_validity_check_plans_the_cold_rounds_runs_from_the_profile():
    default = ExperimentSettings(profile="default", device="cpu")
    rounds = [
        {"dtype": d, "round": r, "run_count": n}
        for d in DETERMINISM_DTYPES
        for r, n in (("round1", 100), ("round2_cold", 25), ("cold_threads_1", 25))
    ]
    ok = checks.every_round_ran_its_planned_runs(_summary(rounds), default)
    assert ok.passed and _v(ok, "planned_rounds") == "round1, round2_cold, cold_threads"
    # a cold round that ran round 1's count is not what the default profile plans
    long_cold = [{**r, "run_count": 100} if r["round"] == "round2_cold" else r for r in rounds]
    bad = checks.every_round_ran_its_planned_runs(_summary(long_cold), default)
    assert not bad.passed and "round2_cold: run counts [100] instead of 25" in _v(bad, "problems")


def _pool_ffn():
    return next(a for a in toolkit.input_pools if a.key == dg.AssetKey("input_pool_ffn"))


def test_smoke_skips_cold_start_and_says_so(smoke_on_run_device):
    """The smoke profile runs round 1 only: the run is valid with that plan, the cold-start claim
    is inconclusive and the thread-count finding has nothing to report."""
    assert not SIZES["smoke"].cold_start
    assert SIZES["default"].cold_start and SIZES["seed"].cold_start
    result = RunPart(smoke_on_run_device, [_pool_ffn(), assets.determinism, *CHECKS])
    assert result.success
    summary = storage.read_value(result.data / "determinism_summary")
    assert set(summary["round"]) == {"round1"} and set(summary["dtype"]) == set(DETERMINISM_DTYPES)
    evals = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert evals["every_round_ran_its_planned_runs"].passed, evals["every_round_ran_its_planned_runs"].metadata
    assert evals["every_round_ran_its_planned_runs"].metadata["planned_rounds"].value == "round1"
    assert evals["cold_start_reproduces_round1"].metadata["verdict"].value == INCONCLUSIVE
    assert evals["thread_count_output_comparison"].passed  # no round planned, none missing
    mat = result.asset_materializations_for_node("determinism")
    meta = next(m.metadata for m in mat if m.asset_key == dg.AssetKey("determinism_summary"))
    assert meta["cold_start_rounds"].value.startswith("not run")
    assert meta["fp16_outputs_equal_across_cold_start"].value == "not run"


def test_smoke_determinism_rounds(smoke_resources, tmp_path, monkeypatch):
    """Round 1 and both cold-start rounds at smoke size (the profile itself skips the cold rounds)."""
    monkeypatch.setitem(SIZES, "smoke", dataclasses.replace(SIZES["smoke"], cold_start=True))
    result = dg.materialize([_pool_ffn(), assets.determinism, *CHECKS], resources=smoke_resources)
    assert result.success
    runs = SIZES["smoke"].runs
    summary = storage.read_value(tmp_path / "smoke" / "determinism_summary")
    log = storage.read_value(tmp_path / "smoke" / "determinism_runs")
    assert set(summary["dtype"]) == set(DETERMINISM_DTYPES)
    on_cpu = smoke_resources["settings"].torch_device().type == "cpu"
    threads_round = {f"cold_threads_{other_thread_count(torch.get_num_threads())}"} if on_cpu else set()
    assert set(summary["round"]) == {"round1", "round2_cold"} | threads_round
    # The per-run log has one md5 per run and round; the summary counts them.
    for r in summary.iter_rows(named=True):
        sub = log.filter((pl.col("round") == r["round"]) & (pl.col("dtype") == r["dtype"]))
        assert sub.height == r["run_count"] and sub["md5"].n_unique() == r["unique_output_hashes"]
    main = summary.filter(pl.col("round").is_in(["round1", "round2_cold"]))
    assert (main["run_count"] == runs).all()

    evals = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert {name: e.metadata["outcome"].value for name, e in evals.items()} == KINDS
    # Validity: the harness did what it says (every planned run, fused, no recompile) on any device.
    assert evals["every_round_ran_its_planned_runs"].passed, evals["every_round_ran_its_planned_runs"].metadata
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
    assert threads.passed and (threads.metadata["findings"].value == 0) == bool(
        (alt["outputs_equal_round1"] == "yes").all()
    )
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


# --- the plain functions behind the asset, without Dagster ------------------------------------------


def _record(hashes, code="code", threads=2, artifacts=()):
    return {
        "hashes": list(hashes),
        "code_sha256": f"sha({code})",
        "artifacts": list(artifacts),
        "artifact_sha256": "art",
        "kernel_count": 1,
        "kernel_names": "k0",
        "extern_calls": "",
        "graph_count": 1,
        "graph_breaks": 0,
        "recompiles": 0,
        "compile_seconds": 0.5,
        "seconds_all_runs": 0.004,
        "threads": threads,
        "code": code,
    }


def _round(hashes, outputs, process, threads=2, code="code"):
    records = {d: _record(hashes, code, threads) for d in DETERMINISM_DTYPES}
    distinct = {f"{d}/{h}": outputs[h] for d in DETERMINISM_DTYPES for h in dict.fromkeys(hashes)}
    return Round(records, distinct, process, "cache", Path("/nonexistent"))  # no artifact files


def test_cold_rounds_plan():
    runs = {"float16": 1000, "float32": 100}
    assert cold_rounds(runs, 2) == [("round2_cold", 2, runs), ("cold_threads_1", 1, {"float16": 25, "float32": 25})]
    assert cold_rounds({"float16": 5}, 1) == [("round2_cold", 1, {"float16": 5}), ("cold_threads_2", 2, {"float16": 5})]
    # The thread-count round changes CPU threads only: on an accelerator it is skipped, with the reason.
    assert cold_rounds(runs, 2, "cuda") == [("round2_cold", 2, runs)]
    assert thread_round_skipped("cpu") is None
    assert "CPU thread count" in (thread_round_skipped("cuda") or "")


def test_runs_per_dtype():
    gpu = SIZES["gpu"]
    assert gpu.runs_by_dtype(DETERMINISM_DTYPES) == {"float16": 1000, "bfloat16": 1000, "float32": 100}
    assert gpu.cold_runs_by_dtype(DETERMINISM_DTYPES) == gpu.runs_by_dtype(DETERMINISM_DTYPES)  # no cold_runs: the same
    # the default profile's cold round runs 25 per dtype, the thread round's count; round 1 keeps its 100
    default = SIZES["default"]
    assert default.runs_for("float16") == 100 and default.cold_runs_by_dtype(("float16", "float32")) == {
        "float16": 25,
        "float32": 25,
    }
    assert gpu.cold_start and SIZES["seed"].runs_for("float32") == 1000
    assert worker.parse_runs("7") == 7
    assert worker.parse_runs(worker.format_runs({"float16": 3, "float32": 1})) == {"float16": 3, "float32": 1}
    with pytest.raises(ValueError, match="runs must be at least 1"):
        run_round({}, ["float16", "float32"], {"float16": 2}, torch.device("cpu"))


def test_determinism_tables_from_given_rounds():
    one = torch.ones(2, 4)
    two = one.clone()
    two[1, 3] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))  # 1 ULP apart in one element
    rounds = {
        "round1": _round(["h1", "h1", "h1"], {"h1": one}, "in-process"),
        "round2_cold": _round(["h1", "h2", "h1"], {"h1": one, "h2": two}, "fresh (pid 1)"),
        "cold_threads_1": _round(["h2", "h2"], {"h2": two}, "fresh (pid 2)", threads=1, code="other"),
    }
    tables = compare.determinism_tables(rounds)
    assert tables.runs.height == 3 * (3 + 3 + 2)
    cold = tables.runs.filter((pl.col("round") == "round2_cold") & (pl.col("dtype") == "float16"))
    assert cold["ulp_vs_round_first"].to_list() == [0, 1, 0] and cold["ulp_vs_round1_first"].to_list() == [0, 1, 0]

    summary = {(r["dtype"], r["round"]): r for r in tables.summary.iter_rows(named=True)}
    r1, r2, r3 = (summary[("float16", n)] for n in ("round1", "round2_cold", "cold_threads_1"))
    assert (r1["unique_output_hashes"], r1["max_ulp_diff_across_runs"], r1["difference_source"]) == (1, 0, "none")
    assert (r2["unique_output_hashes"], r2["max_ulp_diff_across_runs"], r2["outputs_equal_round1"]) == (2, 1, "no")
    assert r2["kernel_hash_equal_across_cold_start"] == "yes" and r2["ms_per_run"] == round(4 / 3, 3)
    assert r2["difference_source"].startswith(
        "within the round, 2 distinct outputs from one program (0 recompiles): 1 of 8 elements in 1 rows differ "
        "(max 1 ULP); outputs differ from round 1 with the same source and artifacts, so the difference arises at "
        "run time (extern calls: none): 1 of 8 elements in 1 rows differ (max 1 ULP)"
    )
    # Another thread count and other code: the source diff is measured and kept per round and dtype.
    assert r3["kernel_hash_equal_across_cold_start"] == "no" and r3["max_ulp_vs_round1"] == 1
    assert "generated source differs from round 1: -code | +other" in r3["difference_source"]
    assert tables.code_diffs["cold_threads_1/float16"] == "-code\n+other"
    assert set(tables.code_diffs) == {f"cold_threads_1/{d}" for d in DETERMINISM_DTYPES}
    assert tables.artifacts.height == 0 and tables.artifacts.schema["bytes"] == pl.Int64


def test_hash_runs_keeps_the_first_distinct_outputs():
    outs = [torch.tensor([float(i % 3)]) for i in range(12)]
    calls = iter(outs[1:])
    hashes, kept = worker._hash_runs(lambda *a: next(calls), (), outs[0], range(12), "float32")
    assert hashes == [output_md5(o) for o in outs]
    assert list(kept) == [f"float32/{output_md5(outs[i])}" for i in range(3)]
    assert all(bit_equal(kept[f"float32/{output_md5(o)}"], o) for o in outs[:3])
    many = [torch.tensor([float(i)]) for i in range(worker.MAX_DISTINCT_KEPT + 3)]
    calls = iter(many[1:])
    _, kept = worker._hash_runs(lambda *a: next(calls), (), many[0], range(len(many)), "float32")
    assert len(kept) == worker.MAX_DISTINCT_KEPT


def test_hash_runs_compares_bits_on_the_device_and_hashes_each_distinct_output_once(monkeypatch):
    """A run equal in every bit to an earlier output reuses that output's md5; NaN payloads and the
    sign of zero count as bits (as they do in the md5), and only new distinct outputs are hashed."""
    nan = torch.tensor([float("nan"), 1.0, 0.0])
    other_nan = nan.clone()
    other_nan.view(torch.int32)[0] ^= 1  # another NaN payload
    neg_zero = torch.tensor([float("nan"), 1.0, -0.0])
    outs = [nan, nan.clone(), other_nan, neg_zero, nan.clone(), neg_zero.clone()]
    hashed = []
    monkeypatch.setattr(worker, "output_md5", lambda t: hashed.append(t) or output_md5(t))
    calls = iter(outs[1:])
    hashes, kept = worker._hash_runs(lambda *a: next(calls), (), outs[0], range(len(outs)), "float32")
    assert hashes == [output_md5(o) for o in outs]
    assert len(set(hashes)) == 3 and len(hashed) == 3 and len(kept) == 3
    assert worker.same_bits(nan, nan.clone()) and not worker.same_bits(nan, other_nan)
    assert not worker.same_bits(torch.zeros(2), -torch.zeros(2)) and not worker.same_bits(nan, nan.double())


def test_artifact_state_compares_only_binaries_that_were_read():
    artifact_state = compare.artifact_state
    art = {"kernel": "triton_k", "kind": "triton_cubin", "sha256": "a", "autotune_choice": "XBLOCK=1"}
    r1 = {"artifacts": [art], "artifact_sha256": "h0"}
    assert artifact_state({"artifacts": [art], "artifact_sha256": "h0"}, r1) == "yes"
    assert artifact_state({"artifacts": [art], "artifact_sha256": "h1"}, r1) == "no"
    # As the H200's bf16 round 1 (2026-11-27): its kernel held no binary when it was read.
    empty = {"artifacts": [{**art, "kind": "triton_unavailable"}], "artifact_sha256": "h2"}
    assert artifact_state(r1, empty) == "unknown: kernel binary not read: round 1: triton_k (triton_unavailable)"
    # A program without generated kernels on both sides compares its (empty) records.
    assert (
        artifact_state({"artifacts": [], "artifact_sha256": "h3"}, {"artifacts": [], "artifact_sha256": "h3"}) == "yes"
    )


def test_rows_the_compiler_did_not_fuse_are_judged_by_no_claim():
    # OpenVINO runs a bfloat16 FFN in torch after failing it: that row's hashes are the fallback's.
    why = "not fused by OpenVINO: ran 1 partition(s) in torch after OpenVINO failed to compile or execute them"
    cold = {"round": "round2_cold", "kernel_hash_equal_across_cold_start": "yes", "outputs_equal_round1": "yes"}
    na = "not applicable to OpenVINO: it exposes no binary per runtime node"
    table = _summary(
        [
            {"artifact_hash_equal_across_cold_start": na, "not_fused": None},
            {**cold, "artifact_hash_equal_across_cold_start": na, "not_fused": None},
            {"dtype": "bfloat16", "unique_output_hashes": 2, "not_fused": why},
        ]
    )
    fused, left = checks.fused_rows(table)
    assert fused.height == 2 and left == f"bfloat16/round1: {why}"
    one = checks.one_output_hash_per_round(table)  # the fallback's two hashes are not held against the claim
    assert _v(one, "verdict") == SUPPORTED and f"not judged, not fused: bfloat16/round1: {why}" in _v(one, "reason")
    cold_start = checks.cold_start_reproduces_round1(table)  # no binary: the code hash stands for the program
    assert _v(cold_start, "verdict") == SUPPORTED and _v(cold_start, "artifact_hash") == na
    only_fallback = _summary([{"dtype": "bfloat16", "not_fused": why}])
    assert _v(checks.zero_ulp_within_round(only_fallback), "verdict") == INCONCLUSIVE


def test_a_compiler_without_binaries_has_no_artifact_part():
    from pipeline.experiments.determinism.compare import artifact_state

    na = "not applicable to IREE: it loads each program as one IREE module"
    rec = {"artifacts": [], "artifact_sha256": "", "artifacts_not_applicable": na}
    assert artifact_state(rec, rec) == na
    inductor = {"artifacts": [{"kernel": "k0", "kind": "cpu_shared_object"}], "artifact_sha256": "ab"}
    assert artifact_state(inductor, inductor) == "yes"  # a record without the field: as before
