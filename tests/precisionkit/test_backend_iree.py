"""precisionkit.backends.iree: the IREE adapter, driven directly, and once through the fused path.

Each compile takes about two seconds on a CPU (iree-turbine imports and traces the graph, IREE
compiles it, the adapter reruns IREE up to its flow phase); the module fixtures share one compile
of each program across the tests that read it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

import pytest
import torch

pytest.importorskip(
    "iree.turbine.dynamo.backends.base", reason="IREE is an optional backend: pip install 'fusion-precision[iree]'"
)

import precisionkit
from precisionkit.backends.iree import IREEAdapter

LAYER_NORM_GELU_OPS = (
    "aten.var_mean.correction",
    "aten.add.Scalar",
    "aten.rsqrt",
    "aten.sub.Tensor",
    "aten.mul.Tensor",
    "aten.gelu",
    "aten.mul.Scalar",
    "aten.add.Scalar",
)


def layer_norm_gelu(x):
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (768,))) * 1.5 + 0.25


def layer_norm_gelu_other_scale(x):
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (768,))) * 2.5 + 0.25


def x_64x768():
    return torch.randn(64, 768, generator=torch.Generator().manual_seed(0))


def compile_captured(adapter, fn, x, options=None, backend=None):
    """One fresh compile of ``fn`` inside a capture: (capture, output); ``x`` one input or a tuple of them."""
    torch._dynamo.reset()
    with adapter.capture() as cap:
        out = torch.compile(fn, backend=backend or adapter.compiler(options or {}))(
            *(x if isinstance(x, tuple) else (x,))
        )
    torch._dynamo.reset()
    return cap, out


@pytest.fixture(scope="module")
def adapter():
    return IREEAdapter()


@pytest.fixture(scope="module")
def first(adapter):
    return compile_captured(adapter, layer_norm_gelu, x_64x768())


@pytest.fixture(scope="module")
def second(adapter, first):
    return compile_captured(adapter, layer_norm_gelu, x_64x768())


def test_layer_norm_gelu_is_two_fp32_dispatches(adapter, first):
    cap, out = first
    assert cap.partitions == 1
    # turbine_cpu decomposes layer_norm (var_mean, add, rsqrt, sub, mul) before IREE sees it.
    assert cap.graph_ops == 8
    assert cap.fallback_ops == []
    # IREE's first dispatch centres x (the mean of var_mean); the second computes the variance and
    # everything after it: layer_norm's second reduction fused with gelu, the scale and the shift.
    assert [(u.name, u.kind, u.precision, u.ops) for u in cap.units] == [
        ("main$async_dispatch_0_reduction_64x768_f32", "dispatch", "float32", ("aten.var_mean.correction",)),
        ("main$async_dispatch_1_reduction_64x768_f32", "dispatch", "float32", LAYER_NORM_GELU_OPS),
    ]
    assert [u.fuses for u in cap.units] == [False, True]
    assert adapter.fusion_problem(cap) is None
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, layer_norm_gelu(x_64x768()), atol=2e-5, rtol=1e-5)


def test_code_names_the_flags_and_dispatches_without_locations(first):
    cap, _ = first
    lines = cap.code.splitlines()
    assert lines[0] == "flags: --iree-hal-target-backends=llvm-cpu --iree-llvmcpu-target-cpu-features=host"
    assert lines[1] == "dispatch main$async_dispatch_0_reduction_64x768_f32: aten.var_mean.correction [float32]"
    assert lines[2].startswith("dispatch main$async_dispatch_1_reduction_64x768_f32: aten.var_mean.correction, ")
    assert "flow.executable private @main$async_dispatch_1" in cap.code
    # The source tags and the stdin locations of the analysis compile are not part of the program.
    assert "loc(" not in cap.code and "pk0:" not in cap.code


def test_code_is_equal_for_equal_programs_only(adapter, first, second):
    other, _ = compile_captured(adapter, layer_norm_gelu_other_scale, x_64x768())
    assert first[0].code == second[0].code
    assert torch.equal(first[1], second[1])
    assert other.code != first[0].code
    assert [u.ops for u in other.units] == [u.ops for u in first[0].units]


def test_options_pass_flags_to_the_compiler(adapter, first):
    cap, out = compile_captured(adapter, layer_norm_gelu, x_64x768(), adapter.knobs()["aggressive_fusion"])
    # Aggressive fusion puts both reductions and the elementwise tail in one dispatch.
    assert [(u.name, u.ops) for u in cap.units] == [("main$async_dispatch_0_reduction_64x768_f32", LAYER_NORM_GELU_OPS)]
    assert cap.code.splitlines()[0].endswith(" --iree-dispatch-creation-enable-aggressive-fusion=true")
    torch.testing.assert_close(out, first[1], atol=2e-5, rtol=1e-5)


def test_nested_captures_both_see_the_compile(adapter):
    torch._dynamo.reset()
    with adapter.capture() as outer:
        with adapter.capture() as inner:
            torch.compile(layer_norm_gelu, backend=adapter.compiler({}))(x_64x768())
        torch._dynamo.reset()
        torch.compile(layer_norm_gelu_other_scale, backend=adapter.compiler({}))(x_64x768())
    torch._dynamo.reset()
    assert (inner.partitions, outer.partitions) == (1, 2)
    assert outer.units[:2] == inner.units and len(outer.units) == 4
    assert outer.graph_ops == 16
    assert outer.code.startswith(inner.code + "\n\n")


def test_a_compile_by_another_backend_is_no_fusion(adapter):
    cap, _ = compile_captured(adapter, layer_norm_gelu, x_64x768(), backend="eager")
    assert (cap.units, cap.partitions, cap.graph_ops, cap.code) == ([], 0, 0, "")
    assert adapter.fusion_problem(cap) == "generated no fused unit (nothing the compiler produced was captured)"


def test_the_hook_is_removed_after_the_block(adapter):
    launch = importlib.import_module("iree.turbine.runtime.launch")
    before = launch._jit_callback
    with adapter.capture():
        assert launch._jit_callback is not before
    assert launch._jit_callback is before


def test_options_other_than_session_flags_are_refused(adapter):
    with pytest.raises(ValueError, match=r"unknown: \['target'\]"):
        adapter.compiler({"target": "llvm-cpu"})
    with pytest.raises(ValueError, match="list of iree-compile flags"):
        adapter.compiler({"flags": "--iree-opt-level=O3"})
    # A process-wide flag cannot be set for one compile.
    with pytest.raises(ValueError, match="does not take"):
        adapter.compiler({"flags": ["--iree-dispatch-creation-element-wise-fuse-multi-reduction=false"]})


def test_declarations(adapter):
    assert (adapter.name, adapter.title, adapter.dynamo_backend, adapter.extra) == (
        "iree",
        "IREE",
        "turbine_cpu",
        "iree",
    )
    assert adapter.missing() is None
    assert sorted(adapter.not_applicable) == ["C1", "C3"]
    info = adapter.provenance()
    assert info["version"] == info["iree-base-compiler"] == importlib.metadata.version("iree-base-compiler")
    assert info["iree-turbine"] == importlib.metadata.version("iree-turbine")
    assert (info["device"], info["target_backend"], info["target_cpu_features"]) == ("local-task", "llvm-cpu", "host")
    knobs = adapter.knobs()
    assert knobs["opt_level_O3"] == {"flags": ["--iree-opt-level=O3"]}
    assert set(knobs) == {
        "aggressive_fusion",
        "opt_level_O3",
        "reassociate_fp_reductions",
        "generic_cpu",
        "keep_f64",
        "no_ukernels",
        "keep_intermediate_roundings",
    }
    for options in knobs.values():
        adapter.compiler(options)  # every knob's flags are per-session flags


def test_fused_path_with_backend_iree(first):
    fused = precisionkit.fused(layer_norm_gelu, backend="iree")
    out = fused(x_64x768())
    torch._dynamo.reset()
    ev = fused.evidence
    assert ev.compiler == "iree"
    assert (ev.graph_count, ev.partitions, ev.kernel_count, ev.fused_units) == (1, 1, 2, 1)
    assert ev.kernel_names == tuple(u.name for u in first[0].units)
    assert ev.precisions == ("float32",)
    assert ev.compiler_version == importlib.metadata.version("iree-base-compiler")
    assert fused.code == first[0].code
    assert torch.equal(out, first[1])


def test_missing_names_the_install_command(adapter, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *args: None if name == "iree.turbine" else find_spec(name, *args)
    )
    assert adapter.missing() == (
        "IREE is not installed (iree.turbine cannot be imported): pip install 'fusion-precision[iree]'"
    )


def cast_pair(x):
    return (x * 1.1).half().float() * 3.0


def test_intents_are_per_session_flags_and_faithful_casts_is_the_default(adapter):
    intents = adapter.intents()
    assert intents["faithful_casts"] == {} and intents["whole_graph"] == {}
    assert adapter.intent("one_thread") == {"flags": ["--iree-dispatch-creation-enable-split-reduction=false"]}
    knobs, tilings = adapter.intent_variants("reduction_knobs"), adapter.intent_variants("reduction_tilings")
    assert set(knobs) == {"reassociate_fp_reductions", "split_reduction"}
    assert set(tilings) == {"reassociate_vw16", "reassociate_vw32", "reassociate_vw64"}
    for options in (adapter.intent("one_thread"), *knobs.values(), *tilings.values()):
        adapter.compiler(options)  # each is a per-session flag set
    assert adapter.merge_options({"flags": ["--a"]}, {"flags": ["--b"]}) == {"flags": ["--a", "--b"]}
    # faithful_casts = {}: IREE keeps an fp32 -> fp16 -> fp32 cast pair by default, rounding as eager does
    x = torch.randn(4096, generator=torch.Generator().manual_seed(3))
    _, out = compile_captured(adapter, cast_pair, x)
    assert torch.equal(out, cast_pair(x)) and not torch.equal(out, x * 1.1 * 3.0)


def long_sum(x):
    return x.sum(-1)


def test_reassociation_changes_a_reductions_order_and_one_thread_does_not(adapter):
    x = torch.rand(2, 1 << 18, generator=torch.Generator().manual_seed(0)) * 2 - 1
    cap, default = compile_captured(adapter, long_sum, x)
    assert (cap.graph_ops, cap.graph_edges) == (1, 0) and adapter.fusion_problem(cap) is None
    _, one = compile_captured(adapter, long_sum, x, adapter.intent("one_thread"))
    assert torch.equal(one, default)  # the default already reduces a row in one workgroup
    _, reassociated = compile_captured(
        adapter, long_sum, x, adapter.intent_variants("reduction_tilings")["reassociate_vw16"]
    )
    assert not torch.equal(reassociated, default)


def rotate_half(x, y):
    def rot(t):
        return torch.cat([-t[..., 3:], t[..., :3]], dim=-1)

    return rot(x), rot(y)


def test_a_dispatch_whose_operations_a_rewrite_renamed_is_not_read_as_unfused(adapter):
    # IREE rewrites slice -> neg -> concat into one generic op located at the function's arguments: the
    # dispatch names none of the source operations, which it still computes together.
    x, y = torch.randn(2, 8, 6), torch.randn(2, 8, 6)
    cap, out = compile_captured(adapter, rotate_half, (x, y))
    assert all(torch.equal(a, b) for a, b in zip(out, rotate_half(x, y), strict=True))
    assert cap.graph_ops == 8 and cap.graph_edges == 6
    assert [u.ops for u in cap.units] == [()]
    assert adapter.fusion_problem(cap) is None


def reshape_concat(x, y):
    return torch.cat([x.reshape(x.shape[0], -1), y.reshape(y.shape[0], -1)], dim=-1)


def test_a_concatenation_left_to_the_runtimes_copies_is_transfer_units_that_fuse_nothing(adapter):
    # At batch 1 IREE turns the concatenation of two reshaped inputs into two updates of one result buffer,
    # with no executable: the units are those transfers, each of the one concatenation, and nothing fused.
    x, y = torch.randn(1, 7, 24), torch.randn(1, 7, 24)
    cap, out = compile_captured(adapter, reshape_concat, (x, y))
    assert [(u.kind, u.ops) for u in cap.units] == [("transfer", ("aten.cat",)), ("transfer", ("aten.cat",))]
    assert (cap.graph_ops, cap.graph_edges) == (3, 2)
    assert adapter.fusion_problem(cap) == "put each of the graph's 3 operations in a unit of its own: nothing was fused"
    assert torch.equal(out, reshape_concat(x, y))
