"""precisionkit.backends.openvino: the OpenVINO adapter, driven directly (not through the fused path).

Each test compiles one or two small graphs with OpenVINO's CPU plugin (under a second each once
openvino is imported).
"""

from __future__ import annotations

import hashlib
import importlib.metadata

import pytest
import torch

pytest.importorskip("openvino", reason="OpenVINO is an optional backend: pip install 'fusion-precision[openvino]'")

from precisionkit.backends.base import FusedUnit
from precisionkit.backends.openvino import OpenVINOAdapter, OpenVINOCapture, normalize_name


def layer_norm_gelu(x):
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (768,))) * 1.5 + 0.25


def layer_norm_gelu_other_scale(x):
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (768,))) * 2.5 + 0.25


def with_erfinv(x):
    # aten.erfinv is not in OpenVINO's operator support table: it splits the graph in two partitions.
    return torch.erfinv(torch.tanh(x) * 0.5) * 2.0 + 1.0


WEIGHT = torch.randn(768, 768, generator=torch.Generator().manual_seed(1)) / 28


def matmul_gelu(x):
    return torch.nn.functional.gelu(x @ WEIGHT) * 1.5 + 0.25


@pytest.fixture
def adapter():
    torch._dynamo.reset()
    return OpenVINOAdapter()


@pytest.fixture
def x():
    return torch.randn(64, 768, generator=torch.Generator().manual_seed(0))


def run(adapter, fn, x, options=None):
    with adapter.capture() as cap:
        out = torch.compile(fn, backend=adapter.compiler(options or {}))(x)
    torch._dynamo.reset()
    return cap, out


def test_layer_norm_gelu_fuses_into_two_fp32_nodes(adapter, x):
    cap, out = run(adapter, layer_norm_gelu, x)
    assert isinstance(cap, OpenVINOCapture)
    assert cap.partitions == 1
    assert cap.graph_ops == 4  # native_layer_norm, gelu, mul, add
    assert cap.fallback_ops == []
    assert adapter.fusion_problem(cap) is None
    # The CPU plugin merges GELU into the MVN before it and the scale and shift into one Eltwise.
    assert [(u.kind, u.ops, u.precision) for u in cap.units] == [
        ("MVN", ("native_layer_norm/aten.native_layer_norm.default/MVN", "gelu/aten.gelu.default/Gelu"), "float32"),
        ("Eltwise", ("mul/aten.mul.Tensor/Multiply", "add/aten.add.Tensor/Add"), "float32"),
    ]
    assert all(isinstance(u, FusedUnit) and u.fuses for u in cap.units)
    torch.testing.assert_close(out, layer_norm_gelu(x), atol=1e-5, rtol=1e-5)


def test_code_is_equal_for_equal_programs_only(adapter, x):
    first, _ = run(adapter, layer_norm_gelu, x)
    second, _ = run(adapter, layer_norm_gelu, x)
    other, _ = run(adapter, layer_norm_gelu_other_scale, x)
    assert first.code and "Result_#" in first.code
    assert first.code == second.code
    # Same runtime nodes, another constant: the constants' digest tells them apart.
    assert other.code != first.code
    assert [u.ops for u in other.units] == [u.ops for u in first.units]
    assert hashlib.sha256(first.code.encode()).digest() != hashlib.sha256(other.code.encode()).digest()


def test_unsupported_op_is_left_to_torch(adapter):
    x = torch.linspace(-2, 2, 128).reshape(8, 16)
    cap, out = run(adapter, with_erfinv, x)
    assert cap.fallback_ops == ["erfinv/aten.erfinv.default"]
    assert cap.partitions == 2  # tanh * 0.5 before erfinv, * 2 + 1 after it
    assert cap.graph_ops == 5
    assert [u.ops for u in cap.units] == [
        ("tanh/aten.tanh.default/Tanh", "mul/aten.mul.Tensor/Multiply"),
        ("mul_1/aten.mul.Tensor/Multiply", "add/aten.add.Tensor/Add"),
    ]
    assert adapter.fusion_problem(cap) is None
    torch.testing.assert_close(out, with_erfinv(x))


def test_matmul_runs_in_the_precision_the_hint_chooses(adapter, x):
    cap, out = run(adapter, matmul_gelu, x)
    (unit,) = cap.units[-1:]
    assert unit.kind == "MatMul" and len(unit.ops) == 4
    hint = cap.properties["INFERENCE_PRECISION_HINT"]
    assert adapter.provenance()["INFERENCE_PRECISION_HINT"] == hint
    reference = torch.nn.functional.gelu(x.double() @ WEIGHT.double()) * 1.5 + 0.25
    error = (out.double() - reference).abs().max().item()
    if hint == "bf16":  # the CPU's default where it has bf16 instructions
        assert unit.precision == "bfloat16"
        assert error > 1e-3
    else:
        assert unit.precision == "float32"
    fp32, out32 = run(adapter, matmul_gelu, x, adapter.knobs()["INFERENCE_PRECISION_HINT=f32 (no bf16/f16 execution)"])
    assert [u.precision for u in fp32.units if u.kind == "MatMul"] == ["float32"]
    assert fp32.properties["INFERENCE_PRECISION_HINT"] == "f32"
    assert (out32.double() - reference).abs().max().item() < 1e-4


def test_nested_captures_both_see_the_models(adapter, x):
    with adapter.capture() as outer, adapter.capture() as inner:
        torch.compile(layer_norm_gelu, backend=adapter.compiler({}))(x)
    assert inner.partitions == outer.partitions == 1
    assert inner.units == outer.units and len(inner.units) == 2
    assert inner.code == outer.code
    import openvino

    assert openvino.Core.compile_model.__qualname__ == "Core.compile_model"  # restored


def test_eager_backend_captures_nothing(adapter, x):
    with adapter.capture() as cap:
        torch.compile(layer_norm_gelu, backend="eager")(x)
    assert cap.units == [] and cap.partitions == 0 and cap.code == ""
    assert adapter.fusion_problem(cap) == "generated no fused unit (nothing the compiler produced was captured)"


def test_failed_openvino_compile_is_a_fusion_problem(adapter):
    # An invalid plugin setting makes compile_model raise; the backend then runs the partition in torch.
    x = torch.linspace(-2, 2, 128).reshape(8, 16)
    cap, out = run(adapter, with_erfinv, x, {"config": {"SNIPPETS_MODE": "NOT_A_MODE"}})
    assert cap.units == [] and cap.torch_fallback_partitions == 2
    assert adapter.fusion_problem(cap) == "ran 2 partition(s) in torch after OpenVINO failed to compile or execute them"
    torch.testing.assert_close(out, with_erfinv(x))


def test_a_graph_handed_to_inductor_is_a_fusion_problem(adapter):
    # The backend's own fallback when converting a graph fails; a stand-in capture, since forcing it
    # would cost an Inductor compile.
    cap = OpenVINOCapture(units=[FusedUnit("k", ("a", "b"))], partitions=1, graph_ops=2, inductor_graphs=1)
    assert adapter.fusion_problem(cap) == "failed to convert 1 graph(s) and compiled them with Inductor instead"
    cap.inductor_graphs = 0
    assert adapter.fusion_problem(cap) is None


def test_declarations(adapter):
    assert (adapter.name, adapter.title, adapter.dynamo_backend, adapter.extra) == (
        "openvino",
        "OpenVINO",
        "openvino",
        "openvino",
    )
    assert adapter.missing() is None
    assert sorted(adapter.not_applicable) == ["C1", "C3"]
    provenance = adapter.provenance()
    assert provenance["version"] == importlib.metadata.version("openvino")
    assert provenance["device"] == "CPU" and provenance["properties_from"] == "CPU defaults"
    assert provenance["INFERENCE_PRECISION_HINT"] in ("bf16", "f16", "f32")
    assert provenance["EXECUTION_MODE_HINT"] == "PERFORMANCE"
    assert adapter.knobs()["EXECUTION_MODE_HINT=ACCURACY"] == {"config": {"EXECUTION_MODE_HINT": "ACCURACY"}}
    assert normalize_name("Result_51") == "Result_#"


def test_through_the_fused_path(adapter, x):
    from precisionkit import fused
    from precisionkit.backends import get_adapter

    assert isinstance(get_adapter("openvino"), OpenVINOAdapter)
    fn = fused(layer_norm_gelu, backend="openvino")
    out = fn(x)
    ev = fn.evidence
    assert (ev.compiler, ev.partitions, ev.kernel_count, ev.fused_units) == ("openvino", 1, 2, 2)
    assert ev.fallback_ops == () and ev.precisions == ("float32",)
    assert ev.compiler_version == importlib.metadata.version("openvino")
    assert ev.code_sha256 == hashlib.sha256(fn.capture.code.encode()).hexdigest()
    torch.testing.assert_close(out, layer_norm_gelu(x), atol=1e-5, rtol=1e-5)
