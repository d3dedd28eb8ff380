"""Host-traffic budgets: what an experiment's run loop reads back from the device per run.

On a GPU a read-back of a full output per run costs far more than the run itself (A's seed-size
fp16 output is 512 MiB; the H200 run of 2026-11-27 spent about 1.6 s per run copying and hashing it,
where the run's 2.2 TFLOP take a few ms at the datasheet peak, an estimate). The budgets
here are counted with :class:`precisionkit.HostTraffic`; on a CPU it counts the reads that would be
transfers on an accelerator, so the same numbers hold on CPU CI and on a GPU.
"""

import pytest
import torch

from pipeline.experiments.determinism import worker
from pipeline.experiments.toolkit.spec import SIZES as POOL_SIZES
from pipeline.workloads import DTYPES, WORKLOADS
from precisionkit import HostTraffic, fused

#: Bytes a run may read back once its output has been seen before: a comparison's bool per distinct
#: output kept on the device and a digest or a few scalars. The smoke FFN's fp16 output is exactly
#: 4 KiB, so the budget sits well below one output: a loop that reads the output back fails it at
#: every size.
RUN_BUDGET_BYTES = 256


def _device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _ffn_args(dtype: str, device: torch.device) -> tuple[torch.Tensor, ...]:
    shapes = WORKLOADS["ffn"].shapes(POOL_SIZES["smoke"])
    gen = torch.Generator().manual_seed(7)
    return tuple(
        (torch.randn(shapes[a], generator=gen) / shapes["x"][-1] ** 0.5).to(DTYPES[dtype]).to(device)
        for a in WORKLOADS["ffn"].arg_names
    )


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_a_run_loop_reads_back_little_per_run(dtype):
    """Around A's run loop at smoke size: after the first (distinct) output, each run stays within
    :data:`RUN_BUDGET_BYTES`; the first output is hashed and kept once."""
    device = _device()
    args = _ffn_args(dtype, device)
    fn = fused(WORKLOADS["ffn"].fn, "inductor", dynamic=False)
    first = fn(*args)
    runs = 6
    per_run: list[int] = []
    with HostTraffic(count_cpu=device.type == "cpu") as traffic:

        def steps():
            for i in range(runs):
                before = traffic.bytes
                yield i
                per_run.append(traffic.bytes - before)

        hashes, kept = worker._hash_runs(fn, args, first, steps(), dtype)
    out_bytes = _nbytes(first)
    print(f"{dtype}: output {out_bytes} B; host bytes per run {per_run}; reads by call {traffic.by_op()}")
    assert len(hashes) == runs and len(set(hashes)) == 1 and len(kept) == 1
    assert fn.evidence.recompiles == 0  # the counter does not disturb the compiled function
    assert per_run[0] <= 2 * out_bytes + RUN_BUDGET_BYTES  # hashed once, one copy kept
    assert max(per_run[1:]) <= RUN_BUDGET_BYTES, f"host bytes per run {per_run[1:]} over {RUN_BUDGET_BYTES}"


def test_a_round_reads_back_inputs_one_output_and_a_budget_per_run():
    """A whole in-process round (every dtype): the only host reads that grow with the output are one
    hash and one kept copy of each distinct output (and, on a CPU, the inputs' move to the device)."""
    device = _device()
    runs = 5
    inputs = {
        f"{d}/{a}": t.cpu()
        for d in worker.DTYPES
        for a, t in zip(WORKLOADS["ffn"].arg_names, _ffn_args(d, torch.device("cpu")), strict=True)
    }
    with HostTraffic(count_cpu=device.type == "cpu") as traffic:
        records, distinct = worker.run_round(inputs, list(worker.DTYPES), runs, device)
    setup = sum(_nbytes(t) for t in inputs.values()) if device.type == "cpu" else 0
    outputs = sum(_nbytes(t) for t in distinct.values())
    budget = setup + 2 * outputs + len(records) * runs * RUN_BUDGET_BYTES
    print(f"round: {traffic.bytes} host bytes ({traffic.by_op()}), budget {budget}")
    assert all(len(set(r["hashes"])) == 1 and r["recompiles"] == 0 for r in records.values())
    assert traffic.bytes <= budget


#: Bytes a B set may read back per path once judged: its per-set statistics (a few dozen scalars),
#: a small fraction of one default-size output (16 x 128 fp16 = 4 KiB), so a judge that brings an
#: output, an error tensor or a reference back to the host fails it.
SET_BUDGET_BYTES = 512


def test_b_judges_a_batch_on_the_device_and_reads_back_scalars_per_set():
    """B's per-set judgment of a batch (every statistic, percentiles included, the element test, the
    bias): what reaches the host per set and path. Counted reads into the host (``cpu``, ``numpy``,
    ``item``...); ``to`` is left out (on an accelerator it uploads inputs and references), and so is
    ulp_diff's CPU fast path (``precisionkit.bits``: numpy views of CPU tensors, taken only on a CPU)."""
    from pipeline.experiments.accumulated_error.per_set import per_set_rows

    n, rows, width = 8, 16, 128
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(n, rows, width, generator=gen, dtype=torch.float64)
    noise = {p: 1e-3 * torch.randn(n, rows, width, generator=gen, dtype=torch.float64) for p in ("eager", "fused")}
    outputs = {p: (ref + e).half() for p, e in noise.items()}
    with HostTraffic() as traffic:
        batch_rows, _ = per_set_rows("layernorm", "normal", "float16", 0, outputs, ref)
    assert len(batch_rows) == n * len(outputs)
    read = [r for r in traffic.reads if r.op != "to" and not r.where.startswith("precisionkit.bits:")]
    per_set = sum(r.bytes for r in read) / (n * len(outputs))
    print(f"B: {per_set:.0f} host bytes per set and path; reads {sorted({r.where for r in read})}")
    assert per_set <= SET_BUDGET_BYTES, f"{per_set:.0f} bytes per set and path over {SET_BUDGET_BYTES}"
