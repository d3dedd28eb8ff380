"""The layer bisection of another compiler's reproducer: its layers skip Inductor (the compiler does not
run through it) and end with that compiler, and its adapter's knobs are the variants tried next."""

from __future__ import annotations

from precisionkit.bisect import KNOB_BACKEND, _adapter_knobs, _layers
from precisionkit.repro import Case, Input, for_backend

SOURCE = "def graph(x):\n    return torch.isinf(x * x)\n"


def _case(name: str) -> Case:
    return for_backend(Case("c", SOURCE, (Input("x", (2, 3), "float16", 1),), rule="diff"), name)


def test_an_openvino_case_bisects_through_its_own_layers_and_knobs() -> None:
    case = _case("openvino")
    assert [b for _, b in _layers(case)] == ["eager", "aot_eager", "aot_eager_decomp_partition", "openvino"]
    knobs = _adapter_knobs(case.backend)
    assert [k.name for k in knobs] == [
        "INFERENCE_PRECISION_HINT=f32 (no bf16/f16 execution)",
        "EXECUTION_MODE_HINT=ACCURACY",
        "SNIPPETS_MODE=DISABLE (no generated subgraph kernels)",
    ]
    assert {k.kind for k in knobs} == {"openvino"}
    assert f"register_backend(name={KNOB_BACKEND!r})(get_adapter('openvino').compiler(" in knobs[0].prelude
    assert 'json.loads("{\\"config\\": {\\"INFERENCE_PRECISION_HINT\\": \\"f32\\"}}")' in knobs[0].prelude


def test_an_iree_case_compiles_with_turbine_cpu_and_bisects_with_the_compile_flags() -> None:
    case = _case("iree")
    assert case.backend == "turbine_cpu"
    assert "import iree.turbine.dynamo.backends.base" in case.setup
    assert [b for _, b in _layers(case)][-1] == "turbine_cpu"
    assert "inductor" not in [b for _, b in _layers(case)]
    assert [k.name for k in _adapter_knobs(case.backend)][:3] == [
        "aggressive_fusion",
        "opt_level_O3",
        "reassociate_fp_reductions",
    ]


def test_inductor_keeps_its_layers_and_its_own_knob_sets() -> None:
    case = _case("inductor")
    assert (case.backend, case.setup) == ("inductor", "")
    assert [b for _, b in _layers(case)][-1] == "inductor"
    assert _adapter_knobs("inductor") == []
