"""E, end-to-end training alignment: id, asset group and the model and schedule per profile.

The default profile trains a small model ([2 layers, width 64, context 64]) for 600 steps, on CPU in
fp32 (``cpu_precision``): a bf16-autocast step of even this model costs seconds on an AVX2 CPU, which
would make E alone take hours. The fp32 master weights and optimizer are unchanged; on CPU the forward
pass is then not autocast, so E compares fused and eager fp32 training (Inductor still fuses and
reorders the normalizations, softmax, GELU and reductions). CUDA keeps fp16 autocast and the seed
profile keeps bf16 autocast on CPU.
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
        layers=2,
        heads=4,
        width=64,
        context=64,
        batch=8,
        steps=600,
        eval_every=30,
        eval_batches=4,
        fp32_control=0,
        cpu_precision="float32",
    ),
    "seed": TrainSizes(
        layers=12, heads=12, width=768, context=1024, batch=8, steps=1000, eval_every=50, eval_batches=8, fp32_control=1
    ),
}
