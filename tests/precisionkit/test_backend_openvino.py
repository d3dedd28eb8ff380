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
    assert sorted(adapter.not_applicable) == ["C1", "C3", "E"]
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


def two_sums(x):
    return x.sum(-1), x.sum(-1, dtype=torch.float32)


def one_sum(x):
    return x.sum(-1)


def cast_pair(x):
    return (x * 1.1).half().float() * 3.0


def test_two_sums_of_one_tensor_compiled_apart_show_what_there_was_to_fuse(adapter):
    # Neither sum consumes the other: nothing to fuse, so two reduction nodes are all OpenVINO can do.
    cap, _ = run(adapter, two_sums, torch.rand(1, 512).half())
    assert (cap.graph_ops, cap.graph_edges, cap.partitions) == (2, 0, 1)
    assert not any(u.fuses for u in cap.units) and adapter.fusion_problem(cap) is None


def test_whole_graph_hands_a_single_operation_to_openvino(adapter):
    x = torch.rand(2, 1000)
    alone, out = run(adapter, one_sum, x)
    assert alone.units == [] and alone.fallback_ops == ["sum_1/aten.sum.dim_IntList"]  # left to torch
    assert adapter.fusion_problem(alone) == "generated no fused unit (nothing the compiler produced was captured)"
    whole, out = run(adapter, one_sum, x, adapter.intent("whole_graph"))
    assert [u.kind for u in whole.units] == ["Reduce"] and adapter.fusion_problem(whole) is None
    torch.testing.assert_close(out, one_sum(x))


def test_one_thread_sets_the_plugins_thread_count_and_merges_into_the_runs_config(adapter):
    assert adapter.intent("one_thread") == {"config": {"INFERENCE_NUM_THREADS": "1"}}
    assert adapter.intent_variants("reduction_knobs") == {"INFERENCE_NUM_THREADS=1": adapter.intent("one_thread")}
    options = adapter.merge_options(
        {"testing": True, "config": {"INFERENCE_PRECISION_HINT": "f32"}}, adapter.intent("one_thread")
    )
    assert options == {"testing": True, "config": {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": "1"}}
    cap, _ = run(adapter, one_sum, torch.rand(2, 1000), options)
    assert cap.properties["INFERENCE_NUM_THREADS"] == "1" and cap.properties["INFERENCE_PRECISION_HINT"] == "f32"


def test_faithful_casts_and_reduction_tilings_are_intents_openvino_lacks(adapter):
    assert adapter.intent("faithful_casts") is None and adapter.intent_variants("reduction_tilings") is None
    assert adapter.why_not("faithful_casts").startswith("OpenVINO removes a narrowing cast pair")
    # The reason holds: the cast pair is elided under every precision property tried.
    x = torch.randn(4096, generator=torch.Generator().manual_seed(3))
    for config in ({}, {"EXECUTION_MODE_HINT": "ACCURACY"}, {"INFERENCE_PRECISION_HINT": "f32"}):
        _, out = run(adapter, cast_pair, x, {"config": config} if config else {})
        assert torch.equal(out, x * 1.1 * 3.0) and not torch.equal(out, cast_pair(x)), config


def test_a_bfloat16_partition_runs_in_torch_and_the_error_is_kept(adapter):
    # OpenVINO 2026.4's backend has no bfloat16 in its input type table: the partition fails and runs in torch.
    x = torch.randn(8, 16).bfloat16()
    cap, out = run(adapter, layer_norm_gelu_small, x)
    assert cap.units == [] and cap.torch_fallback_partitions == 1
    assert cap.fallback_errors == ["KeyError: torch.bfloat16"]
    assert adapter.fell_back(cap) == (
        "ran 1 partition(s) in torch after OpenVINO failed to compile or execute them (KeyError: torch.bfloat16)"
    )
    assert torch.equal(out, layer_norm_gelu_small(x))  # torch's own result


def layer_norm_gelu_small(x):
    return torch.nn.functional.gelu(x * 1.5 + 0.25)


def test_an_output_held_across_calls_keeps_its_values(adapter):
    # The backend hands back its infer request's output buffers, which the next call overwrites; the adapter
    # copies them, so each call's result stays the caller's (B stacks per-set results, C2 keeps rows).
    fn = torch.compile(layer_norm_gelu_small, backend=adapter.compiler(adapter.intent("whole_graph")))
    first, second = fn(torch.ones(4, 16)), fn(torch.zeros(4, 16))
    torch._dynamo.reset()
    assert torch.equal(first, layer_norm_gelu_small(torch.ones(4, 16)))
    assert torch.equal(second, layer_norm_gelu_small(torch.zeros(4, 16)))
    assert first.data_ptr() != second.data_ptr()
