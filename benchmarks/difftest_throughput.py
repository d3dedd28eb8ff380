"""Programs per minute of the differential tester on the run's device, cold and warm. Prints
figures; asserts nothing.

The campaign runs as the pipeline's asset runs it: in one worker interpreter
(:class:`precisionkit.difftest.Isolated`), which pays for its CUDA context once, on the plan the
device gets (:func:`precisionkit.difftest.plan`: on CUDA a third from the ``gpu`` generator).

* cold: a fresh worker and an empty Inductor cache of its own (every kernel generated and built:
  C++ on the CPU, Triton on CUDA);
* warm: the same programs again in the same worker, so Inductor's FX-graph cache serves the code.

    .venv/bin/python benchmarks/difftest_throughput.py                  # 24 programs on the CPU
    .venv/bin/python benchmarks/difftest_throughput.py --device cuda --programs 120
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    torch.device(name)  # a bad name fails here, with torch's message
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=24, help="programs per pass (difftest.plan)")
    ap.add_argument("--base", type=int, default=2000, help="first seed")
    ap.add_argument("--device", default="auto", help="auto (cuda when torch has one, else cpu), cpu, cuda, ...")
    ns = ap.parse_args()
    if ns.programs < 1:
        ap.error("--programs must be at least 1")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-difftest-throughput-")
    import torch

    from precisionkit import difftest

    device = _device(ns.device)
    plan = difftest.plan(ns.programs, ns.base, device)
    mix = Counter(g for g, _ in plan)
    print(f"torch {torch.__version__} on {device}: {len(plan)} programs per pass ({dict(mix)})")
    with difftest.Isolated() as worker:
        for label in ("cold", "warm"):
            start = time.perf_counter()
            classes: Counter[str] = Counter()
            for gen, seed in plan:
                case = difftest.generate(seed, gen, device=device)
                classes[worker.run(case, threads=difftest.threads_for(gen, seed)).klass] += 1
            seconds = time.perf_counter() - start
            print(
                f"{label}: {len(plan)} programs in {seconds:.1f} s = {60.0 * len(plan) / seconds:.1f} programs per "
                f"minute; classes {dict(classes)}; worker restarts {worker.crashes}"
            )


if __name__ == "__main__":
    main()
