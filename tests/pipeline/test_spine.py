import dagster as dg
import polars as pl
import pytest
import torch
from _smoke_run import RunPart  # tests/ is on sys.path (pytest rootdir import mode)

from pipeline import files, set_storage, storage
from pipeline.definitions import defs
from pipeline.experiments import experiment
from pipeline.experiments.toolkit import assets as toolkit
from pipeline.experiments.toolkit.spec import SIZES as POOL_SIZES
from pipeline.resources import ExperimentSettings
from pipeline.verdicts import VALIDITY
from pipeline.workloads import CHAINS, WORKLOADS, set_args
from precisionkit import bit_equal, fp64_reference

S_ASSETS = experiment("S").assets()
S_CHECKS = experiment("S").checks()


def test_definitions_load_with_job_schedule_and_s_assets():
    repo = defs.get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    for name in WORKLOADS:
        assert f"input_pool_{name}" in keys
        # References exist for B's chains, their only reader; A judges the FFN by run-to-run bits.
        assert (f"fp64_reference_{name}" in keys) == (name in CHAINS)
    assert "toolkit_selfcheck" in keys
    schedule = defs.resolve_schedule_def("nightly_regression")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert schedule.job_name == "all_assets_job"
    # Every reference depends on its pool: S is wired as the seed describes.
    for name in CHAINS:
        ref = repo.asset_graph.get(dg.AssetKey(f"fp64_reference_{name}"))
        assert dg.AssetKey(f"input_pool_{name}") in ref.parent_keys


def test_profiles_differ_only_in_sizes_and_reject_unknown_names():
    assert experiment("S").sizes_for("seed").ffn_shape == (8, 2048, 4096)
    assert experiment("A").sizes_for("seed").runs == 1000
    assert POOL_SIZES["smoke"].chain_sets < POOL_SIZES["default"].chain_sets
    with pytest.raises(ValueError, match="unknown profile 'huge'; expected one of smoke, default, gpu, seed"):
        ExperimentSettings(profile="huge", device="cpu")


def test_settings_reject_bad_backend_options():
    with pytest.raises(ValueError, match="not valid JSON"):
        ExperimentSettings(backend_options="{oops").options()
    assert ExperimentSettings(backend_options='{"emulate_precision_casts": true}').options() == {
        "emulate_precision_casts": True
    }


def test_s_checks_are_validity_checks():
    specs = [spec for c in S_CHECKS for spec in c.check_specs]
    assert len(specs) == len(CHAINS) + 1
    assert all(spec.metadata["outcome"] == VALIDITY for spec in specs)
    assert toolkit.toolkit_selfcheck_all_cells_pass.check_specs  # still blocking: downstream waits on the tool
    assert all(spec.blocking for spec in toolkit.toolkit_selfcheck_all_cells_pass.check_specs)


def test_references_check_flags_a_non_finite_or_wrong_dtype_reference():
    check = toolkit.reference_checks[0]
    wl = WORKLOADS[CHAINS[0]]
    assert check.check_keys == {
        dg.AssetCheckKey(dg.AssetKey(f"fp64_reference_{wl.name}"), "references_are_float64_and_finite")
    }
    keys = [f"{d}/{t}" for d in wl.distributions for t in toolkit.POOL_DTYPES[wl.name]]
    good = {k: torch.zeros(2, dtype=torch.float64) for k in keys}
    assert check(good).passed
    bad = {**good, keys[0]: torch.tensor([float("nan"), 1.0], dtype=torch.float64), keys[-1]: torch.zeros(2)}
    res = check(bad)
    assert not res.passed and res.severity == dg.AssetCheckSeverity.ERROR
    assert res.metadata["validity"].value == "invalid" and "not float64" in res.metadata["problems"].value


def test_smoke_materialization_of_s_assets(smoke_on_run_device):
    result = RunPart(smoke_on_run_device, [*S_ASSETS, *S_CHECKS])
    assert result.success
    checks = result.get_asset_check_evaluations()
    assert len(checks) == len(CHAINS) + 1 and all(c.passed for c in checks)
    # S checks that the tool and its references work: run validity, ERROR when broken.
    assert {c.metadata["outcome"].value for c in checks} == {VALIDITY}
    assert all(c.severity == dg.AssetCheckSeverity.ERROR for c in checks)

    sizes = POOL_SIZES["smoke"]
    pool = storage.read_value(result.data / "input_pool_softmax")
    refs = storage.read_value(result.data / "fp64_reference_softmax")
    assert pool["normal/float16/x"].shape == (sizes.chain_sets, sizes.rows, sizes.width)
    assert pool["normal/float16/x"].dtype == torch.float16
    assert pool["large_logits/bfloat16/x"].dtype == torch.bfloat16
    # The stored reference is exactly the fp64 re-execution of the stored (rounded) inputs.
    wl = WORKLOADS["softmax"]
    subset = {"x": pool["normal/float16/x"]}
    assert bit_equal(refs["normal/float16"][3], fp64_reference(wl.fn, set_args(subset, wl, 3)))
    # Each set has its own seed: set 3 redrawn alone equals the stored set 3 (inputs are reproducible
    # without drawing the sets before it), and the whole pool is the sets drawn one by one.
    settings = ExperimentSettings(profile="smoke")
    seed3 = settings.pool_set_seed("softmax", "normal", 3)
    assert seed3 == settings.derived_seed("pool", "softmax", "normal", 3)
    again = wl.sample(sizes, "normal", 1, seed3)
    assert bit_equal(again["x"][0].to(torch.float16), pool["normal/float16/x"][3])
    redrawn = toolkit.draw_sets(wl, settings, "normal", 0, sizes.chain_sets)["x"].to(torch.float16)
    assert bit_equal(redrawn, pool["normal/float16/x"].load())
    assert not bit_equal(pool["normal/float16/x"][0], pool["normal/float16/x"][1])
    # Stored lazily: the pool is read a set at a time, and its file is standard safetensors.
    assert isinstance(pool, set_storage.SetTensors) and pool.n_sets == sizes.chain_sets
    assert bit_equal(files.load_tensors(pool.path)["normal/float16/x"], pool["normal/float16/x"].load())

    selfcheck = storage.read_value(result.data / "toolkit_selfcheck")
    assert selfcheck.height == 4 * 5 and selfcheck["passed"].all()

    # Drawn and referenced on the run's device (the CPU here), each said in the metadata.
    drawn = result.asset_materializations_for_node("input_pool_softmax")[0].metadata
    assert drawn["draw_device"].value == "cpu"
    assert drawn["generator"].value == (
        "torch.Generator(cpu) per set, seed = settings.pool_set_seed('softmax', <distribution>, <set index>)"
    )
    referenced = result.asset_materializations_for_node("fp64_reference_softmax")[0].metadata
    assert referenced["reference_device"].value == "cpu"

    mat = result.asset_materializations_for_node("input_pool_ffn")[0]
    assert mat.metadata["provenance.profile"].value == "smoke"
    assert mat.metadata["provenance.torch_version"].value == torch.__version__
    # Fused CPU code depends on the vector ISA: every materialization records it.
    assert mat.metadata["provenance.cpu_capability"].value == str(torch.backends.cpu.get_cpu_capability())
    assert mat.metadata["provenance.inductor_vec_isa"].value and mat.metadata["provenance.cpu_model"].value
    assert "--version" not in mat.metadata["provenance.cxx"].value and ":" in mat.metadata["provenance.cxx"].value


def test_bfloat16_round_trip_is_bit_exact(tmp_path):
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    value = {"all_bf16_patterns": bits.view(torch.bfloat16), "f16": bits.view(torch.float16)}
    path = storage.write_value(value, tmp_path / "x")
    assert path.suffix == ".safetensors"
    back = storage.read_value(tmp_path / "x")
    assert back["all_bf16_patterns"].dtype == torch.bfloat16
    assert torch.equal(back["all_bf16_patterns"].view(torch.int16), bits)
    assert torch.equal(back["f16"].view(torch.int16), bits)


def test_interrupted_write_keeps_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "table"
    storage.write_value(pl.DataFrame({"a": [1, 2, 3]}), target)

    def crash_midway(df, path):
        with open(path, "wb") as fh:
            fh.write(b"PAR1 truncated")
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", crash_midway)
    with pytest.raises(KeyboardInterrupt):
        storage.write_value(pl.DataFrame({"a": [9]}), target)
    monkeypatch.undo()
    assert storage.read_value(target)["a"].to_list() == [1, 2, 3]
    assert [p.name for p in tmp_path.iterdir()] == ["table.parquet"]  # no temp file left behind


def test_storage_rejects_unstorable_values(tmp_path):
    with pytest.raises(TypeError, match="cannot store a str"):
        storage.write_value("text", tmp_path / "x")
    with pytest.raises(FileNotFoundError, match="materialize it first"):
        storage.read_value(tmp_path / "missing")
