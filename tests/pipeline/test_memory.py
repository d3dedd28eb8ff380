"""S and B fit their host: memory does not grow with the number of input sets.

Each case materializes twice in a fresh process at the seed profile's shapes (only the set count
changes, 16 then 48 sets) and compares the peak resident memory of the step. Holding every set at
once, as a pool drawn whole would, costs at least one stored set's bytes per extra set; streaming
costs a chunk whatever the count. Needs Linux's /proc (peak RSS and its reset)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: B holds one batch of sets (up to 2**20 output elements: 16 sets of the seed's chains), so the
#: smaller count already fills a batch and only the number of batches differs.
FEW, MORE = 16, 48
#: Growth allowed per extra set, as a fraction of one set's stored bytes (allocator noise).
PER_SET_FRACTION = 0.5

pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy,
    pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc"),
]


def _probe(step: str, sets: int, tmp_path: Path) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DAGSTER_HOME": str(tmp_path / f"home{sets}"),
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    (tmp_path / f"home{sets}").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "tests.pipeline._memory_probe", step, str(sets), str(tmp_path / f"data{sets}")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("step", ["S", "B"])
def test_peak_memory_per_extra_set_is_a_fraction_of_one_set(step, tmp_path):
    few, more = _probe(step, FEW, tmp_path), _probe(step, MORE, tmp_path)
    set_bytes = few["set_bytes"]
    assert set_bytes == more["set_bytes"] > 1 << 20  # seed shapes: megabytes per set
    per_extra_set = (more["peak_above_start"] - few["peak_above_start"]) / (MORE - FEW)
    print(
        f"\n{step}: peak {few['peak_above_start'] / 2**20:.0f} MiB at {FEW} sets, "
        f"{more['peak_above_start'] / 2**20:.0f} MiB at {MORE}; {per_extra_set / 2**20:.2f} MiB per extra set "
        f"(one set: {set_bytes / 2**20:.1f} MiB)"
    )
    assert per_extra_set < PER_SET_FRACTION * set_bytes
    # And the whole step stays below what holding every set would take.
    assert more["peak_above_start"] < MORE * set_bytes
