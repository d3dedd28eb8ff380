"""Diagnostics (divergence locator, graph fuzzer, measured tolerances): id, asset group and sizes.
The locator runs E's model (``training.spec.SIZES``)."""

from dataclasses import dataclass

ID, GROUP = "Diagnostics", "diagnostics"


@dataclass(frozen=True)
class DiagnosticsSizes:
    fuzz_graphs: int  # random float graphs of the tolerance fuzzer (one compile each)
    difftest_programs: int  # programs of the typed differential tester (a fifth per structured generator)
    # reproducers built per source and run (each a minimization and a bisection: about a minute,
    # several with the Inductor knobs and the toolchain); the smoke profile builds none for the
    # differential tester, whose real-bug mismatches would otherwise dominate its time
    repro_cap: int
    # reproducers built per experiment that declares reproducer cases, for its contradictions (D: one per
    # subgraph and dtype): each is a minimization and a bisection through every Inductor knob and compiler
    # flag, each a fresh interpreter that compiles cold (about four minutes on a 2-core CPU); a default run
    # that found three contradictions of D spent twelve minutes on them
    contradiction_repro_cap: int = 3


SIZES = {
    "smoke": DiagnosticsSizes(fuzz_graphs=6, difftest_programs=10, repro_cap=0),
    # 40 fuzzer graphs: 80 took 2 min 25 s (143 s of it compiling, 1.8 s a graph) of a 30-minute default report
    # on the slow 16-bit path, and every one was ok (healthy sweep, seed 3, 2 threads, AVX2, 2026-11-27); the
    # differential tester, whose programs find Inductor's defects, keeps its 48.
    "default": DiagnosticsSizes(fuzz_graphs=40, difftest_programs=48, repro_cap=1, contradiction_repro_cap=1),
    # A tenth of the seed's programs (each one compile: Triton's compile time, not the device, is the cost);
    # one reproducer, for D, and none for the fuzzer and the differential tester, as in smoke.
    "gpu": DiagnosticsSizes(fuzz_graphs=100, difftest_programs=100, repro_cap=0, contradiction_repro_cap=1),
    "seed": DiagnosticsSizes(fuzz_graphs=1000, difftest_programs=1000, repro_cap=10),
}
