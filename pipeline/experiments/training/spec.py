"""E, end-to-end training alignment: id, asset group and the model and schedule per profile.

The plan's claim is about mixed-precision training, so every profile trains under autocast: bf16 on
the CPU (fp32 master weights and optimizer), fp16 with loss scaling on CUDA. The default profile's
model ([2 layers, width 64, context 64, batch 8]) and its 150 steps are chosen for CPUs without native
16-bit matmul, where autocast's bf16 matmuls run at about 1 GFLOP/s: measured on an AVX2-only
2-core CPU, a bf16 step took about 0.1 s eager and 0.08 s fused (an fp32 step 0.013 s). The rule
pairs fused with eager on five data orders, each with its one-ULP control: fifteen runs of 150 steps,
which took 4 min 33 s to 6 min 15 s there in three whole default reports, one run after another on two
threads; on a 2-core Xeon with native bf16 (AVX-512, AMX-BF16) they measured 82 to 92 s. On a CPU
with two or more threads the runs now go side by side, one thread each (:func:`.run_set.run_lanes`): the
model's matmuls are too small to use a second thread well (60 steps: 10.3 s on one thread, 8.8 s on two);
the fifteen runs then took 3 min 35 s and 3 min 41 s in two whole cold default reports there.
The fp32 eager/fused pair (``fp32_control``) runs in
the seed profile only: a full default report measured 25 minutes on that CPU with it and 300 steps,
over the 20-minute budget.
"""

from dataclasses import asdict, dataclass

ID, GROUP = "E", "E_training"


@dataclass(frozen=True)
class TrainSizes:
    layers: int
    heads: int
    width: int
    context: int
    batch: int
    steps: int
    eval_every: int
    eval_batches: int
    fp32_control: int  # 1: also train an fp32 control run beside the autocast runs
    #: Autocast precision of the main runs on CPU (float32: no autocast). CUDA uses fp16.
    cpu_precision: str = "bfloat16"
    #: Fewest steps between checkpoints (0: at every curve point). The small CPU models checkpoint at
    #: every curve point (a resume loses at most one interval); a 12-layer model's checkpoint is about
    #: 1.5 GB with its optimizer state, so the GPU sizes write one at most every 250 steps (the gpu
    #: profile's 200-step runs none: a lost run costs seconds there).
    checkpoint_every: int = 0

    def model(self) -> dict[str, int]:
        """The model and schedule fields (what ``TrainConfig.from_profile`` reads)."""
        out = asdict(self)
        out.pop("cpu_precision")
        return out


SIZES = {
    "smoke": TrainSizes(
        layers=1, heads=2, width=32, context=32, batch=4, steps=20, eval_every=5, eval_batches=2, fp32_control=0
    ),
    "default": TrainSizes(
        layers=2, heads=4, width=64, context=64, batch=8, steps=150, eval_every=15, eval_batches=4, fp32_control=0
    ),
    # The seed's model at a quarter of its context, 200 steps on each data order, no fp32 control: one GPU in
    # minutes (benchmarks/gpu_budget.py).
    "gpu": TrainSizes(
        layers=12,
        heads=12,
        width=768,
        context=256,
        batch=8,
        steps=200,
        eval_every=20,
        eval_batches=4,
        fp32_control=0,
        checkpoint_every=250,
    ),
    "seed": TrainSizes(
        layers=12,
        heads=12,
        width=768,
        context=1024,
        batch=8,
        steps=1000,
        eval_every=50,
        eval_batches=8,
        fp32_control=1,
        checkpoint_every=250,
    ),
}


#: The graphs one fused run compiles, by what it computes: the training loss's forward and the backward
#: AOTAutograd derives from it, and the evaluation loss's forward (a separate no-grad compile).
FUSED_RUN_GRAPHS = ("train_forward", "train_backward", "eval_forward")


def compiles(sizes: TrainSizes) -> int:
    """Distinct graphs a materialization compiles: :data:`FUSED_RUN_GRAPHS` once per training precision
    (the main one, and fp32 where ``fp32_control`` trains the fp32 pair). The other fused runs of a
    precision compile the same graphs again from Inductor's cache (same code, counted once)."""
    return len(FUSED_RUN_GRAPHS) * (1 + sizes.fp32_control)
