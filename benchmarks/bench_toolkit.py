"""Benchmark of precisionkit's two bulk operations. Prints figures; asserts nothing about time.

(a) ``ulp_diff`` on 2**24 fp32 elements: median of several repeats, as a ratio to ``numpy.copy`` of
    one input (a memory-bandwidth yardstick measured in the same run) and to numpy's
    ``nulp_diff``; also where ``nulp_diff`` disagrees (it computes the distance in the format's
    own integer width, which wraps for large values of opposite sign, and returns it as a float of
    the input's width).
(b) ``error_stats`` on 67,108,864 fp16 elements (shape [8, 2048, 4096]) against an fp64
    reference, in a child process so that its peak resident memory (``ru_maxrss``) is its own;
    then the same with the torch first pass (``PRECISIONKIT_NATIVE=0``) for comparison.

    .venv/bin/python benchmarks/bench_toolkit.py            # full size
    .venv/bin/python benchmarks/bench_toolkit.py --quick    # small sizes, for a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import TypedDict

import numpy as np
import torch

try:
    from numpy.testing import nulp_diff  # type: ignore[attr-defined]
except ImportError:  # not public in numpy 2
    from numpy.testing._private.utils import nulp_diff  # type: ignore[attr-defined]

from precisionkit import error_stats, ulp_diff
from precisionkit.stats import first_pass_implementation

MIB = 1024 * 1024


class Sizes(TypedDict):
    ulp_n: int
    stats_shape: tuple[int, ...]
    repeats: int


FULL: Sizes = {"ulp_n": 2**24, "stats_shape": (8, 2048, 4096), "repeats": 5}
QUICK: Sizes = {"ulp_n": 2**16, "stats_shape": (2, 256, 512), "repeats": 3}


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up: first-touch page faults, thread pool start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_ulp_diff(n: int, repeats: int) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n, dtype=np.float32)
    # b: a few ULPs away from a, except every 1000th element, which has the opposite sign and a
    # large magnitude (where a 32-bit integer difference wraps)
    steps = rng.integers(-3, 4, size=n).astype(np.int32)
    b = (a.view(np.int32) + steps * np.sign(a).astype(np.int32)).view(np.float32)
    a[::1000] = rng.uniform(2.0, 1e30, size=len(a[::1000])).astype(np.float32)
    b[::1000] = -a[::1000]
    print(
        f"[ulp_diff] elements: {n} fp32 ({a.nbytes / MIB:.1f} MiB per input), repeats: {repeats}, "
        f"threads: {torch.get_num_threads()}"
    )

    t_ulp = median_seconds(lambda: ulp_diff(a, b), repeats)
    t_copy = median_seconds(lambda: np.copy(a), repeats)
    with np.errstate(all="ignore"):
        t_nulp = median_seconds(lambda: nulp_diff(a, b), repeats)
    print(f"[ulp_diff] ulp_diff median: {t_ulp * 1e3:.2f} ms")
    print(f"[ulp_diff] numpy.copy median: {t_copy * 1e3:.2f} ms")
    print(f"[ulp_diff] numpy nulp_diff median: {t_nulp * 1e3:.2f} ms")
    print(f"[ulp_diff] ratio ulp_diff/numpy.copy: {t_ulp / t_copy:.2f}x")
    print(f"[ulp_diff] ratio ulp_diff/nulp_diff: {t_ulp / t_nulp:.3f}x")

    ours = ulp_diff(a, b)
    with np.errstate(all="ignore"):
        theirs = np.asarray(nulp_diff(a, b)).reshape(-1).astype(np.float64)
    disagree = theirs != ours.astype(np.float64)
    opposite = np.signbit(a) != np.signbit(b)
    count = int(disagree.sum())
    print(
        f"[ulp_diff] nulp_diff disagrees: {count} of {n} elements "
        f"(opposite signs: {int((disagree & opposite).sum())}, same sign: {int((disagree & ~opposite).sum())}; "
        f"opposite-sign pairs in the data: {int(opposite.sum())})"
    )
    if count:
        i = int(np.flatnonzero(disagree)[0])
        print(
            f"[ulp_diff] first disagreement at index {i}: a={float(a[i])!r} b={float(b[i])!r} "
            f"ulp_diff={int(ours[i])} nulp_diff={theirs[i]:.0f}"
        )


def child_error_stats(shape: tuple[int, ...]) -> None:
    """Runs in a fresh process: build inputs, then time error_stats and report ru_maxrss."""
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(shape, generator=gen, dtype=torch.float64)
    a = ref.to(torch.float16)  # torch rounds through fp32 (double rounding): a few inexact
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    stats = error_stats(a, ref)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    copies = (a.clone(), ref.clone())  # the yardstick (after the peak is read): one copy of the inputs
    copy_seconds = time.perf_counter() - start
    del copies
    print(
        json.dumps(
            {
                "seconds": seconds,
                "copy_seconds": copy_seconds,
                "peak_bytes": peak,
                "before_bytes": before,
                "a_bytes": a.numel() * a.element_size(),
                "ref_bytes": ref.numel() * ref.element_size(),
                "ulp_max": stats["ulp_max"],
                "exact_fraction": stats["exact_fraction"],
                "n_compared": stats["n_compared"],
                "first_pass": first_pass_implementation("cpu", a.dtype),
            }
        )
    )


def run_child(shape: tuple[int, ...], native: bool) -> dict:
    env = {**os.environ, "PRECISIONKIT_NATIVE": "1" if native else "0"}
    proc = subprocess.run(
        [sys.executable, __file__, "--child-error-stats", ",".join(map(str, shape))],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_error_stats(shape: tuple[int, ...]) -> None:
    n = int(np.prod(shape))
    r = run_child(shape, native=True)
    print(
        f"[error_stats] shape: {list(shape)} = {n} elements; inputs: a fp16 {r['a_bytes'] / MIB:.1f} MiB, "
        f"ref fp64 {r['ref_bytes'] / MIB:.1f} MiB"
    )
    print(f"[error_stats] wall time: {r['seconds']:.2f} s ({n / r['seconds'] / 1e6:.1f} M elements/s)")
    print(
        f"[error_stats] peak RSS: {r['peak_bytes'] / MIB:.1f} MiB (child process; high-water mark "
        f"{r['before_bytes'] / MIB:.1f} MiB with inputs built, so "
        f"+{(r['peak_bytes'] - r['before_bytes']) / MIB:.1f} MiB during error_stats)"
    )
    inputs = r["a_bytes"] + r["ref_bytes"]
    print(
        f"[error_stats] ratio to one copy of the inputs: time {r['seconds'] / r['copy_seconds']:.1f}x "
        f"(copy {r['copy_seconds'] * 1e3:.2f} ms), extra memory {(r['peak_bytes'] - r['before_bytes']) / inputs:.2f}x "
        f"({inputs / MIB:.0f} MiB of inputs)"
    )
    print(
        f"[error_stats] result: n_compared={r['n_compared']} ulp_max={r['ulp_max']} "
        f"exact_fraction={r['exact_fraction']}; first pass: {r['first_pass']}"
    )
    t = run_child(shape, native=False)
    print(
        f"[error_stats] torch first pass, for comparison: wall time {t['seconds']:.2f} s, "
        f"+{(t['peak_bytes'] - t['before_bytes']) / MIB:.1f} MiB; same result: "
        f"{(t['ulp_max'], t['exact_fraction']) == (r['ulp_max'], r['exact_fraction'])}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement")
    parser.add_argument("--child-error-stats", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_error_stats:
        child_error_stats(tuple(int(s) for s in args.child_error_stats.split(",")))
        return
    cfg = QUICK if args.quick else FULL
    repeats = args.repeats or cfg["repeats"]
    print(f"[setup] mode: {'quick' if args.quick else 'full'}; torch {torch.__version__}, numpy {np.__version__}")
    bench_ulp_diff(cfg["ulp_n"], repeats)
    bench_error_stats(cfg["stats_shape"])


if __name__ == "__main__":
    main()
