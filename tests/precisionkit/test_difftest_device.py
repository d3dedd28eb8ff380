"""The bug finders take the run's device: tested on the CPU with the ``meta`` device (tensors with
shapes, strides and a device but no data) and recording backends, so no GPU is needed. What only
a GPU can show (Triton code, CUDA faults) is simulated: a worker that aborts, a backend raising the
CUDA runtime's error text."""

from __future__ import annotations

import random

import pytest
import torch
from repro_backends import SETUP

from precisionkit import difftest, fuzz
from precisionkit.difftest import gpu
from precisionkit.repro import Case, Input, namespace, render, sanitizer_command
from precisionkit.repro_rules import CHECKS

_RECORDED: list[str] = []


def _recording(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> object:
    _RECORDED.extend(str(t.device) for t in example_inputs if isinstance(t, torch.Tensor))
    return gm.forward


def _register_recorder() -> None:
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "pk_dev_record" not in _COMPILER_FNS:
        register_backend(name="pk_dev_record")(_recording)


# --- the device reaches every instrument -----------------------------------------------------------


def test_generated_programs_carry_the_device_into_their_case_file_and_json() -> None:
    case = difftest.generate(5, "typed", device="cuda")
    assert case.device == "cuda" and difftest.generate(5, "typed").device == "cpu"
    assert case.source == difftest.generate(5, "typed").source  # the device changes where, not what
    text = render(case)
    assert "DEVICE, GEN_DEVICE = 'cuda', 'cuda'" in text and "torch.Generator(GEN_DEVICE)" in text
    assert "with torch.no_grad(), torch.device(DEVICE):" in text and "compute-sanitizer" in text
    assert Case.from_json(case.to_json()) == case
    cpu_text = render(difftest.generate(5, "typed"))
    assert "DEVICE" not in cpu_text and "torch.device(" not in cpu_text  # CPU files are as before
    with pytest.raises(ValueError, match="device must be a torch device"):
        difftest.generate(5, "typed", device="gpu0")
    with pytest.raises(ValueError, match="is not a torch device"):
        case.with_(device="tpu-ish")


def test_inputs_are_drawn_on_the_device_in_every_layout() -> None:
    inputs = (
        Input("x", (2, 3, 4, 5), "float16", 1, "channels_last"),
        Input("y", (3, 5), "float32", 2, "transposed", values="edge"),
        Input("i", (3, 5), "int64", 3, values="index", scale=5.0),
    )
    src = "def graph(x, y, i):\n    return x.sum(1), y + i\n"
    on_meta = namespace(Case("m", src, inputs, rule="diff", device="meta"))["make"]()
    on_cpu = namespace(Case("c", src, inputs, rule="diff"))["make"]()
    assert [t.device.type for t in on_meta] == ["meta"] * 3
    assert [t.stride() for t in on_meta] == [t.stride() for t in on_cpu] == [(60, 1, 15, 3), (1, 3), (5, 1)]
    assert on_cpu[0].is_contiguous(memory_format=torch.channels_last)


def test_every_path_of_a_program_runs_on_its_device() -> None:
    """Eager, fp64 and the fused path all get meta tensors, and so do factory calls in the graph
    (``torch.zeros`` without a device); only comparing values fails on meta, which has none."""
    _register_recorder()
    _RECORDED.clear()
    src = "def graph(x):\n    return x + torch.zeros(3, 5, dtype=x.dtype)\n"
    out = difftest.run(Case("m", src, (Input("x", (3, 5)),), rule="diff", device="meta"), "pk_dev_record")
    assert set(_RECORDED) == {"meta"} and len(_RECORDED) >= 1
    assert out.klass == "compile_error" and "meta tensor" in out.message  # eager and fp64 ran: not invalid
    assert out.row()["device"] == "meta"


class _OnDevice:
    """A tensor on a device without an fp64 kernel for the graph's op (what MPS is for many ops)."""

    device = "mps:0"

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def is_floating_point(self) -> bool:
        return True

    def double(self) -> _OnDevice:
        return _OnDevice(self.t.double())

    def cpu(self) -> torch.Tensor:
        return self.t


def test_the_fp64_reference_falls_back_to_the_host_and_says_so() -> None:
    scope: dict = {"torch": torch}
    exec(CHECKS["diff"], scope)

    def graph(x: torch.Tensor | _OnDevice) -> torch.Tensor:
        if isinstance(x, _OnDevice):
            raise NotImplementedError("no fp64 kernel on this device")
        return x * 2

    out = scope["reference"](graph, [_OnDevice(torch.ones(2))])
    assert out[0].dtype == torch.float64 and out[0].tolist() == [2.0, 2.0] and scope["REFERENCE"]["device"] == "cpu"
    scope["reference"](lambda x: x + 1, [torch.ones(2, device="meta")])
    assert scope["REFERENCE"]["device"] == "meta"  # where the device has the op, fp64 stays there
    with pytest.raises(NotImplementedError):  # on the host there is nowhere else to go
        scope["reference"](lambda x: graph(_OnDevice(x)), [torch.ones(2)])


def test_a_cpu_run_records_its_reference_device_and_keeps_the_cpu_rule() -> None:
    case = Case("c", "def graph(x):\n    return x * 3.0\n", (Input("x", (2, 9)),), backend="eager", rule="diff")
    out = difftest.run(case, "eager")
    assert (out.klass, out.reference_device, out.control) == ("ok", "cpu", "")


def test_the_graph_fuzzer_draws_and_runs_on_its_device() -> None:
    graph = fuzz.generate(3)
    meta, cpu = graph.make_inputs("meta"), graph.make_inputs()
    assert {t.device.type for t in meta} == {"meta"} and [t.shape for t in meta] == [t.shape for t in cpu]
    assert [t.dtype for t in meta] == [t.dtype for t in cpu]
    out = fuzz.run_graph(graph, "eager", device="cpu")
    assert out.extra["device"] == "cpu" and out.extra["reference_device"] == "cpu"
    script = fuzz.reproducer_script(graph, out, "eager", device="cuda:1")
    assert "DEVICE = 'cuda:1'" in script and "make_inputs(INPUTS, DTYPE, DEVICE)" in script


def test_the_locator_records_where_it_ran_and_where_fp64_ran() -> None:
    from precisionkit.locator import locate_divergence, model_device, reference_device

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
    res = locate_divergence(model, torch.randn(2, 8), backend="eager", device="cpu")
    assert (res.meta["device"], res.meta["reference_device"]) == ("cpu", "cpu")
    assert reference_device(torch.device("cuda:1")) == torch.device("cuda:1")
    assert reference_device(torch.device("mps")) == torch.device("cpu")  # MPS has no fp64
    assert model_device(model.to("meta")) == torch.device("meta") and model_device(torch.nn.ReLU()).type == "cpu"


def test_reproducer_environment_and_cases_take_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.instruments.diagnostics import cases
    from pipeline.instruments.diagnostics import repro_build as repros

    assert repros.environment("meta")["device"] == "meta" and "gpu" not in repros.environment("cpu")
    monkeypatch.setattr(repros, "device_name", lambda d: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(
        repros,
        "device_versions",
        lambda d: {"compute_capability": "9.0", "driver": "550.54", "cuda_runtime": "12.4"},
    )
    env = repros.gpu_environment(torch.device("cuda"))
    assert env["gpu"] == "NVIDIA H100 80GB HBM3" and (env["compute_capability"], env["driver"]) == ("9.0", "550.54")
    assert env["cuda"] == "12.4" and env["triton"]
    # A CUDA case compiles no C++: Inductor's CPU ISA probe (a C++ build per candidate ISA) is not run for it.
    import torch._inductor.cpu_vec_isa as vec_isa

    def no_probe() -> str:
        raise AssertionError("the CPU ISA probe ran for a CUDA case")

    monkeypatch.setattr(vec_isa, "pick_vec_isa", no_probe)
    assert repros.environment("cuda")["inductor_vec_isa"] == "not probed (cuda case)"
    assert cases.difftest_case("norm", 2, device="cuda").device == "cuda"
    assert cases.fuzz_case(4, device="cuda:0").device == "cuda:0"


# --- crashes on the device ------------------------------------------------------------------------

FAULTS_SETUP = """
import os
from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

def _abort(gm, example_inputs):
    os.abort()

def _fault(gm, example_inputs):
    def run(*args):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    return run

for _name, _fn in (("pk_dev_abort", _abort), ("pk_dev_fault", _fault)):
    if _name not in _COMPILER_FNS:
        register_backend(name=_name)(_fn)
"""


def test_a_device_fault_or_an_abort_is_a_crash_and_the_campaign_goes_on() -> None:
    src = "def graph(x):\n    return x * 2.0\n"
    case = lambda backend: Case("f", src, (Input("x", (2, 3)),), backend=backend, rule="diff")  # noqa: E731
    with difftest.Isolated(FAULTS_SETUP + SETUP, timeout=120) as worker:
        first = worker.run(case("eager"), "eager")
        pid = worker.proc.pid
        fault = worker.run(case("pk_dev_fault"), "pk_dev_fault")
        assert first.klass == "ok" and fault.klass == "crash" and fault.fault
        assert fault.message.startswith("device fault in the fused run: RuntimeError: CUDA error: an illegal")
        assert worker.crashes == 1 and worker.proc is None  # replaced: the next program starts a fresh one
        aborted = worker.run(case("pk_dev_abort"), "pk_dev_abort")
        assert aborted.klass == "crash" and aborted.message == "fused run: the interpreter died (SIGABRT)"
        after = worker.run(case("eager"), "eager")
        assert after.klass == "ok" and worker.proc.pid != pid and worker.crashes == 2


def test_device_faults_are_told_from_compile_errors() -> None:
    assert difftest.runner.device_fault(RuntimeError("CUDA error: unspecified launch failure"))
    assert difftest.runner.device_fault(RuntimeError("device-side assert triggered"))
    assert not difftest.runner.device_fault(RuntimeError("InductorError: LoweringException: foo"))


def test_a_crashing_cuda_reproducer_is_offered_compute_sanitizer(tmp_path: object) -> None:
    from pathlib import Path

    from pipeline.instruments.diagnostics.repro_build import sanitizer_for

    found = lambda name: f"/opt/cuda/bin/{name}"  # noqa: E731
    cmd = sanitizer_command("repro.py", "/usr/bin/python3", found)
    assert cmd == [
        "/opt/cuda/bin/compute-sanitizer",
        "--tool",
        "memcheck",
        "--error-exitcode",
        "3",
        "/usr/bin/python3",
        "repro.py",
    ]
    assert sanitizer_command("repro.py", which=lambda name: None) is None
    script = Path("/x/repro.py")
    assert sanitizer_for(script, "error", "cuda", "python", found).startswith("/opt/cuda/bin/compute-sanitizer ")
    assert sanitizer_for(script, "reproduces", "cuda", "python", found) == ""  # no crash: nothing to offer
    assert sanitizer_for(script, "error", "cpu", "python", found) == ""


# --- the same judgment, and the deterministic-algorithms control ------------------------------------


def test_the_deterministic_control_is_recorded_beside_the_rules_class() -> None:
    case = Case(
        "g", "def graph(x):\n    return x * 2.0\n", (Input("x", (3, 4)),), backend="pk_test_garbage_one", rule="diff"
    )
    case = case.with_(setup=SETUP)
    out = difftest.run(case, "pk_test_garbage_one", control=True)
    assert out.klass == "mismatch" and out.control == "reproduces"  # a wrong element whatever the algorithms
    assert not torch.are_deterministic_algorithms_enabled()  # restored
    plain = difftest.run(case, "pk_test_garbage_one")
    assert plain.klass == "mismatch" and plain.control == ""  # on the CPU only when asked


# --- the GPU vocabulary -----------------------------------------------------------------------------


GPU_FEATURES = {
    "persistent_reduction",
    "looped_reduction",
    "split_reduction",
    "welford",
    "masked_tail",
    "where_fill_reduction",
    "matmul16_epilogue",
    "scan",
    "atomic_scatter",
    "channels_last_input",
    "strided_input",
}


def test_every_gpu_feature_is_generated_and_runs_eagerly_on_the_cpu() -> None:
    seen: set[str] = set()
    options: set[str] = set()
    for seed in range(80):
        case = difftest.generate(seed, "gpu")
        scope = namespace(case)
        with torch.no_grad():
            scope["graph"](*scope["make"]())
            scope["reference"](scope["graph"], scope["make"]())
        seen |= set(case.extra["features"])
        options |= {k for k, _ in case.options}
    assert seen >= GPU_FEATURES, GPU_FEATURES - seen
    assert "large_index" not in seen  # only behind PK_DIFFTEST_LARGE=1, on CUDA
    assert options == {k for k, _ in gpu.HOST_OPTIONS}  # Triton's options are drawn on CUDA only


def test_triton_options_are_drawn_on_cuda_only_and_large_index_behind_its_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on_cuda = {k for s in range(60) for k, _ in difftest.generate(s, "gpu", device="cuda").options}
    assert on_cuda == {k for k, _ in gpu.CUDA_OPTIONS}
    assert difftest.generate(7, "gpu", device="cuda").source == difftest.generate(7, "gpu").source
    monkeypatch.setenv(gpu.LARGE_ENV, "1")
    large = [s for s in range(120) if "large_index" in difftest.generate(s, "gpu", device="cuda").extra["features"]]
    assert large and not any("large_index" in difftest.generate(s, "gpu").extra["features"] for s in large)
    assert gpu.draw_options(random.Random(0), "cpu").keys() <= {k for k, _ in gpu.HOST_OPTIONS}


def test_gpu_programs_compile_and_agree_on_cpu_inductor() -> None:
    """Three small GPU-vocabulary programs (a persistent reduction, a scan, an atomic scatter) through
    CPU Inductor with their drawn options: they compile, run and agree."""
    picked: dict[str, Case] = {}
    for seed in range(200):
        case = difftest.generate(seed, "gpu", "float32")
        feats = set(case.extra["features"])
        for want in ("persistent_reduction", "scan", "atomic_scatter"):
            if (
                want in feats
                and want not in picked
                and len(feats & GPU_FEATURES) == 1
                and case.extra["reduction"] < 300
            ):
                picked[want] = case
    assert set(picked) == {"persistent_reduction", "scan", "atomic_scatter"}
    for case in picked.values():
        out = difftest.run(case, "inductor")
        assert out.klass == "ok", (case.id, out.message)


def test_a_cuda_plan_draws_a_third_from_the_gpu_generator_and_the_cpu_plan_is_unchanged() -> None:
    cuda = difftest.plan(240, 0, "cuda")
    assert len(cuda) == 240 and [g for g, _ in cuda].count("gpu") == 80
    assert difftest.plan(240, 0, "cpu") == difftest.plan(240, 0) and "gpu" not in {g for g, _ in difftest.plan(240)}
    assert difftest.plan(240, 0, "meta") == difftest.plan(240, 0)
    with pytest.raises(ValueError, match="programs must be >= 0"):
        difftest.plan(-1)


def test_the_minimizer_traces_on_the_device_and_its_candidates_keep_it() -> None:
    from precisionkit.minimize import dim_candidates, layout_candidates, trace

    src = "def graph(x):\n    return torch.relu(x) + torch.ones(3, 5)\n"
    case = Case("m", src, (Input("x", (3, 5), layout="transposed"),), rule="diff", device="meta")
    shapes = [tuple(n.meta["tensor_meta"].shape) for n in trace(case).graph.nodes if "tensor_meta" in n.meta]
    assert shapes and all(s == (3, 5) for s in shapes)  # torch.ones was made on meta beside x
    candidates = [*dim_candidates(case), *layout_candidates(case)]
    assert candidates and {c.device for c in candidates} == {"meta"}
