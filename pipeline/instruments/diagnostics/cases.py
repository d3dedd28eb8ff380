"""The fuzzers' finds as reproducer cases: a graph of the tolerance fuzzer or a program of the differential
tester, rebuilt from its seed on the device it was found on (``repros --make fuzz/...`` and ``difftest/...``)."""

from __future__ import annotations

from precisionkit.repro import Case, Input


def fuzz_case(seed: int, backend: str = "inductor", dtype: str | None = None, device: str = "cpu") -> Case:
    """A fuzzer seed's graph as a case, judged by the fuzzer's own tolerance rule against fp64."""
    from precisionkit import fuzz

    graph = fuzz.generate(seed, dtype=dtype)
    tol, _, _ = graph.tolerance()
    inputs = tuple(Input(name, tuple(shape), graph.dtype, s, scale=scale) for name, shape, scale, s in graph.inputs)
    return Case(
        f"fuzz-{seed}-{graph.dtype}",
        graph.source(),
        inputs,
        backend=backend,
        rule="fp64",
        atol=tol.atol,
        rtol=tol.rtol,
        title=f"fuzzer seed {seed} ({graph.dtype}): {graph.op_list()}",
        origin="differential graph fuzzer",
        device=device,
    )


def difftest_case(
    generator: str, seed: int, dtype: str | None = None, backend: str = "inductor", device: str = "cpu"
) -> Case:
    """A program of the differential tester on ``device`` as a case (its own ``diff`` rule)."""
    from precisionkit import difftest

    case = difftest.generate(seed, generator, dtype, device=device)
    return case.with_(backend=backend)
