"""Task E and M on compilers other than Inductor: the options that make a backend differentiable, the
backward graph's evidence from any adapter, and a compiler's own failure on a training step or a model
named in one line (OpenVINO and IREE, each skipped where it is not installed)."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import types
from collections.abc import Mapping
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from pipeline.experiments.models.compute import run_model
from pipeline.experiments.models.zoo import zoo_workloads
from pipeline.experiments.training import compilers
from pipeline.experiments.training.compilers import TrainingCompileError, compiler_messages, training_options
from pipeline.experiments.training.config import TrainConfig
from pipeline.experiments.training.corpus import load_corpus
from pipeline.experiments.training.loop import train
from pipeline.experiments.training.spec import SIZES
from precisionkit.backends import adapter_for_backend
from precisionkit.backends.base import BackendAdapter

NO_OPENVINO = importlib.util.find_spec("openvino") is None
NO_IREE = importlib.util.find_spec("iree.turbine") is None if importlib.util.find_spec("iree") else True
needs_openvino = pytest.mark.skipif(
    NO_OPENVINO, reason="OpenVINO is not installed: pip install 'fusion-precision[openvino]'"
)
needs_iree = pytest.mark.skipif(NO_IREE, reason="IREE is not installed: pip install 'fusion-precision[iree]'")


@pytest.fixture(autouse=True)
def _openvinos_options_reset():
    """OpenVINO's backend keeps the options of its last ``aot_autograd`` compile in a module global
    and applies them to every later compile of the process: each test starts and ends without them."""
    yield
    if not NO_OPENVINO:
        from openvino.frontend.pytorch.torchdynamo import backend

        backend.openvino_options = {}


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def tiny_fused(corpus, backend: str, **kwargs) -> TrainConfig:
    """One optimizer step of the smoke model on ``backend``'s fused path, with its training options."""
    options = training_options(backend, {})
    import json

    return TrainConfig.from_profile(
        SIZES["smoke"].model(),
        **{
            "corpus_sha256": corpus.sha256,
            "steps": 1,
            "eval_every": 1,
            "eval_batches": 1,
            "path": "fused",
            "precision": "float32",
            "backend": backend,
            "options_json": json.dumps(options, sort_keys=True),
            **kwargs,
        },
    )


class DeclaresAll(BackendAdapter):
    """A user's compiler that declares what E needs of it: no table of E's names it."""

    name = title = "declares_all"
    training_options: Mapping[str, Any] = {"differentiable": True, "level": 2}
    training_options_why = "its backend traces for inference unless told otherwise"
    failure_loggers = ("declares_all.frontend",)
    process_globals = (("declares_all_state", "sticky", {}), ("declares_all_unloaded", "sticky", 0))


@pytest.fixture
def declares_all(monkeypatch):
    """E's compiler helpers answer :class:`DeclaresAll` for its name, with its state module loaded."""
    real = compilers.adapter_for_backend
    adapter = DeclaresAll()
    monkeypatch.setattr(compilers, "adapter_for_backend", lambda name: adapter if name == adapter.name else real(name))
    state = types.ModuleType("declares_all_state")
    state.sticky = {}
    monkeypatch.setitem(sys.modules, "declares_all_state", state)
    return state


def test_e_reads_what_a_compiler_needs_from_its_adapter_alone(declares_all):
    for table in ("TRAINING_OPTIONS", "COMPILER_LOGGERS", "COMPILER_GLOBALS"):
        assert not hasattr(compilers, table)  # nothing keyed by a compiler's name
    assert training_options("declares_all", {"level": 3}) == {"differentiable": True, "level": 3}
    with compiler_messages("declares_all") as logged:
        logging.getLogger("declares_all.frontend").debug("lowered 4 nodes")
        logging.getLogger("declares_all.frontend").debug("lowering failed:\n  no rule for aten.erf")
    assert logged.lines == ["lowering failed: no rule for aten.erf"]
    with compilers.compiler_globals_kept("declares_all"):
        declares_all.sticky["differentiable"] = True  # the backend keeps a compile's options
    assert declares_all.sticky == {} and "declares_all_unloaded" not in sys.modules


def test_a_compilers_failure_names_what_it_logged_once(declares_all):
    logged = compilers.CompilerMessages(["lowering failed: no rule for aten.erf"])
    said = compilers.compile_failure("declares_all", "the training step's backward", ValueError("no kernel"), logged)
    assert str(said) == (
        "declares_all failed on the training step's backward: ValueError: no kernel; the compiler logged: lowering "
        "failed: no rule for aten.erf"
    )
    # a refusal that names the logged failure already is not followed by it again
    refusal = ValueError("refused; the compiler logged: lowering failed: no rule for aten.erf")
    said = compilers.compile_failure("declares_all", "the training step's backward", refusal, logged)
    assert str(said).count("lowering failed") == 1


def test_training_options_add_what_a_compiler_needs_to_differentiate_and_keep_the_users():
    assert training_options("inductor", {"max_autotune": False}) == {"max_autotune": False}
    assert training_options("aot_eager", {}) == {}
    if not NO_OPENVINO:
        detach = ("torch.ops.aten.detach.default",)
        assert training_options("openvino", {}) == {"aot_autograd": True, "disabled_ops": detach}
        assert training_options("openvino", {"aot_autograd": False, "device": "CPU"}) == {
            "aot_autograd": False,
            "disabled_ops": detach,
            "device": "CPU",
        }


@needs_openvino
def test_openvinos_own_backend_returns_no_gradient_without_aot_autograd():
    """Why E passes OpenVINO ``aot_autograd``: its plain backend traces for inference."""
    import openvino.torch  # noqa: F401

    from precisionkit.backends.openvino_isa import isa_capped_config

    # Under an ONEDNN_MAX_CPU_ISA cap below bf16 the plugin needs the f32 hint to run at all (as the adapter
    # passes it); without it every graph would run in torch and carry a gradient for that reason alone.
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    torch._dynamo.reset()
    lin = torch.nn.Linear(4, 4)
    out = torch.compile(lin, backend="openvino", options=isa_capped_config({}, cap))(torch.randn(4, 4))
    assert out.requires_grad is False and out.grad_fn is None
    torch._dynamo.reset()
    options = isa_capped_config({"aot_autograd": True}, cap)
    out = torch.compile(lin, backend="openvino", options=options)(torch.randn(4, 4))
    assert out.requires_grad is True


@needs_openvino
def test_openvinos_frontend_converts_cross_entropys_training_forward_only_with_detach_left_to_torch():
    """The compiler's failure, with no code of ours around it: the forward graph returns ``_log_softmax`` beside
    its ``detach`` (both saved for the backward), the frontend converts ``detach`` to the tensor itself and cannot
    name a partition's result twice, logs it and runs the partition in torch. With ``detach`` disabled (E's
    training options) the partition converts and nothing falls back."""
    import openvino.torch  # noqa: F401

    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    x, y = torch.randn(8, 8), torch.arange(8)
    F.cross_entropy(lin(x), y).backward()  # eager's gradient, for the comparison below
    expected = lin.weight.grad.clone()
    from precisionkit.backends.openvino_isa import isa_capped_config

    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "")  # under a cap below bf16 the plugin needs the f32 hint to run
    for options, refused in (({"aot_autograd": True}, True), (training_options("openvino", {}), False)):
        options = isa_capped_config(options, cap)
        torch._dynamo.reset()
        lin.weight.grad = None
        fn = torch.compile(lambda a, t: F.cross_entropy(lin(a), t), backend="openvino", options=options)
        with compiler_messages("openvino") as logged:
            fn(x, y).backward()
        said = [line for line in logged.lines if "is_number(name)" in line and "Falling back to native PyTorch" in line]
        assert bool(said) is refused and (refused or logged.lines == [])
        # OpenVINO's CPU plugin may run the matrix products in bf16 (its default hint on a bf16 CPU)
        torch.testing.assert_close(lin.weight.grad, expected, atol=1e-2, rtol=1e-2)


@needs_openvino
def test_openvinos_backend_returns_a_bfloat16_result_as_float16_holding_its_bits():
    """Why E does not apply to OpenVINO: E trains under bf16 autocast, and a bf16 result of an OpenVINO
    partition comes back as a float16 tensor of the same bits (no code of ours around the backend)."""
    import openvino.torch  # noqa: F401

    from pipeline.experiment import not_applicable
    from pipeline.experiments import experiment

    torch._dynamo.reset()
    a = torch.arange(-4.0, 4.0)  # every result exact in bf16: the bits do not depend on how a compiler rounds

    def f(t: torch.Tensor) -> torch.Tensor:
        return (t.to(torch.bfloat16) * 3).relu() + 1

    # through the adapter's compiler: under an ISA cap below bf16 it passes the f32 hint the plugin then needs
    out = torch.compile(f, backend=adapter_for_backend("openvino").compiler(training_options("openvino", {})))(a)
    eager = f(a)
    assert out.dtype == torch.float16 and eager.dtype == torch.bfloat16
    assert torch.equal(out.view(torch.int16), eager.view(torch.int16))  # the bf16 bits, read as float16
    assert torch.tensor(1.0, dtype=torch.bfloat16).view(torch.float16).item() == 1.875
    why = not_applicable(experiment("E"), "openvino")
    assert why is not None and why.startswith("not applicable to OpenVINO: E trains under bfloat16 autocast")
    assert "1.0 reads as 1.875" in why


@needs_openvino
def test_e_trains_under_openvino_in_float32_and_fails_in_one_line_under_bfloat16(corpus):
    from openvino.frontend.pytorch.torchdynamo import backend

    result = train(tiny_fused(corpus, "openvino"), corpus)  # float32: forward and backward compiled by OpenVINO
    ev = result.evidence
    assert ev["train_graph_count"] == 1 and ev["train_kernel_count"] > 0 and ev["bwd_kernel_count"] > 0
    assert ev["bwd_graphs"] >= 1 and len(ev["bwd_code_sha256"]) == 64
    assert [r["step"] for r in result.rows] == [0, 1] and result.rows[1]["eval_loss"] < result.rows[0]["eval_loss"]
    with pytest.raises(TrainingCompileError) as err:
        train(tiny_fused(corpus, "openvino", precision="bfloat16"), corpus)
    assert backend.openvino_options == {}  # the run's aot_autograd does not follow the process into other compiles
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(
        "OpenVINO failed on the training step's backward: RuntimeError: expected m1 and m2 to have the same dtype, "
        "but got: c10::BFloat16 != c10::Half"
    )
    assert "Arguments do not have the same element type (arg0 element type: bf16, arg1 element type: f16)" in message


@needs_iree
def test_e_trains_under_iree_with_its_backward_compiled_by_iree(corpus):
    """E's training step on IREE (its bf16 autocast): the forward and the backward are one IREE program each,
    and the curve follows eager's (what the adapter changes to iree-turbine's backward: its tests)."""
    fused = train(tiny_fused(corpus, "iree", precision="bfloat16"), corpus)
    eager = train(tiny_fused(corpus, "iree", precision="bfloat16", path="eager"), corpus)
    ev = fused.evidence
    assert ev["train_graph_count"] == 1 and ev["train_graph_breaks"] == 0 and ev["train_kernel_count"] > 0
    assert ev["bwd_graphs"] == 1 and ev["bwd_kernel_count"] > 0 and len(ev["bwd_code_sha256"]) == 64
    assert [r["step"] for r in fused.rows] == [0, 1]
    assert fused.rows[0]["eval_loss"] == pytest.approx(eager.rows[0]["eval_loss"], abs=1e-3)
    assert fused.rows[1]["train_loss"] == pytest.approx(eager.rows[1]["train_loss"], abs=1e-3)
    assert fused.rows[1]["eval_loss"] < fused.rows[0]["eval_loss"]  # the step's update reached the weights


def test_inductor_records_the_backward_graphs_code(corpus):
    result = train(tiny_fused(corpus, "inductor"), corpus)
    ev = result.evidence
    assert ev["bwd_graphs"] == 1 and ev["bwd_kernel_count"] > 0 and len(ev["bwd_code_sha256"]) == 64
    assert ev["train_graph_count"] == 1 and ev["options"] == "{}"


@needs_openvino
def test_m_names_openvinos_failure_on_vit_in_one_line():
    """Plain ``torch.compile(vit, backend="openvino")`` fails as well: Dynamo cannot build the guards of
    sizes OpenVINO's inference tracing created without a source."""
    logging.getLogger("torch._guards").setLevel(logging.CRITICAL)  # Dynamo logs the whole failure at ERROR
    vit = zoo_workloads(("vit",), "tiny", 8, 32)[0]
    run = run_model(
        vit,
        "float32",
        device=torch.device("cpu"),
        batches=1,
        batch_size=1,
        backend="openvino",
        options={},
        seed_of=lambda *parts: 7,
    )
    assert run.error.startswith(
        "OpenVINO: compile or fused run failed: IndexError: list index out of range (raised at "
    )
    assert "torch/fx/experimental/symbolic_shapes.py" in run.error and "\n" not in run.error
