"""The ``opinfo`` generator of the differential tester: its op list, its coverage and a campaign.

* ``--list``: the eligible ops, and the excluded ones grouped by reason (no programs made);
* ``--coverage N``: generate N programs (no running) and print which share of the eligible ops,
  which dtypes, range modes and compile modes they reach; ``--table`` adds programs per 1000 for
  every (op, dtype, mode);
* ``--run N``: a campaign of N programs in one worker interpreter, one JSON line per outcome in
  ``--out``; prints the classes, throughput in programs per minute on one core (all programs, and
  warm: after the first ``--warmup`` programs, once the op database and the samples of the ops drawn
  so far are cached and the worker is started) and every mismatch with its ops, dtype, modes and
  the rule's message, and the coverage of the programs run (stored beside ``--out`` as
  ``<out>-coverage.txt``); ``--minutes M`` starts no program after M minutes (a timeout's SIGTERM also ends the
  campaign with its report). A mismatch that ``emulate_precision_casts`` clears is labelled *by design*
  (Inductor keeps 16-bit intermediates in fp32 unless asked to round them, as its docs say).

    .venv/bin/python benchmarks/difftest_opinfo.py --list
    .venv/bin/python benchmarks/difftest_opinfo.py --coverage 2000
    .venv/bin/python benchmarks/difftest_opinfo.py --run 100 --start 50000 --out /tmp/opinfo.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from precisionkit.difftest import Outcome


def _list() -> None:
    from precisionkit.difftest import opinfo

    eligible, excluded = opinfo.catalogue()
    print(f"eligible ops: {len(eligible)}")
    for key in eligible:
        print(f"  {key}  [{opinfo.family(key)}; {', '.join(opinfo.dtypes_of(opinfo.op_db()[key]))}]")
    print(f"\nexcluded ops: {len(excluded)}")
    for reason, keys in sorted(opinfo.exclusions_by_reason(excluded).items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(keys):3d}  {reason}: {', '.join(keys)}")


def _coverage(n: int, start: int, table: bool) -> None:
    from precisionkit.difftest import generate, opinfo

    t0 = time.perf_counter()
    cases = [generate(s, "opinfo") for s in range(start, start + n)]
    took = time.perf_counter() - t0
    cov = opinfo.coverage(cases)
    print(f"generated {n} programs (seeds {start}..{start + n - 1}) in {took:.0f} s")
    # generation runs each step eagerly and in fp64 only: nothing may have gone through Dynamo
    from torch._dynamo.utils import counters

    print(f"frames compiled while generating: {counters['frames']['total']}")
    print(cov.summary())
    lengths = Counter(len(c.extra["ops"]) for c in cases)
    print("ops per program: " + ", ".join(f"{k}: {v}" for k, v in sorted(lengths.items())))
    if table:
        print(cov.table())


def _describe(case: object) -> str:
    extra = case.extra  # type: ignore[attr-defined]
    ops = " > ".join(o["op"] + ("(scalar)" if o["how"] == "scalar" else "") for o in extra["ops"])
    return f"{extra['dtype']}, {extra['mode']}, {extra['compile']['mode']}: {ops}"


class _TimeUp(Exception):
    """The campaign's time (``--minutes``) is spent: no further program is started."""


def _store_coverage(cases: list[object], out: str) -> None:
    """Print the coverage of the programs the campaign ran and store its table beside ``out``."""
    from precisionkit.difftest import opinfo

    cov = opinfo.coverage(cases)  # type: ignore[arg-type]
    path = os.path.splitext(os.path.abspath(out))[0] + "-coverage.txt"
    with open(path, "w") as fh:
        fh.write(cov.summary() + "\n\n" + cov.table() + "\n")
    print(f"\ncoverage of the {cov.programs} programs run (table: {path}):\n{cov.summary()}")


def _run(
    n: int,
    start: int,
    out: str,
    warmup: int,
    minutes: float = 0.0,
    device: str = "cpu",
    workers: int = 1,
    backend: str = "inductor",
) -> None:
    import signal

    from precisionkit.difftest import fuzz

    def stop(*_: object) -> None:  # a timeout's SIGTERM: the programs run so far are still reported
        raise _TimeUp

    signal.signal(signal.SIGTERM, stop)
    stamps: list[float] = []
    cases: list[object] = []
    classes: Counter[str] = Counter()
    mismatches: list[Outcome] = []
    t0 = time.perf_counter()
    cpu0 = os.times()

    with open(out, "w") as fh:

        def log(o: Outcome) -> None:
            stamps.append(time.perf_counter())
            classes[o.klass] += 1
            row = {
                **o.row(),
                "ops": o.case.extra["ops"],
                "mode": o.case.extra["mode"],
                "compile": o.case.extra["compile"],
                "opinfo_dtype": o.case.extra["dtype"],
            }
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            if o.klass == "mismatch":
                mismatches.append(o)
            cases.append(o.case)
            print(f"[{len(stamps)}/{n}] {o.case.id} {o.klass} {o.seconds:.1f}s", flush=True)
            if minutes and time.perf_counter() - t0 > 60 * minutes:
                raise _TimeUp

        try:
            fuzz(
                [("opinfo", s) for s in range(start, start + n)],
                isolated=True,
                log=log,
                device=device,
                workers=workers,
                backend=backend,
            )
        except _TimeUp:
            print(f"time is up: {len(stamps)} of {n} programs run", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    n = len(stamps)
    took = time.perf_counter() - t0
    cpu1 = os.times()
    print(f"\n{n} programs in {took:.0f} s wall; classes: {dict(classes)}")
    print(f"compiler: {backend}; device: {device}; workers: {workers}")
    print(f"throughput: {60 * n / took:.1f} programs/min in {workers} worker(s) (all)")
    if len(stamps) > warmup + 1:
        warm = stamps[-1] - stamps[warmup]
        print(f"throughput warm (after {warmup}): {60 * (len(stamps) - warmup - 1) / warm:.1f} programs/min")
    print(
        f"CPU of this process: {cpu1.user - cpu0.user + cpu1.system - cpu0.system:.0f} s; "
        f"of the worker: {cpu1.children_user - cpu0.children_user + cpu1.children_system - cpu0.children_system:.0f} s"
    )
    _store_coverage(cases, out)
    _print_mismatches(mismatches, backend)


def _print_mismatches(mismatches: list[Outcome], backend: str) -> None:
    """Each mismatch with its rule message; on Inductor, rerun with faithful casts for a by-design label."""
    from precisionkit.difftest import Isolated

    print(f"\nmismatches: {len(mismatches)}")
    for o in mismatches:
        case = o.case
        label = "-"
        if backend != "inductor":  # the faithful-casts option below is Inductor's
            print(f"- {case.id} [{_describe(case)}]\n    rule: {o.message}")
            continue
        try:
            with Isolated() as worker:
                again = worker.run(case.with_(options=(("emulate_precision_casts", True),)))
            if again.klass == "ok":
                label = "by design (16-bit rounding elided; clean with emulate_precision_casts)"
        except Exception as exc:  # noqa: BLE001 - the label is advice
            label = f"(rerun failed: {exc})"
        print(f"- {case.id} [{_describe(case)}]\n    rule: {o.message}\n    label: {label}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="print eligible and excluded ops")
    ap.add_argument("--coverage", type=int, default=0, help="programs to generate for the coverage summary")
    ap.add_argument("--table", action="store_true", help="with --coverage: programs per 1000 per (op, dtype, mode)")
    ap.add_argument("--run", type=int, default=0, help="programs to run (in --workers worker interpreters)")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--warmup", type=int, default=10, help="programs before the warm throughput is measured")
    ap.add_argument("--out", default="/tmp/difftest_opinfo.jsonl", help="JSON lines of the campaign's outcomes")
    ap.add_argument("--minutes", type=float, default=0.0, help="with --run: start no program after this many minutes")
    ap.add_argument("--device", default="cpu", help="with --run: the device the programs run on (cpu, cuda, ...)")
    ap.add_argument("--workers", type=int, default=1, help="with --run: worker interpreters side by side")
    ap.add_argument(
        "--backend", default="inductor", help="with --run: the compiler (inductor, openvino, iree, a user's adapter)"
    )
    ns = ap.parse_args()
    if ns.list:
        _list()
    if ns.coverage:
        _coverage(ns.coverage, ns.start, ns.table)
    if ns.run:
        _run(ns.run, ns.start, ns.out, ns.warmup, ns.minutes, ns.device, ns.workers, ns.backend)
    if not (ns.list or ns.coverage or ns.run):
        ap.error("say --list, --coverage N or --run N")


if __name__ == "__main__":
    main()
