"""S's pools and references stored as a recipe (the gpu and seed profiles) give the same bits as stored sets."""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.experiments.toolkit import assets as s_assets
from pipeline.experiments.toolkit.assets import as_recipe, pool_stream, reference_stream
from pipeline.resources import ExperimentSettings
from pipeline.set_storage import RegeneratedSets, SetTensors
from pipeline.storage import read_value, write_value
from pipeline.workloads import WORKLOADS

SMOKE = ExperimentSettings(profile="smoke", device="cpu")


@pytest.fixture(scope="module")
def stored_and_regenerated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sets")
    w = WORKLOADS["layernorm"]
    write_value(pool_stream(w, SMOKE), folder / "pool")
    write_value(as_recipe("input_pool", w, SMOKE, pool_stream(w, SMOKE)), folder / "pool_recipe")
    pool, regen = read_value(folder / "pool"), read_value(folder / "pool_recipe")
    write_value(reference_stream(w, pool, "cpu"), folder / "ref")
    write_value(as_recipe("fp64_reference", w, SMOKE, reference_stream(w, regen, "cpu")), folder / "ref_recipe")
    return folder, pool, regen, read_value(folder / "ref"), read_value(folder / "ref_recipe")


def test_a_recipe_is_a_small_json_file_and_reads_back_as_regenerated_sets(stored_and_regenerated):
    folder, pool, regen, ref, ref_regen = stored_and_regenerated
    assert isinstance(pool, SetTensors) and isinstance(regen, RegeneratedSets)
    assert not (folder / "pool_recipe.safetensors").exists()
    record = json.loads((folder / "pool_recipe.json").read_text())["__set_recipe__"]
    assert record["kind"] == "input_pool"
    assert record["params"] == {"workload": "layernorm", "profile": "smoke", "seed": 20241223, "device": "cpu"}
    assert (folder / "pool_recipe.json").stat().st_size < 4096 < (folder / "pool.safetensors").stat().st_size
    assert regen.n_sets == pool.n_sets == 16 and sorted(regen) == sorted(pool)
    assert sorted(ref_regen) == sorted(ref) and len(ref) == 4  # 2 distributions x 2 dtypes


def test_regenerated_pools_and_references_are_bit_identical_to_stored_ones(stored_and_regenerated):
    _, pool, regen, ref, ref_regen = stored_and_regenerated
    for stored, again in ((pool, regen), (ref, ref_regen)):
        for key in stored:
            a, b = stored[key], again[key]
            assert (a.shape, a.dtype) == (b.shape, b.dtype)
            assert torch.equal(a.load(), b.load()), key
            assert torch.equal(a[3:7], b[3:7]) and torch.equal(a[5], b[5]) and torch.equal(a[[1, 9]], b[[1, 9]])
            assert [s for s, _ in b.chunks(6)] == [0, 6, 12]


def test_a_batch_of_arguments_is_drawn_once(monkeypatch):
    draws = []
    real = s_assets.draw_sets
    monkeypatch.setattr(s_assets, "draw_sets", lambda *a, **k: draws.append(a[2:5]) or real(*a, **k))
    w = WORKLOADS["layernorm"]  # three arguments: x, weight, bias
    regen = RegeneratedSets(as_recipe("input_pool", w, SMOKE, pool_stream(w, SMOKE)).as_json()["__set_recipe__"])
    batch = [regen[f"normal/float16/{a}"][0:8] for a in w.arg_names]
    assert len(batch) == 3 and draws == [("normal", 0, 8)]
    regen["normal/bfloat16/x"][0:8]  # outside dtype units one draw serves both dtypes: kept
    assert draws == [("normal", 0, 8)]
    regen["normal/float16/x"][8:16]
    assert draws == [("normal", 0, 8), ("normal", 8, 16)]


def test_a_recipe_that_no_longer_rebuilds_what_it_recorded_is_refused(stored_and_regenerated):
    folder = stored_and_regenerated[0]
    record = json.loads((folder / "pool_recipe.json").read_text())
    record["__set_recipe__"]["n_sets"] = 17
    (folder / "stale.json").write_text(json.dumps(record))
    stale = read_value(folder / "stale")  # listed from the record; refused when a set is asked for
    assert stale["normal/float16/x"].shape[0] == 17
    with pytest.raises(ValueError, match=r"no longer rebuilds what it recorded.*rematerialize it"):
        stale["normal/float16/x"][0]
    record["__set_recipe__"]["kind"] = "no_such_kind"
    (folder / "unknown.json").write_text(json.dumps(record))
    with pytest.raises(KeyError, match="kind 'no_such_kind' cannot be read here: known kinds are fp64_reference"):
        read_value(folder / "unknown")


@pytest.mark.parametrize(
    ("profile", "keep", "stores"),
    [
        ("smoke", None, True),
        ("default", None, True),
        ("gpu", None, False),
        ("seed", None, False),
        ("gpu", True, True),
        ("smoke", False, False),
    ],
)
def test_the_profile_chooses_whether_sets_are_stored_and_keep_sets_overrides_it(profile, keep, stores):
    assert ExperimentSettings(profile=profile, device="cpu", keep_sets=keep).stores_sets() is stores


@pytest.mark.parametrize(("env", "keep"), [("1", True), ("0", False), ("", None)])
def test_keep_sets_defaults_from_the_environment(monkeypatch, env, keep):
    monkeypatch.setenv("FUSION_KEEP_SETS", env)
    assert ExperimentSettings(profile="gpu", device="cpu").keep_sets is keep


def test_a_recipe_made_for_a_device_this_machine_lacks_lists_its_sets_and_refuses_to_produce_them(
    stored_and_regenerated,
):
    # an imported GPU run's references: pages list them; only producing a set needs the device
    folder = stored_and_regenerated[0]
    record = json.loads((folder / "ref_recipe.json").read_text())
    record["__set_recipe__"]["params"]["device"] = "cuda"
    (folder / "gpu_ref.json").write_text(json.dumps(record))
    refs = read_value(folder / "gpu_ref")
    assert (
        len(refs) == 4 and refs["normal/float16"].dtype == torch.float64 and refs["normal/float16"].shape == (16, 4, 32)
    )
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda' requested but torch reports no cuda backend"):
            refs["normal/float16"][0]
