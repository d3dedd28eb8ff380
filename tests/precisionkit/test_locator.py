"""Divergence locator: a planted fused-path bug in one layer must be found at exactly that layer.

One locator run (module-scoped: every Inductor compile costs seconds) covers the planted bug,
tuple outputs, a non-contiguous output, a module called twice, and the untouched caller's model.
"""

from __future__ import annotations

import operator

import pytest
import torch
from torch import nn

from precisionkit.bounds import unit_roundoff
from precisionkit.locator import locate_divergence

BACKEND = "pk_test_locator_mul_bias"
BIAS = 1 + 2**-7


@torch._dynamo.register_backend(name=BACKEND)
def _mul_bias_backend(gm: torch.fx.GraphModule, example_inputs):
    """Inductor, except that graphs containing a multiply get every float output scaled by 1+2**-7."""
    from torch._inductor.compile_fx import compile_fx

    compiled = compile_fx(gm, example_inputs)
    has_mul = any(n.op == "call_function" and n.target in (operator.mul, torch.mul) for n in gm.graph.nodes)
    if not has_mul:
        return compiled

    def run(*args):
        out = compiled(*args)
        return type(out)(o * BIAS if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in out)

    return run


class Pair(nn.Module):
    """Tuple output."""

    def forward(self, x):
        return torch.sin(x), torch.cos(x)


class Scale(nn.Module):
    """The only module with a multiply: the planted bug lives here."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, n))

    def forward(self, x):
        return x * self.w


class Transpose(nn.Module):
    """Non-contiguous output."""

    def forward(self, x):
        return x.transpose(0, 1)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.act = nn.Tanh()  # called twice
        self.pair = Pair()
        self.scale = Scale(16)
        self.t = Transpose()

    def forward(self, x):
        h = self.act(self.lin(x))
        a, b = self.pair(h)
        h = self.act(a + b)
        return self.t(self.scale(h))


def _noop_hook(module, args, output):
    return None


def _hook_dicts(model: nn.Module):
    names = (
        "_forward_hooks",
        "_forward_pre_hooks",
        "_forward_hooks_with_kwargs",
        "_forward_pre_hooks_with_kwargs",
        "_backward_hooks",
        "_backward_pre_hooks",
        "_state_dict_hooks",
        "_load_state_dict_pre_hooks",
    )
    return {
        (mod_name, attr): dict(getattr(m, attr))
        for mod_name, m in model.named_modules()
        for attr in names
        if hasattr(m, attr)
    }


@pytest.fixture(scope="module")
def run():
    torch.manual_seed(0)
    model = Net().train()  # train mode must survive (the locator runs copies in eval mode)
    handle = model.lin.register_forward_hook(_noop_hook)
    x = torch.randn(8, 16)
    x_before = x.clone()
    before = {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "dtypes": {k: p.dtype for k, p in model.named_parameters()},
        "hooks": _hook_dicts(model),
        "training": model.training,
    }
    result = locate_divergence(model, x, dtype=torch.float32, backend=BACKEND)
    yield model, x, x_before, before, result
    handle.remove()


def test_planted_bug_is_located_at_its_layer(run):
    _, _, _, _, result = run
    assert result.first_divergent_layer == "scale#0", result.table
    divergent = {r["layer"] for r in result.table if r["divergent"]}
    # Only the faulty layer and the root (whose whole-model graph contains the multiply).
    assert divergent == {"scale#0", "<root>#0"}
    scale = next(r for r in result.table if r["layer"] == "scale#0")
    assert scale["excess"] > 2**-9 and scale["ulp_eager_vs_fused_max"] > 1000
    assert result.noise >= unit_roundoff(torch.float32)
    # Every non-multiplying layer is real Inductor output and stays within the measured noise.
    for r in result.table:
        if r["layer"] not in divergent:
            assert r["excess"] <= result.noise and r["fused_error"] == ""


def test_rows_follow_completion_order_and_cover_every_call(run):
    _, _, _, _, result = run
    layers = [r["layer"] for r in result.table]
    assert layers == ["lin#0", "act#0", "pair#0", "act#1", "scale#0", "t#0", "<root>#0"]
    assert [r["index"] for r in result.table] == list(range(len(layers)))
    # One compiled function per module, reused by the second call of ``act`` without recompiling.
    assert result.meta["compiled_submodules"] == 6
    act1 = next(r for r in result.table if r["layer"] == "act#1")
    assert act1["recompiles"] == 0 and act1["call"] == 1


def test_tuple_and_noncontiguous_outputs(run):
    _, _, _, _, result = run
    pair = next(r for r in result.table if r["layer"] == "pair#0")
    assert pair["n_outputs"] == 2 and pair["output"].count("float32[8, 16]") == 2
    assert pair["eager_err"] < 1e-6 and pair["fused_err"] < 1e-6
    t = next(r for r in result.table if r["layer"] == "t#0")
    assert "noncontig" in t["output"] and t["n_outputs"] == 1
    # A transpose computes nothing, so whatever layout the fused path returns, values are bit-equal.
    assert t["bit_equal_fraction"] == 1.0 and t["fused_error"] == ""


def test_model_and_inputs_unchanged(run):
    model, x, x_before, before, _ = run
    after = model.state_dict()
    assert after.keys() == before["state"].keys()
    for k, v in before["state"].items():
        assert after[k].dtype == v.dtype and torch.equal(after[k], v), k
    assert {k: p.dtype for k, p in model.named_parameters()} == before["dtypes"]
    assert _hook_dicts(model) == before["hooks"]
    assert model.training is before["training"]
    assert type(model).forward is Net.forward and "forward" not in vars(model)
    assert torch.equal(x, x_before)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match=r"nn\.Module"):
        locate_divergence(lambda x: x, torch.ones(2))
    with pytest.raises(ValueError, match="noise"):
        locate_divergence(nn.Tanh(), torch.ones(2), noise=-1.0)
    with pytest.raises(ValueError, match="not found"):
        locate_divergence(Net(), torch.ones(2, 16), modules=["nope"])


def test_divergence_rule_on_given_rows():
    """The rule alone, on rows as the locator tabulates them: a failed fused run and a new non-finite
    output diverge whatever the noise; otherwise excess above the threshold; the first in order wins."""
    from precisionkit import locator

    def row(layer, excess, error="", fused_nf=0, eager_nf=0):
        return {
            "layer": layer,
            "excess": excess,
            "fused_error": error,
            "fused_nonfinite_mismatch": fused_nf,
            "eager_nonfinite_mismatch": eager_nf,
        }

    rows = [
        row("a#0", 1e-9),
        row("b#0", 0.5),
        row("c#0", float("nan"), error="RuntimeError: x"),
        row("d#0", 0.0, fused_nf=1),
    ]
    threshold, rule = locator._threshold(rows, 0.1, torch.float32)
    assert (threshold, rule) == (0.1, "excess > 0.1 (given)")
    assert locator._mark_divergent(rows, threshold) == "b#0"
    assert [r["divergent"] for r in rows] == [False, True, True, True] and {r["noise"] for r in rows} == {0.1}
    # Measured: 3 * 1.4826 * median |excess| over the finite rows, floored at fp32's unit roundoff.
    # Here the median is 1e-9, so the floor 2**-24 applies; with larger excesses the spread does.
    measured, rule = locator._threshold(rows, "auto", torch.float32)
    assert measured == unit_roundoff(torch.float32) == 2.0**-24 and "over 4 rows" in rule
    spread, _ = locator._threshold([row("a#0", 0.01), row("b#0", -0.02), row("c#0", 0.03)], "auto", torch.float32)
    assert spread == pytest.approx(3 * 1.4826 * 0.02)
    assert locator._mark_divergent(rows[:1], measured) is None
