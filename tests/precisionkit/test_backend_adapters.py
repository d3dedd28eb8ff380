"""precisionkit.backends: the adapter registry, a user's adapter installed through its entry point,
the fusion rule the fused path asks an adapter for, and a block that wraps an adapter's backend.

A user's adapter is written into a temporary directory as an installed distribution (a module and a
``<name>-0.1.dist-info`` with ``entry_points.txt``) and put on ``sys.path``, as pip would leave it.
Only one test compiles with Inductor; the fake adapters run the graph as it is.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import precisionkit
from precisionkit import FusionError, error_stats, fp64_reference, ulp_diff
from precisionkit.backends import (
    AdapterLoadError,
    MissingCompiler,
    adapter_for_backend,
    adapter_names,
    get_adapter,
    wrapped_backend,
)
from precisionkit.backends.base import BackendAdapter, CompileCapture, FusedUnit
from precisionkit.backends.inductor import GeneratedCode, InductorAdapter

BUILT_IN = ["inductor", "openvino", "iree"]

# A user's compiler: Inductor compiles underneath, but the adapter reports its own units (one per
# graph, holding every operation of the graph) and its own program text.
TINY_FUSER = """
from contextlib import contextmanager

from precisionkit.backends.base import BackendAdapter, CompileCapture, FusedUnit
from precisionkit.backends.inductor import InductorAdapter


class TinyFuser(BackendAdapter):
    name = "tinyfuser"
    title = "Tiny fuser"

    def __init__(self):
        self._open = []

    def compiler(self, options):
        inductor = InductorAdapter().compiler(options)

        def compile_graph(gm, example_inputs):
            ops = tuple(n.name for n in gm.graph.nodes if n.op == "call_function")
            for cap in self._open:
                cap.units.append(FusedUnit(f"tiny_{cap.partitions}", ops, precision="float32", kind="tiny"))
                cap.partitions += 1
                cap.graph_ops += len(ops)
                cap.code += "tiny: " + ", ".join(ops) + "\\n"
            return inductor(gm, example_inputs)

        return compile_graph

    @contextmanager
    def capture(self):
        cap = CompileCapture()
        self._open.append(cap)
        try:
            yield cap
        finally:
            self._open.remove(cap)

    def provenance(self):
        return {"version": "0.1"}
"""

# A compiler that is not installed here, made by a factory function.
ABSENT = """
from precisionkit.backends.base import BackendAdapter


class Absent(BackendAdapter):
    title = "Absent C"
    dynamo_backend = "absentc"
    extra = "absentc"

    def missing(self):
        return "the absentc package is not installed"


def make():
    return Absent()
"""


def install(
    root: Path, monkeypatch: pytest.MonkeyPatch, dist: str, modules: dict[str, str], eps: dict[str, str]
) -> None:
    """Write ``modules`` and a distribution ``dist`` whose ``fusion_precision.backends`` entry points
    are ``eps`` into ``root``, and put ``root`` first on ``sys.path``."""
    root.mkdir(parents=True, exist_ok=True)
    for name, source in modules.items():
        (root / f"{name}.py").write_text(source)
        monkeypatch.delitem(sys.modules, name, raising=False)  # imported afresh, forgotten after
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in eps.items())
    (info / "entry_points.txt").write_text(f"[fusion_precision.backends]\n{lines}")
    monkeypatch.syspath_prepend(str(root))


@pytest.fixture
def forget_modules() -> Iterator[None]:
    """Drop the modules a test's distributions defined, so another test imports its own."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("tiny_fuser", "absent_c", "not_an_adapter", "declaring_compilers")):
            del sys.modules[name]


def add_then_third(x):
    return (x + 1) / 3


def test_a_users_adapter_comes_in_through_its_entry_point_and_runs_a_fused_path(tmp_path, monkeypatch, forget_modules):
    install(
        tmp_path / "site", monkeypatch, "tiny-fuser", {"tiny_fuser": TINY_FUSER}, {"tinyfuser": "tiny_fuser:TinyFuser"}
    )
    assert adapter_names() == [*BUILT_IN, "tinyfuser"]
    assert get_adapter("tinyfuser").title == "Tiny fuser"

    torch._dynamo.reset()
    fn = precisionkit.fused(add_then_third, backend="tinyfuser")
    x = torch.tensor([0.0, 1.0, 2.0, 5.0])
    out = fn(x)
    ev = fn.evidence
    assert (ev.backend, ev.compiler, ev.compiler_version) == ("tinyfuser", "tinyfuser", "0.1")
    assert (ev.graph_count, ev.graph_breaks, ev.partitions) == (1, 0, 1)
    assert (ev.kernel_count, ev.kernel_names, ev.fused_units, ev.precisions) == (1, ("tiny_0",), 1, ("float32",))
    assert fn.capture is not None and fn.capture.units == [FusedUnit("tiny_0", ("add", "truediv"), "float32", "tiny")]
    assert ev.code_sha256 == hashlib.sha256(b"tiny: add, truediv\n").hexdigest()
    meta = ev.as_metadata()
    assert (meta["compiler"], meta["precisions"], meta["fallback_ops"]) == ("tinyfuser", "float32", "")

    # (x + 1) / 3 in float32: 1/3 and 2/3 round up by a third of an ulp, 1 and 2 are exact, and every
    # value is the fp64 result correctly rounded (and eager's, bit for bit).
    ref = fp64_reference(add_then_third, x)
    assert ref.dtype == torch.float64
    assert ulp_diff(out, add_then_third(x)).tolist() == [0, 0, 0, 0]
    assert ulp_diff(out, ref.to(torch.float32)).tolist() == [0, 0, 0, 0]
    stats = error_stats(out, ref)
    assert stats["exact_fraction"] == 1.0
    assert stats["ulp_max"] == pytest.approx(1 / 3, rel=1e-6)
    assert stats["abs_max"] == pytest.approx(float(torch.tensor(2 / 3, dtype=torch.float32)) - 2 / 3, rel=1e-9)


class RunsEager(BackendAdapter):
    """A compiler that compiles nothing: the graph runs as it is, and nothing is captured."""

    name = title = "runs_eager"

    def compiler(self, options):
        return lambda gm, example_inputs: gm.forward


class OnePerOp(BackendAdapter):
    """A compiler that puts each operation of a graph in a unit of its own (``together``: all in one)."""

    name = title = "one_per_op"

    def __init__(self, together: bool = False) -> None:
        self.together = together
        self._open: list[CompileCapture] = []

    def compiler(self, options):
        def compile_graph(gm, example_inputs):
            ops = [n.name for n in gm.graph.nodes if n.op == "call_function"]
            units = (
                [FusedUnit("all", tuple(ops))]
                if self.together
                else [FusedUnit(f"u{i}", (op,)) for i, op in enumerate(ops)]
            )
            for cap in self._open:
                cap.units.extend(units)
                cap.partitions += 1
            return gm.forward

        return compile_graph

    def capture(self):
        return _collecting(self._open)


def _collecting(open_captures: list[CompileCapture]):
    from contextlib import contextmanager

    @contextmanager
    def block():
        cap = CompileCapture()
        open_captures.append(cap)
        try:
            yield cap
        finally:
            open_captures.remove(cap)

    return block()


def scale_shift_tanh(x):
    return torch.tanh(x * 2 + 1)


def with_adapter(monkeypatch: pytest.MonkeyPatch, adapter: BackendAdapter) -> None:
    """Make ``adapter_for_backend`` in the fused path answer ``adapter`` for its name."""
    import precisionkit.paths as paths

    real = paths.adapter_for_backend
    monkeypatch.setattr(paths, "adapter_for_backend", lambda name: adapter if name == adapter.name else real(name))


def test_an_adapter_that_runs_eager_is_not_a_fused_path(monkeypatch):
    with_adapter(monkeypatch, RunsEager())
    fn = precisionkit.fused(scale_shift_tanh, backend="runs_eager")
    with pytest.raises(
        FusionError,
        match=r"^fused path \(backend 'runs_eager'\) for 'scale_shift_tanh' generated no fused unit "
        r"\(nothing the compiler produced was captured\)$",
    ):
        fn(torch.randn(4))
    assert (fn.capture.units, fn.capture.partitions, fn.capture.graph_ops) == ([], 0, 3)


def test_a_unit_per_operation_is_not_fusion_and_a_unit_of_several_is(monkeypatch):
    with_adapter(monkeypatch, OnePerOp())
    apart = precisionkit.fused(scale_shift_tanh, backend="one_per_op")
    with pytest.raises(
        FusionError, match=r"put each of the graph's 3 operations in a unit of its own: nothing was fused$"
    ):
        apart(torch.randn(4))
    assert [u.ops for u in apart.capture.units] == [("mul",), ("add",), ("tanh",)]
    assert apart.evidence.fused_units == 0 and apart.evidence.kernel_count == 3

    with_adapter(monkeypatch, OnePerOp(together=True))
    together = precisionkit.fused(scale_shift_tanh, backend="one_per_op")
    x = torch.linspace(-1, 1, 5)
    assert torch.equal(together(x), scale_shift_tanh(x))
    ev = together.evidence
    assert (ev.compiler, ev.kernel_names, ev.fused_units, ev.partitions, ev.code_sha256) == (
        "one_per_op",
        ("all",),
        1,
        1,
        "",
    )


def tanh_only(x):
    return torch.tanh(x)


def test_a_single_operation_in_a_unit_of_its_own_is_enough(monkeypatch):
    # A graph of one operation cannot fuse; one unit for it is all a compiler can do.
    with_adapter(monkeypatch, OnePerOp())
    fn = precisionkit.fused(tanh_only, backend="one_per_op")
    fn(torch.randn(3))
    assert (fn.evidence.kernel_count, fn.evidence.fused_units, fn.capture.graph_ops) == (1, 0, 1)


def test_an_unknown_name_lists_the_adapters_and_the_backends():
    with pytest.raises(ValueError) as err:
        adapter_for_backend("no-such-compiler")
    msg = str(err.value)
    assert msg.startswith("unknown torch.compile backend 'no-such-compiler'; registered: ")
    assert "inductor" in msg.split("; registered: ")[1] and msg.endswith("; adapters: inductor, openvino, iree")
    with pytest.raises(ValueError, match=r"^no adapter named 'no-such-compiler'; adapters: inductor, openvino, iree$"):
        get_adapter("no-such-compiler")


def test_an_adapter_whose_compiler_is_missing_says_how_to_install_it(tmp_path, monkeypatch, forget_modules):
    install(tmp_path / "site", monkeypatch, "absent-c", {"absent_c": ABSENT}, {"absentc": "absent_c:make"})
    line = "Absent C cannot run here: the absentc package is not installed; install it with pip install 'fusion-precision[absentc]'"
    with pytest.raises(MissingCompiler) as err:
        get_adapter("absentc")
    assert str(err.value) == line and "\n" not in line
    with pytest.raises(MissingCompiler, match=r"pip install 'fusion-precision\[absentc\]'$"):
        precisionkit.fused(scale_shift_tanh, backend="absentc")
    # Named by its torch.compile backend too, and listed without being checked.
    with pytest.raises(MissingCompiler):
        adapter_for_backend("absentc")
    assert get_adapter("absentc", require_installed=False).name == "absentc"
    assert "absentc" in adapter_names()


def test_an_entry_point_that_fails_to_load_is_named_with_its_cause(tmp_path, monkeypatch, forget_modules):
    install(
        tmp_path / "site",
        monkeypatch,
        "broken-backends",
        {"not_an_adapter": "VALUE = 3\n"},
        {"broken": "no_such_module_for_fusion:Adapter", "number": "not_an_adapter:VALUE"},
    )
    assert adapter_names() == [*BUILT_IN, "broken", "number"]
    with pytest.raises(AdapterLoadError) as err:
        get_adapter("broken")
    assert str(err.value) == (
        "entry point 'broken' (no_such_module_for_fusion:Adapter) of group 'fusion_precision.backends' failed to load: "
        "ModuleNotFoundError: No module named 'no_such_module_for_fusion'"
    )
    with pytest.raises(AdapterLoadError, match=r"^entry point 'number' \(not_an_adapter:VALUE\) .* names a int, not"):
        precisionkit.fused(scale_shift_tanh, backend="number")


def test_backends_without_an_adapter_are_judged_by_inductors_capture():
    adapter = adapter_for_backend("aot_eager")
    assert isinstance(adapter, InductorAdapter)
    assert (adapter.name, adapter.title, adapter.dynamo_backend) == ("inductor", "Inductor", "aot_eager")
    assert adapter_for_backend("inductor").dynamo_backend == "inductor"
    assert adapter.fusion_problem(CompileCapture()) == "generated no fused kernel (no generated code was captured)"
    assert (
        adapter.fusion_problem(CompileCapture(fused_library_calls=["_scaled_dot_product_flash_attention_for_cpu"]))
        is None
    )
    # Inductor's rule is the one it had before adapters: a kernel is enough, whatever it computes.
    assert adapter.fusion_problem(CompileCapture(units=[FusedUnit("k0")], graph_ops=5)) is None


def test_inductor_units_carry_the_source_nodes_inductor_names():
    code = (
        "# AOT ID: ['0_inference']\n"
        "# kernel path: /tmp/x/cx.py\n"
        "# Topologically Sorted Source Nodes: [mul, add, tanh], Original ATen: [aten.mul, aten.add, aten.tanh]\n"
        "# Source node to ATen node mapping:\n"
        "#   add => add\n"
        "triton_poi_fused_add_mul_tanh_0 = async_compile.triton('triton_poi_fused_add_mul_tanh_0', '''\n"
        "x = 1\n"
        "''')\n"
        "\n"
        "cpp_fused_sum_1 = async_compile.cpp_pybinding(['float*'], r'''...''')\n"
    )
    units = GeneratedCode([code]).units
    assert units == (
        FusedUnit("triton_poi_fused_add_mul_tanh_0", ("mul", "add", "tanh"), kind="triton"),
        FusedUnit("cpp_fused_sum_1", (), kind="cpp_pybinding"),
    )
    assert [u.fuses for u in units] == [True, False]


def test_inductor_knobs_are_the_config_knobs_of_the_layer_bisection():
    from precisionkit import bisect

    adapter = InductorAdapter()
    for device, knobs in (("cpu", bisect.INDUCTOR_KNOBS), ("cuda:0", bisect.CUDA_INDUCTOR_KNOBS)):
        config_knobs = {k.name: k.prelude for k in knobs if k.prelude}
        preludes = {
            name: "import torch._inductor.config as c\n"
            + "\n".join(f"c.{key} = {value!r}" for key, value in opts.items())
            for name, opts in adapter.knobs(device).items()
        }
        assert preludes == config_knobs, device
    assert adapter.provenance()["version"] == torch.__version__
    assert adapter.provenance()["codegen_cpu"] == "cpp"


def test_importing_precisionkit_imports_no_other_compiler():
    code = (
        "import sys, precisionkit\n"
        "from precisionkit.backends import adapter_names\n"
        "adapter_names()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openvino', 'iree')"
        " or m in ('precisionkit.backends.openvino', 'precisionkit.backends.iree')))\n"
    )
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- the rule where nothing could fuse ------------------------------------------------------------


def test_operations_that_feed_no_other_need_only_be_compiled():
    # Two sums of one tensor: two operations, neither consuming the other. A compiler that runs them as
    # two units compiled all there was to fuse; counted edges say so, uncounted ones keep the old rule.
    apart = [FusedUnit("sum", ("sum",)), FusedUnit("sum_1", ("sum_1",))]
    rule = BackendAdapter().fusion_problem
    assert rule(CompileCapture(units=apart, graph_ops=2, graph_edges=0)) is None
    assert rule(CompileCapture(units=apart, graph_ops=2, graph_edges=1)) == (
        "put each of the graph's 2 operations in a unit of its own: nothing was fused"
    )
    assert rule(CompileCapture(units=apart, graph_ops=2)) is not None  # edges not counted: as before
    # A unit that names none of its operations (a rewrite lost them) may hold several: not "nothing fused".
    assert rule(CompileCapture(units=[*apart, FusedUnit("dispatch_0")], graph_ops=8, graph_edges=6)) is None
    # Nothing compiled is refused whatever the graph.
    assert rule(CompileCapture(graph_ops=1, graph_edges=0)) == (
        "generated no fused unit (nothing the compiler produced was captured)"
    )


def two_sums(x):
    return torch.sum(x, -1), torch.sum(x, -1, dtype=torch.float32)


def test_a_unit_per_operation_where_no_operation_feeds_another_is_enough(monkeypatch):
    from precisionkit.backends.base import count_edges

    class CountingOnePerOp(OnePerOp):
        """OnePerOp that counts the graph's edges, as OpenVINO's and IREE's adapters do."""

        def compiler(self, options):
            inner = super().compiler(options)

            def compile_graph(gm, example_inputs):
                for cap in self._open:
                    cap.graph_edges = (cap.graph_edges or 0) + count_edges(gm.graph, lambda n: n.op == "call_function")
                return inner(gm, example_inputs)

            return compile_graph

    with_adapter(monkeypatch, CountingOnePerOp())
    sums = precisionkit.fused(two_sums, backend="one_per_op")
    sums(torch.randn(2, 8).half())
    assert (sums.capture.graph_ops, sums.capture.graph_edges, sums.evidence.kernel_count) == (2, 0, 2)
    # the same adapter on a chain, where each operation feeds the next, is refused as before
    chain = precisionkit.fused(scale_shift_tanh, backend="one_per_op")
    with pytest.raises(FusionError, match=r"nothing was fused$"):
        chain(torch.randn(4))
    assert chain.capture.graph_edges == 2


# --- intents --------------------------------------------------------------------------------------


def test_inductors_intents_are_the_options_the_experiments_used_before_intents():
    """Experiments ask intents now; Inductor's answers are the options C2 and B set themselves before, so its
    results do not change."""
    from precisionkit.backends import INTENTS

    ind = InductorAdapter()
    assert set(INTENTS) == {"one_thread", "faithful_casts", "whole_graph", "reduction_knobs", "reduction_tilings"}
    assert ind.intent("one_thread", "cpu") == {"cpp.threads": 1}
    assert ind.intent("one_thread", "cuda:0") == {"split_reductions": False}
    assert ind.intent("faithful_casts") == {"emulate_precision_casts": True}
    assert ind.intent("whole_graph") == {}
    assert ind.intent_variants("reduction_knobs", "cpu") == {
        "cpp.threads=1": {"cpp.threads": 1},
        "cpp.simdlen=0": {"cpp.simdlen": 0},
        "split_reductions=False": {"split_reductions": False},
    }
    assert ind.intent_variants("reduction_tilings", "cpu") == {
        f"t{t}_simd{w}": {"cpp.threads": t, "cpp.simdlen": w} for t in (1, 2) for w in (0, 256, 512)
    }
    assert list(ind.intent_variants("reduction_tilings", "cuda")) == [
        "split",
        "nosplit_persistent",
        "nosplit_looped",
        "cooperative",
        "min_num_split_64",
    ]
    assert ind.intent_variants("reduction_knobs", "cuda") == {
        "split_reductions=False": {"split_reductions": False},
        "triton.persistent_reductions=False": {"triton.persistent_reductions": False},
    }
    # a device Inductor declares no one-thread setting for: None, with the reason an experiment stores
    assert ind.intent("one_thread", "mps") is None
    assert "CPU and CUDA devices only" in ind.why_not("one_thread", "mps")
    assert ind.merge_options({"a": 1}, {"cpp.threads": 1}) == {"a": 1, "cpp.threads": 1}


def test_intents_are_asked_by_their_declared_names_and_kinds():
    ind = InductorAdapter()
    with pytest.raises(ValueError, match=r"no intent 'cpp\.threads'; intents: one_thread, "):
        ind.intent("cpp.threads")
    with pytest.raises(ValueError, match="is a set of variants"):
        ind.intent("reduction_knobs")
    with pytest.raises(ValueError, match="is one option set"):
        ind.intent_variants("one_thread")
    # an adapter that declares no intents has none, and says that its adapter declares no way
    plain = RunsEager()
    assert plain.intent("faithful_casts") is None and plain.intent_variants("reduction_tilings") is None
    assert plain.why_not("faithful_casts") == (
        "its adapter declares no way to round every cast between fused operations as eager does (keep an fp32 -> "
        "fp16 -> fp32 pair) on cpu"
    )


def test_a_users_adapter_declares_its_intents(tmp_path, monkeypatch, forget_modules):
    source = """
from precisionkit.backends.base import BackendAdapter


class Declaring(BackendAdapter):
    name, title = "declaring", "Declaring"
    intents_lacking = {"one_thread": "its thread pool is process-wide"}

    def intents(self, device="cpu"):
        return {"faithful_casts": {}, "reduction_knobs": {"fast": {"fast_math": True}}}
"""
    install(
        tmp_path / "site",
        monkeypatch,
        "declaring-compilers",
        {"declaring_compilers": source},
        {"declaring": "declaring_compilers:Declaring"},
    )
    adapter = get_adapter("declaring")
    assert adapter.intent("faithful_casts") == {}
    assert adapter.intent_variants("reduction_knobs") == {"fast": {"fast_math": True}}
    assert adapter.intent("one_thread") is None and adapter.why_not("one_thread") == "its thread pool is process-wide"


def gelu_of_affine(x):
    return torch.nn.functional.gelu(x * 1.5 - 0.25)


def test_a_wrapped_backend_compiles_through_the_wrapper_and_gives_inductors_result():
    from torch._dynamo import lookup_backend

    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    plain = precisionkit.fused(gelu_of_affine)(x)
    original = lookup_backend("inductor")
    calls: list[int] = []

    def counting(original_compile, gm, example_inputs):
        calls.append(sum(1 for n in gm.graph.nodes if n.op == "call_function"))
        return original_compile(gm, example_inputs)

    with wrapped_backend("inductor", counting) as name:
        assert name == "inductor" and lookup_backend(name) is not original
        fn = precisionkit.fused(gelu_of_affine, name)
        out = fn(x)
        fn(x)  # served by the compiled graph: no second compile
    assert torch.equal(out, plain) and calls == [3]  # one graph of mul, sub, gelu
    assert fn.evidence.graph_count == 1 and fn.evidence.kernel_count >= 1
    assert lookup_backend("inductor") is original
    precisionkit.fused(gelu_of_affine)(x)
    assert calls == [3]  # after the block, compiles no longer go through the wrapper


def test_a_wrapped_backend_is_put_back_when_the_block_raises():
    from torch._dynamo import lookup_backend

    original = lookup_backend("inductor")
    with pytest.raises(RuntimeError, match="inside the block"), wrapped_backend("inductor", lambda o, g, e: o(g, e)):
        raise RuntimeError("inside the block")
    assert lookup_backend("inductor") is original

    def refusing(original_compile, gm, example_inputs):
        raise ValueError("the wrapper refuses")

    with pytest.raises(Exception, match="the wrapper refuses"), wrapped_backend("inductor", refusing) as name:
        precisionkit.fused(gelu_of_affine, name)(torch.randn(4))
    assert lookup_backend("inductor") is original
    with pytest.raises(ValueError, match="no adapter named 'nothing'"), wrapped_backend("nothing", refusing):
        pass
