"""Throughput of the differential tester (precisionkit.difftest). Prints figures; asserts nothing.

Runs the same programs twice in one process, each time after ``torch._dynamo.reset()``:

* cold: an empty Inductor cache of its own (every kernel generated and built by the C++ compiler);
* warm: the same programs again, so Inductor's FX-graph cache serves the compiled code.

For each it prints programs per minute and program operations per second (an operation is one
line of a program's body), per generator and overall, and the classes found.

    .venv/bin/python benchmarks/bench_difftest.py              # 40 typed programs + 8 of each structured
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

    plan = [("typed", s) for s in range(ns.base, ns.base + ns.programs)]
    for gen in ("attention", "norm", "gelu", "reduction"):
        plan += [(gen, s) for s in range(ns.base, ns.base + max(1, ns.programs // 5))]
    cases = [difftest.generate(s, g) for g, s in plan]
    ops = {c.id: c.source.count("\n") - 1 for c in cases}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {len(cases)} programs")
    for label in ("cold", "warm"):
        per_gen: dict[str, list[float]] = {}
        classes: Counter[str] = Counter()
        start = time.perf_counter()
        for case in cases:
            t0 = time.perf_counter()
            out = difftest.run(case)
            per_gen.setdefault(case.extra["generator"], []).append(time.perf_counter() - t0)
            classes[out.klass] += 1
        wall = time.perf_counter() - start
        total_ops = sum(ops.values())
        print(
            f"{label}: {len(cases)} programs in {wall:.1f} s = {60 * len(cases) / wall:.1f} programs/min, "
            f"{total_ops / wall:.2f} ops/s; classes {dict(classes)}"
        )
        for gen, secs in per_gen.items():
            print(f"  {gen:10s} {len(secs):4d} programs, {60 * len(secs) / sum(secs):7.1f} programs/min")


if __name__ == "__main__":
    main()
