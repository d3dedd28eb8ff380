"""The typed differential tester: generators, the ``diff`` rule's power and its silence on rounding."""

from __future__ import annotations

import pytest
import torch
from repro_backends import SETUP, register

from precisionkit import difftest
from precisionkit.repro import Case, Input, namespace, reproduces

register()


def diff_case(source: str, *inputs: Input, backend: str = "eager") -> Case:
    return Case("d", source, tuple(inputs), backend=backend, rule="diff", setup=SETUP)


def test_generate_is_deterministic_and_names_bad_requests() -> None:
    a, b = difftest.generate(17, "typed"), difftest.generate(17, "typed")
    assert a == b and a.rule == "diff" and a.id.startswith("typed-17-")
    assert difftest.generate(17, "typed") != difftest.generate(18, "typed")
    assert difftest.generate(3, "norm", "bfloat16").inputs[0].dtype == "bfloat16"
    with pytest.raises(ValueError, match="generator must be one of"):
        difftest.generate(1, "conv")
    with pytest.raises(ValueError, match="dtype must be one of"):
        difftest.generate(1, "typed", "float64")


def test_every_generator_writes_programs_that_run_eagerly() -> None:
    """No compile: the programs, their inputs and their fp64 reference must all run (an invalid
    program would be the generator's fault, not the compiler's)."""
    plan = [("typed", s) for s in range(60)] + [(g, s) for g in ("attention", "norm", "gelu") for s in range(6)]
    layouts, values, kinds = set(), set(), set()
    for gen, seed in plan:
        case = difftest.generate(seed, gen)
        scope = namespace(case)
        with torch.no_grad():
            scope["graph"](*scope["make"]())
            scope["graph"](*[a.double() if a.is_floating_point() else a for a in scope["make"]()])
        layouts |= {i.layout for i in case.inputs}
        values |= {i.values for i in case.inputs}
        kinds |= set(case.extra["features"])
    assert layouts == {"contiguous", "transposed", "broadcast", "offset", "strided"}
    assert values == {"normal", "edge", "grid", "specials", "tail", "int", "index", "bool"}
    for feature in ("argmin_argmax", "cumulative", "cast", "index_put", "in_place_view", "expanded_view", "attention"):
        assert feature in kinds


def test_reduction_generator_reaches_a_million_terms() -> None:
    sizes = {difftest.generate(s, "reduction").extra["reduction"] for s in range(40)}
    assert max(sizes) == 2**20 and min(sizes) == 2**12


# --- the rule: silent on rounding, loud on defects --------------------------------------------


X = Input("x", (4, 33), "float32", 5, values="edge")


def test_rounding_noise_is_never_a_mismatch() -> None:
    for dtype in ("float32", "float16", "bfloat16"):
        c = diff_case(
            "def graph(x):\n    return torch.exp(x) * 3.0 + x\n",
            Input("x", (4, 33), dtype, 5),
            backend="pk_test_one_ulp",
        )
        assert reproduces(c) == (False, "every output agrees with eager and fp64 (pk_test_one_ulp)")


def test_a_lost_zero_sign_a_wrong_integer_and_one_garbage_element_are_mismatches() -> None:
    hit, msg = reproduces(
        diff_case("def graph(x):\n    return torch.relu(x) * 0.0\n", X, backend="pk_test_negative_zero")
    )
    assert hit and "eager 0.0, fused (pk_test_negative_zero) -0.0, fp64 0.0" in msg
    ints = Input("i", (3, 9), "int64", 2, values="int", scale=5.0)
    hit, msg = reproduces(diff_case("def graph(i):\n    return i * 2\n", ints, backend="pk_test_int_off_by_one"))
    assert hit and msg.startswith("output 0: 27 of 27 elements wrong")
    normal = Input("x", (4, 33), "float32", 5)
    hit, msg = reproduces(diff_case("def graph(x):\n    return x * 2.0\n", normal, backend="pk_test_garbage_one"))
    assert hit and msg.startswith("output 0: 1 of 132 elements wrong; at (3, 32)")


def test_a_nan_swallowing_max_is_a_mismatch() -> None:
    """max over a row with a NaN is NaN in eager and in fp64; a fused max that ignores NaN returns the
    largest finite value there: a finite output where eager and fp64 agree on NaN is a wrong result."""
    assert torch.isnan(namespace(diff_case("def graph(x):\n    return x\n", X))["make"]()[0]).any()
    hit, msg = reproduces(
        diff_case("def graph(x):\n    return torch.amax(x, dim=-1)\n", X, backend="pk_test_nan_swallowing_max")
    )
    assert hit and "nan" in msg
    assert not reproduces(diff_case("def graph(x):\n    return torch.amax(x, dim=-1)\n", X))[0]


def test_nan_payloads_and_matching_specials_are_not_mismatches() -> None:
    c = diff_case("def graph(x):\n    return torch.log(x), torch.reciprocal(x)\n", X, backend="eager")
    assert not reproduces(c)[0]


def test_features_of_reads_source_and_inputs() -> None:
    c = diff_case(
        "def graph(x, i):\n    v0 = x.to(torch.float16).to(x.dtype) - x\n    return torch.argmin(v0, dim=1, keepdim=True) + i\n",
        Input("x", (4, 8), "float32", 1, layout="transposed"),
        Input("i", (4, 1), "int64", 2, values="int"),
    )
    assert difftest.features_of(c) >= {
        "cast",
        "fp16_bf16",
        "argmin_argmax",
        "transpose_input",
        "integer_dtype",
        "reduction",
    }
    assert not {"index_put", "signed_zero", "nan_inf"} & difftest.features_of(c)
    said = "output 0: 2 of 8 elements wrong; at (0, 1): eager 0.0, fused (inductor) -0.0, fp64 0.0"
    assert {"signed_zero"} <= difftest.features_of(c, said) and "nan_inf" not in difftest.features_of(c, said)
    said = "output 0: 1 of 8 elements wrong; at (0, 1): eager 2.0, fused (inductor) inf, fp64 2.0"
    assert "nan_inf" in difftest.features_of(c, said)
    dtype_only = diff_case(
        "def graph(x, y):\n    return x.to(y.dtype)\n", Input("x", (2, 2)), Input("y", (2, 2), layout="strided")
    )
    assert "as_strided" not in difftest.features_of(dtype_only) and "transpose_input" not in difftest.features_of(
        dtype_only
    )


def test_run_classifies_invalid_programs_and_compile_errors() -> None:
    bad = diff_case("def graph(x):\n    return x @ x\n", Input("x", (3, 5)))
    assert difftest.run(bad).klass == "invalid"
    out = difftest.run(diff_case("def graph(x):\n    return x + 1.0\n", Input("x", (3, 5))), backend="pk_test_raise")
    assert out.klass == "compile_error" and "pk_test_raise" in out.message
    ok = difftest.run(diff_case("def graph(x):\n    return x + 1.0\n", Input("x", (3, 5))), backend="eager", threads=1)
    assert ok.klass == "ok" and ok.threads == 1 and ok.row()["class"] == "ok"


@pytest.mark.slow
def test_typed_generator_finds_the_fp16_round_trip_that_inductor_elides() -> None:
    """typed seed 2 (float32) takes the error of a float16 round trip and feeds it to atan2(v, v);
    the CPU kernel keeps the float32 value (pytorch/pytorch#185337, open on 2.13), so the error is 0
    and atan2(0, 0) = 0 where eager's is pi/4. Only the lines output 0 depends on are read."""
    case = difftest.generate(2, "typed")
    assert "v0 = f0.to(torch.float16).to(f0.dtype) - f0" in case.source and "torch.atan2(v0" in case.source
    out = difftest.run(case)
    if torch.__version__.startswith("2.13"):
        assert out.klass == "mismatch"
        assert out.message.startswith("output 0:") and "fused (inductor) 0.0, fp64 0.78539816" in out.message
        assert difftest.features_of(case, out.message) == {"cast", "fp16_bf16"}


def test_plan_gives_each_structured_generator_an_eighth_and_alternates_reduction_threads() -> None:
    todo = difftest.plan(240, 7)
    assert len(todo) == 240 and todo[0] == ("typed", 7) and todo[119] == ("typed", 126)
    assert [g for g, _ in todo].count("typed") == 120
    for gen in ("attention", "norm", "gelu", "reduction"):
        assert [s for g, s in todo if g == gen] == list(range(7, 37))
    assert difftest.plan(10) == [("typed", s) for s in range(6)] + [
        (g, 0) for g in ("attention", "norm", "gelu", "reduction")
    ]
    assert (difftest.threads_for("reduction", 3), difftest.threads_for("reduction", 4)) == (1, None)
    assert difftest.threads_for("typed", 3) is None


def test_features_come_from_the_lines_the_wrong_output_depends_on() -> None:
    from precisionkit.minimize import live_lines, single_output

    src = (
        "def graph(f0, i1):\n"
        "    v0 = f0.argmin()\n"
        "    v1 = f0.clone()\n"
        "    v1[:, i1] = 2.0\n"
        "    v3 = torch.cumsum(f0, dim=1)\n"
        "    f0.fill_(1.0)\n"
        "    return v0, v1, v3\n"
    )
    case = diff_case(src, Input("f0", (2, 3)), Input("i1", (3,), "int64", values="index"))
    body = src.splitlines()[1:-1]
    assert live_lines(body, ["v1"]) == body[1:3]  # its clone and the write into it; f0.fill_ comes after
    assert live_lines(body, ["v3"]) == [body[3]]  # a write after the read does not reach v3
    one = single_output(case, 2)
    assert one is not None and one.source.splitlines()[-1] == "    return v3" and [i.name for i in one.inputs] == ["f0"]
    assert single_output(case, 3) is None
    said = "output 2: 1 of 6 elements wrong; at (0, 1): eager 1.0, fused (inductor) 2.0, fp64 1.0"
    assert difftest.features_of(case, said) == {"cumulative"}
    assert {"argmin_argmax", "index_put", "cumulative"} <= difftest.features_of(case)


def test_a_wrong_output_dtype_is_named_by_its_index() -> None:
    src = "def graph(x):\n    return x + 1.0, x.to(torch.float16)\n"
    case = Case("d", src, (Input("x", (2, 2)),), backend="pk_test_to_f32", rule="diff", setup=SETUP)
    hit, said = reproduces(case)
    assert hit and said.startswith("output 1: shape or dtype differs") and "torch.float16" in said


def test_a_program_that_kills_or_hangs_the_worker_costs_one_program() -> None:
    """In :class:`difftest.Isolated`, compiled code that segfaults is a ``crash`` of the fused run,
    one that never returns is killed after the timeout, and the next program runs in a fresh worker."""
    prog = "def graph(x):\n    return x + 1.0\n"
    with difftest.Isolated(timeout=60) as worker:
        crashed = worker.run(diff_case(prog, Input("x", (3, 5)), backend="pk_test_crash"), "pk_test_crash")
        assert crashed.klass == "crash" and crashed.message == "fused run: the interpreter died (SIGSEGV)"
        assert worker.crashes == 1
        ok = worker.run(diff_case(prog, Input("x", (3, 5))), "eager")
        assert ok.klass == "ok"
        small = worker.minimize(diff_case(prog, Input("x", (3, 5)), backend="pk_test_garbage_one"))
        assert small is not None and "1 of 1 elements wrong" in small[1] and small[0].inputs[0].shape == (1, 1)
    with difftest.Isolated(timeout=5) as worker:
        # A first program warms the worker (Dynamo's imports), so that only the fused run can hang
        # past the 5 s: on a loaded machine a cold eager run can take that long by itself.
        assert worker.run(diff_case(prog, Input("x", (2, 2))), "eager").klass == "ok"
        hung = worker.run(diff_case(prog, Input("x", (2, 2)), backend="pk_test_hang"), "pk_test_hang")
        assert hung.klass == "crash" and hung.message == "fused run: no result within 5 s (killed)"


def test_the_diff_rule_judges_classes_only_where_eager_has_the_references_class() -> None:
    """What the rule calls wrong, element by element (float32): a zero beside eager's one-ULP
    remainder is rounding; a lost sign of zero or a NaN where eager and fp64 are finite is not;
    where eager itself overflowed (NaN against a finite reference), fused's -inf is no worse."""
    from precisionkit.repro_rules import CHECKS

    scope: dict = {"torch": torch, "REDUCTION": 1}
    exec(CHECKS["diff"], scope)
    wrong = scope["wrong"]
    f32 = lambda *v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    f64 = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    eager, fused = f32(2.0**-24, -0.0, float("nan"), 1.0), f32(0.0, 0.0, -float("inf"), float("nan"))
    ref = f64(0.29999999999999993, -0.0, 0.0667, 1.0)
    assert wrong(eager, fused, ref).tolist() == [False, True, False, True]


def test_the_diff_rule_measures_eager_noise_over_the_row() -> None:
    """bf16 attention: eager's element 0 happens to be close to fp64, its neighbour is off by 0.03;
    fused off by 0.07 at element 0 is rounding at that row's scale, off by 1 is not."""
    from precisionkit.repro_rules import CHECKS

    scope: dict = {"torch": torch, "REDUCTION": 1}
    exec(CHECKS["diff"], scope)
    wrong = scope["wrong"]
    ref = torch.tensor([[0.0986, 0.5]], dtype=torch.float64)
    eager = torch.tensor([[0.0913, 0.53]], dtype=torch.bfloat16)
    assert wrong(eager, torch.tensor([[0.0245, 0.53]], dtype=torch.bfloat16), ref).tolist() == [[False, False]]
    assert wrong(eager, torch.tensor([[1.0986, 0.53]], dtype=torch.bfloat16), ref).tolist() == [[True, False]]


def test_the_diff_rule_widens_a_row_by_how_far_roundings_can_move_it() -> None:
    """An ill-conditioned row (a softmax over near-tied logits) where eager happens to land near fp64:
    the jittered fp64 runs move it by 11, so fused off by 11 is rounding there; off by 60 is not."""
    from precisionkit.repro_rules import CHECKS

    scope: dict = {"torch": torch, "REDUCTION": 1}
    exec(CHECKS["diff"], scope)
    wrong = scope["wrong"]
    ref = torch.tensor([[30.27, 1.0]], dtype=torch.float64)
    eager = torch.tensor([[30.25, 1.0]], dtype=torch.float16)
    fused = torch.tensor([[41.28, 1.0]], dtype=torch.float16)
    jitter = [torch.tensor([[30.2, 1.0]], dtype=torch.float64), torch.tensor([[19.1, 1.0]], dtype=torch.float64)]
    assert wrong(eager, fused, ref).tolist() == [[True, False]]  # eager's luck alone: a mismatch
    assert wrong(eager, fused, ref, None, jitter).tolist() == [[False, False]]
    far = torch.tensor([[90.0, 1.0]], dtype=torch.float16)
    assert wrong(eager, far, ref, None, jitter).tolist() == [[True, False]]


def test_jittered_fp64_runs_keep_the_programs_aliasing_and_leave_integers_alone() -> None:
    """Every new float64 result moves by at most u of itself, differently per run; an in-place add
    through a view still lands in its base, and an index stays an index. A run whose moved values
    reach a jump (floor, comparison, index, cast to integers, floor division) is not used."""
    from precisionkit.repro_rules import CHECKS

    scope: dict = {"torch": torch, "REDUCTION": 1}
    exec(CHECKS["diff"], scope)

    def graph(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = x * 3.0
        y.view(-1)[:2].add_(1.0)  # through a view into y
        return y, torch.argmax(x, dim=-1), x.sum(-1)

    x = torch.tensor([[1.0, 2.0, 4.0], [8.0, 16.0, 0.0]], dtype=torch.float16)
    u = scope["unit_roundoff"]([x])
    assert u == 2.0**-11
    ys, idx, sums = scope["jittered"](graph, [x], u)
    exact = torch.tensor([[4.0, 7.0, 12.0], [24.0, 48.0, 0.0]], dtype=torch.float64)
    for y in ys:
        assert (y - exact).abs().max() <= 2 * u * 48 and y[1, 2] == 0.0  # 1 and a zero stay put
        assert (y[0, :2] - exact[0, :2]).abs().max() <= 1.0 + 2 * u * 7  # the add went into y
    assert len({tuple(y.flatten().tolist()) for y in ys}) == 3  # three different runs
    assert all(i.tolist() == [2, 1] for i in idx)  # an index of an input: no jump
    assert all((s - torch.tensor([7.0, 24.0], dtype=torch.float64)).abs().max() <= 3 * u * 24 for s in sums)
    # a floor, a comparison or an index of a moved value jumps: those runs measure no rounding noise
    for jump in (
        lambda x: torch.floor(x * 3.0),
        lambda x: (x * 3.0) > 1.0,
        lambda x: torch.argmax(x * 3.0, dim=-1),
        lambda x: (x * 3.0).to(torch.int32),
        lambda x: (x * 3.0) // 0.1,
    ):
        assert scope["jittered"](jump, [x], u) == [[]]

    # a program that writes into its inputs: every run starts from the inputs as given
    def writes(t: torch.Tensor) -> torch.Tensor:
        t.mul_(2.0)
        return t + 1.0

    runs = scope["jittered"](writes, [x], u)[0]
    assert all((r - (2.0 * x.double() + 1.0)).abs().max() <= 2 * u * 33 for r in runs)
    assert x[1, 1] == 16.0  # and the caller's inputs stay as they were
    # an exact class test of a moved value is no jump
    assert len(scope["jittered"](lambda x: torch.isinf(x * 3.0), [x], u)[0]) == 3


def test_a_near_tied_fp16_softmax_that_fused_rounds_differently_is_not_a_mismatch() -> None:
    """Attention 474981 (fp16): two logits 1.5 apart at about 583, q @ k^T of magnitude 3300 rounded to
    fp16 (ulp 2); Inductor divides that rounded product in fp32, eager rounds once more, and the output
    moves from eager's 29.56 to fused's 41.28 (fp64 30.27). The jittered fp64 runs show the row is that
    sensitive, so the tester's healthy runs do not call it a compiler fault."""
    case = difftest.generate(474981, "attention", "float16")
    scope = namespace(case)
    args = scope["make"]()
    fused = torch.compile(scope["graph"], backend="inductor")(*args)
    eager, ref = scope["graph"](*args), scope["graph"](*[a.double() for a in args])
    assert abs(float(fused[0, 5, 0]) - float(ref[0, 5, 0])) > 10 > abs(float(eager[0, 5, 0]) - float(ref[0, 5, 0]))
    outcome = difftest.run(case)
    assert outcome.klass == "ok", outcome.message


def _bf16_math_in_fp32(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """A healthy fused kernel's habit: 16-bit inputs loaded, the arithmetic done in fp32."""

    def run(*args: object) -> object:
        return gm(*[a.float() if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 else a for a in args])

    return run


def test_an_index_that_picks_the_fp64_optimum_among_16bit_ties_is_not_a_mismatch() -> None:
    from torch._dynamo import list_backends, register_backend

    if "pk_test_bf16_in_fp32" not in list_backends(exclude_tags=()):
        register_backend(compiler_fn=_bf16_math_in_fp32, name="pk_test_bf16_in_fp32")
    # Near 1000 bf16 is 4 apart, so eager's x + 1000 ties many elements and argmax takes the first;
    # fp32 arithmetic keeps them apart and finds fp64's maximum.
    source = "def graph(x):\n    return torch.argmax(x + 1000.0, dim=-1)\n"
    x = Input("x", (8, 64), "bfloat16", 3)
    args = namespace(diff_case(source, x))["make"]()
    eager = torch.argmax(args[0] + 1000.0, dim=-1)
    fp64 = torch.argmax(args[0].double() + 1000.0, dim=-1)
    assert bool((eager != fp64).any())  # the ties are there: the rule is tested on them
    assert reproduces(diff_case(source, x, backend="pk_test_bf16_in_fp32")) == (
        False,
        "every output agrees with eager and fp64 (pk_test_bf16_in_fp32)",
    )
    # An index that matches neither eager nor fp64 is still wrong.
    hit, msg = reproduces(diff_case(source, x, backend="pk_test_int_off_by_one"))
    assert hit and msg.startswith("output 0: 8 of 8 elements wrong")


@pytest.mark.slow
def test_a_stop_raised_by_the_log_ends_the_campaign_before_its_other_programs_are_made(monkeypatch) -> None:
    """Programs are generated when a worker is free for them, so a deadline (raised by ``log``, as the
    campaign scripts do) leaves the rest of a long plan unmade: the first program's log stops the plan
    while the second runs, and the other four are neither made nor run."""
    from precisionkit.difftest import campaign

    made: list[int] = []
    real = campaign.generate

    def counted(seed, gen, device="cpu"):
        made.append(seed)
        return real(seed, gen, device=device)

    class TimeUp(Exception):
        pass

    def stop(o) -> None:
        raise TimeUp(o.case.id)

    monkeypatch.setattr(campaign, "generate", counted)
    todo = difftest.plan(6)
    with pytest.raises(TimeUp):
        difftest.fuzz(todo, isolated=True, log=stop)
    assert made == [seed for _, seed in todo[:2]]


@pytest.mark.slow
def test_a_campaign_on_two_workers_gives_the_outcomes_of_one() -> None:
    """Side by side (as on an accelerator host, one worker interpreter per core) the outcomes and
    their log come in the plan's order and equal a single worker's."""
    todo = difftest.plan(4)
    seen: list[str] = []
    one = difftest.fuzz(todo, isolated=True)
    two = difftest.fuzz(todo, isolated=True, workers=2, log=lambda o: seen.append(o.case.id))
    assert [(o.case.id, o.klass, o.message) for o in two] == [(o.case.id, o.klass, o.message) for o in one]
    assert seen == [o.case.id for o in one]
    with pytest.raises(ValueError, match="needs isolated=True"):
        difftest.fuzz(todo, workers=2)
