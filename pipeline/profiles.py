"""Run profiles: one code path, three sizes. Only shapes and counts differ between them.

* ``smoke``: the whole graph in well under a minute (tests);
* ``default``: the seed document's methods at reduced sizes for a 2-core CPU (minutes);
* ``seed``: the seed document's exact shapes, dtypes and counts (meant for a GPU).

The default profile's budget holds on any CPU, not only on one with fast 16-bit matmul. Where
the CPU has no native fp16/bf16 matrix instructions (AVX2 only; reproduce with
``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2`` and its own ``TORCHINDUCTOR_CACHE_DIR``,
see the README, and check with ``make matmul-timing``),
torch's fp16/bf16 matmul runs at about 0.5 GFLOP/s against about 30 GFLOP/s in fp32, 60x
slower, while elementwise work and compilation barely change. So the default sizes spend the
16-bit matmul budget where the evidence needs it, the same on every machine:

* A (determinism) keeps its run counts (the claim is "every run, one hash") and shrinks the FFN
  to [4, 128, 256]: tokens x hidden^2, so an eighth of the 16-bit matmul work per
  run; bit-identity across runs is a property of the kernel, not of its size.
* E (training) keeps its replicates, the one-ULP control and the fused run, and its 20
  evaluation points, but trains a smaller model ([2 layers, width 64, context 64]) for 600
  steps, and on CPU in fp32 (``cpu_train_precision``): a bf16-autocast step of even this model
  costs seconds on an AVX2 CPU, which would make E alone take hours. The fp32 master weights
  and optimizer are unchanged; what changes is that the CPU forward pass is not autocast, so on
  CPU E compares fused and eager fp32 training (Inductor still fuses and reorders the
  normalizations, softmax, GELU and reductions). CUDA keeps fp16 autocast and the seed profile
  keeps bf16 autocast on CPU.
* The fuzzer compiles 120 random graphs (compile time dominates a cold run).

The smoke profile leaves out A's cold-start rounds (``determinism_cold_start``): each is a fresh
interpreter that imports torch and recompiles with an empty cache, about 15 s whatever the size,
a quarter of the whole smoke graph. So in smoke A's cold-start claim is inconclusive and its
thread-count finding reports no round; the determinism tests run the cold rounds at smoke size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    # Task A: the FFN first half's input [batch, seq, hidden] (its weight projects hidden -> 4 * hidden)
    # and the runs per round.
    ffn_shape: tuple[int, int, int]
    determinism_runs: int
    # Task B: input sets per chain and distribution, and the per-set sizes of the chains.
    chain_sets: int
    rows: int  # rows of the 2-D elementwise / normalization inputs
    width: int  # row length (normalized / reduced dimension)
    attention: tuple[int, int, int]  # heads, sequence, head dim
    # Task D: activation shapes for the data-movement graphs (odd sizes included).
    movement_shapes: tuple[tuple[int, ...], ...]
    # Tasks C1 / C3: [rows, cols]; C2: row length, pool rows, runs per version.
    c1_shape: tuple[int, int] = (1024, 1024)
    c2_length: int = 16384
    c2_pool_rows: int = 256
    c2_runs: int = 1000
    c3_shape: tuple[int, int] = (1024, 1024)
    # Diagnostics: random graphs of the differential fuzzer (one Inductor compile each).
    fuzz_graphs: int = 200
    # Task E: GPT-2 style model and schedule.
    train: dict[str, int] = field(default_factory=dict)
    # Task E on CPU: the autocast precision of the main runs (float32: no autocast). CUDA uses fp16.
    cpu_train_precision: str = "bfloat16"
    # Planted-bug matrix: the bugs it runs when its config names none (empty: every planted bug).
    # Each bug is a full re-run of B, C2 and D, so the smoke profile runs one bug per way of being caught.
    planted_bugs: tuple[str, ...] = ()
    # Healthy base seeds of the planted-bug matrix (its "no false alarm" claim needs 3 to be supported;
    # the smoke profile runs one, so there that claim can be contradicted but not supported).
    planted_bug_healthy_seeds: int = 3
    # Task A: whether the cold-start rounds run (fresh processes with an empty compiler cache).
    determinism_cold_start: bool = True

    def sizes(self) -> dict[str, Any]:
        """Every size of the profile, flat, for asset metadata."""
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if isinstance(value, dict):
                out.update({f"{key}.{k}": v for k, v in value.items()})
            elif key != "description":
                out[key] = str(value) if isinstance(value, tuple) else value
        return out


PROFILES: dict[str, Profile] = {
    "smoke": Profile(
        name="smoke",
        description="tiny sizes for the test suite: every asset in seconds",
        ffn_shape=(2, 8, 32),
        determinism_runs=5,
        determinism_cold_start=False,  # ~15 s of interpreter start and cold compilation; see above
        chain_sets=6,
        rows=4,
        width=32,
        attention=(2, 8, 16),
        movement_shapes=((2, 8, 16), (1, 7, 24)),
        c1_shape=(64, 64),
        c2_length=4096,
        c2_pool_rows=8,
        c2_runs=5,
        c3_shape=(64, 64),
        fuzz_graphs=6,
        train=dict(
            layers=1, heads=2, width=32, context=32, batch=4, steps=20, eval_every=5, eval_batches=2, fp32_control=0
        ),
        # caught by: the run's validity (no fusion), C2's determinism claim, D's bit-exactness claim, B's claim
        planted_bugs=(
            "planted_fallback_to_eager",
            "planted_nondeterministic_reduction",
            "planted_contiguous_only",
            "planted_layout_swap",
        ),
        planted_bug_healthy_seeds=1,
    ),
    "default": Profile(
        name="default",
        description="the seed's methods at sizes a 2-core CPU finishes in minutes, fast 16-bit matmul or not",
        # [4, 128, 256] -> 1024 wide: an eighth of the matmul work of [4, 256, 512] per run (tokens x
        # width^2), which on a CPU with native 16-bit matmul took about 45 ms per fp16 run on 2 cores;
        # without it (AVX2 only) 16-bit matmul is ~60x slower, so the run counts stay and the FFN shrinks.
        ffn_shape=(4, 128, 256),
        determinism_runs=300,
        chain_sets=1000,
        rows=16,
        width=128,
        attention=(2, 32, 32),
        movement_shapes=((4, 128, 256), (2, 77, 200), (1, 333, 96)),
        c1_shape=(1024, 1024),
        c2_length=16384,
        c2_pool_rows=256,
        c2_runs=200,
        c3_shape=(1024, 1024),
        fuzz_graphs=120,
        train=dict(
            layers=2, heads=4, width=64, context=64, batch=8, steps=600, eval_every=30, eval_batches=4, fp32_control=0
        ),
        cpu_train_precision="float32",
    ),
    "seed": Profile(
        name="seed",
        description="the seed document's exact shapes and counts; meant for a GPU",
        ffn_shape=(8, 2048, 4096),
        determinism_runs=1000,
        chain_sets=1000,
        rows=64,
        width=1024,
        attention=(12, 128, 64),
        movement_shapes=((8, 2048, 4096), (4, 1023, 768), (1, 4097, 128)),
        c1_shape=(1024, 1024),
        c2_length=16384,
        c2_pool_rows=1024,
        c2_runs=1000,
        c3_shape=(1024, 1024),
        fuzz_graphs=1000,
        train=dict(
            layers=12,
            heads=12,
            width=768,
            context=1024,
            batch=8,
            steps=1000,
            eval_every=50,
            eval_batches=8,
            fp32_control=1,
        ),
    ),
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; expected one of {', '.join(PROFILES)}") from None
