"""Throughput of the differential tester (precisionkit.difftest). Prints figures; asserts nothing.

Runs the same programs twice in one process, each time after ``torch._dynamo.reset()``:

* cold: an empty Inductor cache of its own (every kernel generated and built by the C++ compiler);
* warm: the same programs again, so Inductor's FX-graph cache serves the compiled code.

For each it prints programs per minute and program operations per second (an operation is one
line of a program's body), per generator and overall, and the classes found.

    .venv/bin/python benchmarks/bench_difftest.py              # 48 programs: 24 typed, 6 per structured generator
    .venv/bin/python benchmarks/bench_difftest.py --programs 8 # a quick look
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--programs", type=int, default=40, help="typed programs (a fifth as many per structured generator)"
    )
    ap.add_argument("--base", type=int, default=1000, help="first seed")
    ns = ap.parse_args()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-difftest-")
    import torch

    from precisionkit import difftest

    plan = difftest.plan(ns.programs, ns.base)
    ops = sum(difftest.generate(s, g).source.count("\n") - 1 for g, s in plan)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {len(plan)} programs")
    for label in ("cold", "warm"):
        start = time.perf_counter()
        outcomes = difftest.fuzz(plan)
        wall = time.perf_counter() - start
        classes = Counter(o.klass for o in outcomes)
        print(
            f"{label}: {len(plan)} programs in {wall:.1f} s = {60 * len(plan) / wall:.1f} programs/min, "
            f"{ops / wall:.2f} ops/s; classes {dict(classes)}"
        )
        per_gen: dict[str, list[float]] = {}
        for o in outcomes:
            per_gen.setdefault(o.case.extra["generator"], []).append(o.seconds)
        for gen, secs in per_gen.items():
            print(f"  {gen:10s} {len(secs):4d} programs, {60 * len(secs) / sum(secs):7.1f} programs/min")


if __name__ == "__main__":
    main()
