"""Power and false alarms of B's rule, by simulation with B's own functions at the judged size.

Part 1 runs every fault of ``pipeline.experiments.accumulated_error.faults.FAULTS`` as the fused path
on freshly drawn sets of its chain, distribution and dtype, once per seed, and judges it as one row
of B's whole table: the detection rate over seeds (figures from the first seed). Part 2 runs the healthy fused path (``torch.compile`` with the chosen backend) on every row of
B's table for several seeds and counts the rows any part of the rule contradicts: the false alarms.
Prints markdown tables; asserts nothing.

    .venv/bin/python scripts/b_rule_power.py                       # 1000 sets, seeds 0 1 2
    .venv/bin/python scripts/b_rule_power.py --sets 200 --seeds 0 --skip-healthy
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from pipeline.experiments.accumulated_error import faults
from pipeline.experiments.accumulated_error.rules import DTYPES_B
from pipeline.workloads import CHAINS, WORKLOADS
from precisionkit import FusedFunction, fused


def _g(value: Any, fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


def _figures(row: dict[str, Any]) -> str:
    return (
        f"{_g(row['p99_difference'], '+.3g')} | {row['gross_sets']} | {_g(row['bias_difference'], '+.3g')} | "
        f"{_g(row['misrounded_sets'], 'd')} / {_g(row['decisive_elements'], 'd')}"
    )


#: The rule's tests and the column of each one's Holm-adjusted p-value.
_TESTS = (("tail", "p_holm"), ("bias", "bias_p_holm"), ("element", "element_p_holm"))


def fault_table(sets: int, seeds: list[int]) -> None:
    print(
        f"## Faults ({sets} sets each, seeds {', '.join(map(str, seeds))}; each judged as one row of a table of "
        f"{faults.TABLE_FAMILY} tests)\n"
    )
    print(
        "| fault | row | what it does | designed part | contradicted | caught by (all seeds) | P99 diff (sULP) "
        "| gross sets | bias diff (sULP) | sets misrounding a decisive element / decisive elements |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f in faults.FAULTS:
        rows = [
            faults.simulate(f.chain, f.distribution, f.dtype, f.make(WORKLOADS[f.chain]), sets=sets, seed=seed)[1]
            for seed in seeds
        ]
        hits = sum(r["verdict"] == "contradicted" for r in rows)
        parts = sorted({p for r in rows for p in faults.caught_by(r)})
        print(
            f"| {f.name} | {f.chain}/{f.distribution}/{f.dtype} | {f.description} | {f.designed} | {hits}/{len(rows)} "
            f"| {', '.join(parts) or '-'} | {_figures(rows[0])} |",
            flush=True,
        )


def _as_fault(fn: FusedFunction) -> faults.FaultFn:
    """The compiled chain as a simulation's fused path (it ignores the set index)."""
    return lambda args, i: fn(*args)


def healthy_table(sets: int, seeds: list[int], backend: str) -> None:
    print(f"\n## Healthy fused path ({backend}), {sets} sets per row, every row of B's table\n")
    compiled = {}
    for chain in CHAINS:
        for dtype in DTYPES_B:
            compiled[chain, dtype] = fused(WORKLOADS[chain].fn, backend=backend)
    print(
        "| seed | rows | supported | inconclusive | contradicted | contradicted rows (by) | smallest Holm p "
        "(tail, bias, element) | largest worst - eager worst (sULP) | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for seed in seeds:
        smallest = dict.fromkeys((name for name, _ in _TESTS), 1.0)
        headroom = -float("inf")
        t0 = time.perf_counter()
        counts = {"supported": 0, "inconclusive": 0, "contradicted": 0}
        alarms = []
        for chain in CHAINS:
            for dist in WORKLOADS[chain].distributions:
                for dtype in DTYPES_B:
                    fn = compiled[chain, dtype]
                    first = faults.draw(WORKLOADS[chain], dist, dtype, 1, seed)[0]
                    fn(*first)  # compiles on first use; the evidence then says whether it fused every op
                    ev = fn.evidence
                    whole = not (ev.extern_calls or ev.fused_library_calls)
                    _, row = faults.simulate(chain, dist, dtype, _as_fault(fn), sets=sets, seed=seed, whole_chain=whole)
                    counts[row["verdict"]] += 1
                    for name, column in _TESTS:
                        if row[column] is not None:
                            smallest[name] = min(smallest[name], row[column])
                    if row["worst_over_eager_worst"] is not None:
                        headroom = max(headroom, row["worst_over_eager_worst"])
                    if row["verdict"] == "contradicted":
                        alarms.append(f"{chain}/{dist}/{dtype} ({', '.join(faults.caught_by(row))})")
        rows = sum(counts.values())
        print(
            f"| {seed} | {rows} | {counts['supported']} | {counts['inconclusive']} | {counts['contradicted']} "
            f"| {'; '.join(alarms) or '-'} | {', '.join(f'{v:.2g}' for v in smallest.values())} | {headroom:+.3f} "
            f"| {time.perf_counter() - t0:.0f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", type=int, default=1000, help="input sets per row (default: the judged size, 1000)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the healthy runs")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend of the healthy path")
    parser.add_argument("--skip-faults", action="store_true")
    parser.add_argument("--skip-healthy", action="store_true")
    args = parser.parse_args()
    if args.sets < 2:
        parser.error(f"--sets must be at least 2, got {args.sets}")
    if not args.skip_faults:
        fault_table(args.sets, args.seeds)
    if not args.skip_healthy:
        healthy_table(args.sets, args.seeds, args.backend)


if __name__ == "__main__":
    main()
