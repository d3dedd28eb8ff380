"""Measured figures the cost model (:mod:`pipeline.plan`) rests on: step times from the H200 runs of
2026-11-27 (logs under ``results/gpu-logs/``), each with the log lines it was taken from. The datasheet
peaks and the assumed shares of them stay in :mod:`pipeline.plan`."""

# --- figures from the H200 run of 2026-11-27 (commit ed50613, torch 2.11.0+cu130, Triton 3.6.0, 16 CPU
# threads, cold Inductor cache); logs results/gpu-logs/2026-11-27-h200-gpu/call1-log.txt and call2-log.txt ----------

#: One ``report`` invocation's start, plan and staleness scan before its first step: the invocation's wall
#: time minus its run's (call1: 113 - 90.4, 58 - 34.3, 145 - 123.9; call2: 47 - 29.6 s), their mean.
REPORT_START_S = (22.6 + 23.7 + 21.1 + 17.4) / 4
#: The first GPU work of the report's process (CUDA context, Inductor's first compile): D's first combination
#: took 11.4 s in a cold process (call1) and 4.0 s in a warm one (call2's smoke D). Paid once per run.
FIRST_GPU_S = 11.4 - 4.0
#: A fuzzer graph and a tester program, each compiled and run warm: the fuzzer's graphs after the first,
#: (3.5 - 0.4) / 5 s, the tester's after the first, (26.2 - 18.4) / 9 s (call2, smoke); the tester's first
#: took 18.4 s, its warm-up the rest beyond one program. A warm small-subgraph compile: their mean.
FUZZ_GRAPH_S = (3.5 - 0.4) / 5
DIFFTEST_PROGRAM_S = (26.2 - 18.4) / 9
DIFFTEST_WARMUP_S = 18.4 - DIFFTEST_PROGRAM_S
COMPILE_S = (FUZZ_GRAPH_S + DIFFTEST_PROGRAM_S) / 2
#: Per D pool task (one input draw on the device, then its compiles): the warm first combination's 4.0 s
#: (call2) less one compile.
D_TASK_S = 4.0 - COMPILE_S
#: A compile worker from its start until it takes its first task on the GPU host: 14 s makes the pool model
#: give 36.8 s for gpu D (measured 33.1 s, call1, cold process) and 21.7 s for smoke D (measured 24.4 s,
#: call2), 11% off each way: the whole second with the smaller worst relative error of the two (13 s: 15%).
WORKER_READY_S = 14.0
#: divergence_per_layer at smoke sizes (call2), the only measurement; used for every profile.
DIVERGENCE_PER_LAYER_S = 11.6
#: One D reproducer, from 1m40s to 4m04s in call2's smoke Diagnostics run (144 s): minimizing and its
#: fresh run (26 s), four bisection layers one after another (13, 11, 13 and 26 s), then 55 s to the next
#: case. Since 5514dcc the layers run at once on an accelerator host: the longest layer, not their sum.
#: That case did not reproduce, so no knob variant ran; a reproducing case's knob variants now start with
#: the layers there, adding what runs beyond the layers' wave, and torch's bisector after them (unmodelled).
REPRO_LAYERS_S = (13.0, 11.0, 13.0, 26.0)
#: Of those 55 s, the reproducer's environment record ran Inductor's CPU vector-ISA probe for the CUDA case
#: (a C++ test build per candidate ISA, in the step's own process); a CUDA case is no longer probed. Its
#: share is an estimate: one candidate's build took 9.8 s on an AVX2-only EPYC (the only candidate there),
#: and the H200 host's Xeon offers three (AVX2, AVX-512, AMX), so about 30 s; the first analysis of that
#: run put a process's first stored output (this probe and nvidia-smi) at about 35 s. 30 s is taken.
REPRO_ISA_PROBE_S = 3 * 9.8
REPRO_S = 26.0 + max(REPRO_LAYERS_S) + 55.0 - REPRO_ISA_PROBE_S
REPRO_MEASURED_S = 244.0 - 100.0
#: One model x dtype of M (a real model's compile and its batches): gpt2 bf16 14.1 s, resnet50 bf16 16.9 s,
#: vit fp16 15.0 s (call1, gpu), their mean.
MODEL_COMPILE_S = (14.1 + 16.9 + 15.0) / 3
#: M's workers until their first task (they build the models too): the last of 4 architecture tasks of two
#: dtypes each ended at 55.8 s (call1), so 55.8 - 2 x MODEL_COMPILE_S.
MODEL_WORKER_READY_S = 55.8 - 2 * MODEL_COMPILE_S
#: Locating the divergence of one model x dtype row: 65 s for two rows (call1, gpu). Which rows need it
#: depends on the outcome; the run located 2 of its 8, taken as the share for every profile.
LOCATE_S = 65.0 / 2
LOCATED_SHARE = 2 / 8
#: A's per-dtype setup (inputs cast and moved) before each dtype's first run: the gaps of 2.4 s and 2.8 s
#: between fp16's end and bf16's start and bf16's end and fp32's start (call1), their mean. A's FFN compile
#: with its first run: fp16 2.0 s, bf16 1.9 s, fp32 3.8 s (call1), their mean.
A_SETUP_S = (2.4 + 2.8) / 2
A_COMPILE_S = (2.0 + 1.9 + 3.8) / 3
#: B's graphs (chain x dtype x fused, fused_emulate) with their small-set runs: 32 in 15.8 s
#: (call2, smoke).
B_GRAPH_S = 15.8 / 32
#: B at gpu sizes on the H200 (results/gpu-logs/2026-11-27-h200-gpu-2, pools drawn where read): 36,000 set x
#: distribution x dtype rows judged in 115.7 s of its 143 s step (every path, the regenerated pool and its
#: fp64 reference included); the rest is the 32 compiles.
B_SET_ROW_S, B_GPU_GRAPH_S = 115.7 / 36_000, (143.0 - 115.7) / 32
#: E at gpu sizes on the H200 (same logs): 15 runs x 200 steps in 152.4 s, 6 s of it compiling (the fused
#: graphs cached by the session's first, capped try); cold, the first fused run took 28 s more than eager's.
E_GPU_STEPS_S, E_COMPILE_S = 152.4 - 6.0, 28.0
#: Storing a pool drawn on the device: A's FFN pool, drawn on the host then, took 5.8 s for 1.07 GB
#: (call1, gpu sizes); since f85aeaa every pool is drawn on the device, so what is left is its copy to
#: the host and its serialization, taken at that measured rate (an upper bound: it included the draw).
POOL_BYTES_S = 1.07e9 / 5.8
#: fp64 reference calls, one per set, distribution and dtype: each an eager chain of about 10 kernels.
REFERENCE_KERNELS = 10
#: Compile workers on the GPU machine: pipeline.compile_pool.pool_size on a CUDA device gives one per CPU
#: core, and the lent H100/H200 machines have 16 (the H200 run: 16 CPU threads).
GPU_HOST_CORES = 16
#: C1, C2 and C3 per step, measured (seconds; call2): at gpu sizes (the seed's sizes too) and smoke. Smoke
#: ran no c2_long_reductions: its gpu figure stands in. The H100 is assumed to take as long.
C_STEP_S = {
    "gpu": {"C1": 6.1, "C2 long reductions": 5.5, "C2 reduction order": 9.6, "C3": 6.4},
    "smoke": {"C1": 5.2, "C2 long reductions": 5.5, "C2 reduction order": 3.5, "C3": 3.4},
}
C_STEP_S["seed"] = C_STEP_S["default"] = C_STEP_S["gpu"]  # default: never measured, gpu's figures
