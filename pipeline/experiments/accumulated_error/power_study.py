"""Power and false alarms of B's rule, by simulation with B's own functions at the judged size.

Part 1 runs every fault of :data:`.faults.FAULTS` (and every legitimate
variant of ``HEALTHY_VARIANTS``) as the fused path on freshly drawn sets of its chain, distribution and
dtype, once per seed, and judges it as one row of B's whole table: the detection rate over seeds (figures
from the first seed), beside the false-alarm rate of the healthy fused path (``torch.compile`` with the
chosen backend) on the same row and seeds. Part 2 runs the healthy fused path on every row of B's table
for several seeds and counts the rows any part of the rule contradicts, with the smallest Holm p-value of
each test. Prints markdown tables; asserts nothing.

    .venv/bin/python -m pipeline.experiments.accumulated_error.power_study        # 1000 sets, seeds 0 1 2
    .venv/bin/python -m pipeline.experiments.accumulated_error.power_study --sets 200 --seeds 0 --skip-healthy
    .venv/bin/python -m pipeline.experiments.accumulated_error.power_study --chains attention attention_masked \
        --threads 1
    .venv/bin/python -m pipeline.experiments.accumulated_error.power_study --chains layernorm_long --seeds 0 1 \
        --skip-healthy                                                 # the review's row
    .venv/bin/python -m pipeline.experiments.accumulated_error.power_study --sets 200 --seeds 0 1 2 --threads 1 \
        --write                                                        # stores power.json

``--write`` also stores both parts as B's power tables (``power.json`` beside B,
:mod:`pipeline.pagekit.power`), one per chain's claim check: per fault, how many seeds contradicted it (each
fault is a named effect, no size in sULP), and the healthy fused path's rows and legitimate variants as the rows
that plant nothing (their contradictions are false alarms); with the command, seeds and sets that measured them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from precisionkit import FusedFunction, fused

from ...pagekit import power
from ...workloads import CHAINS, WORKLOADS
from . import faults
from .rules import DTYPES_B, MATERIALITY_SULP

#: How the stored tables name the measurement that wrote them.
COMMAND = "python -m pipeline.experiments.accumulated_error.power_study"
OUT = Path(__file__).with_name("power.json")
#: The claim check of each chain (``checks.py`` names them so).
CHECK = "accumulated_error_summary:fused_not_worse_than_eager_{chain}"
VERDICTS = ("contradicted", "inconclusive", "supported")


def _g(value: Any, fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


def _figures(row: dict[str, Any]) -> str:
    return (
        f"{_g(row['p99_difference'], '+.3g')} | {row['gross_sets']} | {_g(row['bias_difference'], '+.3g')} | "
        f"{_g(row['misrounded_sets'], 'd')} / {_g(row['decisive_elements'], 'd')} | {_g(row.get('bias_margin'))}"
    )


#: The rule's tests and the column of each one's Holm-adjusted p-value.
_TESTS = (("tail", "p_holm"), ("bias", "bias_p_holm"), ("element", "element_p_holm"))


class Healthy:
    """The healthy fused path per chain x dtype, compiled once, and its judged rows per row x seed."""

    def __init__(self, backend: str, sets: int) -> None:
        self.backend, self.sets = backend, sets
        self._fns: dict[tuple[str, str], FusedFunction] = {}
        self._rows: dict[tuple[str, str, str, int], dict[str, Any]] = {}

    def row(self, chain: str, dist: str, dtype: str, seed: int) -> dict[str, Any]:
        key = (chain, dist, dtype, seed)
        if key not in self._rows:
            fn = self._fns.setdefault((chain, dtype), fused(WORKLOADS[chain].fn, backend=self.backend))
            fn(*faults.draw(WORKLOADS[chain], dist, dtype, 1, seed)[0])  # compiles; the evidence then says what fused
            ev = fn.evidence
            whole = not (ev.extern_calls or ev.fused_library_calls)
            self._rows[key] = faults.simulate(
                chain, dist, dtype, lambda args, i: fn(*args), sets=self.sets, seed=seed, whole_chain=whole
            )[1]
        return self._rows[key]


def fault_table(sets: int, seeds: list[int], chains: tuple[str, ...], healthy: Healthy) -> list[dict[str, Any]]:
    """Prints the fault table; returns each fault's power-table row (:func:`_fault_effect`), its chain beside it."""
    print(
        f"## Faults ({sets} sets each, seeds {', '.join(map(str, seeds))}, {torch.get_num_threads()} threads; each "
        f"judged as one row of a table of {faults.TABLE_FAMILY} tests)\n"
    )
    print(
        "| fault | row | what it does | designed part | contradicted | caught by (all seeds) | healthy fused "
        "contradicted | harmless | verdicts | most of the bound used (fault / healthy) | P99 diff (sULP) | gross sets | "
        "bias diff (sULP) | sets failing the element test / elements judged | bias margin (sULP) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    measured = []
    for f in (*faults.FAULTS, *faults.NO_DECISIVE_FAULTS, *faults.HEALTHY_VARIANTS):
        if f.chain not in chains:
            continue
        rows = [
            faults.simulate(f.chain, f.distribution, f.dtype, f.make(WORKLOADS[f.chain]), sets=sets, seed=seed)[1]
            for seed in seeds
        ]
        base = [healthy.row(f.chain, f.distribution, f.dtype, seed) for seed in seeds]
        hits = sum(r["verdict"] == "contradicted" for r in rows)
        alarms = sum(r["verdict"] == "contradicted" for r in base)
        parts = sorted({p for r in rows for p in faults.caught_by(r)})
        use = f"{_g(_most(rows, 'bound_use_max'))} / {_g(_most(base, 'bound_use_max'))}"
        print(
            f"| {f.name} | {f.chain}/{f.distribution}/{f.dtype} | {f.description} | {f.designed} | {hits}/{len(rows)} "
            f"| {', '.join(parts) or '-'} | {alarms}/{len(base)} | {'yes' if f.harmless else '-'} "
            f"| {', '.join(r['verdict'] for r in rows)} | {use} "
            f"| {_figures(rows[0])} |",
            flush=True,
        )
        measured.append(_fault_effect(f, rows, parts))
    return measured


def _counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}


def _fault_effect(f: faults.Fault, rows: list[dict[str, Any]], parts: list[str]) -> dict[str, Any]:
    """A fault as a power-table row: a named effect (no size), detected when its row is contradicted; a
    legitimate variant (``designed`` healthy) plants nothing, so its contradictions are false alarms."""
    figures: dict[str, Any] = {"designed part": f.designed, "caught by": ", ".join(parts) or "-"}
    if rows[0]["p99_difference"] is not None:
        figures["P99 diff, first seed (sULP)"] = round(float(rows[0]["p99_difference"]), 4)
    if f.harmless:
        figures["harmless"] = "yes (within the chain's fp32 bound)"
    return {
        "chain": f.chain,
        "effect": f"{f.name}: {f.description} ({f.distribution}/{f.dtype})",
        "size": None,
        "healthy": f.designed == "healthy",
        "replications": len(rows),
        **_counts(rows),
        "figures": figures,
    }


def _headroom(rows: list[dict[str, Any]]) -> str:
    """The largest worst-set headroom (fused's worst minus eager's worst, sULP) and the row it is on."""
    known = [r for r in rows if r["worst_over_eager_worst"] is not None]
    if not known:
        return "-"
    top = max(known, key=lambda r: r["worst_over_eager_worst"])
    return f"{top['worst_over_eager_worst']:+.3f} ({top['chain']}/{top['distribution']}/{top['dtype']})"


def _most(rows: list[dict[str, Any]], column: str) -> float | None:
    values = [r[column] for r in rows if r.get(column) is not None]
    return max(values) if values else None


def healthy_table(seeds: list[int], chains: tuple[str, ...], healthy: Healthy) -> list[dict[str, Any]]:
    """Prints the healthy table; returns per row of B's table its power-table row over the seeds (nothing
    planted: a contradiction is a false alarm), its chain beside it."""
    print(
        f"\n## Healthy fused path ({healthy.backend}), {healthy.sets} sets per row, {torch.get_num_threads()} threads, "
        f"every row of B's table ({', '.join(chains)})\n"
    )
    print(
        "| seed | rows | supported | inconclusive | contradicted | contradicted rows (by) | smallest Holm p "
        "(tail, bias, element) | largest worst - eager worst (sULP) | most of a library bound used | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for seed in seeds:
        smallest = dict.fromkeys((name for name, _ in _TESTS), 1.0)
        t0 = time.perf_counter()
        counts = {"supported": 0, "inconclusive": 0, "contradicted": 0}
        alarms, judged = [], []
        for chain in chains:
            for dist in WORKLOADS[chain].distributions:
                for dtype in DTYPES_B:
                    row = healthy.row(chain, dist, dtype, seed)
                    judged.append(row)
                    counts[row["verdict"]] += 1
                    for name, column in _TESTS:
                        if row[column] is not None:
                            smallest[name] = min(smallest[name], row[column])
                    if row["verdict"] == "contradicted":
                        alarms.append(f"{chain}/{dist}/{dtype} ({', '.join(faults.caught_by(row))})")
        print(
            f"| {seed} | {len(judged)} | {counts['supported']} | {counts['inconclusive']} | {counts['contradicted']} "
            f"| {'; '.join(alarms) or '-'} | {', '.join(f'{v:.2g}' for v in smallest.values())} "
            f"| {_headroom(judged)} | {_g(_most(judged, 'bound_use_max'))} "
            f"| {time.perf_counter() - t0:.0f} |",
            flush=True,
        )
    return [
        {
            "chain": chain,
            "effect": f"healthy fused path ({healthy.backend}) on {dist}/{dtype}",
            "size": None,
            "healthy": True,
            "replications": len(seeds),
            **_counts([healthy.row(chain, dist, dtype, seed) for seed in seeds]),
        }
        for chain in chains
        for dist in WORKLOADS[chain].distributions
        for dtype in DTYPES_B
    ]


def power_tables(sets: int, seeds: list[int], effects: list[dict[str, Any]], scope: str) -> list[dict[str, Any]]:
    """The measured rows as B's power tables (:mod:`pipeline.pagekit.power`), one per chain's claim check."""
    tables = []
    for chain in dict.fromkeys(e["chain"] for e in effects):
        rows = [{k: v for k, v in e.items() if k != "chain"} for e in effects if e["chain"] == chain]
        tables.append(
            {
                "checks": [CHECK.format(chain=chain)],
                "kind": "measured",
                "unit": "sULP",
                "threshold": MATERIALITY_SULP,
                "power": 0.8,
                "effect": "a fault of B's catalogue (pipeline/experiments/accumulated_error/faults.py) as the fused path "
                "on its chain's row, judged as one row of B's whole table; detected when that row is contradicted. "
                "Each fault is a named effect (what it changes), not a size in sULP",
                "sample_size": "input sets per row (B's judged size is 1000)",
                "simulation": "faults.simulate: fresh sets per seed, drawn as S draws them; the healthy rows run "
                "torch.compile's fused path on the same rows and seeds",
                "scope": scope,
                "replications": len(seeds),
                "seeds": list(seeds),
                "command": COMMAND + " " + shlex.join(sys.argv[1:]),
                "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
                "sizes": [{"n": sets, "effects": rows}],
            }
        )
    return tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", type=int, default=1000, help="input sets per row (default: the judged size, 1000)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the healthy runs")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend of the healthy path")
    parser.add_argument("--chains", nargs="+", default=list(CHAINS), help="only these chains' faults and rows")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads before anything runs")
    parser.add_argument("--skip-faults", action="store_true")
    parser.add_argument("--skip-healthy", action="store_true")
    parser.add_argument("--write", action="store_true", help=f"store B's power tables in {OUT.name} beside B")
    args = parser.parse_args()
    if args.sets < 2:
        parser.error(f"--sets must be at least 2, got {args.sets}")
    unknown = sorted(set(args.chains) - set(CHAINS))
    if unknown:
        parser.error(f"unknown chains {', '.join(unknown)}; expected some of {', '.join(CHAINS)}")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    healthy = Healthy(args.backend, args.sets)
    chains = tuple(c for c in CHAINS if c in args.chains)
    effects = fault_table(args.sets, args.seeds, chains, healthy) if not args.skip_faults else []
    effects += healthy_table(args.seeds, chains, healthy) if not args.skip_healthy else []
    if args.write:
        left = [c for c in CHAINS if c not in chains]
        scope = (
            f"{'faults' if not args.skip_faults else 'no fault'} and {'the healthy path' if not args.skip_healthy else 'no healthy row'}"
            f" on {', '.join(chains)}; {len(args.seeds)} seeds x {args.sets} sets, {torch.get_num_threads()} thread(s)"
            + (f"; not measured: {', '.join(left)}" if left else "")
        )
        power.write_power_tables(OUT, "B", power_tables(args.sets, args.seeds, effects, scope))
        print(f"\nwrote {OUT}")


if __name__ == "__main__":
    main()
