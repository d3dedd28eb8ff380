"""Differential graph fuzzer: reproducible graphs, no false alarms on a correct backend, and a
planted faulty backend found, shrunk and reproduced by a standalone script in a subprocess.

The faulty backend wraps Dynamo's ``eager`` backend (no Inductor compile), so the fuzz loop and
its shrinking cost milliseconds per graph; one test runs real Inductor on a single graph.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
import torch

from precisionkit import fuzz

FAULTY = "pk_test_fuzz_drop_last_channel"
# Source shared by this process and the reproducer subprocess (``--setup``), so both register
# the very same faulty backend.
FAULTY_SRC = f'''
import torch


@torch._dynamo.register_backend(name={FAULTY!r})
def drop_last_channel(gm, example_inputs):
    """The graph run as is, except that every float output's last channel is zeroed."""
    def run(*args):
        outs = []
        for o in gm(*args):
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.dim() >= 1:
                o = o.clone()
                o[..., -1] = 0
            outs.append(o)
        return tuple(outs)
    return run
'''
exec(compile(FAULTY_SRC, "<faulty backend>", "exec"), {})


def test_same_seed_same_graph_and_inputs():
    a, b = fuzz.generate(1234), fuzz.generate(1234)
    assert a.source() == b.source() and a == b
    for x, y in zip(a.make_inputs(), b.make_inputs(), strict=False):
        assert torch.equal(x, y) and x.dtype == getattr(torch, a.dtype)
    sources = {fuzz.generate(s).source() for s in range(40)}
    assert len(sources) > 35  # seeds really vary the graph
    # The printed source is what runs: executing it gives the eager result.
    out = a.function()(*a.make_inputs())
    assert out.shape == next(op.shape for op in a.ops if op.out == a.output)


def test_generator_covers_the_op_families():
    kinds = Counter(op.kind for s in range(300) for op in fuzz.generate(s).ops)
    for needed in ("matmul", "layer_norm", "softmax", "sum", "transpose", "reshape", "cat", "add", "mul", "gelu"):
        assert kinds[needed] > 0, needed
    dtypes = Counter(fuzz.generate(s).dtype for s in range(300))
    assert set(dtypes) == set(fuzz.FUZZ_DTYPES)
    broadcast = [op for s in range(300) for op in fuzz.generate(s).ops if op.kind in ("add", "sub", "mul")]
    assert broadcast


def test_correct_backend_gives_no_failures():
    # Dynamo's eager backend computes exactly what eager computes: every graph must be "ok".
    outcomes = fuzz.fuzz(range(20), backend="eager")
    assert Counter(o.klass for o in outcomes) == Counter({"ok": 20})
    assert all(o.fused_tol_ratio == o.eager_tol_ratio for o in outcomes)


def test_inductor_single_graph_ok():
    out = fuzz.run_graph(fuzz.generate(1001))  # a layernorm graph
    assert out.klass == "ok", out.row()
    assert out.kernel_count >= 1 and out.graph_count == 1
    assert 0 <= out.fused_tol_ratio <= 1


@pytest.mark.slow  # compiles dozens of graphs while shrinking
def test_planted_bug_found_shrunk_and_reproduced(tmp_path):
    outcomes = fuzz.fuzz(range(6), backend=FAULTY, out_dir=tmp_path, max_shrink_checks=12)
    classes = Counter(o.klass for o in outcomes)
    assert classes["mismatch"] >= 5, [o.row() for o in outcomes]
    failing = [o for o in outcomes if o.klass == "mismatch"]
    for o in failing:
        assert 1 <= len(o.shrunk.ops) <= len(o.graph.ops)
        assert o.fused_tol_ratio > 1 and o.fused_tol_ratio > fuzz.EAGER_MARGIN * o.eager_tol_ratio
    assert min(len(o.shrunk.ops) for o in failing) == 1
    shrunk_more = [o for o in failing if len(o.shrunk.ops) < len(o.graph.ops)]
    assert shrunk_more, "no failing graph was shrunk"

    script = tmp_path / f"repro_seed{shrunk_more[0].graph.seed}.py"
    text = script.read_text()
    assert "import precisionkit" not in text and "from precisionkit" not in text
    setup = tmp_path / "faulty_backend.py"
    setup.write_text(FAULTY_SRC)
    bad = subprocess.run(
        [sys.executable, str(script), "--setup", str(setup)], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "class=mismatch" in bad.stdout
    good = subprocess.run(
        [sys.executable, str(script), "--backend", "eager"], capture_output=True, text=True, timeout=120
    )
    assert good.returncode == 0, good.stdout + good.stderr
