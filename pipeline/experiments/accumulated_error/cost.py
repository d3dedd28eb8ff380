"""B's cost: its graphs, and its judged set rows on the device's lanes (the cost model:
:mod:`pipeline.costmodel`)."""

from __future__ import annotations

from ...costmodel import Cost, lanes_text, one_row, per_gpu
from ...profiles import PROFILES
from ...workloads import CHAINS
from ..toolkit.spec import SIZES as POOL_SIZES
from ..toolkit.spec import chain_elements, pool_bytes
from .chain_runs import chain_lanes
from .rules import DTYPES_B
from .spec import compiles

#: B's graphs (chain x dtype x fused, fused_emulate) with their small-set runs: 32 in 15.8 s
#: (call2, smoke).
B_GRAPH_S = 15.8 / 32
#: B at gpu sizes on the H200 (results/gpu-logs/2026-11-27-h200-gpu-2, pools drawn where read): 36,000 set x
#: distribution x dtype rows judged in 115.7 s of its 143 s step (every path, the regenerated pool and its
#: fp64 reference included); the rest is the 32 compiles.
B_SET_ROW_S, B_GPU_GRAPH_S = 115.7 / 36_000, (143.0 - 115.7) / 32


def cost_b(profile: str) -> Cost:
    _, chains = pool_bytes(profile)
    pools = sum(i + r for i, r in chains.values())
    n_sets, dtypes = POOL_SIZES[profile].chain_sets, len(DTYPES_B)
    paths = 4  # eager (several ops), fused, fused_emulate, the fp32 single-rounding prediction
    dists = sum(d for _, _, d in chain_elements(profile).values())
    calls = n_sets * dists * dtypes * paths * 4  # assumed: about 4 launches per call (eager's several ops)
    graphs = compiles(len(CHAINS), dtypes)  # B's spec: chains x dtypes x (fused, fused_emulate)
    if PROFILES[profile].store_sets:
        return Cost(
            "B",
            "B accumulated error",
            compiles=graphs,
            compile_s=graphs * B_GRAPH_S,
            device_bytes=pools * paths,
            calls=calls,
            host_bytes=pools,  # every pool to the device once, per-set errors back (small)
            note="one call per input set and path; measured at smoke only",
        )
    # Pools drawn and references computed on the device where read: per judged row, as measured on the H200
    # (one chain x dtype pair at a time), the pairs now in lanes.
    c = Cost(
        "B",
        "B accumulated error",
        compiles=graphs,
        compile_s=graphs * B_GPU_GRAPH_S,
        fixed_s=n_sets * dists * dtypes * B_SET_ROW_S,
        lanes=per_gpu(lambda device, memory, cores: chain_lanes(device, len(CHAINS) * dtypes, memory, cores)),
    )
    c.note = (
        f"{n_sets * dists * dtypes} set rows at the H200's measured {1e3 * B_SET_ROW_S:.1f} ms each (every path, "
        f"the pool drawn and its fp64 reference computed where read), {len(CHAINS) * dtypes} chain x dtype pairs "
        f"on {lanes_text(c)} lanes"
    )
    return c


costs = one_row(cost_b)
