"""M's user workloads beyond float modules: plain callables from files outside ``sys.modules``,
integer and bool outputs and dtypes, and the sign of a zero, integer ties and IEEE classes judged
against the fp64 re-execution by the differential tester's rule."""

import importlib.util
import sys
import textwrap

import pytest
import torch

from pipeline.experiments.models import compute, judge
from pipeline.experiments.models.user_workloads import WorkloadError, check_workload, load_workloads

CPU = torch.device("cpu")
BATCHES, BATCH_SIZE = 2, 2  # M's smoke size is 3 batches of 2; two keep these compiles short

PLAIN_FILE = textwrap.dedent(
    """
    import torch


    def shifted_relu(x):
        return torch.relu(x - 0.5) * 2.0


    class Plain:
        name = "plain_function"
        dtypes = ("float32",)

        def build(self):
            return shifted_relu

        def inputs(self, generator, batch):
            return (torch.randn(batch, 70, 16, generator=generator, device=generator.device),)


    PLAIN = Plain()
    """
)


def _load_outside_sys_modules(tmp_path, text, module_name):
    path = tmp_path / f"{module_name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module_name not in sys.modules
    return module


def _run(workload, dtype, backend="inductor"):
    seeds = compute.model_seeds(workload.name, BATCHES, lambda *parts: 1234)
    return compute.run_model(
        workload,
        dtype,
        device=CPU,
        batches=BATCHES,
        batch_size=BATCH_SIZE,
        backend=backend,
        options={},
        seed_of=seeds,
    )


def _row(run):
    return judge.verdict_table([run], seed=0).row(0, named=True)


def test_a_plain_function_from_a_file_outside_sys_modules_is_compiled_as_it_is(tmp_path):
    module = _load_outside_sys_modules(tmp_path, PLAIN_FILE, "plain_outside_m41")
    run = _run(module.PLAIN, "float32")
    assert run.error == ""  # wrapped in a module, Dynamo raised "No module named 'plain_outside_m41'"
    assert run.parameters == 0 and run.evidence["graph_count"] == 1 and run.evidence["kernel_count"] >= 1
    assert [o.shape for o in run.outputs] == ["(2, 70, 16)"] * BATCHES
    row = _row(run)
    assert row["verdict"] == "supported" and row["units"] == BATCHES * 2 * 70
    assert row["reason"].startswith("supported: P99(fused) - P99(eager) = ")


INTEGER_FILE = textwrap.dedent(
    """
    import torch


    class Masks:
        name = "token_masks"
        dtypes = ("int64",)

        def build(self):
            return lambda ids, keep: (((ids * 3 + 1) % 7 == 0) & keep, ids.cumsum(-1), ids.argmax(-1))

        def inputs(self, generator, batch):
            ids = torch.randint(0, 1000, (batch, 64), generator=generator, device=generator.device)
            keep = torch.rand(batch, 64, generator=generator, device=generator.device) > 0.25
            return ids, keep


    class Predictions:
        name = "predictions"
        dtypes = ("float32", "bfloat16")

        def build(self):
            return lambda x: (x.argmax(-1), x > 0)

        def inputs(self, generator, batch):
            return (torch.randn(batch, 8, 16, generator=generator, device=generator.device),)


    class Named:
        name = "named"

        def build(self):
            return lambda x: x

        def inputs(self, generator, batch):
            return (torch.randn(batch, 4, generator=generator, device=generator.device),)


    MASKS, PREDICTIONS, NAMED = Masks(), Predictions(), Named()
    """
)


@pytest.fixture
def integer_module(tmp_path, monkeypatch):
    (tmp_path / "int_workloads_m41.py").write_text(INTEGER_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import int_workloads_m41

    return int_workloads_m41


def test_workloads_with_integer_and_bool_outputs_declare_their_dtypes(integer_module):
    masks, predictions = load_workloads("int_workloads_m41:MASKS,int_workloads_m41:PREDICTIONS")
    assert (masks.dtypes, predictions.dtypes) == (("int64",), ("float32", "bfloat16"))
    run = _run(masks, "int64")  # native: nothing cast, three integer/bool outputs
    assert run.error == "" and run.dtype == "int64"
    per_batch = [("integer", 128, 0), ("integer", 128, 0), ("integer", 2, 0)]
    assert [(o.kind, o.units, o.mismatched) for o in run.outputs] == per_batch * BATCHES
    row = _row(run)
    # no float unit: supported on the integer elements alone (3 outputs x 2 batches: 2 x (128 + 128 + 2))
    assert (row["units"], row["integer_elements"], row["verdict"]) == (0, 516, "supported")


@pytest.mark.parametrize(
    ("dtypes", "message"),
    [
        (
            ("float32", "fp8"),
            "workload 'named' (int_workloads_m41:NAMED): `dtypes` names 'fp8'; allowed: float names float32, "
            "bfloat16, float16 (cast), or one of bool, uint8, int8, int16, int32, int64 (native)",
        ),
        (
            (torch.float32,),
            "workload 'named' (int_workloads_m41:NAMED): `dtypes` names torch.float32; allowed: float names float32, "
            "bfloat16, float16 (cast), or one of bool, uint8, int8, int16, int32, int64 (native)",
        ),
        (
            ("bfloat16", "int64"),
            "workload 'named' (int_workloads_m41:NAMED): `dtypes` ('bfloat16', 'int64'): an integer or bool name "
            "(int64) means one run with nothing cast, so it stands alone; allowed: float names float32, bfloat16, "
            "float16 (cast), or one of bool, uint8, int8, int16, int32, int64 (native)",
        ),
        (
            ("int32",),
            "workload 'named' (int_workloads_m41:NAMED): `dtypes` ('int32',) declares a native int32 run, but no "
            "input is int32 (inputs: float32); name the inputs' integer dtype, or float dtypes to cast to",
        ),
    ],
)
def test_a_bad_dtype_name_is_refused_in_one_line_naming_the_workload(integer_module, monkeypatch, dtypes, message):
    monkeypatch.setattr(integer_module.NAMED, "dtypes", dtypes, raising=False)
    with pytest.raises(WorkloadError) as info:
        check_workload(integer_module.NAMED, "int_workloads_m41:NAMED", CPU)
    assert str(info.value) == message


def _negative_zeros_backend(gm, example_inputs):
    """Inductor, then every +0 of a float output returned as -0 (a wrong sign of zero, 0 ULP away)."""
    from pipeline.instruments.regression.planted_faults import _wrap_outputs, inductor

    return _wrap_outputs(inductor(gm, example_inputs), lambda t: torch.where(t == 0, torch.full_like(t, -0.0), t))


def test_a_fused_zero_of_the_wrong_sign_is_contradicted_and_healthy_inductor_is_not(tmp_path):
    from torch._dynamo import list_backends, register_backend

    if "m41_negative_zeros" not in list_backends(exclude_tags=()):
        register_backend(compiler_fn=_negative_zeros_backend, name="m41_negative_zeros")
    workload = _load_outside_sys_modules(tmp_path, PLAIN_FILE, "zeros_outside_m41").PLAIN
    planted, healthy = _run(workload, "float32", "m41_negative_zeros"), _run(workload, "float32")
    zeros = sum(int((o == 0).sum()) for o in [workload.build()(*_inputs(workload, b)) for b in range(BATCHES)])
    assert zeros > 0  # relu(x - 0.5) is +0 in eager and fp64 wherever x <= 0.5
    bad, good = _row(planted), _row(healthy)
    assert (bad["fused_max"], good["fused_max"]) == (good["fused_max"], good["fused_max"])  # ULPs alike
    assert (bad["class_differences"], bad["verdict"]) == (zeros, "contradicted")
    assert bad["reason"].startswith(f"contradicted: 0 integer/bool and {zeros} float-class element(s) wrong, e.g. ")
    assert "eager 0.0, fused -0.0, fp64 0.0" in bad["reason"]
    assert (good["class_differences"], good["verdict"]) == (0, "supported")


def _inputs(workload, batch):
    seeds = compute.model_seeds(workload.name, BATCHES, lambda *parts: 1234)
    return compute.batch_inputs(workload, batch, "float32", CPU, BATCH_SIZE, seeds)


def test_a_zero_sign_is_judged_by_fp64_not_by_eager():
    ref = torch.tensor([0.0, 0.0, -0.0, 1.0], dtype=torch.float64)
    eager = torch.tensor([0.0, -0.0, -0.0, 1.0])
    fused = torch.tensor([-0.0, 0.0, 0.0, 1.0])
    rec = compute.compare_output(0, 0, eager, fused, ref, torch.float32)
    # [0] fused leaves fp64's +0 (eager kept it): wrong; [1] fused has fp64's +0, eager not: right;
    # [2] fused leaves fp64's -0 that eager kept: wrong
    assert (rec.class_wrong, rec.fp64_sided) == (2, 1)
    assert rec.example == "output 0 at (0,): eager 0.0, fused -0.0, fp64 0.0"


def test_an_argmax_tie_fp64_breaks_as_fused_did_is_not_flagged():
    # bf16 rounds x + 1000 to a multiple of 4: eager's argmax takes the first of the tied maxima;
    # fp64 (and fused where it keeps x + 1000 in fp32) takes the largest x
    x = torch.tensor([[0.5, 1.5, 1.0], [0.25, -1.0, 0.75]], dtype=torch.bfloat16)
    eager = (x + 1000).argmax(-1)
    ref = (x.double() + 1000).argmax(-1)
    assert eager.tolist() == [0, 0] and ref.tolist() == [1, 2]
    sided = compute.compare_output(0, 0, eager, ref.clone(), ref, torch.bfloat16)
    assert (sided.mismatched, sided.fp64_sided, sided.units) == (0, 2, 2)
    neither = compute.compare_output(0, 0, eager, torch.tensor([2, 1]), ref, torch.bfloat16)
    assert (neither.mismatched, neither.fp64_sided) == (2, 0)
    assert neither.example == "output 0 at (0,): eager 0, fused 2, fp64 1"


def test_healthy_inductor_breaking_bf16_argmax_ties_as_fp64_does_is_supported():
    class Ties:
        name = "bf16_argmax_ties"

        def build(self):
            return lambda x: (x + 1000).argmax(-1)

        def inputs(self, generator, batch):
            return (torch.randn(batch, 64, 40, generator=generator, device=generator.device),)

    run = _run(Ties(), "bfloat16")
    row = _row(run)
    # Inductor keeps x + 1000 in fp32 inside the fused argmax: it differs from bf16 eager on ties,
    # and fp64 sides with it on every one (M's rule before this counted each as a mismatch)
    assert row["fp64_sided"] > 0 and row["integer_mismatches"] == 0
    assert row["verdict"] == "supported" and not row["same_passed"]
    assert row["disagreement"].startswith(f"same() failed: {row['fp64_sided']} element(s) differ from eager's")


def test_a_nan_or_infinity_fused_loses_or_invents_is_judged_by_fp64_class():
    inf, nan = float("inf"), float("nan")
    ref = torch.tensor([inf, 1.0, nan, 1e300, 2.0], dtype=torch.float64)
    eager = torch.tensor([inf, 1.0, nan, inf, 2.0])
    fused = torch.tensor([1.0, nan, 0.5, 3e38, 2.0])
    rec = compute.compare_output(0, 0, eager, fused, ref, torch.float32)
    # lost +inf, invented NaN, lost NaN: wrong; [3] fp64 overflows fp32 as eager does, fused finite: wrong
    assert (rec.class_wrong, rec.fp64_sided) == (4, 0)
    same = compute.compare_output(0, 0, eager, eager.clone(), ref, torch.float32)
    assert (same.class_wrong, same.fp64_sided, same.example) == (0, 0, "")
