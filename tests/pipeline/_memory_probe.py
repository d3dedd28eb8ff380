"""Peak resident memory of materializing S or B at the seed profile's shapes with few sets.

Run as ``python -m tests.pipeline._memory_probe {S|B} <sets> <data dir>``; prints one JSON line:
the peak resident set size (VmHWM) of the measured step above the resident size before it, and
the bytes of one input set. For B the chain pools are materialized first, then the peak is reset
(``/proc/self/clear_refs``) so that only B's own step is measured.
"""

import dataclasses
import json
import sys
from pathlib import Path


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def main(step: str, n_sets: int, data_dir: str) -> None:
    import dagster as dg

    from pipeline.definitions import build_resources
    from pipeline.experiments.accumulated_error import assets as b
    from pipeline.experiments.toolkit import assets as toolkit
    from pipeline.experiments.toolkit.spec import SIZES as POOL_SIZES
    from pipeline.resources import ExperimentSettings
    from pipeline.workloads import CHAINS, WORKLOADS

    # The seed profile's pool shapes, with only the set count changed. The probe owns its process, so
    # it replaces S's seed sizes in place: the settings accept only the profile names of the schema.
    POOL_SIZES["seed"] = dataclasses.replace(POOL_SIZES["seed"], chain_sets=n_sets)
    settings = ExperimentSettings(profile="seed", device="cpu")
    resources = build_resources(settings, base_dir=data_dir)
    chains = ("matmul_add_layernorm",) if step == "S" else CHAINS
    upstream = [
        a
        for a in [*toolkit.input_pools, *toolkit.fp64_references]
        if any(k.to_user_string().endswith(chains) for k in a.keys)
    ]
    set_bytes = sum(toolkit.pool_stream(WORKLOADS[c], settings).set_bytes() for c in chains)
    if step == "S":
        measured = upstream
    else:
        assert dg.materialize(upstream, resources=resources).success
        measured = [b.accumulated_error_runs]
    _reset_peak()
    before = _status("VmRSS")
    assets = list({id(a): a for a in [*upstream, *measured]}.values())
    result = dg.materialize(assets, resources=resources, selection=[k for a in measured for k in a.keys])
    assert result.success
    print(json.dumps({"peak_above_start": _status("VmHWM") - before, "set_bytes": set_bytes, "sets": n_sets}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
