"""fp32 vs fp16 vs bf16 matmul throughput on this CPU, and one training step of the default
profile's E model in bf16 autocast. Prints figures; asserts nothing.

On a CPU without native 16-bit matmul (AVX2 only) the fp16/bf16 rows run one to two orders of
magnitude below fp32. To reproduce that on a faster CPU, restrict oneDNN and ATen first:

    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 .venv/bin/python benchmarks/bench_matmul.py

and check that the printed ``cpu_capability`` says AVX2 and the 16-bit rows slowed down.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def gflops(n: int, dtype: torch.dtype, repeats: int) -> float:
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    a @ b  # warm-up: kernel selection, thread pool
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def training_step_seconds(profile: str, steps: int, dtype: torch.dtype) -> float:
    """Median wall time of one eager training step (forward under ``dtype`` autocast, backward,
    AdamW) of ``profile``'s E model: the loop the E experiment runs thousands of times."""
    import contextlib

    from pipeline.experiments.training import build_model
    from pipeline.experiments.training.spec import SIZES

    t = SIZES[profile]
    model = build_model(t.layers, t.heads, t.width, t.context)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (t.batch, t.context))
    times = []
    for i in range(steps + 1):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext():
            logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i:  # the first step pays for allocation and kernel selection
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512, help="square matmul size")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--train-profile", default="default", help="profile whose E model steps are timed ('' to skip)")
    parser.add_argument("--train-steps", type=int, default=5)
    args = parser.parse_args(argv)
    print(
        f"[setup] torch {torch.__version__}, threads {torch.get_num_threads()}, cpu_capability "
        f"{torch.backends.cpu.get_cpu_capability()}, ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '(unset)')}, "
        f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '(unset)')}"
    )
    rates = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        rates[dtype] = gflops(args.size, dtype, args.repeats)
        print(
            f"[matmul] {args.size}x{args.size} {str(dtype).removeprefix('torch.'):<9} {rates[dtype]:8.2f} GFLOP/s "
            f"({rates[dtype] / rates[torch.float32]:.3f}x fp32)"
        )
    if args.train_profile:
        from pipeline.experiments.training.spec import SIZES

        for dtype in (torch.float32, torch.bfloat16):
            seconds = training_step_seconds(args.train_profile, args.train_steps, dtype)
            print(
                f"[train] profile {args.train_profile} E model ({SIZES[args.train_profile].model()}): one eager "
                f"{str(dtype).removeprefix('torch.')} step {seconds * 1e3:.0f} ms (median of {args.train_steps})"
            )


if __name__ == "__main__":
    main()
