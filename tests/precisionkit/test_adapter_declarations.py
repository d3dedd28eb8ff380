"""What an experiment needs of a compiler beyond a forward pass is declared on its adapter: the options that
make it differentiate a training step, the loggers where it reports a failure it then hides, and the module
globals it carries between compiles. The failure loggers serve every fused path: its capture keeps the
compiler's own error text, and a refusal names it (a fake compiler; OpenVINO's capture where it is installed)."""

from __future__ import annotations

import importlib.util
import logging
from contextlib import contextmanager

import pytest
import torch

import precisionkit
from precisionkit import FusionError
from precisionkit.backends import failures_logged, get_adapter
from precisionkit.backends.base import BackendAdapter, CompileCapture, FusedUnit

NO_OPENVINO = importlib.util.find_spec("openvino") is None
LOGGER = "hides_failures.frontend"


class HidesFailures(BackendAdapter):
    """A compiler whose frontend logs, at DEBUG, that it failed to lower a graph, then runs it in torch."""

    name = title = "hides_failures"
    failure_loggers = (LOGGER,)

    def compiler(self, options):
        def compile_graph(gm, example_inputs):
            log = logging.getLogger(LOGGER)
            log.debug("lowering %d nodes", len(gm.graph.nodes))  # no failure: not collected
            log.debug("frontend failed:\n  no lowering for %s", "aten.tanh")
            return gm.forward

        return compile_graph


class OwnCapture(HidesFailures):
    """The same compiler with a capture and a refusal of its own (as OpenVINO's adapter has): the capture
    collects the failure loggers all the same, and the refusal names what they caught with ``naming_logged``."""

    name = title = "own_capture"

    @contextmanager
    def capture(self):
        yield CompileCapture(units=[FusedUnit("u0", ("mul",))], partitions=1)

    def fusion_problem(self, capture):
        return self.naming_logged("ran 1 graph(s) in torch after failing to lower them", capture)


def with_adapter(monkeypatch: pytest.MonkeyPatch, adapter: BackendAdapter) -> None:
    import precisionkit.paths as paths

    real = paths.adapter_for_backend
    monkeypatch.setattr(paths, "adapter_for_backend", lambda name: adapter if name == adapter.name else real(name))


def scale_shift_tanh(x):
    return torch.tanh(x * 2 + 1)


def test_an_adapter_declares_nothing_beyond_a_forward_pass_by_default():
    for adapter in (BackendAdapter(), get_adapter("inductor")):
        assert adapter.training_options == {} and adapter.training_options_why == ""
        assert adapter.failure_loggers == () and adapter.process_globals == ()
    iree = get_adapter("iree", require_installed=False)  # a training step's backward: its one declaration
    assert iree.training_options == {"compile_backward": True} and "turbine_cpu fails" in iree.training_options_why
    assert iree.failure_loggers == () and iree.process_globals == ()


def test_openvinos_adapter_declares_what_its_backend_needs():
    ov = get_adapter("openvino", require_installed=False)  # class attributes: no openvino import needed
    assert ov.training_options == {"aot_autograd": True, "disabled_ops": ("torch.ops.aten.detach.default",)}
    assert "only through AOTAutograd" in ov.training_options_why
    assert ov.failure_loggers == (
        "openvino.frontend.pytorch.torchdynamo.execute",
        "openvino.frontend.pytorch.torchdynamo.backend",
    )
    assert ov.process_globals == (("openvino.frontend.pytorch.torchdynamo.backend", "openvino_options", {}),)


def test_a_refusal_names_the_failure_the_compiler_logged_and_hid(monkeypatch):
    with_adapter(monkeypatch, HidesFailures())
    fn = precisionkit.fused(scale_shift_tanh, backend="hides_failures")
    with pytest.raises(
        FusionError,
        match=r"^fused path \(backend 'hides_failures'\) for 'scale_shift_tanh' generated no fused unit "
        r"\(nothing the compiler produced was captured\); the compiler logged: frontend failed: no lowering "
        r"for aten.tanh$",
    ):
        fn(torch.randn(4))
    assert fn.capture.compiler_log == ["frontend failed: no lowering for aten.tanh"]
    assert fn.adapter.fell_back(fn.capture) == (
        "ran part of the graph another way after a failure it logged: frontend failed: no lowering for aten.tanh"
    )
    # the logger is as it was: no handler of ours left, its level back
    assert logging.getLogger(LOGGER).handlers == [] and logging.getLogger(LOGGER).level == logging.NOTSET


def test_an_adapters_own_capture_and_refusal_name_the_logged_failure_too(monkeypatch):
    with_adapter(monkeypatch, OwnCapture())
    fn = precisionkit.fused(scale_shift_tanh, backend="own_capture")
    with pytest.raises(
        FusionError,
        match=r"ran 1 graph\(s\) in torch after failing to lower them; the compiler logged: frontend failed: "
        r"no lowering for aten.tanh$",
    ):
        fn(torch.randn(4))
    assert fn.capture.compiler_log == ["frontend failed: no lowering for aten.tanh"]


def test_a_compiler_that_logs_no_failure_is_judged_as_before(monkeypatch):
    adapter = HidesFailures()
    assert adapter.fell_back(CompileCapture()) is None
    assert adapter.fusion_problem(CompileCapture(units=[FusedUnit("k", ("a", "b"))], graph_ops=2)) is None
    assert adapter.naming_logged("refused", CompileCapture(compiler_log=["x failed"])) == (
        "refused; the compiler logged: x failed"
    )
    assert adapter.naming_logged("refused (x failed)", CompileCapture(compiler_log=["x failed"])) == (
        "refused (x failed)"
    )


def test_failures_logged_collects_around_any_block_and_keeps_errors():
    with failures_logged(HidesFailures()) as lines:
        logging.getLogger(LOGGER).error("out of registers")
        logging.getLogger(LOGGER).info("compiled")
        logging.getLogger(LOGGER).debug("Failed in execution: bad shape")
    assert lines == ["out of registers", "Failed in execution: bad shape"]
    with failures_logged(BackendAdapter()) as none:  # no loggers declared
        logging.getLogger(LOGGER).error("not ours")
    assert none == []


@pytest.mark.skipif(NO_OPENVINO, reason="OpenVINO is not installed: pip install 'fusion-precision[openvino]'")
def test_openvinos_fused_path_keeps_its_frontends_words_for_a_bfloat16_partition():
    """OpenVINO 2026.4 has no bfloat16 input type: it logs the failure at DEBUG and runs the partition in torch."""

    def layer_norm_gelu(x):
        return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (16,)))

    torch._dynamo.reset()
    fn = precisionkit.fused(layer_norm_gelu, backend="openvino")
    with pytest.raises(FusionError, match=r"ran 1 partition\(s\) in torch after OpenVINO failed to compile or execute"):
        fn(torch.randn(8, 16).bfloat16())
    torch._dynamo.reset()
    said = "OpenVINO execution failed with torch.bfloat16. Falling back to native PyTorch execution."
    assert fn.capture.compiler_log == [said]
    assert fn.adapter.naming_logged("refused", fn.capture) == f"refused; the compiler logged: {said}"
