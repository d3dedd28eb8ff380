"""Smoke test of benchmarks/bench_toolkit.py: ``--quick`` runs and prints every labelled figure."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_toolkit.py"

NUMBER = r"[0-9]+(?:\.[0-9]+)?"
EXPECTED_LINES = [
    r"\[setup\] mode: quick; torch \S+, numpy \S+",
    r"\[ulp_diff\] elements: 65536 fp32 \(0\.2 MiB per input\), repeats: 3, threads: \d+",
    rf"\[ulp_diff\] ulp_diff median: {NUMBER} ms",
    rf"\[ulp_diff\] numpy\.copy median: {NUMBER} ms",
    rf"\[ulp_diff\] numpy nulp_diff median: {NUMBER} ms",
    rf"\[ulp_diff\] ratio ulp_diff/numpy\.copy: {NUMBER}x",
    rf"\[ulp_diff\] ratio ulp_diff/nulp_diff: {NUMBER}x",
    # every 1000th pair has opposite signs and large magnitudes: nulp_diff wraps on all 66
    r"\[ulp_diff\] nulp_diff disagrees: 66 of 65536 elements \(opposite signs: 66, same sign: 0; "
    r"opposite-sign pairs in the data: 66\)",
    r"\[ulp_diff\] first disagreement at index 0: a=\S+ b=-\S+ ulp_diff=\d+ nulp_diff=\d+",
    r"\[error_stats\] shape: \[2, 256, 512\] = 262144 elements; inputs: a fp16 0\.5 MiB, ref fp64 2\.0 MiB",
    rf"\[error_stats\] wall time: {NUMBER} s \({NUMBER} M elements/s\)",
    rf"\[error_stats\] peak RSS: {NUMBER} MiB \(child process; high-water mark {NUMBER} MiB with inputs "
    rf"built, so \+-?{NUMBER} MiB during error_stats\)",
    rf"\[error_stats\] ratio to one copy of the inputs: time {NUMBER}x \(copy {NUMBER} ms\), extra memory "
    rf"-?{NUMBER}x \(2 MiB of inputs\)",
    rf"\[error_stats\] result: n_compared=262144 ulp_max={NUMBER} exact_fraction={NUMBER}; first pass: (C|torch)",
    rf"\[error_stats\] torch first pass, for comparison: wall time {NUMBER} s, \+-?{NUMBER} MiB; same result: True",
]


def test_quick_benchmark_prints_labelled_figures():
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(EXPECTED_LINES), proc.stdout
    for pattern, line in zip(EXPECTED_LINES, lines, strict=False):
        assert re.fullmatch(pattern, line), (pattern, line)
    # the first disagreement is reported with the correct distance and numpy's wrapped one
    m = re.search(r"ulp_diff=(\d+) nulp_diff=(\d+)", proc.stdout)
    assert int(m.group(1)) > 2**31 > int(m.group(2))
    peak = float(re.search(r"peak RSS: (\S+) MiB", proc.stdout).group(1))
    assert peak > 0
