"""Power and false alarms of M's rule, by simulation with M's own judge at the table sizes M uses.

Each replication builds a table of N model x dtype rows as :mod:`pipeline.experiments.models.compute` stores
them (:class:`~pipeline.experiments.models.compute.ModelRun`, one float output per row, units labelled with their
independent input) and judges it with :func:`pipeline.experiments.models.judge.verdict_table`, the function whose
row verdicts the claim check ``fused_not_worse_than_eager_on_models`` combines. One row is *planted*: its fused
path is k sULP worse than eager on every unit (so P99(fused) - P99(eager) moves by k, the rule's statistic, in the
rule's unit). The other N - 1 rows are healthy (k = 0) and share Holm's family with it. Counted per k and N: the
planted row's verdicts (contradicted = detected), and at k = 0 the tables with any row contradicted (family-wise
false alarms).

Simulated units: the planted row has 8 independent inputs x 32 units, the default profile's smallest float
output (4 batches x 2 sequences x 32 tokens); each healthy row 8 x 13 (104 units, just over the 100 the rule
needs for supported: their bootstrap is what a replication spends its time on, and they only shape Holm). A unit's error is s_input * g: g ~ Gamma(4, 0.3) sULP (mean 1.2, P99 about
3), s_input ~ lognormal(0, 0.2) shared by an input's units (units of one input are correlated, as M's bootstrap
assumes); fused draws its own g (it rounds differently, but as often) on the same inputs, plus k. Eager's P99 is
then 2 to 4 sULP, as stored for GPT-2, BERT and ViT on the H200 (results/bundles/2026-11-27-h200-gpu).

    .venv/bin/python -m pipeline.experiments.models.power_study --replications 20            # prints the table
    .venv/bin/python -m pipeline.experiments.models.power_study --replications 200 --write   # power.json beside M
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...pagekit import power
from . import compute, judge
from .rules import MATERIALITY_SULP

#: How the stored table names the measurement that wrote it.
COMMAND = "python -m pipeline.experiments.models.power_study"

CHECK = "model_verdicts:fused_not_worse_than_eager_on_models"
OUT = Path(__file__).with_name("power.json")
#: Independent inputs per row and units per input: the planted row (the default profile's smallest float output)
#: and the healthy rows beside it (just over the rule's 100 units for supported).
INPUTS, UNITS_PER_INPUT, HEALTHY_UNITS_PER_INPUT = 8, 32, 13
GAMMA_SHAPE, GAMMA_SCALE, INPUT_SPREAD = 4.0, 0.3, 0.2
VERDICTS = ("contradicted", "inconclusive", "supported")


def simulated_row(name: str, k: float, rng: np.random.Generator, per_input: int = UNITS_PER_INPUT) -> compute.ModelRun:
    """One model x dtype row of ``per_input`` units per input: fused k sULP worse than eager on every unit (k = 0:
    healthy)."""
    clusters = np.repeat(np.arange(INPUTS, dtype=np.int64), per_input)
    scale = np.exp(rng.normal(0.0, INPUT_SPREAD, INPUTS))[clusters]
    eager = scale * rng.gamma(GAMMA_SHAPE, GAMMA_SCALE, clusters.size)
    fused = scale * rng.gamma(GAMMA_SHAPE, GAMMA_SCALE, clusters.size) + k
    record = compute.OutputRecord(
        0, 0, f"({clusters.size},)", "float", int(clusters.size), eager, fused,
        float(eager.max()), float(fused.max()), 0, 0, 0, 0, 1.0, 1.0, False, unit_clusters=clusters,
    )  # fmt: skip
    return compute.ModelRun(name, "simulated", "float32", [record], [True], {"graph_count": 1, "graph_breaks": 0})


def replicate(rows: int, k: float, seed: int) -> tuple[str, bool]:
    """One simulated table judged by M's judge: the planted row's verdict, and whether any row is contradicted."""
    rng = np.random.default_rng(seed)
    healthy = [simulated_row(f"healthy{i}", 0.0, rng, HEALTHY_UNITS_PER_INPUT) for i in range(rows - 1)]
    runs = [simulated_row("planted", k, rng), *healthy]
    table = judge.verdict_table(runs, seed=seed)
    verdicts = table["verdict"].to_list()
    return verdicts[0], "contradicted" in verdicts


def measure(rows: int, k: float, replications: int, base_seed: int) -> dict[str, Any]:
    """The planted row's verdict counts over ``replications`` tables (seeds base_seed, base_seed + 1, ...)."""
    counts = dict.fromkeys(VERDICTS, 0)
    family = 0
    for r in range(replications):
        verdict, any_contradicted = replicate(rows, k, base_seed + r)
        counts[verdict] += 1
        family += any_contradicted
    row: dict[str, Any] = {"effect": f"fused {k:g} sULP worse on every unit", "size": k, "healthy": k == 0}
    row.update(replications=replications, **counts)
    if k == 0:
        row["figures"] = {"tables with any row contradicted (family-wise false alarms)": family}
    return row


def table_record(sizes: list[dict[str, Any]], replications: int, seed: int, command: str) -> dict[str, Any]:
    return {
        "checks": [CHECK],
        "kind": "measured",
        "unit": "sULP",
        "threshold": MATERIALITY_SULP,
        "power": 0.8,
        "effect": "one row of the table planted with a fused path k sULP worse than eager on every unit (its "
        "P99(fused) - P99(eager) moves by k); a detection is that row contradicted",
        "sample_size": "model x dtype rows in the judged table (Holm's family); the planted row 8 independent inputs "
        "x 32 units, each healthy row 8 x 13",
        "n_key": "rows_judged",
        "simulation": f"per unit error s_input * g, g ~ Gamma({GAMMA_SHAPE:g}, {GAMMA_SCALE:g}) sULP, s_input ~ "
        f"lognormal(0, {INPUT_SPREAD:g}) shared by an input's units; fused draws its own g on the same inputs, plus k; "
        "the other rows healthy (k = 0); judged by pipeline.experiments.models.judge.verdict_table; replication r "
        "draws its data and its bootstrap from seed r, the same r for every k and table size",
        "replications": replications,
        "seeds": list(range(seed, seed + replications)),
        "command": command,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "sizes": sizes,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replications", type=int, default=200, help="simulated tables per k and table size")
    parser.add_argument("--rows", type=int, nargs="+", default=[7, 21, 40], help="table sizes (model x dtype rows)")
    parser.add_argument("--effects", type=float, nargs="+", default=[0, 2, 3, 4, 6], help="k in sULP")
    parser.add_argument("--seed", type=int, default=0, help="first replication's seed (data and bootstrap)")
    parser.add_argument("--write", action="store_true", help=f"store the table in {OUT.name} beside M")
    args = parser.parse_args(argv)
    if args.replications < 1 or min(args.rows) < 1:
        parser.error("--replications and --rows must be at least 1")
    sizes = []
    for rows in args.rows:
        effects = []
        for k in args.effects:
            t0 = time.perf_counter()
            row = measure(rows, k, args.replications, args.seed)
            effects.append(row)
            counts = " ".join(f"{v} {row[v]}" for v in VERDICTS)
            print(f"rows {rows} k {k:g}: {counts} ({time.perf_counter() - t0:.0f} s)", flush=True)
        sizes.append({"n": rows, "effects": effects})
    command = COMMAND + " " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    record = table_record(sizes, args.replications, args.seed, command)
    power.show_power_tables("M", [record], OUT if args.write else None)


if __name__ == "__main__":
    main()
