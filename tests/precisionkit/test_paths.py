"""precisionkit.paths: the fused path and its evidence.

Every new graph costs an Inductor compile (seconds on a small CPU box), so this module compiles
little: one elementwise chain shared through a module-scoped fixture (plus one recompile for a new
shape) and one graph-breaking function. ``aot_eager`` generates no code, so it is cheap.
"""

from __future__ import annotations

import hashlib
import re

import pytest
import torch

from precisionkit import FusedFunction, FusionError, FusionEvidence, eager, fused
from precisionkit.paths import GeneratedCode, capture_generated_code, normalize_code


def tiny_chain(x):
    return torch.nn.functional.gelu(x * 2 + 1)


@pytest.fixture(scope="module")
def compiled_chain():
    """One FusedFunction, called once on an 8-element input (one Inductor compile)."""
    torch._dynamo.reset()
    fn = fused(tiny_chain)
    x = torch.linspace(-2, 2, 8)
    out = fn(x)
    return fn, x, out


def test_first_call_evidence(compiled_chain):
    fn, x, out = compiled_chain
    ev = fn.evidence
    assert isinstance(fn, FusedFunction) and isinstance(ev, FusionEvidence)
    assert ev.backend == "inductor"
    assert ev.device == "cpu"
    assert ev.graph_count == 1
    assert ev.graph_breaks == 0
    assert ev.break_reasons == ()
    assert ev.recompiles == 0
    assert ev.kernel_count >= 1
    assert len(ev.kernel_names) == ev.kernel_count
    assert all(name in fn.code for name in ev.kernel_names)
    assert re.fullmatch(r"[0-9a-f]{64}", ev.code_sha256)
    assert ev.compile_seconds > 0
    torch.testing.assert_close(out, tiny_chain(x), rtol=1e-6, atol=1e-6)


def test_metadata_view_is_flat(compiled_chain):
    fn, _, _ = compiled_chain
    meta = fn.evidence.as_metadata()
    assert meta["kernel_names"] == ", ".join(fn.evidence.kernel_names)
    assert meta["options"] == "(none)"
    assert meta["graph_breaks"] == 0 and meta["break_reasons"] == ""


def test_recompiles_counted_per_new_shape(compiled_chain):
    fn, _, _ = compiled_chain
    fn(torch.randn(8))  # same shape: served by the compiled artifact
    assert fn.evidence.recompiles == 0
    first = fn.evidence
    y = torch.randn(16)
    out = fn(y)  # new shape, static shapes: exactly one recompile
    ev = fn.evidence
    assert ev.recompiles == 1
    assert ev.graph_count == 1  # the first call's evidence is kept, only recompiles move
    assert ev.code_sha256 == first.code_sha256
    torch.testing.assert_close(out, tiny_chain(y), rtol=1e-6, atol=1e-6)
    fn(torch.randn(16))
    assert fn.evidence.recompiles == 1


def test_graph_break_raises_fusion_error():
    def chatty(x):
        print("side effect")
        return x * 2 + 1

    with pytest.raises(FusionError, match=r"broke the graph 1 time\(s\)"):
        fused(chatty)(torch.randn(4))


def test_backend_without_generated_code_raises_fusion_error():
    def chain_for_aot(x):
        return torch.relu(x - 1) * 3

    with pytest.raises(FusionError, match=r"aot_eager.*generated no fused kernel"):
        fused(chain_for_aot, backend="aot_eager")(torch.randn(4))


def test_require_fusion_false_records_evidence_without_raising():
    def chain_unchecked(x):
        return torch.tanh(x) + 1

    fn = FusedFunction(chain_unchecked, backend="aot_eager", require_fusion=False)
    x = torch.randn(4)
    torch.testing.assert_close(fn(x), chain_unchecked(x))
    ev = fn.evidence
    assert (ev.backend, ev.graph_count, ev.graph_breaks, ev.kernel_count) == ("aot_eager", 1, 0, 0)


def test_unknown_backend_raises_value_error():
    with pytest.raises(ValueError, match=r"unknown torch\.compile backend 'no-such-backend'; registered: .*inductor"):
        FusedFunction(tiny_chain, backend="no-such-backend")


def test_evidence_before_first_call_raises():
    fn = FusedFunction(tiny_chain)
    with pytest.raises(FusionError, match="has not been called yet"):
        _ = fn.evidence


def test_eager_path_is_the_function_itself():
    assert eager(tiny_chain) is tiny_chain


def test_normalize_code_strips_paths_and_volatile_lines():
    code = (
        "# AOT ID: ['0_inference']\n"
        "from torch import device\n"
        "# Topologically Sorted Source Nodes: [mul, add]\n"
        "# Source node to ATen node mapping:\n"
        "kernel = async_compile.cpp_pybinding(['const float*'], '''...''')\n"
        "module = load('/tmp/torchinductor_root/ab/cabcdef.py')\n"
        'other = load("/home/user/cache/x.so", "relative/path.so")\n'
    )
    out = normalize_code(code)
    assert "AOT ID" not in out
    assert "Topologically Sorted" not in out and "Source node to ATen" not in out
    assert "/tmp/" not in out and "/home/" not in out
    assert "load('<path>')" in out
    assert 'load("<path>", "relative/path.so")' in out
    assert "from torch import device" in out and "async_compile.cpp_pybinding" in out
    # two processes that differ only in ids and cache paths hash the same
    other = code.replace("0_inference", "7_inference").replace("/tmp/torchinductor_root", "/var/cache/ti")
    assert normalize_code(other) == out


WRAPPER = (
    "# AOT ID: ['3_backward']\n"
    "cpp_fused_mul_0 = async_compile.cpp_pybinding(['const float*', 'float*'], src0)\n"
    "cpp_fused_add_tanh_1 = async_compile.cpp_pybinding(['float*'], src1)\n"
    "def call(args):\n"
    "    extern_kernels.mm(arg0, arg1, out=buf0)\n"
    "    extern_kernels.addmm(arg2, buf0, arg1, out=buf1)\n"
    "    extern_kernels.mm(buf1, arg1, out=buf2)\n"
    "module = load('/tmp/torchinductor_root/ab/cabcdef.py')\n"
)


def test_capture_generated_code_reads_what_inductor_saves():
    from torch._inductor.graph import GraphLowering

    hook_before = GraphLowering.save_output_code
    with capture_generated_code() as captured:
        GraphLowering.save_output_code(WRAPPER)  # the hook Inductor calls once per compiled graph
    assert GraphLowering.save_output_code is hook_before
    assert captured.sources == [WRAPPER]
    assert captured.graphs == 1
    assert captured.kernel_names == ("cpp_fused_mul_0", "cpp_fused_add_tanh_1")
    assert captured.extern_calls == ("addmm", "mm")
    assert "AOT ID" not in captured.code and "load('<path>')" in captured.code
    assert captured.sha256 == hashlib.sha256(normalize_code(WRAPPER).encode()).hexdigest()


def test_nested_captures_both_see_the_inner_code():
    from torch._inductor.graph import GraphLowering

    with capture_generated_code() as outer:
        GraphLowering.save_output_code("a = async_compile.triton('a', src)\n")
        with capture_generated_code() as inner:
            GraphLowering.save_output_code("b = async_compile.triton('b', src)\n")
    assert (outer.graphs, outer.kernel_names) == (2, ("a", "b"))
    assert (inner.graphs, inner.kernel_names) == (1, ("b",))


def test_empty_capture_hashes_the_empty_program():
    captured = GeneratedCode()
    assert (captured.graphs, captured.kernel_names, captured.extern_calls) == (0, (), ())
    assert captured.sha256 == hashlib.sha256(b"").hexdigest()


def chain_with_grad(x):
    return torch.tanh(x * 3) + x


def first_training_step() -> tuple[FusionEvidence, GeneratedCode, GeneratedCode]:
    """Evidence of a fresh fused function's first call, the code that arrived during the forward,
    and the code of the forward and backward together."""
    fn = fused(chain_with_grad)
    x = torch.linspace(-1, 1, 8, requires_grad=True)
    with capture_generated_code() as both:
        with capture_generated_code() as at_forward:
            out = fn(x)
        out.sum().backward()
    torch.testing.assert_close(x.grad, 3 * (1 - torch.tanh(x.detach() * 3) ** 2) + 1, rtol=1e-5, atol=1e-6)
    return fn.evidence, at_forward, both


def test_backward_code_and_evidence_do_not_depend_on_the_caches():
    with torch._functorch.config.patch(enable_autograd_cache=False), torch._inductor.config.patch(fx_graph_cache=False):
        compiled_ev, compiled_at_forward, compiled = first_training_step()
    first_training_step()  # fills the caches, if the first step did not
    cached_ev, cached_at_forward, cached = first_training_step()

    # Compiled: the forward at the first call, the backward at the first backward().
    assert compiled_at_forward.kinds == ("forward",)
    assert compiled.kinds == ("forward", "backward")
    assert len(compiled.of_kind("backward").kernel_names) >= 1
    # The evidence is the forward's, and a warm cache changes neither it nor the backward's code.
    assert compiled_ev.kernel_names == compiled.of_kind("forward").kernel_names
    assert cached_ev.code_sha256 == compiled_ev.code_sha256
    assert cached.of_kind("backward").sha256 == compiled.of_kind("backward").sha256
    if cached_at_forward.graphs < 2:
        pytest.skip("AOTAutograd's cache did not serve the graphs here, so the warm path was not exercised")
    # Served from the cache, the backward arrived with the forward, before any backward() ran.
    assert sorted(cached_at_forward.kinds) == ["backward", "forward"]


def test_of_kind_and_excluding_select_by_the_aot_label():
    captured = GeneratedCode(
        [
            "# AOT ID: ['4_forward']\nf = async_compile.cpp_pybinding(['float*'], src)\n",
            "# AOT ID: ['4_backward']\nb = async_compile.cpp_pybinding(['float*'], src)\n",
            "u = async_compile.triton('u', src)\n",
        ]
    )
    assert captured.kinds == ("forward", "backward", "")
    assert captured.of_kind("backward").kernel_names == ("b",)
    assert captured.excluding("backward").kernel_names == ("f", "u")
    assert captured.of_kind("inference").graphs == 0


def test_first_call_skips_only_the_guard_latency_probe(monkeypatch):
    """Dynamo's guard-latency probe (a cache flush and a timed guard evaluation per compiled graph)
    does not run in a fused path's first call; it is back afterwards, and a plain compile runs it."""
    from torch._dynamo import guards

    calls = []

    def probe(*args):
        calls.append(len(args))
        return 1.0

    monkeypatch.setattr(guards, "profile_guard_manager", probe)
    x = torch.linspace(-2, 2, 8)

    def chain(t):
        return torch.nn.functional.gelu(t * 3 - 1)

    fn = fused(chain)
    torch.testing.assert_close(fn(x), chain(x))
    assert calls == [] and fn.evidence.kernel_count >= 1
    assert guards.profile_guard_manager is probe
    torch.compile(lambda t: t * 5 + 2, backend="aot_eager")(x)
    assert calls == [3]


def test_functions_without_a_source_file_each_compile_past_dynamos_recompile_limit():
    """Functions made by exec (as the fuzzer's graphs are) have no source file: torch.compile before
    2.8 ran them through one shared wrapper frame, so from the ninth on Dynamo's per-code recompile
    limit sent them to eager silently. Each fused function compiles its own graph."""
    import torch

    from precisionkit import fused

    made = []
    for i in range(12):
        scope: dict = {"torch": torch}
        exec(f"def graph(x):\n    return torch.sin(x) * {i + 1}.0 + x\n", scope)
        made.append(scope["graph"])
    x = torch.randn(16)
    for i, fn in enumerate(made):
        f = fused(fn)
        assert torch.equal(f(x), fn(x)) or torch.allclose(f(x), fn(x)), i
        assert f.evidence.graph_count == 1 and f.evidence.kernel_count >= 1, i


def test_fused_library_calls_are_read_from_the_code():
    code = (
        "buf0 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v, attn_mask=m)\n"
        "buf1 = torch.ops.aten._scaled_dot_product_efficient_attention.default(q, k, v, None, False)\n"
        "buf2 = extern_kernels.bmm(a, b)\n"
        "buf3 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(q, k, v)\n"
    )
    got = GeneratedCode([code])
    assert got.fused_library_calls == (
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    )
    assert got.extern_calls == ("bmm",) and got.kernel_names == ()


def test_a_graph_rewritten_into_a_fused_attention_kernel_counts_as_fused():
    # Heads permuted, scores divided by the scale, an additive mask: the form Inductor's attention
    # pattern matcher rewrites into one scaled-dot-product-attention kernel, with no generated kernel.
    import math

    def bert_attention(query, key, value, mask):
        q, k, v = (t.permute(0, 2, 1, 3) for t in (query, key, value))
        scores = torch.matmul(q, k.transpose(-2, -1)).div(math.sqrt(q.shape[-1])) + mask
        return scores.softmax(dim=-1).matmul(v)

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 16, 2, 16, generator=g) for _ in range(3))
    mask = torch.zeros(1, 1, 1, 16)
    mask[..., -3:] = -1e4
    fn = fused(bert_attention)
    torch.testing.assert_close(fn(q, k, v, mask), bert_attention(q, k, v, mask), rtol=1e-5, atol=1e-5)
    ev = fn.evidence
    assert any(c.startswith("_scaled_dot_product") for c in ev.fused_library_calls), ev
    assert ev.as_metadata()["fused_library_calls"] == ", ".join(ev.fused_library_calls)


def test_triton_wrapper_cache_paths_and_settings_are_not_hashed():
    # Lines of the FFN's wrapper as Inductor wrote them on the H200 (2026-11-27), round 1 against a
    # cold start: another cache file, caches disabled, another build fingerprint, the harness's label.
    meta = (
        "    inductor_meta={{'grid_type': 'Grid1D', 'kernel_name': 'triton_red_fused_gelu_0', 'backend_hash': '{h}', "
        "'autotune_local_cache': {local}, 'autotune_pointwise': True, 'autotune_remote_cache': {remote}, "
        "'force_disable_caches': {off}, 'max_autotune': False, 'tiling_scores': {{'x': 0, 'r0_': 1610645504}}}}"
    )
    round1 = "\n".join(
        [
            "# kernel path: /tmp/gpu-inductor/mb/cmbog3eph.py",
            meta.format(h="91D1D116", local=True, remote=None, off=False),
            "    tmp0 = tl.load(in_ptr0 + (r0_1), r0_mask, other=0.0)",
            "    compiled_module_main('A', lambda times, repeat: benchmark_compiled_module(args))",
        ]
    )
    cold = (
        round1.replace("/tmp/gpu-inductor/mb/cmbog3eph.py", "/tmp/determinism_eb/inductor_cold_6o/nb/cnbx7.py")
        .replace("'91D1D116'", "'B0102098'")
        .replace("'autotune_local_cache': True", "'autotune_local_cache': False")
        .replace("'autotune_remote_cache': None", "'autotune_remote_cache': False")
        .replace("'force_disable_caches': False", "'force_disable_caches': True")
        .replace("compiled_module_main('A'", "compiled_module_main('None'")
    )
    assert cold != round1 and normalize_code(cold) == normalize_code(round1)
    # What the kernel computes stays hashed: another load, another tiling score.
    assert normalize_code(round1.replace("other=0.0", "other=1.0")) != normalize_code(round1)
    assert normalize_code(round1.replace("1610645504", "3221291008")) != normalize_code(round1)
