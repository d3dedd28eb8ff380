"""The ``opinfo`` generator of the differential tester: deterministic programs of 2 to 8 ops from
PyTorch's op database, compiled statically or dynamically as the program says, every excluded op
with its reason, coverage counted from the programs' records, and programs that run clean."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

pytest.importorskip("expecttest")  # torch's op database needs it

from precisionkit.difftest import (
    generate,
    opinfo,
    run,
)
from precisionkit.difftest.compile_modes import compiled_as, setup_source
from precisionkit.repro import Case, Input, namespace, render

SEEDS = range(6)


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return [generate(s, "opinfo") for s in SEEDS]


def test_generation_is_a_function_of_the_seed(cases: list[Case]) -> None:
    again = generate(SEEDS[2], "opinfo")
    first = cases[2]
    assert (again.id, again.source, again.inputs, again.setup) == (first.id, first.source, first.inputs, first.setup)
    assert again.extra == first.extra
    assert len({c.source for c in cases}) == len(cases)


def test_chains_hold_two_to_eight_ops(cases: list[Case]) -> None:
    for case in cases:
        ops = case.extra["ops"]
        assert opinfo.MIN_OPS <= len(ops) <= opinfo.MAX_OPS, case.id
        assert all(o["op"] in opinfo.op_db() for o in ops)
        assert case.rule == "diff" and case.id.startswith("opinfo-") and case.extra["dtype"] in opinfo.DTYPES


def test_a_dynamic_program_compiles_with_symbolic_sizes(cases: list[Case]) -> None:
    seen: list[bool] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[object]) -> object:
        symbolic = any(isinstance(a, torch.SymInt) for a in example_inputs) or any(
            isinstance(s, torch.SymInt) for a in example_inputs if isinstance(a, torch.Tensor) for s in a.shape
        )
        seen.append(symbolic)
        return gm.forward

    case = Case(
        "dyn",
        "def graph(f0):\n    v0 = torch.exp(f0)\n    v1 = torch.sum(v0, 1)\n    return v1\n",
        (Input("f0", (4, 9)),),
        rule="diff",
        extra={"compile": {"mode": "dynamic"}},
    )
    scope = namespace(case)
    torch._dynamo.reset()
    with compiled_as(case):
        torch.compile(scope["graph"], backend=backend)(*scope["make"]())
    assert seen and seen[0]
    seen.clear()
    torch._dynamo.reset()
    torch.compile(scope["graph"], backend=backend)(*scope["make"]())  # outside: static again
    assert seen == [False]
    torch._dynamo.reset()
    # the reproducer file compiles the same way when it runs as a script, and only then
    text = render(case.with_(setup=setup_source(case.extra["compile"])))
    assert 'if __name__ == "__main__"' in text and "dynamic=True" in text
    before = torch.compile
    namespace(case.with_(setup=setup_source({"mode": "dynamic"})))
    assert torch.compile is before  # in process the setup does nothing: the runner compiles as the case says
    marked = {"mode": "mark_dynamic", "input": 0, "dim": 1}
    assert "maybe_mark_dynamic(args[0], 1)" in setup_source(marked)


def test_programs_record_a_compile_mode_the_runner_understands() -> None:
    modes = Counter(generate(s, "opinfo").extra["compile"]["mode"] for s in range(20, 32))
    assert set(modes) <= {"static", "dynamic", "mark_dynamic"} and len(modes) >= 2


def test_every_excluded_op_has_a_reason() -> None:
    eligible, excluded = opinfo.catalogue()
    assert len(eligible) > 400 and len(excluded) > 50
    assert not set(eligible) & set(excluded)
    assert all(isinstance(r, str) and len(r) > 10 for r in excluded.values())
    assert set(eligible) | set(excluded) == set(opinfo.op_db())
    assert "bernoulli" in excluded and "random" in excluded["bernoulli"]
    groups = opinfo.exclusions_by_reason(excluded)
    assert sum(len(v) for v in groups.values()) == len(excluded)


def test_coverage_counts_programs_per_op_dtype_and_mode() -> None:
    def fake(seed: int, dtype: str, mode: str, ops: list[tuple[str, str]], compile_mode: str = "static") -> Case:
        return Case(
            f"opinfo-{seed}",
            "def graph(f0):\n    return f0\n",
            (Input("f0", (2,)),),
            rule="diff",
            extra={
                "dtype": dtype,
                "mode": mode,
                "compile": {"mode": compile_mode},
                "ops": [{"op": o, "dtype": d, "family": "pointwise", "how": "op"} for o, d in ops],
            },
        )

    cases = [
        fake(0, "float32", "tiny", [("exp", "float32"), ("exp", "float32"), ("log", "float32")]),
        fake(1, "float32", "tiny", [("exp", "float32")], "dynamic"),
        fake(2, "int64", "normal", [("add", "int64"), ("exp", "float32")]),
        fake(3, "float64", "huge", [("add", "float64")]),
    ]
    cov = opinfo.coverage(cases, eligible=["exp", "log", "add", "sin"])
    assert cov.programs == 4
    assert cov.counts[("exp", "float32", "tiny")] == 2  # once per program, not per occurrence
    assert cov.per_1000(("exp", "float32", "tiny")) == 500.0
    assert cov.counts[("exp", "float32", "normal")] == 1 and cov.counts[("log", "float32", "tiny")] == 1
    assert cov.reached == 0.75
    assert cov.modes == Counter({"tiny": 2, "normal": 1, "huge": 1})
    assert cov.compile_modes == Counter({"static": 3, "dynamic": 1})
    assert cov.dtypes["float32"] == 3 and cov.dtypes["int64"] == 1
    assert "never drawn (1): sin" in cov.summary()


def test_programs_run_clean_on_the_eager_backend(cases: list[Case]) -> None:
    for case in cases[:3]:
        out = run(case, backend="eager")
        assert out.klass == "ok", (case.id, out.message, case.source)


def test_consecutive_seeds_start_their_programs_at_every_op_once() -> None:
    """The first op is stratified over seeds: as many consecutive seeds as there are eligible ops
    anchor each op exactly once (from any starting seed), and a seed whose op is not among the
    candidates (the program's dtype or role) takes the next candidate in the same rotation."""
    eligible = opinfo.catalogue()[0]
    n = len(eligible)
    for start in (0, 500000):
        anchors = [opinfo._anchor(s, eligible) for s in range(start, start + n)]
        assert sorted(anchors) == sorted(eligible)
    assert opinfo._anchor(7, eligible) == opinfo._anchor(7 + n, eligible)
    few = ["exp", "add", "sin"]
    picks = Counter(opinfo._anchor(s, few) for s in range(n))
    assert set(picks) == set(few) and sum(picks.values()) == n


def test_the_first_op_of_a_program_is_its_seeds_anchor_where_that_op_can_start_it() -> None:
    """A program starts at its seed's anchor among the ops of its dtype, in the role it drew (any
    eligible op, or a module op); another first op only where the anchor could not start it."""
    keys = opinfo._keys()
    anchored = 0
    for s in range(40, 52):
        case = generate(s, "opinfo")
        dtype, first = case.extra["dtype"], case.extra["ops"][0]["op"]
        roles = [
            [k for k in keys[r] if dtype in opinfo.dtypes_of(opinfo.op_db()[k])] or keys[r] for r in ("all", "module")
        ]
        anchored += first in [opinfo._anchor(s, ks) for ks in roles]
    assert anchored >= 10


def test_a_special_polynomials_degree_is_not_drawn_where_values_may_be_huge_or_not_finite() -> None:
    """A polynomial's degree is converted to an integer: 3e38 is undefined there (eager returns at
    once, a fused kernel may loop 3e38 times), so in the huge and nonfinite modes the step is drawn
    again; in the normal mode the same step is written."""
    import random

    from precisionkit.difftest.program import Program

    for mode, written in (("huge", False), ("nonfinite", False), ("normal", True)):
        st = opinfo._State(Program(0, random.Random(0), "float32"), "float32", mode)
        st.env["f0"], st.env64["f0"] = torch.tensor([0.5, 0.25]), torch.tensor([0.5, 0.25], dtype=torch.float64)
        degree = "3e+38" if mode != "normal" else "3.0"
        expr = f"torch.special.legendre_polynomial_p(f0, {degree})"
        got = opinfo._commit(st, expr, "special.legendre_polynomial_p", "float32", "scalar")
        assert (got == "v0") is written, mode


def test_an_ops_dtypes_are_the_ones_opinfo_lists_for_the_programs_device() -> None:
    # CUDA's kernels lack integer matmuls, int64 convolutions and 16-bit igammac, which the CPU has:
    # drawn from the CPU's lists, a CUDA campaign made programs whose eager run raised (20 of 273
    # on an H200). The lists are OpInfo's data, read without a GPU.
    db = opinfo.op_db()
    assert {"int64", "int32"} <= set(opinfo.dtypes_of(db["addmm"]))
    assert not {"int64", "int32"} & set(opinfo.dtypes_of(db["addmm"], "cuda"))
    assert "int64" in opinfo.dtypes_of(db["nn.functional.conv2d"], "cpu")
    assert "int64" not in opinfo.dtypes_of(db["nn.functional.conv2d"], "cuda:1")  # the kind, not the index
    assert {"float16", "bfloat16"} <= set(opinfo.dtypes_of(db["igammac"]))
    assert opinfo.dtypes_of(db["igammac"], "cuda") == ("float32", "float64")
