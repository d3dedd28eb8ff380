"""How many programs a blind differential-testing campaign needs to catch each planted fault family
(the backends of ``tests/precisionkit/repro_backends.py``, which run the graph eagerly around one
fault), per campaign seed. Prints a markdown table: the position of the first ``mismatch`` in the
campaign's plan, or ``missed`` within the budget; asserts nothing (the pass/fail form is
``tests/precisionkit/test_difftest_blind.py`` on its three seeds).

    .venv/bin/python benchmarks/difftest_blind.py [--seeds 7001 8002 9003 4242 5151 31337] [--budget 240]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "precisionkit"))

from repro_backends import FAMILIES, first_catch, register  # type: ignore[import-not-found]  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[7001, 8002, 9003, 4242, 5151, 31337])
    parser.add_argument("--budget", type=int, default=240)
    args = parser.parse_args(argv)
    register()
    start = time.perf_counter()
    print(f"# Programs to the first catch (budget {args.budget})\n")
    print("| family | backend | " + " | ".join(f"seed {s}" for s in args.seeds) + " |")
    print("|---|---|" + "---|" * len(args.seeds))
    for family, backend in FAMILIES.items():
        cells = []
        for seed in args.seeds:
            hit = first_catch(backend, seed, args.budget)
            cells.append("missed" if hit is None else f"{hit[0]} ({hit[1].case.id})")
        print(f"| {family} | `{backend}` | " + " | ".join(cells) + " |", flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
