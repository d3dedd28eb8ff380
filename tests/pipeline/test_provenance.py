"""Provenance: the source commit comes from this project's own git checkout or says it has none, and
the one-off costs (Inductor's vector-ISA probe, nvidia-smi, git) are paid once per process, the probe
only for CPU runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from pipeline import compile_cache, devices, resources, source
from pipeline.resources import ExperimentSettings

REPO = Path(__file__).resolve().parents[2]
GIT = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def _copy_source(target: Path) -> Path:
    """The packages' source (no caches) copied to ``target``, as a plain copy of the project would be."""
    for pkg in source.HASHED_PACKAGES:
        shutil.copytree(REPO / pkg, target / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return target


def _fresh_repo(folder: Path) -> str:
    """``folder`` as a git repository with everything in it committed once; the commit."""
    folder.mkdir(parents=True, exist_ok=True)
    _git(folder, "init", "-q")
    (folder / "README").write_text("another project\n")
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "one commit")
    return _git(folder, "rev-parse", "HEAD")


@pytest.fixture(autouse=True)
def _no_cached_source(monkeypatch):
    monkeypatch.delenv(source.COMMIT_ENV, raising=False)
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_CEILING_DIRECTORIES"):
        monkeypatch.delenv(var, raising=False)
    source.source_provenance.cache_clear()
    yield
    source.source_provenance.cache_clear()


def test_a_copy_inside_another_repository_does_not_take_its_commit(tmp_path, monkeypatch):
    outer = tmp_path / "workspace"
    _fresh_repo(outer)
    proj = _copy_source(outer / "proj")
    _git(outer, "add", "-A")
    _git(outer, "commit", "-q", "-m", "the copy")
    foreign = _git(outer, "rev-parse", "HEAD")
    assert _git(proj, "rev-parse", "--show-toplevel") == str(outer.resolve())  # git would answer with the outer one

    got = source.source_provenance(proj)
    assert got["git_commit"] == source.NOT_A_CHECKOUT != foreign
    assert got["commit_origin"] == "none"
    assert got["source_sha256"] == source.source_sha256(proj) and len(got["source_sha256"]) == 64

    # The stamp file written when the source is exported names the commit ...
    (proj / source.COMMIT_FILE).write_text("a6e6ca4\n")
    source.source_provenance.cache_clear()
    got = source.source_provenance(proj)
    assert (got["git_commit"], got["commit_origin"]) == ("a6e6ca4", "SOURCE_COMMIT file")
    # ... and the environment variable takes precedence over it.
    monkeypatch.setenv(source.COMMIT_ENV, "feedbeef")
    source.source_provenance.cache_clear()
    assert source.source_provenance(proj)["git_commit"] == "feedbeef"


def test_a_copy_outside_any_repository_records_a_hash_of_its_code(tmp_path):
    proj = _copy_source(tmp_path / "plain")
    if subprocess.run(["git", "rev-parse"], cwd=proj, capture_output=True).returncode == 0:
        pytest.skip("the temporary folder lies inside a git work tree here")
    got = source.source_provenance(proj)
    assert got["git_commit"] == source.NOT_A_CHECKOUT
    before = got["source_sha256"]
    # The hash covers the code: one changed byte in one module changes it.
    module = proj / "pipeline" / "source.py"
    module.write_text(module.read_text() + "\n")
    assert source.source_sha256(proj) != before


def test_a_copy_that_is_its_own_repository_records_its_head(tmp_path):
    proj = _copy_source(tmp_path / "own")
    head = _fresh_repo(proj)
    got = source.source_provenance(proj)
    assert (got["git_commit"], got["commit_origin"]) == (head, "git")
    (proj / "pipeline" / "source.py").write_text("# changed\n")
    source.source_provenance.cache_clear()
    assert source.source_provenance(proj)["git_commit"] == head + "+dirty"


def test_commits_this_repository_does_not_hold_are_told_apart(tmp_path):
    if source.git_checkout_commit(REPO) is None:
        pytest.skip("this source is not a git checkout")
    head = _git(REPO, "rev-parse", "HEAD")
    assert source.commit_known(head, REPO) is True
    assert source.commit_known(head + "+dirty", REPO) is True
    assert source.commit_known("9ca536bd747e6b71992f8404c0214e9d382f2dc0", REPO) is False
    assert source.commit_known(source.NOT_A_CHECKOUT, REPO) is None
    assert source.commit_known(head, tmp_path) is None  # not a checkout: nothing to compare


def test_the_package_version_is_read_from_the_source_next_to_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "fusion-precision"\nversion = "9.8.7"\n')
    assert source.package_version(tmp_path) == "9.8.7"
    assert source.package_version(tmp_path / "nowhere") not in ("", "unknown")


# --- one-off costs -----------------------------------------------------------------------------


@pytest.fixture
def fresh_machine_provenance():
    resources.machine_provenance.cache_clear()
    yield
    resources.machine_provenance.cache_clear()


def test_the_vector_isa_probe_does_not_run_for_an_accelerator(monkeypatch, fresh_machine_provenance):
    def probe(*_: object) -> str:
        raise AssertionError("Inductor's CPU vector-ISA probe ran for a non-CPU device")

    monkeypatch.setattr(compile_cache, "probed_vec_isa", probe)
    monkeypatch.setattr(resources, "cpu_capability", probe)
    monkeypatch.setattr("torch._inductor.cpu_vec_isa.pick_vec_isa", probe)
    got = resources.machine_provenance("cuda")
    assert got["inductor_vec_isa"] == "not probed (cuda run)"
    assert got["cpu_capability"] == str(torch.backends.cpu.get_cpu_capability())
    assert got["git_commit"] and got["source_sha256"]


def test_the_probe_runs_for_a_cpu_run(monkeypatch, fresh_machine_provenance):
    calls = []
    monkeypatch.setattr(resources, "cpu_capability", lambda: calls.append(1) or {"inductor_vec_isa": "probed"})
    assert resources.machine_provenance("cpu")["inductor_vec_isa"] == "probed"
    assert calls == [1]


def test_repeated_provenance_reuses_what_it_computed_once(monkeypatch, fresh_machine_provenance):
    calls = []
    real = resources.device_versions
    monkeypatch.setattr(resources, "device_versions", lambda d: calls.append(d) or real(d))
    settings = ExperimentSettings(profile="smoke", device="cpu")
    first = settings.provenance()
    again = ExperimentSettings(profile="smoke", device="cpu", seed=7).provenance()
    assert len(calls) == 1
    assert again["seed"] == 7 and {k: v for k, v in again.items() if k != "seed"} == {
        k: v for k, v in first.items() if k != "seed"
    }
    assert first["git_commit"] == source.source_provenance()["git_commit"]


def test_the_driver_version_is_asked_of_nvidia_smi_once(monkeypatch):
    runs = []

    def fake_run(cmd, **_):
        runs.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="580.159.04\n580.159.04\n", stderr="")

    devices._nvidia_smi_driver.cache_clear()
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(subprocess, "run", fake_run)
    try:
        assert [devices._nvidia_smi_driver() for _ in range(3)] == ["580.159.04"] * 3
        assert len(runs) == 1
    finally:
        devices._nvidia_smi_driver.cache_clear()


def test_the_cache_key_predicts_the_isa_without_building(monkeypatch):
    monkeypatch.setattr("torch._inductor.cpu_vec_isa.VecISA.check_build", lambda *_: pytest.fail("built"))
    compile_cache.predicted_vec_isa.cache_clear()
    try:
        assert compile_cache.cache_key_parts()["inductor_vec_isa"] == compile_cache.predicted_vec_isa()
    finally:
        compile_cache.predicted_vec_isa.cache_clear()
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR")  # importing the pipeline chose a cache folder


def test_the_predicted_isa_is_the_one_inductor_probes_here():
    # So the cache folders keyed before the prediction replaced the probe keep their names.
    assert compile_cache.predicted_vec_isa() == compile_cache.probed_vec_isa()


def test_vec_isa_ok_off_is_predicted_as_no_vector_isa():
    # TORCHINDUCTOR_VEC_ISA_OK=0 makes Inductor's probe fail every ISA: the key must say so too. Inductor's
    # own config.patch sets and restores the option (a plain monkeypatch deletes it on undo, which hides the
    # option from every later compile in the process).
    from torch._inductor import config

    compile_cache.predicted_vec_isa.cache_clear()
    try:
        with config.patch({"cpp.vec_isa_ok": False}):
            assert compile_cache.predicted_vec_isa() == "INVALID_VEC_ISA"
    finally:
        compile_cache.predicted_vec_isa.cache_clear()
    assert config.cpp.vec_isa_ok is None and compile_cache.predicted_vec_isa() != "INVALID_VEC_ISA"


def test_a_probe_that_disagrees_with_the_prediction_moves_the_cache(monkeypatch):
    """Where a candidate ISA fails to build or load on one machine only, its key (from the CPU's flags)
    could match a machine where it works: the probe of a CPU run moves the cache to the probed ISA's key."""
    monkeypatch.setattr(compile_cache, "predicted_vec_isa", lambda: "avx512")
    parts = compile_cache.cache_key_parts()
    predicted_dir = compile_cache.keyed_cache_dir(parts)
    monkeypatch.setenv(compile_cache.CACHE_ENV, predicted_dir)
    assert compile_cache.check_predicted_isa("avx512") is None and os.environ[compile_cache.CACHE_ENV] == predicted_dir
    assert compile_cache.check_predicted_isa("unknown") is None and os.environ[compile_cache.CACHE_ENV] == predicted_dir
    with pytest.warns(UserWarning, match="'avx2' here, not 'avx512'"):
        assert compile_cache.check_predicted_isa("avx2") is not None
    moved = os.environ[compile_cache.CACHE_ENV]
    assert moved == compile_cache.keyed_cache_dir({**parts, "inductor_vec_isa": "avx2"}) != predicted_dir
    # a folder the user chose is theirs
    monkeypatch.setenv(compile_cache.CACHE_ENV, "/somewhere/mine")
    assert (
        compile_cache.check_predicted_isa("avx2") is None and os.environ[compile_cache.CACHE_ENV] == "/somewhere/mine"
    )


def test_the_cpu_provenance_probe_checks_the_prediction(monkeypatch):
    seen = []
    monkeypatch.setattr(compile_cache, "probed_vec_isa", lambda: "probed-isa")
    monkeypatch.setattr(compile_cache, "check_predicted_isa", seen.append)
    resources.cpu_capability.cache_clear()
    try:
        assert resources.cpu_capability()["inductor_vec_isa"] == "probed-isa" and seen == ["probed-isa"]
    finally:
        resources.cpu_capability.cache_clear()


def test_cpu_threads_are_read_per_call(monkeypatch, fresh_machine_provenance):
    settings = ExperimentSettings(profile="smoke", device="cpu")
    monkeypatch.setattr(resources, "cpu_capability", lambda: {"inductor_vec_isa": "probed"})
    first = settings.provenance()["cpu_threads"]
    monkeypatch.setattr(torch, "get_num_threads", lambda: first + 1)
    assert settings.provenance()["cpu_threads"] == first + 1
