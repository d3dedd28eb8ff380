"""Reproducer cases of the planted bugs: small graphs in the forms the experiments use, probed until one shows
a planted bug while healthy Inductor stays clean (``python -m pipeline.cli repros --planted``)."""

from __future__ import annotations

from collections.abc import Callable

from precisionkit.repro import Case, Input, reproduces

from .planted_bugs import PLANTED_BUGS, register_planted_backends

#: What a planted bug's reproducer runs first: the project's registration of the planted backends.
PLANTED_SETUP = (
    "from pipeline.instruments.regression.planted_bugs import register_planted_backends  # the planted fault\n\n"
    "register_planted_backends()\n"
)


def _probe(name: str, source: str, inputs: tuple[Input, ...], rule: str, slack: int = 0) -> Case:
    return Case(name, source, inputs, rule=rule, slack=slack, setup=PLANTED_SETUP)


def planted_probes() -> list[Case]:
    """Small graphs in the forms the experiments use, each with the rule that judges it; every
    elementwise probe is exact in eager (scaling by 2 commutes with rounding), so any ULP of
    error is the fused path's own. The row length 20 is not a multiple of a vector width."""
    chain = "def graph(x):\n    y = x * 1.5\n    y = torch.relu(y)\n    return y * 2.0\n"
    total = "def graph(x):\n    y = x * 2.0\n    return y.sum(dim=-1)\n"
    x = (Input("x", (4, 20), "float32", 11),)
    return [
        _probe("chain", chain, x, "compiled"),
        _probe("sum", total, x, "repeat"),
        _probe("chain", chain, x, "ulp"),
        _probe("sum", total, x, "ulp", slack=8),
        _probe("long_sum", total, (Input("x", (2, 2048), "float32", 12),), "ulp", slack=16),
        _probe("transposed", chain, (Input("x", (12, 20), "float32", 13, layout="transposed"),), "ulp"),
    ]


def planted_case(bug: str, log: Callable[[str], None] | None = None) -> tuple[Case | None, int]:
    """The first probe that shows planted bug ``bug`` while healthy Inductor stays clean, and how
    many probes were run."""
    if bug not in PLANTED_BUGS:
        raise ValueError(f"unknown planted bug {bug!r}; known: {', '.join(PLANTED_BUGS)}")
    register_planted_backends()
    tried = 0
    for probe in planted_probes():
        case = probe.with_(
            id=bug.removeprefix("planted_"),
            backend=bug,
            title=f"planted bug {bug}: {PLANTED_BUGS[bug].fault_class}",
            origin=f"planted-bug matrix, probe {probe.id!r}",
        )
        tried += 1
        hit, msg = reproduces(case)
        if log:
            log(f"  probe {probe.id} ({probe.rule}): {'reproduces' if hit else 'clean'}: {msg}")
        if hit and not reproduces(case, "inductor")[0]:
            return case, tried
    return None, tried
