"""Reproducer files, their rules, delta debugging and the bisection of the layer at fault.

The faulty backends of ``repro_backends`` damage what the FX graph returns without calling
Inductor, so these tests compile no C++ except where Inductor is the point (marked slow/heavy).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from repro_backends import SETUP, register

from precisionkit.bisect import bisect
from precisionkit.minimize import graph_source, minimize, predicate_for
from precisionkit.repro import (
    Case,
    Input,
    lines_of,
    make_inputs,
    minimization_text,
    render,
    reproduces,
    run_script,
    write,
)

register()

EXACT = "def graph(x):\n    return x * 2.0\n"
CHAIN = "def graph(x, b):\n    y = x * 1.5\n    y = torch.relu(y)\n    return y * 2.0 + b * 0.0\n"


def case(**kw: object) -> Case:
    base: dict[str, object] = {
        "id": "t",
        "source": EXACT,
        "inputs": (Input("x", (4, 20), "float32", 3),),
        "backend": "pk_test_one_ulp",
        "rule": "ulp",
        "setup": SETUP,
    }
    base.update(kw)
    return Case(**base)  # type: ignore[arg-type]


# --- cases and their inputs -------------------------------------------------------------------


def test_bad_inputs_and_rules_are_named() -> None:
    with pytest.raises(ValueError, match="layout must be one of"):
        Input("x", (2, 3), layout="diagonal")
    with pytest.raises(ValueError, match="transposed input needs at least 2 dims"):
        Input("x", (5,), layout="transposed")
    with pytest.raises(ValueError, match="'float33' is not a torch dtype"):
        Input("x", (2,), "float33")
    with pytest.raises(ValueError, match="rule must be one of"):
        case(rule="close_enough")
    with pytest.raises(ValueError, match="must define graph"):
        case(source="def f(x):\n    return x\n")
    with pytest.raises(ValueError, match="fp64 rule needs atol or rtol"):
        case(rule="fp64")


def test_inputs_are_seeded_and_a_transposed_input_is_a_view() -> None:
    c = case(inputs=(Input("x", (3, 5), "float16", 7, layout="transposed", scale=4.0),))
    (a,), (b,) = make_inputs(c), make_inputs(c)
    assert a.shape == (3, 5) and a.dtype == torch.float16 and a.stride() == (1, 3)
    assert torch.equal(a, b)
    g = torch.Generator().manual_seed(7)
    expected = (torch.randn((5, 3), generator=g, dtype=torch.float64) * 4.0).to(torch.float16).transpose(-1, -2)
    assert torch.equal(a, expected)


def test_json_round_trip() -> None:
    c = case(inputs=(Input("x", (2, 3), "bfloat16", 1, "transposed", 0.5),), slack=3)
    assert Case.from_json(c.to_json()) == c


# --- the rules, in-process ----------------------------------------------------------------------


def test_ulp_rule_sees_one_ulp_that_eager_does_not_have() -> None:
    hit, msg = reproduces(case())
    assert hit and "eager 0 ULP" in msg and "1 ULP" in msg
    assert reproduces(case(), "eager") == (False, msg.replace("1 ULP", "0 ULP").replace("pk_test_one_ulp", "eager"))
    assert not reproduces(case(slack=1))[0]


def test_bitwise_rule_counts_elements_and_treats_nan_alike() -> None:
    hit, msg = reproduces(case(rule="bitwise", backend="pk_test_tail"))
    assert hit and msg.startswith("16 of 80 elements differ")  # 4 rows x the tail of 4 (20 % 8)
    nan = case(rule="bitwise", backend="eager", source="def graph(x):\n    return torch.log(x - 10.0)\n")
    assert reproduces(nan) == (False, "0 of 80 elements differ in their bits between eager and fused (eager)")


def test_repeat_rule_and_compiled_rule() -> None:
    assert reproduces(case(rule="repeat", backend="pk_test_jitter"))[0]
    assert not reproduces(case(rule="repeat", backend="eager"))[0]
    hit, msg = reproduces(case(rule="compiled", backend="eager"))
    assert hit and msg == "the fused path (eager) generated 0 kernels"


def test_fp64_rule_uses_the_tolerance_and_eager_margin() -> None:
    hit, msg = reproduces(case(rule="fp64", atol=0.0, rtol=2**-30))
    assert hit and "eager 0, fused (pk_test_one_ulp)" in msg
    assert 64 <= float(msg.rsplit(" ", 1)[1]) <= 128  # one ULP of fp32 is 2^-23..2^-24 of |ref|: 2^6..2^7 tolerances
    assert not reproduces(case(rule="fp64", atol=1e-3, rtol=0.0))[0]


def test_a_graph_that_raises_does_not_reproduce_and_says_why() -> None:
    hit, msg = reproduces(case(source="def graph(x):\n    return x @ x\n"))
    assert not hit and msg.startswith("raised RuntimeError")


# --- the file -----------------------------------------------------------------------------------


def test_file_is_short_runs_alone_and_exits_by_the_rule(tmp_path: Path) -> None:
    c = case(rule="bitwise", setup="", backend="eager")
    script = write(c, tmp_path / "r")
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["case.json", "repro.py"]
    assert lines_of(c) <= 30
    clean = run_script(script)
    assert clean.status == "clean" and clean.last_line.startswith("clean: 0 of 80")
    broken = write(case(rule="bitwise", backend="pk_test_one_ulp"), tmp_path / "b")
    run = run_script(broken)
    assert run.returncode == 1 and run.last_line == (
        "REPRODUCES: 80 of 80 elements differ in their bits between eager and fused (pk_test_one_ulp)"
    )
    assert run_script(broken, ["eager"]).returncode == 0  # the backend is the file's first argument
    assert "import precisionkit" not in render(c) and "import pipeline" not in render(c)


def test_prelude_runs_before_the_file(tmp_path: Path) -> None:
    script = write(case(rule="compiled", backend="eager", setup=""), tmp_path)
    run = run_script(script, prelude="raise SystemExit(7)")
    assert run.returncode == 7 and run.status == "error"


# --- minimization -------------------------------------------------------------------------------


def test_graph_source_prints_plain_code_without_annotations_or_deletions() -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.cat([x.transpose(1, 2), y.transpose(1, 2)], dim=-1)

    src = graph_source(torch.fx.symbolic_trace(f))
    assert src.splitlines()[0] == "def graph(x, y):"
    assert "= None" not in src and "Tensor" not in src
    assert src.strip().endswith("return cat")


def test_minimize_removes_ops_and_shrinks_dims_while_control_stays_clean() -> None:
    c = case(source=CHAIN, inputs=(Input("x", (6, 20), "float32", 1), Input("b", (6, 20), "float32", 2)))
    c = c.with_(backend="pk_test_tail", rule="bitwise")
    assert reproduces(c)[0]
    m = minimize(c, predicate_for("eager"))
    assert m.ops_before == 5 and m.ops_after == 1
    # 20 -> 10 keeps a tail (10 % 8 = 2); 5 or 1 would not; the 6 rows shrink to 1.
    assert [i.shape for i in m.case.inputs] == [(1, 10)]
    assert reproduces(m.case)[0] and not reproduces(m.case, "eager")[0]


def test_minimize_keeps_a_case_whose_defect_needs_every_op() -> None:
    c = case(rule="bitwise", backend="pk_test_one_ulp", inputs=(Input("x", (1, 1), "float32", 1),))
    m = minimize(c, predicate_for("eager"))
    assert m.case == c and m.ops_after == 1
    # one op on a [1, 1] input: no candidate to try at all
    assert (m.checks, m.ended) == (0, "minimal")
    assert minimization_text(m.outcome()) == (
        "Not minimized: could not shrink its 1 op because the program was already minimal "
        "(no smaller candidate to try)."
    )


#: A sum whose doubled result is what fails: without the multiply the failing output is the sum's, another
#: failure (:class:`~precisionkit.minimize.Signature`), and the sum cannot be bypassed (its shape differs).
SUM_THEN_SCALE = "def graph(x):\n    y = x.sum(-1)\n    return y * 2.0\n"


def test_a_case_that_cannot_shrink_says_why_with_its_counts() -> None:
    c = case(source=SUM_THEN_SCALE, rule="bitwise", inputs=(Input("x", (1, 1), "float32", 3),))
    m = minimize(c, predicate_for("eager"))
    # the one candidate (the graph ended at the sum; bypassing the multiply gives the same program) loses it
    assert (m.case, m.ops_before, m.ops_after, m.checks, m.accepted, m.ended) == (c, 2, 2, 1, 0, "exhausted")
    record = m.outcome()
    assert record["minimize_seconds"] == round(m.seconds, 1)
    assert minimization_text(record) == (
        "Not minimized: could not shrink its 2 ops because every candidate removal lost the failure "
        f"(1 tried in {record['minimize_seconds']} s)."
    )
    # out of budget before every candidate was tried: the 3-op program's two early ends lose the failure
    # (the sum's and the multiply's output fail as other ops than amax); bypassing the multiply is left
    three = c.with_(source="def graph(x):\n    y = x.sum(-1, keepdim=True)\n    return (y * 2.0).amax(-1)\n")
    short = minimize(three, predicate_for("eager"), max_checks=2)
    assert (short.case, short.ops_after, short.checks, short.ended) == (three, 3, 2, "budget")
    assert minimization_text(short.outcome()) == (
        "Not minimized: could not shrink its 3 ops because its budget of 2 candidates ran out "
        f"(2 tried in {round(short.seconds, 1)} s)."
    )
    # with the budget it needs, the multiply and then the sum go
    full = minimize(three, predicate_for("eager"))
    assert (full.ops_after, full.checks, full.ended) == (1, 4, "exhausted")
    assert minimization_text(full.outcome()) == f"Minimized from 3 to 1 ops (4 candidates, {round(full.seconds, 1)} s)."


def test_the_sentence_says_what_shrank_and_why_the_ops_did_not() -> None:
    record = {
        "ops_before": 3,
        "ops_after": 3,
        "shapes_before": [[6, 20]],
        "shapes_after": [[1, 20]],
        "minimize_checks": 9,
        "minimize_accepted": 2,
        "minimize_ended": "exhausted",
        "minimize_max_checks": 40,
        "minimize_seconds": 2.0,
    }
    assert minimization_text(record) == (
        "Could not shrink its 3 ops because every op removal tried lost the failure (9 candidates in 2.0 s); "
        "shapes minimized from [[6, 20]] to [[1, 20]]."
    )
    ran_out = {**record, "ops_after": 2, "minimize_ended": "budget", "minimize_checks": 40}
    assert minimization_text(ran_out) == (
        "Minimized from 3 to 2 ops and from shapes [[6, 20]] to [[1, 20]] (40 candidates, 2.0 s; its budget of 40 "
        "ran out)."
    )
    # a record from before the minimizer said why it stopped claims no minimization it did not do
    old = {k: v for k, v in record.items() if k not in ("minimize_ended", "minimize_accepted")}
    assert minimization_text({**old, "shapes_after": [[6, 20]]}) == "Kept all 3 ops (9 candidates, 2.0 s)."


def test_a_case_with_removable_ops_says_it_was_minimized() -> None:
    c = case(source=CHAIN, inputs=(Input("x", (6, 20), "float32", 1), Input("b", (6, 20), "float32", 2)))
    m = minimize(c.with_(backend="pk_test_tail", rule="bitwise"), predicate_for("eager"))
    assert (m.ops_before, m.ops_after, m.accepted, m.ended) == (5, 1, 3, "exhausted")
    assert minimization_text(m.outcome()) == (
        "Minimized from 5 to 1 ops and from shapes [[6, 20], [6, 20]] to [[1, 10]] "
        f"({m.checks} candidates, {round(m.seconds, 1)} s)."
    )
    # the file's docstring carries the same sentence
    text = render(m.case, minimization_text(m.outcome()))
    assert text.splitlines()[1] == minimization_text(m.outcome()) + '"""'


# --- bisection ----------------------------------------------------------------------------------


#: The layers of a case whose custom backend adds one ULP: every layer below it is clean.
ONE_ULP_LAYERS = [
    ("eager", "clean"),
    ("aot_eager", "clean"),
    ("aot_eager_decomp_partition", "clean"),
    ("inductor", "clean"),
    ("pk_test_one_ulp", "reproduces"),
]


@pytest.mark.slow
def test_bisect_names_the_custom_backend_when_every_layer_below_is_clean(tmp_path: Path) -> None:
    c = case(inputs=(Input("x", (1, 3), "float32", 1),))
    b = bisect(write(c, tmp_path), c, knobs=False)
    assert [(v.backend, v.status) for v in b.variants] == ONE_ULP_LAYERS
    assert b.layer_at_fault == "the backend 'pk_test_one_ulp' (wraps the layers above)"
    assert b.workaround == "use the layer before it: backend='inductor'"
    assert b.variants[3].cpp_sha256  # Inductor's C++ was found and hashed


def _o3_breaks_division(folder: Path) -> Path:
    """A g++ whose -O3 (the last -O flag in effect) also turns on -ffast-math: division by a
    reciprocal estimate, a few ULP off."""
    wrapper = folder / "g++"
    wrapper.write_text(
        '#!/bin/sh\nlast=""\nfor a in "$@"; do case "$a" in -O*) last="$a" ;; esac; done\n'
        'if [ "$last" = "-O3" ]; then exec /usr/bin/env g++ "$@" -ffast-math; fi\nexec /usr/bin/env g++ "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


@pytest.mark.heavy
@pytest.mark.parametrize("at_once", [False, True], ids=["in-turn", "knobs-ahead"])
def test_bisect_blames_a_compiler_whose_O3_is_broken(tmp_path: Path, at_once: bool) -> None:
    """Inductor's C++ is right; the toolchain's -O3 is not: the same source built with -O2 is clean.
    Alike when the knob variants start with the layers (``at_once``, as on an accelerator host)."""
    real_gxx = subprocess.run(["which", "g++"], capture_output=True, text=True).stdout.strip()
    assert real_gxx
    cxx = _o3_breaks_division(tmp_path)
    src = "def graph(x, y):\n    return x / y\n"
    c = case(
        source=src,
        backend="inductor",
        setup="",
        inputs=(Input("x", (64,), "float32", 1), Input("y", (64,), "float32", 2)),
    )
    env = {"CXX": str(cxx), "PATH": os.environ["PATH"]}
    b = bisect(write(c, tmp_path / "r"), c, env=env, parallel_layers=at_once)
    assert b.first_layer == "Inductor lowering, fusion and code generation"
    assert b.layer_at_fault.startswith("native toolchain (C++ compiler)") and "-O2" in b.layer_at_fault
    o2 = next(v for v in b.variants if v.name == "-O2")
    base = next(v for v in b.variants if v.backend == "inductor" and v.step == "layer")
    assert o2.status == "clean" and o2.cpp_sha256 == base.cpp_sha256
    assert b.pytorch_bisector  # PyTorch's own bisector ran on the same file; its answer is kept beside ours


def test_cli_names_bad_requests(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from pipeline.cli import main

    assert main(["repros", "--data-dir", str(tmp_path), "--make", "d/transpose_concat/float16/4x128/contiguous"]) == 2
    assert "[batch, seq, hidden]" in capsys.readouterr().err
    assert main(["repros", "--data-dir", str(tmp_path), "--make", "e/1"]) == 2
    assert "expected d/<subgraph>" in capsys.readouterr().err
    assert main(["repros", "--data-dir", str(tmp_path), "--planted", "no_such_bug"]) == 2
    assert "unknown planted bug(s) no_such_bug" in capsys.readouterr().err
    assert main(["repros", "--data-dir", str(tmp_path), "--python", sys.executable + "-missing"]) == 2
    assert not (tmp_path / "default" / "repros").exists() or not any((tmp_path / "default" / "repros").iterdir())


def test_minimize_cuts_untraceable_programs_by_source_line() -> None:
    """Index assignment stops torch.fx; the line-level candidates still shrink the program."""
    src = "def graph(x, y):\n    a = x.clone()\n    a[:, 0] = 1.0\n    b = a * 2.0\n    c = b + y\n    return c, a\n"
    c = case(
        source=src,
        rule="diff",
        backend="pk_test_garbage_one",
        inputs=(Input("x", (3, 4), "float32", 1), Input("y", (3, 4), "float32", 2)),
    )
    assert reproduces(c)[0]
    m = minimize(c, predicate_for("eager"))
    assert m.ops_before == 4 and m.ops_after == 1
    assert m.case.source == "def graph(x):\n    a = x.clone()\n    return a\n"
    assert [i.name for i in m.case.inputs] == ["x"] and m.case.inputs[0].shape == (1, 1)


def test_generated_cpp_hash_ignores_the_cache_folder_path(tmp_path: Path) -> None:
    """torch before 2.8 includes its kernel header by its path inside the cache: the same program
    built in two caches must hash alike, or the toolchain rows could never match the base row."""
    from precisionkit.bisect import generated_cpp

    shas = []
    for name in ("a", "b"):
        cache = tmp_path / name
        (cache / "xy").mkdir(parents=True)
        (cache / "xy" / "k.cpp").write_text(f'#include "{cache}/pc/header.h"\nextern "C" void kernel() {{}}\n')
        (cache / "xy" / "chk.cpp").write_text('extern "C" void __avx_chk_kernel() {}\n')  # the ISA probe
        shas.append(generated_cpp(cache))
    assert shas[0] == shas[1] and shas[0][0]
    assert shas[0][1].startswith('extern "C" void kernel()')
    assert generated_cpp(tmp_path / "empty") == ("", "")


def _int_and_zero_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
    """Two defects at once: integer outputs one too large, and every +0 of a float output made -0."""

    def run(*args: object) -> object:
        out = gm(*args)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        fixed = [torch.where(o == 0, torch.full_like(o, -0.0), o) if o.is_floating_point() else o + 1 for o in outs]
        return type(out)(fixed) if isinstance(out, (tuple, list)) else fixed[0]

    return run


TWO_DEFECTS = "def graph(x, y):\n    b = y * 0.0\n    a = torch.argmin(torch.exp(x) * 2.0, dim=-1)\n    return a, b\n"


def test_minimize_keeps_the_failure_it_started_from() -> None:
    from torch._dynamo import list_backends, register_backend

    from precisionkit.minimize import difference_kind, signature

    if "pk_test_int_and_zero" not in list_backends(exclude_tags=()):
        register_backend(compiler_fn=_int_and_zero_backend, name="pk_test_int_and_zero")
    inputs = (Input("x", (4, 8), "float32", 1), Input("y", (4, 8), "float32", 2))
    c = case(source=TWO_DEFECTS, inputs=inputs, rule="diff", backend="pk_test_int_and_zero")
    hit, message = reproduces(c)
    assert hit and message.startswith("output 0:") and difference_kind(message) == "integer"
    started = signature(c, message)
    assert (started.op, started.dtypes, started.kind) == ("argmin", ("int64", "float32"), "integer")
    # Any mismatch will do: the search slides to the other, smaller defect (the sign of a zero).
    slid = minimize(c, lambda cand: reproduces(cand)[0])
    assert "argmin" not in slid.case.source and difference_kind(reproduces(slid.case)[1]) == "sign of zero"
    # The usual predicate keeps the integer defect it was given, and still cuts what it does not need.
    kept = minimize(c, predicate_for("eager"))
    assert "argmin" in kept.case.source and "y * 0.0" not in kept.case.source
    assert kept.ops_after < kept.ops_before and kept.original == c
    assert signature(kept.case, reproduces(kept.case)[1]).kept_by(started)


def test_layers_run_at_once_give_the_table_of_layers_run_one_at_a_time() -> None:
    import threading
    import time

    from precisionkit.bisect import Variant, _first_layer

    class Runner:  # stands in for the fresh interpreters: later layers finish first
        def __init__(self, reproducing: set[str]) -> None:
            self.reproducing, self.variants, self.lock = reproducing, [], threading.Lock()

        def run(self, step: str, name: str, backend: str) -> Variant:
            time.sleep(0.01 * (5 - int(name[-1])))
            v = Variant(step, name, backend, "reproduces" if name in self.reproducing else "clean", "", 0.0)
            with self.lock:
                self.variants.append(v)
            return v

    layers = [(f"layer{i}", f"backend{i}") for i in range(5)]
    for reproducing, first, kept in (({"layer2", "layer3", "layer4"}, "layer2", 3), (set(), "", 5)):
        alone, together = Runner(reproducing), Runner(reproducing)
        assert _first_layer(alone, layers, 1) == _first_layer(together, layers, 5) == first
        assert together.variants == alone.variants and len(alone.variants) == kept


def test_knobs_started_with_the_layers_give_the_table_and_verdict_of_a_bisection_in_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an accelerator host the knob variants start with the layers; the table, the verdict and the
    logged lines are those of the bisection run in turn, and the knobs are not in the table when a layer
    before Inductor is at fault. Variants stand in for the interpreters here."""
    import time

    from precisionkit import bisect as pk_bisect

    def fake_run(self, step, name, backend, knob=None, keep=True):  # type: ignore[no-untyped-def]
        ran.append(step)
        time.sleep(0.02 if step == "layer" else 0.0)  # the knobs finish before the layers
        bad = name in self.reproducing or (step != "layer" and name not in self.fixes)
        v = pk_bisect.Variant(step, name, backend, "reproduces" if bad else "clean", "", 0.0, "sha")
        with self.lock:
            self.excerpts[name] = ""
        if keep:
            self.keep(v)
        return v

    started: list[str] = []
    ran: list[str] = []
    monkeypatch.setattr(pk_bisect._Runner, "run", fake_run)
    monkeypatch.setattr(pk_bisect, "pytorch_bisector", lambda *a, **k: started.append("bisector") or "its answer")
    c = case(inputs=(Input("x", (1, 3), "float32", 1),))
    for reproducing, fixes in (
        ({"Inductor lowering, fusion and code generation"}, {"max_fusion_size=1 (fusion off)"}),
        ({"AOTAutograd", "Inductor lowering, fusion and code generation"}, set()),
    ):
        monkeypatch.setattr(pk_bisect._Runner, "reproducing", reproducing, raising=False)
        monkeypatch.setattr(pk_bisect._Runner, "fixes", fixes, raising=False)
        runs = []
        for parallel in (False, True):
            lines: list[str] = []
            started.clear()
            ran.clear()
            b = bisect(tmp_path / "repro.py", c, workers=4, parallel_layers=parallel, log=lines.append)
            knobs_ran = sum(step != "layer" for step in ran)
            runs.append(
                (b.summary(), [(v.step, v.name, v.status) for v in b.variants], lines, list(started), knobs_ran)
            )
        (in_turn, table, log, asked, knobs), (at_once, table_now, log_now, asked_now, knobs_now) = runs
        assert at_once == in_turn and table_now == table
        # the same knob and bisector lines are logged (layers at once log every layer; knobs run in turn log
        # as they finish, knobs started ahead in the table's order)
        assert sorted(ln for ln in log_now if not ln.startswith("  layer")) == sorted(
            ln for ln in log if not ln.startswith("  layer")
        )
        # torch's bisector runs only once Inductor is blamed, either way
        assert asked == asked_now == ([] if "AOTAutograd" in reproducing else ["bisector"])
        knob_rows = sum(step != "layer" for step, _, _ in table)
        if "AOTAutograd" in reproducing:  # a layer before Inductor: the knobs ran ahead but are not in the table
            assert [step for step, _, _ in table] == ["layer"] * 2 and (knobs, knob_rows) == (0, 0) and knobs_now > 0
        else:
            assert b.workaround == "set max_fusion_size=1 (fusion off)" and knobs == knobs_now == knob_rows > 0
            assert [step for step, _, _ in table].count("layer") == 4


@pytest.mark.heavy
def test_bisect_gives_the_same_table_with_its_layers_run_at_once(tmp_path: Path) -> None:
    # As on an accelerator host: every layer starts at once; the table and the verdict are those of
    # layers run one at a time (the variants after the first reproducing layer are dropped).
    c = case(inputs=(Input("x", (1, 3), "float32", 1),))
    b = bisect(write(c, tmp_path), c, knobs=False, workers=3, parallel_layers=True)
    assert [(v.backend, v.status) for v in b.variants] == ONE_ULP_LAYERS
    assert b.workaround == "use the layer before it: backend='inductor'"
