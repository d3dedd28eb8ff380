"""The planted-bug matrix on several compilers side by side: the same bugs, experiments and seed, planted around
Inductor and around another adapter's compiler (:mod:`.planted_on`), and per bug whether each caught it at ERROR.

``python -m pipeline.instruments.regression.matrix_compare --compilers inductor,openvino --experiments D
--bugs planted_off_by_one_ulp,planted_vector_tail`` prints the table (markdown) and exits 1 when a bug that
applies to both compilers is caught by one and not the other.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import polars as pl

from ...resources import ExperimentSettings
from ...tables import markdown_table
from ...verdicts import NOT_APPLICABLE
from .harness import CANNOT_JUDGE, build_matrix
from .matrix_runs import MATRIX_DEVICE, MATRIX_EXPERIMENTS, MATRIX_PROFILE
from .planted_bugs import PLANTED_BUGS
from .rules import HEALTHY_ROW

#: Options a compiler's matrix runs compile with, and why: OpenVINO's default (inference) tracing fails Dynamo's
#: guard building on D's data-movement graphs on this torch (IndexError in ``produce_guards``, the healthy run
#: invalid); through AOTAutograd (its ``aot_autograd`` option) every D check runs.
COMPILER_OPTIONS: dict[str, dict[str, object]] = {"openvino": {"aot_autograd": True}}


def compare_compilers(
    bugs: list[str],
    experiments: list[str],
    compilers: Sequence[str],
    seed: int,
    work_dir: Path,
    log: Callable[[str], None] | None = None,
    options: Mapping[str, Mapping[str, object]] | None = None,
) -> pl.DataFrame:
    """The matrix of each of ``compilers`` (with its ``options``, default :data:`COMPILER_OPTIONS`) at one seed,
    side by side.
    One row per bug (and one for the healthy run): per compiler, ``caught_<compiler>`` (yes, no, not by its
    claim, not applicable, or the healthy run's clean / false alarm) and ``caught_by_<compiler>``."""
    table: pl.DataFrame | None = None
    for compiler in compilers:
        chosen = json.dumps(dict((options or COMPILER_OPTIONS).get(compiler, {})), sort_keys=True)
        like = ExperimentSettings(profile=MATRIX_PROFILE, device=MATRIX_DEVICE, seed=seed, backend_options=chosen)
        matrix, _facts = build_matrix(
            bugs, experiments, like, work_dir / compiler, healthy_seeds=[seed], log=log, compiler=compiler
        )
        part = matrix.select(
            pl.when(pl.col("row") == HEALTHY_ROW).then(pl.lit("(healthy)")).otherwise(pl.col("bug")).alias("bug"),
            pl.col("caught").alias(f"caught_{compiler}"),
            pl.when(pl.col("caught").is_in([NOT_APPLICABLE, CANNOT_JUDGE]))
            .then(pl.col("first_failure"))
            .otherwise(pl.col("caught_by"))
            .alias(f"caught_by_{compiler}"),
        )
        table = part if table is None else table.join(part, on="bug", how="full", coalesce=True)
    if table is None:
        raise ValueError("no compiler to run the matrix on")
    order = {"(healthy)": -1, **{b: i for i, b in enumerate(bugs)}}
    return table.sort(pl.col("bug").replace_strict(order, default=len(order)))


def disagreements(table: pl.DataFrame, compilers: Sequence[str]) -> list[str]:
    """The bugs (and the healthy row) whose outcome differs between compilers, bugs not applicable to a
    compiler, or that its claims cannot judge there, left out."""
    out = []
    for row in table.iter_rows(named=True):
        caught = {row[f"caught_{c}"] for c in compilers if row[f"caught_{c}"] not in (NOT_APPLICABLE, CANNOT_JUDGE)}
        if len(caught) > 1:
            out.append(f"{row['bug']}: " + ", ".join(f"{c} {row[f'caught_{c}']}" for c in compilers))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.instruments.regression.matrix_compare")
    parser.add_argument("--compilers", default="inductor,openvino", help="comma list of adapter names")
    parser.add_argument("--experiments", default=",".join(MATRIX_EXPERIMENTS), help="comma list of experiment ids")
    parser.add_argument("--bugs", default=",".join(PLANTED_BUGS), help="comma list of planted bugs")
    parser.add_argument("--seed", type=int, default=20241223, help="base seed of the healthy and bug runs")
    parser.add_argument(
        "--options",
        default=json.dumps(COMPILER_OPTIONS),
        help="JSON object: compiler -> its options for every run (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        parser.error(f"--options must be a JSON object of compiler -> options object, got {args.options!r}")
    compilers = [c for c in args.compilers.split(",") if c]
    bugs = [b for b in args.bugs.split(",") if b]
    with tempfile.TemporaryDirectory(prefix="planted_compare_") as tmp:
        table = compare_compilers(
            bugs,
            [e for e in args.experiments.split(",") if e],
            compilers,
            args.seed,
            Path(tmp),
            log=lambda line: print(line, file=sys.stderr),
            options=options,
        )
    print(markdown_table(table))
    differ = disagreements(table, compilers)
    for line in differ:
        print(f"differs: {line}")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
