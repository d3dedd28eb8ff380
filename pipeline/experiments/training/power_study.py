"""Power and false alarms of E's rule, measured by running E's own judge on simulated training runs.

Each simulated run is what the claim check ``fused_learns_like_eager`` judges: per data order (5, the rule's
fewest for supported) a healthy eager curve of each judged metric, the fused curve and the one-ULP control, 10
judged eval points (:func:`.error_rates.simulated_curves`). Fused and the control
differ from eager by paired noise of sd 0.25 or 0.5 margin (normal, or Student t with 3 degrees of freedom for
heavy tails: the table's four conditions); fused's eval loss also carries a planted shift or drift of k margins.
Each run is judged by :func:`.judge.judge_training`, the function the claim check
calls, and its verdict counted (contradicted = detected; below 1 margin, a false alarm). The measurement is
:func:`.error_rates.compute_declared_error_rates`; the table keeps the rule's
fingerprint, so the claim check and the page use it only while the rule is the one measured.

    .venv/bin/python -m pipeline.experiments.training.power_study --draws 20   # a quick look, printed
    .venv/bin/python -m pipeline.experiments.training.power_study --write      # 500 runs per cell: power.json beside E
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
import time
from collections.abc import Sequence

from ...pagekit import power
from . import error_rates

#: How the stored table names the measurement that wrote it.
COMMAND = "python -m pipeline.experiments.training.power_study"
OUT = error_rates.MEASURED_TABLE
#: The declared measurement's runs per cell and seed (the rule's, as error_rates reads them).
MEASURED_DRAWS, POWER_SEED = error_rates.MEASURED_DRAWS, error_rates.POWER_SEED


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=MEASURED_DRAWS, help="simulated runs per effect and condition")
    parser.add_argument("--seed", type=int, default=POWER_SEED, help="the seed of every effect's draws")
    parser.add_argument("--write", action="store_true", help=f"store the table in {OUT.name} beside E")
    args = parser.parse_args(argv)
    if args.draws < 1:
        parser.error("--draws must be at least 1")
    if args.write and (args.draws, args.seed) != (MEASURED_DRAWS, POWER_SEED):
        parser.error("--write stores the rule's declared measurement: keep --draws and --seed at their defaults")
    started = time.perf_counter()
    rows = error_rates.compute_declared_error_rates(draws=args.draws, seed=args.seed)
    print(f"{len(rows)} cells x {args.draws} judged runs in {time.perf_counter() - started:.0f} s", flush=True)
    command = COMMAND + " " + shlex.join(sys.argv[1:] if argv is None else list(argv))
    date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    record = error_rates.power_table(rows, command=command.strip(), date=date, seed=args.seed)
    if args.write:
        record["fingerprint"] = error_rates.rule_fingerprint()
    power.show_power_tables("E", [record], OUT if args.write else None)


if __name__ == "__main__":
    main()
