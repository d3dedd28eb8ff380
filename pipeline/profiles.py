"""Run profiles: one code path, four sizes. Only shapes and counts differ between them.

* ``smoke``: the whole graph in well under a minute (tests);
* ``default``: the seed document's methods at reduced sizes for a 2-core CPU (minutes);
* ``gpu``: one GPU in ten minutes, the target: A, B, C1-C3, D, E and M were measured on an H200 on 2026-11-27,
  and the estimate calibrated on them is about 9 minutes with B's chain x dtype pairs and E's runs side by
  side on four lanes, 12.8 if those lanes gained nothing (their gain is assumed until a GPU run measures it;
  see benchmarks/gpu_budget.py): the seed's shapes, with the counts that cost compiles or device time cut
  (A's fp32 row, the fuzzer, the differential tester, M's architectures, E's steps) to what the evidence needs;
* ``seed``: the seed document's exact shapes, dtypes and counts (meant for a GPU).

A profile is a name: each experiment declares its own typed sizes per profile in its folder
(``pipeline/experiments/<name>/spec.py``), with the reasons for them; a test checks that every
experiment with sizes has one record per profile.

The default profile's budget is meant to hold on any CPU, not only on one with fast 16-bit matmul: a cold
default report on an idle 2-core AMD EPYC with AVX2 only took 19 min 34 s (2026-11-28; E's identical work
varied from 4.5 to 6.3 minutes between runs there before its runs went side by side), its largest steps
the planted-bug matrix, B and E. Where the
CPU has no native fp16/bf16 matrix instructions (AVX2 only; reproduce with
``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2`` and its own ``TORCHINDUCTOR_CACHE_DIR``, see the
README, and check with ``make matmul-timing``), torch's fp16/bf16 matmul runs at about 0.5 GFLOP/s
against about 30 GFLOP/s in fp32, 60x slower, while elementwise work and compilation barely change.
So the default sizes spend the 16-bit matmul budget where the evidence needs it, the same on every
machine: A keeps its run counts and shrinks the FFN (S's pool sizes, ``toolkit/spec.py``); E trains a
small model (width 64) under bf16 autocast for 150 steps on five data orders, whose matmuls are small enough that a step
costs about 0.1 s there (``training/spec.py``); A runs 100 times per dtype (``determinism/spec.py``);
D compiles two shapes and the planted-bug matrix runs nine of its bugs, each on the experiment built to
catch it (``regression/spec.py``); the fuzzer compiles 40 graphs (``diagnostics/spec.py``); M builds small
configs of its architectures, each in one dtype (``models/spec.py``), where compile time dominates. The smoke profile leaves out A's cold-start rounds (``determinism/spec.py``).
The gpu profile runs the planted-bug matrix at its smoke size: the matrix is a self-test of the
checks on the CPU, not a measurement of the GPU. On a GPU, D's combinations and M's architectures go
to the compile pool (:mod:`pipeline.compile_pool`: one warm worker per CPU core), and B's chain x dtype
pairs and E's training runs to the device's lanes (four processes side by side); each of their
``spec.py`` declares its compiles per profile. ``benchmarks/gpu_budget.py`` estimates the gpu and seed
profiles' time on an H100 and an H200 from these sizes (:mod:`pipeline.plan`), and ``report`` prints
the same estimate before it starts.

Each profile also states its time budget: the wall time a whole ``report`` run of it should stay
under, with the reason for that number. ``python -m pipeline.cli times`` (and the end of ``report``)
compares the last run against it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Budget:
    """The wall time a whole run of a profile should stay under (every asset materialized), and why."""

    seconds: float
    reason: str


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    budget: Budget | None = None
    #: Whether S stores its input pools and fp64 references (False: a small recipe is stored and the sets
    #: are drawn and computed again, on the run's device, where they are read; at GPU sizes that is tens of
    #: GB not written and read back). ``ExperimentSettings.keep_sets`` overrides it.
    store_sets: bool = True


PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        "smoke",
        "tiny sizes for the test suite: every asset in seconds",
        Budget(
            2 * 60,
            "the test suite materializes the whole graph several times, so it must stay cheap; two minutes "
            "covers a cold Inductor cache on a busy 2-core machine",
        ),
    ),
    "default": Profile(
        "default",
        "the seed's methods at sizes a 2-core CPU finishes in minutes, fast 16-bit matmul or not",
        Budget(
            20 * 60,
            "a first run on a 2-core CPU, the slow 16-bit matmul path (AVX2 only) included, should give "
            "results within a coffee break; each spec.py sizes its experiment to fit this",
        ),
    ),
    "gpu": Profile(
        "gpu",
        "the seed's shapes with fewer runs, programs and steps: one GPU in ten minutes, the target "
        "(benchmarks/gpu_budget.py estimates it)",
        Budget(
            10 * 60,
            "a first look at every experiment on one H100 or H200 inside a short lease; "
            "benchmarks/gpu_budget.py estimates it from the sizes",
        ),
        store_sets=False,
    ),
    "seed": Profile(
        "seed",
        "the seed document's exact shapes and counts; meant for a GPU",
        Budget(
            60 * 60,
            "the test plan's exact shapes and counts on one H200 GPU; a nightly run has to finish well inside the "
            "hour to leave room for the report and a re-run",
        ),
        store_sets=False,
    ),
}


def profiles_help() -> str:
    """``--profile``'s help: each profile, what it is for and its time budget."""
    parts = []
    for p in PROFILES.values():
        budget = f"; budget {p.budget.seconds / 60:g} min" if p.budget is not None else ""
        parts.append(f"{p.name} ({p.description}{budget})")
    return "one of: " + "; ".join(parts)
