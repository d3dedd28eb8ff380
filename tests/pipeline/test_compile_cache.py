"""The compiler cache is keyed by what changes the generated code, so a run under other ISA settings
never loads another run's kernels."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from pipeline import compile_cache

#: A float32 sum whose vectorized (AVX2) and scalar kernels round differently; prints its value
#: or the first line of the error, and the cache folder in use.
_PROBE = """
import os, sys
import torch
import pipeline  # noqa: F401 - chooses the cache folder
def f(x):
    return (x * 1.0001).sum()
x = torch.randn(100003, generator=torch.Generator().manual_seed(0))
try:
    print(repr(torch.compile(f)(x).item()))
except Exception as exc:
    print("error:", type(exc).__name__)
print(os.environ["TORCHINDUCTOR_CACHE_DIR"])
"""


def _probe(tmp_path, capability: str, cache: str | None) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "ATEN_CPU_CAPABILITY")}
    env.update(ATEN_CPU_CAPABILITY=capability, TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(parents=True, exist_ok=True)
    if cache is not None:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=600, check=True
    ).stdout.split("\n")
    return out[0], out[1]


def test_the_key_changes_with_isa_variables_compiler_and_torch(monkeypatch) -> None:
    base = compile_cache.cache_key_parts()
    assert {"torch", "cpu_model", "aten_cpu_capability", "inductor_vec_isa", "compiler"} <= set(base)
    assert base["torch"] == torch.__version__
    key = compile_cache.cache_key(base)
    assert len(key) == 16 and compile_cache.cache_key(dict(base)) == key
    for field, values in (
        ("ATEN_CPU_CAPABILITY", ("default", "avx2")),
        ("ONEDNN_MAX_CPU_ISA", ("AVX2", "SSE41")),
        ("compiler", ("clang++: 16", "g++: 12")),
        ("torch", ("2.7.1", "2.8.0")),
    ):
        other = next(v for v in values if v != base.get(field))  # this machine may already set the first
        assert compile_cache.cache_key({**base, field: other}) != key, field
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2_TEST")
    assert compile_cache.cache_key_parts()["ONEDNN_MAX_CPU_ISA"] == "AVX2_TEST"
    assert os.path.basename(compile_cache.keyed_cache_dir(base)) == f"fusion-{key}"


def test_a_cache_folder_the_user_set_is_kept(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache.use_keyed_cache() == str(tmp_path / "mine")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    assert os.path.basename(compile_cache.use_keyed_cache()).startswith("fusion-")


@pytest.mark.heavy  # four cold compiles in fresh interpreters: over a minute on two cores (make test-all)
def test_a_shared_folder_serves_another_isas_kernel_and_the_keyed_one_does_not(tmp_path) -> None:
    if str(torch.backends.cpu.get_cpu_capability()) not in ("AVX2", "AVX512"):
        pytest.skip("needs a CPU with AVX2 for a vectorized kernel that differs from the scalar one")
    # Before: one folder for both settings. The scalar run gets the AVX2 run's graph: it fails to
    # rebuild it without vector headers, or returns the vectorized value; never a scalar one.
    shared = str(tmp_path / "shared")
    vectorized = _probe(tmp_path / "a", "avx2", shared)[0]
    served = _probe(tmp_path / "a", "default", shared)[0]
    assert not vectorized.startswith("error") and (served == vectorized or served.startswith("error"))
    # After: no folder set; the pipeline keys one per setting, so the scalar run compiles its own
    # kernel, whose sum rounds differently from the vectorized one.
    value, folder_avx2 = _probe(tmp_path / "b", "avx2", None)
    assert value == vectorized
    own, folder_default = _probe(tmp_path / "b", "default", None)
    assert folder_default != folder_avx2 and os.path.basename(folder_default).startswith("fusion-")
    assert not own.startswith("error") and own != vectorized
