"""Programs of the ``opinfo`` generator per CPU-minute, run in this process (no worker), warm.

Generates ``N`` programs from ``--start`` first (not timed), runs 3 programs before them to warm
Dynamo and Inductor, then runs the ``N`` and prints the CPU time they took: this process's and its
reaped children's (the C++ compiler, when Inductor compiles in-process). Set
``TORCHINDUCTOR_COMPILE_THREADS=1`` so the compiler runs as a child of this process and is counted,
and a fresh ``TORCHINDUCTOR_CACHE_DIR`` so no kernel comes from an earlier run's cache. ``--no-cache``
turns Inductor's FX graph, AOTAutograd and autotune caches off (what their writes cost).

    TORCHINDUCTOR_COMPILE_THREADS=1 TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) \\
        nice -n 5 .venv/bin/python benchmarks/difftest_opinfo_speed.py --start 330000 -n 12
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=int, default=330000, help="first seed")
    ap.add_argument("-n", type=int, default=12, help="programs timed")
    ap.add_argument("--no-cache", action="store_true", help="Inductor's caches off")
    ns = ap.parse_args()
    import torch

    if ns.no_cache:
        import torch._inductor.config as inductor_config

        inductor_config.fx_graph_cache = False
        inductor_config.autotune_local_cache = False
        torch._functorch.config.enable_autograd_cache = False  # noqa: SLF001 - its only switch
    from precisionkit.difftest import generate
    from precisionkit.difftest.runner import run

    for s in range(ns.start - 3, ns.start):
        run(generate(s, "opinfo"), "inductor")
    cases = [generate(s, "opinfo") for s in range(ns.start, ns.start + ns.n)]
    t0, c0 = time.perf_counter(), os.times()
    classes = [run(c, "inductor").klass for c in cases]
    t1, c1 = time.perf_counter(), os.times()
    own = c1.user - c0.user + c1.system - c0.system
    cpu = own + c1.children_user - c0.children_user + c1.children_system - c0.children_system
    print(
        f"{'no cache' if ns.no_cache else 'default'}: {ns.n} programs, wall {t1 - t0:.0f} s, CPU {cpu:.0f} s "
        f"(this process {own:.0f} s), {60 * ns.n / cpu:.1f} programs per CPU-minute; classes {classes}"
    )


if __name__ == "__main__":
    main()
