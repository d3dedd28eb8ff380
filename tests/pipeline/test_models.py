"""Experiment M: real architectures and user workloads, eager vs fused vs fp64, judged by B's rule."""

import textwrap

import dagster as dg
import numpy as np
import pytest
import torch

from pipeline import cli
from pipeline.definitions import build_resources, defs
from pipeline.experiments import experiment
from pipeline.experiments.models import compute, judge
from pipeline.experiments.models.user_workloads import WorkloadError, load_workloads
from pipeline.experiments.models.zoo import ARCHITECTURES, zoo_workloads
from pipeline.pagekit.render import Report
from pipeline.reporting.pages import experiment_page
from pipeline.resources import ExperimentSettings

USER_MODULE = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Mlp:
        name = "my_mlp"
        dtypes = ("float32",)

        def build(self):
            return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8))

        def inputs(self, generator, batch):
            return (torch.randn(batch, 24, 16, generator=generator, device=generator.device),)


    class Argmax:
        name = "my_argmax"
        dtypes = ("float32",)

        def build(self):
            return lambda x: (torch.softmax(x * 3, dim=-1), x.argmax(dim=-1))

        def inputs(self, generator, batch):
            return (torch.randn(batch, 64, 40, generator=generator, device=generator.device),)


    WORKLOADS = [Mlp(), Argmax()]


    class Raises:
        name = "boom"

        def build(self):
            raise RuntimeError("no weights here")

        def inputs(self, generator, batch):
            return (torch.zeros(1),)


    class WrongBuild:
        name = "not_a_model"

        def build(self):
            return 42

        def inputs(self, generator, batch):
            return (torch.zeros(1),)


    class WrongDevice:
        name = "elsewhere"

        def build(self):
            return nn.Identity()

        def inputs(self, generator, batch):
            return (torch.zeros(batch, 4, device="meta"),)


    WRONG_DEVICE = WrongDevice()


    class NotATuple:
        name = "listy"

        def build(self):
            return nn.Identity()

        def inputs(self, generator, batch):
            return [torch.zeros(batch, 4)]


    NO_NAME = type("NoName", (), {"build": lambda self: nn.Identity(), "inputs": lambda self, g, b: (torch.zeros(1),)})()
    """
)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_workloads.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_workloads"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("no_such_module_xyz:W", "workload spec 'no_such_module_xyz:W': cannot import module 'no_such_module_xyz'"),
        ("{mod}:MISSING", "workload spec '{mod}:MISSING': module '{mod}' has no attribute 'MISSING'"),
        ("{mod}", "workload spec '{mod}': expected module:NAME"),
        ("{mod}:NO_NAME", "workload from {mod}:NO_NAME: `name` must be a non-empty str, got None"),
    ],
)
def test_bad_specs_are_refused_with_one_line(user_module, spec, expected):
    spec, expected = spec.format(mod=user_module), expected.format(mod=user_module)
    with pytest.raises(WorkloadError) as info:
        load_workloads(spec)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_bad_workload_objects_name_the_workload_and_the_problem(user_module, monkeypatch):
    import my_workloads as m  # the fixture put it on the path

    monkeypatch.setattr(m, "BAD", [m.Raises(), m.WrongBuild(), m.WrongDevice(), m.NotATuple()], raising=False)
    cases = {
        "Raises": "workload 'boom' (my_workloads:ONE): build() raised RuntimeError: no weights here",
        "WrongBuild": "workload 'not_a_model' (my_workloads:ONE): build() must return an nn.Module or a callable, got int",
        "WrongDevice": "workload 'elsewhere' (my_workloads:ONE): inputs(generator, batch) returned tensors on meta, "
        "expected cpu (the generator's device)",
        "NotATuple": "workload 'listy' (my_workloads:ONE): inputs(generator, batch) must return a non-empty tuple of "
        "tensors, got list",
    }
    for cls, line in cases.items():
        monkeypatch.setattr(m, "ONE", getattr(m, cls)(), raising=False)
        with pytest.raises(WorkloadError) as info:
            load_workloads("my_workloads:ONE")
        assert str(info.value) == line


def test_cli_refuses_a_bad_spec_with_exit_2_before_anything_runs(user_module, capsys):
    code = cli.main(["report", "--profile", "smoke", "--device", "cpu", "--workloads", f"{user_module}:WRONG_DEVICE"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().endswith(
        "inputs(generator, batch) returned tensors on meta, expected cpu (the generator's device)"
    )
    assert cli.main(["report", "--profile", "smoke", "--only", "B,Q"]) == 2
    assert "--only: no experiment 'Q'; known: S, A" in capsys.readouterr().err


def test_only_selects_the_experiment_what_it_needs_and_the_report():
    assets, checks = cli.selection_for(defs, ["D"])
    names = {k.to_user_string() for k in assets}
    assert {"data_movement_check_table", "report_site"} <= names
    assert not any(n.startswith(("accumulated_error", "model_", "c2_")) for n in names)
    assert all(c.asset_key in assets for c in checks)
    b_assets, _ = cli.selection_for(defs, ["B"])
    assert {"input_pool_softmax", "fp64_reference_softmax"} <= {k.to_user_string() for k in b_assets}


def test_zoo_builds_every_architecture_tiny_with_inputs_that_suit_it():
    gen = torch.Generator().manual_seed(0)
    for w in zoo_workloads(tuple(ARCHITECTURES), "tiny", seq_len=8, image_size=32):
        inputs = w.inputs(gen, 2)
        out = compute.tensors(w.build()(*inputs))
        assert out and all(t.shape[0] == 2 and torch.isfinite(t).all() for t in out), w.name
        if w.arch.kind != "image":
            assert inputs[0].dtype == torch.int64 and inputs[1].sum(dim=1).min() >= 4  # half the tokens kept at least


def test_each_profile_declares_one_compile_per_architecture_and_dtype():
    from pipeline.experiments.models.spec import SIZES

    for profile, sizes in SIZES.items():
        assert sizes.compiles == sizes.planned_compiles(), profile
    assert SIZES["gpu"].compiles == 8  # issue 38: four architectures x bf16/fp16
    # issue 42: default runs each architecture in one dtype, every dtype on two or more of them
    default = SIZES["default"]
    assert default.compiles == 7 and set(dict(default.dtype_of)) == set(default.architectures)
    shares = [sum(default.dtypes_for(a) == (d,) for a in default.architectures) for d in default.dtypes]
    assert min(shares) >= 2 and sum(shares) == 7
    assert SIZES["seed"].compiles == 21 and SIZES["seed"].dtypes_for("gpt2") == SIZES["seed"].dtypes


def test_a_model_is_built_once_and_cast_per_dtype_with_the_weights_the_locator_rebuilds():
    seeds = compute.model_seeds("gpt2", 2, ExperimentSettings(profile="smoke", device="cpu").derived_seed)
    assert set(seeds) == {("M", "gpt2", "weights"), ("M", "gpt2", "batch", 0), ("M", "gpt2", "batch", 1)}
    with pytest.raises(LookupError, match=r"no seed computed for \('M', 'gpt2', 'batch', 2\)"):
        seeds("M", "gpt2", "batch", 2)
    w = zoo_workloads(("gpt2",), "tiny", seq_len=8, image_size=32)[0]
    cpu = torch.device("cpu")
    master = compute.master_module(w, cpu, seeds)
    bf16 = compute.cast_module(master, "bfloat16")
    first = next(iter(master.parameters()))
    assert first.dtype == torch.float32 and next(iter(bf16.parameters())).dtype == torch.bfloat16
    assert torch.equal(next(iter(bf16.parameters())), first.to(torch.bfloat16))
    # the locator builds the module again: the same bits as the run's cast copy
    again = compute.working_module(w, "bfloat16", cpu, seeds)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), bf16.state_dict().values(), strict=True))


def _run(model, units_e, units_f, **extra):
    rec = compute.OutputRecord(
        0,
        0,
        "(1,)",
        "float",
        len(units_e),
        np.array(units_e),
        np.array(units_f),
        float(np.max(units_e)),
        float(np.max(units_f)),
        0,
        0,
        0,
        0,
        1.0,
        1.0,
        False,
    )
    for k, v in extra.items():
        setattr(rec, k, v)
    return compute.ModelRun(model, "test", "float32", [rec], [True], {"graph_count": 1, "graph_breaks": 0})


def test_unit_errors_keep_a_paired_sample_and_the_largest_error_of_every_unit(monkeypatch):
    monkeypatch.setattr(compute, "MAX_UNITS_PER_OUTPUT", 10)
    ref = torch.ones(100, 64, dtype=torch.float64)
    out = ref.to(torch.float32)
    out[37, 5] += 2**-20  # row 37 is not in the stride sample (rows 0, 10, 20, ...)
    units, largest = compute.unit_errors(out, ref, torch.float32)
    assert units.size == 10 and not units.any()
    assert largest == 8.0  # 2**-20 in ULPs of fp32 at 1.0 (2**-23)


def test_verdicts_follow_the_rule():
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 2, 400)
    table = judge.verdict_table(
        [
            _run("same", base, base),
            _run("worse", base, base + 5.0),
            _run("nonfinite", base, base, fused_nonfinite_where_eager_finite=3, class_wrong=3),
            _run("overflow", base, base, fused_nonfinite_where_eager_finite=3),  # fp64 overflows the dtype too
            _run("indices", base, base, mismatched=1),
            _run("few", base[:20], base[:20]),
        ],
        seed=0,
    )
    verdicts = dict(zip(table["model"], table["verdict"], strict=True))
    assert verdicts == {
        "same": "supported",
        "worse": "contradicted",
        "nonfinite": "contradicted",
        "overflow": "supported",
        "indices": "contradicted",
        "few": "inconclusive",
    }
    worse = table.filter(table["model"] == "worse").row(0, named=True)
    assert worse["difference"] == pytest.approx(5.0) and worse["p_holm"] < 0.01
    assert "same() compares whole-output RMSE" in worse["disagreement"]


def _materialize_m(tmp_path, backend="inductor", seed=20241223, workloads="", architectures=()):
    settings = ExperimentSettings(profile="smoke", device="cpu", backend=backend, seed=seed, workloads=workloads)
    exp = experiment("M")
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize(
        [*exp.assets(), *exp.checks()],
        resources=build_resources(settings, base_dir=str(tmp_path)),
        run_config={"ops": {"model_runs": {"config": {"architectures": list(architectures)}}}},
        instance=instance,
    )
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    return result, checks, instance


def _meta(evaluation, key):
    value = evaluation.metadata[key]
    return getattr(value, "value", value)


@pytest.mark.slow
def test_user_workloads_appear_on_m_page_with_a_verdict(tmp_path, user_module, monkeypatch):
    monkeypatch.setenv("FUSION_WORKLOADS", f"{user_module}:WORKLOADS")
    result, checks, instance = _materialize_m(tmp_path, workloads=f"{user_module}:WORKLOADS", architectures=["none"])
    assert checks["model_runs_valid"].passed
    report = Report(instance, defs.resolve_asset_graph(), tmp_path / "smoke", tmp_path / "docs", "smoke", "", "cpu")
    page = experiment_page(report, experiment("M"))
    verdicts = result.output_for_node("model_runs", "model_verdicts")
    assert set(verdicts["source"]) == {"user"} and verdicts["integer_mismatches"].to_list() == [0, 0]
    assert "Beyond the test plan" in page
    for r in verdicts.iter_rows(named=True):
        row = next(line for line in page.splitlines() if line.startswith(f"| {r['model']} | float32 |"))
        assert r["verdict"] in ("supported", "inconclusive", "contradicted") and f"| {r['verdict']} |" in row
        assert f"| {r['same_verdict']} |" in row


@pytest.mark.slow
def test_planted_fault_in_m_is_contradicted_with_the_module_named(tmp_path):
    from pipeline.instruments.regression.planted_bugs import register_planted_backends

    register_planted_backends()
    result, checks, _ = _materialize_m(tmp_path, backend="planted_bf16_scratch", architectures=["gpt2"])
    claim = checks["fused_not_worse_than_eager_on_models"]
    assert not claim.passed and claim.severity == dg.AssetCheckSeverity.ERROR
    assert _meta(claim, "verdict") == "contradicted"
    verdicts = result.output_for_node("model_runs", "model_verdicts")
    fp32 = verdicts.filter(verdicts["dtype"] == "float32").row(0, named=True)
    # the fault rounds reduction results (layer norm's mean and variance) to bf16: the first layer norm
    assert fp32["first_divergent_module"] == "model.transformer.h.0.ln_1#0"
    assert "model.transformer.h.0.ln_1#0" in _meta(claim, "reason")


@pytest.mark.slow
def test_smoke_run_builds_each_architecture_once_and_compiles_what_the_spec_declares(tmp_path, monkeypatch):
    from pipeline.experiments.models.spec import SIZES

    builds, compiles = [], []
    real_master, real_fused = compute.master_module, compute.fused

    def counting_master(workload, device, seed_of):
        builds.append(workload.name)
        return real_master(workload, device, seed_of)

    def counting_fused(*args, **kwargs):
        compiles.append(type(args[0]).__name__)
        return real_fused(*args, **kwargs)

    monkeypatch.setattr(compute, "master_module", counting_master)
    monkeypatch.setattr(compute, "fused", counting_fused)
    result, checks, _ = _materialize_m(tmp_path)
    assert checks["model_runs_valid"].passed
    verdicts = result.output_for_node("model_runs", "model_verdicts")
    sizes = SIZES["smoke"]
    # built once per architecture (again for each model x dtype the locator re-ran), cast per dtype
    assert sorted(builds) == sorted([*sizes.architectures, *verdicts.filter(verdicts["located"])["model"]])
    assert len(compiles) == sizes.compiles == verdicts.height
    # the fusion evidence: every declared compile produced at least one graph with kernels
    assert (verdicts["graph_count"] >= 1).all() and (verdicts["kernel_count"] >= 1).all()


@pytest.mark.slow
@pytest.mark.parametrize(
    "seed", [1, pytest.param(2, marks=pytest.mark.heavy), pytest.param(3, marks=pytest.mark.heavy)]
)
def test_healthy_m_has_no_error_at_each_of_three_seeds(tmp_path, seed):
    # make test keeps one seed; make test-all runs all three
    _, checks, _ = _materialize_m(tmp_path, seed=seed)
    errors = [n for n, e in checks.items() if not e.passed and e.severity == dg.AssetCheckSeverity.ERROR]
    assert errors == [], {n: _meta(checks[n], "reason") if "reason" in checks[n].metadata else "" for n in errors}


BROKEN_MODULE = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Explodes(nn.Module):
        def forward(self, x):
            if x.shape[0] > 1:  # the spec check builds with batch 1; the run uses the profile's batches
                raise RuntimeError("kernel exploded")
            return x * 2


    class Broken:
        name = "broken"
        dtypes = ("float32",)

        def build(self):
            return Explodes()

        def inputs(self, generator, batch):
            return (torch.randn(batch, 8, generator=generator, device=generator.device),)


    BROKEN = Broken()
    """
)


@pytest.mark.slow
def test_a_failed_step_prints_its_root_cause_and_the_report_still_builds(tmp_path, monkeypatch, capsys):
    import dataclasses
    import shutil

    from pipeline.experiments.models import spec

    (tmp_path / "broken_workloads.py").write_text(BROKEN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(cli.REPO_ROOT / ".dagster_home" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("FUSION_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setitem(spec.SIZES, "smoke", dataclasses.replace(spec.SIZES["smoke"], architectures=()))
    code = cli.main(
        ["report", "--profile", "smoke", "--device", "cpu", "--only", "M", "--workloads", "broken_workloads:BROKEN"]
    )
    out = capsys.readouterr().out
    assert code == 1
    line = next(x for x in out.splitlines() if x.startswith("failed step model_runs:"))
    assert line.startswith(
        "failed step model_runs: RuntimeError: kernel exploded (at pipeline/experiments/models/compute.py"
    )
    assert "building the report from what was materialized (M failed)" in out
    docs = cli.REPO_ROOT / "site" / "docs"
    assert "failed: step model_runs: RuntimeError: kernel exploded" in (docs / "index.md").read_text()
    page = (docs / "results" / "models.md").read_text()
    assert "failed: step model_runs: RuntimeError: kernel exploded" in page
    assert "not run in this report" in (docs / "index.md").read_text()  # --only M: the others


def test_each_profile_declares_the_compiles_its_sizes_make():
    from pipeline.experiments.models.spec import SIZES

    for profile, sizes in SIZES.items():
        assert sizes.compiles == sizes.planned_compiles(), profile
    assert (SIZES["smoke"].compiles, SIZES["gpu"].compiles, SIZES["default"].compiles) == (3, 8, 7)


def _clustered(model, e, f, clusters):
    run = _run(model, e, f)
    run.outputs[0].unit_clusters = np.asarray(clusters, dtype=np.int64)
    return run


@pytest.mark.parametrize("rows", [7, 21, 40])
def test_a_fused_path_10_sulp_worse_on_every_unit_is_contradicted_at_any_table_size(rows):
    """Issue: with 1999 resamples the p-value floor is 1/2000, which Holm over 21 rows or more cannot reject
    (21/2000 > 0.01). The resamples now grow with the table: the worse row is contradicted at 7, 21 and 40."""
    rng = np.random.default_rng(1)
    base = rng.uniform(0, 2, 4096)
    seqs = np.repeat(np.arange(8), 512)  # 4096 units: the rows of 8 sequences
    runs = [_clustered("worse", base, base + 10.0, seqs)]
    # the other rows healthy, smaller (their size does not matter to Holm): fused equal to eager
    runs += [_clustered(f"same{i}", base[:256], base[:256], seqs[::16]) for i in range(rows - 1)]
    table = judge.verdict_table(runs, seed=0)
    worse = table.filter(table["model"] == "worse").row(0, named=True)
    assert worse["verdict"] == "contradicted" and worse["clusters"] == 8
    expected = {7: 1999, 21: 4199, 40: 7999}[rows]
    assert worse["resamples"] == expected
    assert worse["p_value"] == pytest.approx(1 / (expected + 1))
    assert worse["p_holm"] == pytest.approx(rows / (expected + 1)) and worse["p_holm"] <= 0.01
    assert set(table.filter(table["model"] != "worse")["verdict"]) == {"supported"}


def test_the_old_resample_count_could_not_reject_at_21_rows():
    # the floor the issue found: 21 rows x 1/2000 is above the family-wise level 0.01
    from precisionkit.decide import resamples_for_family

    assert 21 / (1999 + 1) > 0.01 and 21 / (resamples_for_family(21, 0.01, 1999) + 1) <= 0.005


def test_the_tail_test_resamples_images_not_their_elements():
    """2048 elements of 8 images: fused is worse on the elements of two images only. Counted as 2048
    independent units the interval excludes 0 (a 99% bound above the margin); resampled by image, a draw without
    those two images is likely (about (6/8)^8 = 10%), so the lower bound reaches 0 and the row is not contradicted."""
    from precisionkit.decide import paired_quantile_test

    rng = np.random.default_rng(2)
    e = rng.uniform(0, 1, 2048)
    images = np.repeat(np.arange(8), 256)
    f = e + np.where(images < 2, 3.0, 0.0)
    by_element = paired_quantile_test(f, e, q=0.99, margin=1.0, resamples=1999, seed=0)
    by_image = paired_quantile_test(f, e, q=0.99, margin=1.0, resamples=1999, seed=0, clusters=images)
    assert by_element.lower > 1.0 and by_element.p_value == pytest.approx(1 / 2000)
    assert by_image.lower < 0.5 and by_image.p_value > 0.05
    table = judge.verdict_table([_clustered("two_images", e, f, images)], seed=0)
    row = table.row(0, named=True)
    assert row["clusters"] == 8 and row["verdict"] == "inconclusive"


def test_one_image_cannot_be_judged_by_the_tail_test():
    rng = np.random.default_rng(3)
    e = rng.uniform(0, 1, 256)
    row = judge.verdict_table([_clustered("one", e, e + 10.0, np.zeros(256))], seed=0).row(0, named=True)
    assert row["verdict"] == "inconclusive" and row["p_value"] is None and row["clusters"] == 1
    assert row["cannot_judge"] == (
        "256 units from 1 independent input(s) (image or sequence): the bootstrap resamples inputs and needs at least 2"
    )
    assert "the tail test cannot judge here: 256 units from 1 independent input(s)" in row["reason"]


def test_unit_clusters_name_the_image_or_sequence_of_each_unit_kept(monkeypatch):
    seqs = compute.unit_clusters(torch.zeros(4, 32, 10))  # 128 rows as units, 32 per sequence
    assert seqs.tolist() == [i // 32 for i in range(128)]
    images = compute.unit_clusters(torch.zeros(8, 16))  # 8 rows: elements as units, 16 per image
    assert images.tolist() == [i // 16 for i in range(128)]
    monkeypatch.setattr(compute, "MAX_UNITS_PER_OUTPUT", 10)
    assert compute.unit_clusters(torch.zeros(100, 64)).tolist() == list(range(0, 100, 10))
