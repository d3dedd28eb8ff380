"""The bisection on CUDA, tested on the CPU: one code path (:func:`precisionkit.bisect.bisect`)
chooses the device's knob sets. Each variant's interpreter is replaced by a recorder that writes a
generated kernel into the variant's cache and answers by the knob it was given, so the path, the
table, the kernel hash and the verdict are checked without a GPU or a compile."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from precisionkit import bisect as pk_bisect
from precisionkit.repro import Case, Input, ScriptRun

_SEEN: list[tuple[str, str, dict[str, str]]] = []
_FIRST_LAYERS = ("eager", "aot_eager", "aot_eager_decomp_partition")


def _fake_runner(kernel_file: str, kernel_text: str, clean_when: str) -> object:
    """A stand-in for ``run_script``: writes the same generated kernel under every variant's cache
    and reports clean for the layers before Inductor and for the one variant named by ``clean_when``
    (a prelude fragment or a compiler flag)."""

    def run(script: object, args: list[str], **kw: object) -> ScriptRun:
        env: dict[str, str] = kw["env"]  # type: ignore[assignment]
        prelude = str(kw.get("prelude", ""))
        (Path(env["TORCHINDUCTOR_CACHE_DIR"]) / kernel_file).write_text(kernel_text)
        cxx = Path(env["CXX"]).read_text() if "CXX" in env and Path(env["CXX"]).exists() else ""
        _SEEN.append((args[0], prelude, {k: v for k, v in env.items() if k != "TORCHINDUCTOR_CACHE_DIR"}))
        clean = args[0] in _FIRST_LAYERS or clean_when in prelude or clean_when in cxx
        return ScriptRun(0 if clean else 1, "clean: agrees" if clean else "REPRODUCES: 3 of 9 elements wrong", 0.01)

    return run


def _case(device: str) -> Case:
    return Case("b", "def graph(x):\n    return x.sum(-1)\n", (Input("x", (3, 33)),), rule="diff", device=device)


@pytest.fixture(autouse=True)
def _no_pytorch_bisector(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pk_bisect, "pytorch_bisector", lambda *a, **k: "found no failing configuration")
    _SEEN.clear()


def test_on_cuda_the_toolchain_layer_is_triton_and_its_kernel_hash_is_recorded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kernel = "import triton\n@triton.jit\ndef triton_red_fused_sum_0(in_ptr0, out_ptr0, xnumel, rnumel):\n    pass\n"
    monkeypatch.setattr(pk_bisect, "run_script", _fake_runner("k.py", kernel, "c.num_warps = 8"))
    bis = pk_bisect.bisect(tmp_path / "repro.py", _case("cuda"), workers=1)
    names = [v.name for v in bis.variants]
    assert names[:4] == [n for n, _ in pk_bisect.LAYERS]
    assert [n for n in names[4:]] == [k.name for k in (*pk_bisect.TRITON_KNOBS, *pk_bisect.CUDA_INDUCTOR_KNOBS)]
    assert bis.layer_at_fault.startswith("Triton/PTX toolchain") and "num_warps=8" in bis.layer_at_fault
    assert bis.workaround == "compile Inductor's Triton kernels with num_warps=8"
    hashes = {v.cpp_sha256 for v in bis.variants[3:]}
    assert len(hashes) == 1 and len(hashes.pop()) == 64  # the same generated kernel under every variant
    assert bis.kernel_excerpt.startswith("@triton.jit") and "another Triton version" in bis.skipped[0]
    assert ("inductor", "", {}) in [(b, p, e) for b, p, e in _SEEN]
    fp_fusion = next(e for _b, _p, e in _SEEN if "TRITON_DEFAULT_FP_FUSION" in e)
    assert fp_fusion == {"TRITON_DEFAULT_FP_FUSION": "0"}


def test_on_the_cpu_the_same_path_takes_the_cpp_knob_sets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    kernel = 'extern "C" void kernel(const float* in_ptr0, float* out_ptr0) {}\n'
    monkeypatch.setattr(pk_bisect, "run_script", _fake_runner("k.cpp", kernel, "'-O2'"))
    bis = pk_bisect.bisect(tmp_path / "repro.py", _case("cpu"), workers=1)
    names = [v.name for v in bis.variants]
    assert "-O2" in names and "num_warps=2" not in names and "cpp.simdlen=0 (no vectorization)" in names
    assert bis.layer_at_fault.startswith("native toolchain (C++ compiler)") and "-O2" in bis.workaround
    assert bis.kernel_excerpt.startswith('extern "C"')


def test_knob_sets_follow_the_device_type() -> None:
    assert pk_bisect.knob_sets("cuda:1") == (pk_bisect.TRITON_KNOBS, pk_bisect.CUDA_INDUCTOR_KNOBS)
    assert pk_bisect.knob_sets("cpu") == (pk_bisect.TOOLCHAIN_KNOBS, pk_bisect.INDUCTOR_KNOBS)
    with pytest.raises(ValueError, match="not a torch device"):
        pk_bisect.knob_sets("gpu")


def test_the_triton_launch_prelude_fixes_warps_and_stages_of_every_config(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.config as ic
    import torch._inductor.runtime.triton_heuristics as h

    for name in ("triton_config", "triton_config_reduction"):
        monkeypatch.setattr(h, name, lambda *a, **k: types.SimpleNamespace(num_warps=4, num_stages=3), raising=False)
    # Inductor's own patch restores the option; monkeypatch's undo deletes a config option (every later
    # compile in the process then fails on a missing compile_threads).
    with ic.patch(compile_threads=ic.compile_threads):
        exec(compile(pk_bisect._triton_launch(num_warps=2, num_stages=1), "<prelude>", "exec"), {})
        cfg = h.triton_config({"x": 64}, 32)
        assert (cfg.num_warps, cfg.num_stages) == (2, 1) and ic.compile_threads == 1
    assert hasattr(ic, "compile_threads")
    assert h.triton_config_reduction({"x": 64}, 32, 32).num_warps == 2


def test_generated_triton_is_hashed_without_the_cache_path(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        (root / "xy").mkdir(parents=True)
        (root / "xy" / "k.py").write_text(f"# {root}\n@triton.jit\ndef triton_poi_0(x):\n    pass\n")
        (root / "xy" / "other.py").write_text("print('not a kernel')\n")
    assert pk_bisect.generated_triton(a)[0] == pk_bisect.generated_triton(b)[0] != ""
    assert pk_bisect.generated_triton(tmp_path / "empty") == ("", "")
    assert pk_bisect.generated_code(a, "cpu") == ("", "")  # no C++ there
