"""How often the differential tester's generators write each feature of its vocabulary, per 1000
programs of a campaign's plan, on the CPU and on a GPU (the GPU plan adds the GPU generator). Prints a
markdown table; asserts nothing. A feature far below 10 per 1000 is one a campaign of a few hundred
programs rarely reaches (issue: no listed feature under 1 %).

    .venv/bin/python benchmarks/difftest_features.py [--programs 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from precisionkit.difftest.features import FROM_MESSAGE, GPU_ONLY, OPT_IN, feature_frequencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=1000)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    cpu, gpu = (feature_frequencies(args.programs, device) for device in ("cpu", "cuda"))
    print(f"# Feature frequencies, per 1000 programs ({args.programs} programs per plan)\n")
    print("| feature | CPU plan | GPU plan | note |\n|---|---|---|---|")
    for feature in cpu:
        note = "read from a mismatch's message" if feature in FROM_MESSAGE else ""
        note = note or ("GPU generator only" if feature in GPU_ONLY else "")
        note = note or ("opt-in (PK_DIFFTEST_LARGE=1 on CUDA)" if feature in OPT_IN else "")
        low = feature not in FROM_MESSAGE | GPU_ONLY | OPT_IN and min(cpu[feature], gpu[feature]) < 10
        print(f"| {feature} | {cpu[feature]:.1f} | {gpu[feature]:.1f} | {note or ('under 1 %' if low else '')} |")
    print(f"\n{time.perf_counter() - start:.1f} s to generate and read {2 * args.programs} programs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
