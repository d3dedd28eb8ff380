"""M judges in the workload's own dtype, as the differential tester does: a float16 product that
overflows in eager, which a fused path keeps finite in float32 and then calls not inf, contradicts
the row although fp64 sides with fused; the eager backend is clean, and upcasting that only makes
values more accurate changes no class and is not contradicted."""

import torch

from pipeline.experiments.models import compute, judge

CPU = torch.device("cpu")
BATCHES, BATCH_SIZE = 2, 2


def overflow(x):
    y = x * x
    return y, torch.isinf(y), y / x, torch.where(torch.isinf(y), 0, y)


def upcast(x):
    z = torch.exp(x * 0.5 + 0.1) * 0.5 - x
    return (z * z).sum(-1), z


class Workload:
    dtypes = ("float16",)

    def __init__(self, name, fn, scale):
        self.name, self.fn, self.scale = name, fn, scale

    def build(self):
        return self.fn

    def inputs(self, generator, batch):
        return (torch.randn(batch, 8, 33, generator=generator, device=generator.device) * self.scale,)


def _row(workload, backend):
    seeds = compute.model_seeds(workload.name, BATCHES, lambda *parts: 4321)
    run = compute.run_model(
        workload,
        "float16",
        device=CPU,
        batches=BATCHES,
        batch_size=BATCH_SIZE,
        backend=backend,
        options={},
        seed_of=seeds,
    )
    return judge.verdict_table([run], seed=0).row(0, named=True)


def test_the_float16_overflow_is_contradicted_under_inductor_and_not_under_eager():
    workload = Workload("fp16_overflow", overflow, 300.0)
    bad, clean = _row(workload, "inductor"), _row(workload, "eager")
    # fp64 never overflows and sides with fused everywhere (1110 elements): the rule against it is blind
    assert (bad["class_differences"], bad["integer_mismatches"], bad["fp64_sided"]) == (0, 0, 1110)
    # up to 370 elements of each of isinf(y), y / x and where(isinf(y), 0, y) over the 2 batches change
    # class against the float16-faithful run (6 whose overflow one rounding decides are not judged), and
    # isinf(y) disagrees with fused's own y in all 370
    assert (bad["faithful_class_changes"], bad["inconsistent"], bad["verdict"]) == (1104, 370, "contradicted")
    assert bad["reason"].startswith(
        "contradicted in the program's own dtypes: 1104 element(s) change class (a bool its value) against the "
        "dtype-faithful re-execution"
    )
    assert "e.g. output 1 at (0, 0, 2): eager True, fused False, dtype-faithful True" in bad["reason"]
    # the eager backend: nothing changes class and nothing is inconsistent (M then refuses it as unfused)
    assert (clean["faithful_class_changes"], clean["inconsistent"], clean["class_differences"]) == (0, 0, 0)
    assert (clean["verdict"], clean["reason"]) == ("invalid run", "not judged: generated no fused kernel")


def test_upcasting_that_only_improves_accuracy_is_supported():
    row = _row(Workload("fp16_upcast", upcast, 1.0), "inductor")
    assert (row["faithful_class_changes"], row["inconsistent"], row["class_differences"]) == (0, 0, 0)
    assert row["fused_p99"] < row["eager_p99"]  # float32 intermediates: closer to fp64 than eager's float16
    assert row["verdict"] == "supported"
