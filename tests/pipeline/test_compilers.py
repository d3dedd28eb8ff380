"""The plan per compiler: adapter names as settings, a compiler that is not installed, values stored per
compiler with S's shared, experiments that do not apply, the precision check, and faults of a compiler
(one that raises while compiling, one that sends the whole graph back to eager) as outcomes."""

from __future__ import annotations

import sys
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from pipeline import cli
from pipeline.compilers import (
    not_applicable,
    not_applicable_assets,
    not_applicable_experiments,
    outcomes_by_compiler,
    record_not_applicable,
)
from pipeline.definitions import build_resources
from pipeline.experiments import EXPERIMENTS, experiment
from pipeline.fusion_checks import ExpectedFusion, lower_precisions, precision_check
from pipeline.resources import ExperimentSettings, backend_problem
from pipeline.run_summary import failed_experiments, outcome_table, step_failures
from pipeline.storage import NO_FUSED_PATH, DataFolder, compiler_folder
from pipeline.verdicts import (
    FINDING,
    NOT_APPLICABLE,
    CheckOutcome,
    check_outcome,
    finding_check,
    finding_result,
    summarize,
)
from precisionkit.backends.openvino import OpenVINOAdapter

OV_C1 = (
    "not applicable to OpenVINO: OpenVINO generates no C++ source to read: its CPU plugin runs precompiled and "
    "JIT-emitted kernels whose instructions are not visible as code."
)


# --- a compiler that is not installed -------------------------------------------------------------


def _not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        OpenVINOAdapter,
        "missing",
        lambda self: "the openvino package is not installed: pip install 'fusion-precision[openvino]'",
    )


def test_an_adapter_name_is_a_backend_and_a_missing_compiler_names_its_install_command(monkeypatch):
    assert backend_problem("openvino") is None and backend_problem("iree") is None
    _not_installed(monkeypatch)
    assert backend_problem("openvino") == (
        "OpenVINO cannot run here: the openvino package is not installed: pip install 'fusion-precision[openvino]'"
    )


@pytest.mark.parametrize("argv", [["--backend", "openvino"], ["--backends", "inductor,openvino,iree"]])
def test_report_with_a_missing_compiler_exits_2_in_one_line_having_written_nothing(tmp_path, monkeypatch, capsys, argv):
    _not_installed(monkeypatch)
    home, data = tmp_path / "home", tmp_path / "data"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("FUSION_DATA_DIR", str(data))
    assert cli.main(["report", "--profile", "smoke", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(
        "OpenVINO cannot run here: the openvino package is not installed: pip install 'fusion-precision[openvino]'"
    )
    assert not home.exists() and not data.exists()  # no instance, so no Dagster run; no data folder


# --- stored per compiler, S shared ----------------------------------------------------------------


def test_compiler_folders_keep_inductors_paths():
    assert compiler_folder("inductor") == () and compiler_folder(None) == ()
    assert compiler_folder("openvino") == ("compilers", "openvino")
    assert DataFolder(root="d").value_stem("smoke", ["c2_versions"], "iree") == Path(
        "d/smoke/compilers/iree/c2_versions"
    )
    with pytest.raises(ValueError):
        compiler_folder("../x")


def test_the_io_manager_stores_s_once_and_the_rest_per_compiler(tmp_path):
    io = build_resources(ExperimentSettings(profile="smoke", device="cpu", backend="openvino"), base_dir=str(tmp_path))[
        "io_manager"
    ]
    # S's pools declare no fused path (their tag); the registry says so where a context has no spec
    assert io._stem(dg.AssetKey("input_pool_softmax")) == tmp_path / "smoke" / "input_pool_softmax"
    assert io._stem(dg.AssetKey("fp64_reference_softmax")) == tmp_path / "smoke" / "fp64_reference_softmax"
    assert io._stem(dg.AssetKey("c2_versions")) == tmp_path / "smoke" / "compilers" / "openvino" / "c2_versions"
    shared = {k.to_user_string() for e in EXPERIMENTS for a in e.assets() for k in a.keys if a.tags_by_key[k]}
    assert {"input_pool_softmax", "fp64_reference_attention", "toolkit_selfcheck", "planted_bug_matrix"} <= shared


def test_a_second_compiler_reuses_what_depends_on_no_fused_path_and_keeps_the_firsts_values(tmp_path):
    @dg.asset(tags=NO_FUSED_PATH)
    def pool() -> dict:
        return {"v": 1}

    @dg.asset
    def fused_rows(pool: dict) -> dict:
        return {"v": pool["v"] + 1}

    @finding_check(asset="fused_rows")
    def rows_read(fused_rows: dict) -> dg.AssetCheckResult:
        return finding_result([])

    small = dg.Definitions(assets=[pool, fused_rows], asset_checks=[rows_read])
    instance = dg.DagsterInstance.ephemeral()
    same = {"device": "cpu", "backend_options": "{}"}

    def todo(backend: str) -> tuple[list[str], list[str]]:
        assets, checks = cli.assets_to_run(small, instance, "smoke", {**same, "backend": backend})
        return [k.to_user_string() for k in assets], [c.name for c in checks]

    def run(backend: str, selection: list) -> None:
        resources = build_resources(ExperimentSettings(profile="smoke", device="cpu", backend=backend), str(tmp_path))
        assert dg.materialize(
            [pool, fused_rows, rows_read], resources=resources, instance=instance, selection=selection
        ).success

    run("inductor", [pool, fused_rows])
    assert todo("inductor") == ([], [])
    assert todo("openvino") == (["fused_rows"], ["rows_read"])  # the pool is shared: not run again
    run("openvino", [fused_rows])
    assert todo("openvino") == ([], []) and todo("inductor") == ([], [])  # neither overwrote the other
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.json")) == [
        "smoke/compilers/openvino/fused_rows.json",
        "smoke/fused_rows.json",
        "smoke/pool.json",
    ]
    pools = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("pool")), limit=10).records
    assert len(pools) == 1  # stored once
    assert todo("iree") == (["fused_rows"], ["rows_read"])


# --- experiments that do not apply ----------------------------------------------------------------


def test_c1_and_c3_do_not_apply_to_openvino_or_iree_and_every_experiment_applies_to_inductor():
    assert not_applicable(experiment("C1"), "openvino") == OV_C1
    assert set(not_applicable_experiments("openvino")) == {"C1", "C3", "E"}  # E: OpenVINO passes no bf16 tensor
    assert set(not_applicable_experiments("iree")) == {"C1", "C3"}
    assert not_applicable(experiment("C3"), "iree").startswith("not applicable to IREE: IREE has no Inductor-generated")
    assert not_applicable_experiments("inductor") == {} and not_applicable_experiments("aot_eager") == {}
    keys = {k.to_user_string() for k in not_applicable_assets("openvino")}
    assert {"c1_path_outputs", "c3_iteration_table"} <= keys and "c2_versions" not in keys


def test_a_users_adapter_gets_the_experiments_own_reason(monkeypatch):
    from precisionkit.backends.base import BackendAdapter

    class Other(BackendAdapter):
        name, title = "other", "Other"

    monkeypatch.setattr("pipeline.intents.adapter_or_none", lambda backend: Other())
    assert not_applicable(experiment("C1"), "other") == (
        "not applicable to Other: it reads the instruction route (scalar or vector, FMA or not) from the C++ "
        "Inductor generates"
    )
    assert not_applicable(experiment("C2"), "other") is None


def test_not_applicable_is_an_outcome_of_its_own_never_a_pass():
    reason = "not applicable to OpenVINO: no C++"
    na = check_outcome("c1:x", False, "WARN", {"outcome": "claim", "not_applicable": reason}, "claim")
    assert na == CheckOutcome("c1:x", "claim", False, "WARN", None, 0, reason)
    assert not na.is_error and not na.to_read
    assert summarize([na, na], not_applicable=True) == summarize([na], not_applicable=True)
    o = summarize([na], not_applicable=True)
    assert (o.validity, o.verdict, o.findings) == (NOT_APPLICABLE, reason, 0)
    assert summarize([na], failed_steps=["c1_step"], not_applicable=True).validity == "invalid"
    # a reader that does not know the outcome yet (the site's labels) gets words it has: incomplete, not yet run
    assert summarize([na]) == summarize([na], complete=True)
    assert (summarize([na]).validity, summarize([na]).verdict) == ("incomplete", "not yet run")
    passed = CheckOutcome("c1:y", "validity", True, "ERROR")
    assert (summarize([na, passed]).validity, summarize([na, passed]).verdict) == ("incomplete", "no claim")


def test_a_judged_checks_own_use_of_the_key_does_not_make_it_not_applicable():
    # The planted-bug matrix once listed its inapplicable bugs under the same metadata key ("none" when
    # there were none); read as a reason, it turned a supported claim into a skipped one and the whole
    # Regression experiment into "incomplete" on every compiler.
    caught = check_outcome(
        "m:every_planted_bug_caught", True, "WARN", {"verdict": "supported", "not_applicable": "none"}, "claim"
    )
    assert caught == CheckOutcome("m:every_planted_bug_caught", "claim", True, "WARN", "supported", 0, "")
    o = summarize([caught], not_applicable=True)
    assert (o.validity, o.verdict) == ("valid", "supported")
    listed = check_outcome("m:x", True, "WARN", {"not_applicable": "mlir_fast_math, reassoc"}, "claim")
    assert listed.not_applicable == ""


def test_not_applicable_records_are_read_per_compiler_and_device():
    from pipeline.definitions import defs

    instance = dg.DagsterInstance.ephemeral()
    reasons = not_applicable_experiments("openvino")
    recorded = record_not_applicable(
        instance, EXPERIMENTS, reasons, {"backend": "openvino", "device_label": "cpu-a", "profile": "smoke"}
    )
    assert len(recorded) == len(experiment("C1").checks()[0].check_keys) * 0 + sum(
        len(c.check_keys) for i in ("C1", "C3", "E") for c in experiment(i).checks()
    )
    outcomes = outcomes_by_compiler(defs, instance, profile="smoke")
    assert list(outcomes) == [("openvino", "cpu-a")]
    assert outcomes["openvino", "cpu-a"]["C1"].validity == NOT_APPLICABLE
    assert outcomes["openvino", "cpu-a"]["C1"].verdict == OV_C1
    assert outcomes_by_compiler(defs, instance, profile="default") == {}
    table = outcome_table(defs, [e.evaluation for e in _all(instance, defs)], [])
    assert f"C1            not applicable {OV_C1}" in table and "checks that did not pass" not in table


def _all(instance, defs):
    from pipeline.compilers import latest_evaluations_by_compiler

    return [e for items in latest_evaluations_by_compiler(defs, instance).values() for e in items]


# --- the precision a compiler computed in ---------------------------------------------------------


def test_a_fused_row_computed_below_its_dtype_is_a_finding_beside_its_verdict():
    assert lower_precisions(["float32", "bfloat16", "int64", "u8"], "float32") == ["bfloat16"]
    assert lower_precisions(["float32"], "float16") == [] and lower_precisions(["float16"], "bfloat16") == []
    table = pl.DataFrame(
        {
            "chain": ["softmax", "softmax", "gelu", "gelu"],
            "dtype": ["float32", "float32", "float32", "bfloat16"],
            "path": ["eager", "fused", "fused", "fused"],
            "precisions": ["", "bfloat16, float32", "float32", "bfloat16"],
        }
    )
    declared = ExpectedFusion("rows", names=("chain", "dtype"), fused_where=(("path", ("fused",)),))
    check = precision_check("B", declared)
    # A finding, not run validity: a compiler that runs an fp32 workload in bf16 keeps its verdicts.
    (spec,) = check.check_specs
    assert spec.metadata["outcome"] == FINDING
    problems, judged = declared.precision_problems(declared.fused_rows(table))
    assert problems == ["softmax/float32: float32 workload ran in bfloat16"] and judged == 3
    inductor = table.with_columns(pl.lit("").alias("precisions"))
    assert declared.precision_problems(declared.fused_rows(inductor)) == ([], 0)  # Inductor says none


def test_every_declared_fusion_table_has_its_precision_check():
    names = {k.name for e in EXPERIMENTS for c in e.checks() for k in c.check_keys}
    for exp in EXPERIMENTS:
        for expected in exp.fusion:
            assert expected.precision_check_name in names


# --- faults of a compiler are outcomes --------------------------------------------------------------

FAULTY = """
from precisionkit.backends.base import BackendAdapter


class Raising(BackendAdapter):
    name, title = "raising", "Raising"

    def compiler(self, options):
        def compile_graph(gm, example_inputs):
            raise RuntimeError("the compiler failed on purpose")

        return compile_graph


class AllEager(BackendAdapter):
    name, title = "all_eager", "All eager"

    def compiler(self, options):
        return lambda gm, example_inputs: gm.forward
"""


@pytest.fixture
def faulty(tmp_path, monkeypatch):
    from precisionkit.backends import _entry_points_on

    root = tmp_path / "dist"
    root.mkdir()
    (root / "faulty_compilers.py").write_text(FAULTY)
    info = root / "faulty_compilers-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: faulty-compilers\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[fusion_precision.backends]\nraising = faulty_compilers:Raising\nall_eager = faulty_compilers:AllEager\n"
    )
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, "faulty_compilers", raising=False)
    _entry_points_on.cache_clear()
    yield
    _entry_points_on.cache_clear()


@pytest.mark.parametrize(
    ("backend", "cause"),
    [
        ("raising", "the compiler failed on purpose"),
        ("all_eager", "generated no fused unit (nothing the compiler produced was captured)"),
    ],
)
def test_a_faulty_compiler_makes_its_experiment_invalid_with_the_reason(tmp_path, faulty, backend, cause):
    from pipeline.definitions import defs

    assert backend_problem(backend) is None  # registered through its entry point
    c2 = experiment("C2")
    settings = ExperimentSettings(profile="smoke", device="cpu", backend=backend)
    result = dg.materialize(
        [*c2.assets(), *c2.checks()],
        resources=build_resources(settings, base_dir=str(tmp_path)),
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert not result.success
    causes = step_failures(result)
    assert set(causes) == {"c2_long_reductions", "c2_reduction_order"}  # C2's two compiling steps
    assert all(cause in c.message for c in causes.values())
    assert failed_experiments(causes)["C2"].startswith("step c2_long_reductions: ")
    table = outcome_table(defs, [], list(causes))
    assert "C2            invalid        not judged (invalid run)" in table


def test_openvinos_bf16_matmul_on_an_fp32_workload_is_named_by_the_precision_finding():
    import torch

    import precisionkit
    from precisionkit.evidence import evidence_fields

    if OpenVINOAdapter().missing() is not None:
        pytest.skip("OpenVINO is not installed")
    fn = precisionkit.fused(lambda a, b: torch.relu(a @ b + 1.0), backend="openvino")
    fn(torch.randn(64, 64), torch.randn(64, 64))
    row = {"chain": "matmul_relu", "dtype": "float32", **evidence_fields(fn.evidence, ("kernel_count", "precisions"))}
    declared = ExpectedFusion("rows", names=("chain", "dtype"))
    problems, judged = declared.precision_problems(pl.DataFrame([row]))
    if "bfloat16" not in row["precisions"]:
        assert (problems, judged) == ([], 1)  # a CPU without bf16 instructions keeps fp32
    else:
        assert (problems, judged) == (["matmul_relu/float32: float32 workload ran in bfloat16"], 1)


def test_report_with_a_raising_compiler_builds_the_report_and_records_the_reason(tmp_path, monkeypatch, capfd, faulty):
    from pipeline.cli import local
    from pipeline.compilers import failed_steps_by_compiler
    from pipeline.definitions import defs

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FUSION_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FUSION_SITE_DIR", str(tmp_path / "site"))
    assert cli.main(["report", "--profile", "smoke", "--device", "cpu", "--only", "C2", "--backend", "raising"]) == 1
    out = capfd.readouterr().out  # printed by the child process that ran the compiler
    assert "building the report from what was materialized (C2 failed)" in out
    assert "C2            invalid        not judged (invalid run)" in out
    assert (tmp_path / "site" / "build" / "index.html").is_file()  # the rest of the report is built
    instance = local.local_instance()
    reason = (
        "step c2_long_reductions: BackendCompilerFailed: backend='_counting_backend' raised: "
        "RuntimeError: the compiler failed on purpose"
    )
    assert failed_steps_by_compiler(instance, "smoke") == {"raising": {"C2": ("c2_long_reductions", reason)}}
    outcome = outcomes_by_compiler(defs, instance, "smoke")["raising", ""]["C2"]
    assert (outcome.validity, outcome.invalid_checks) == ("invalid", ("step failed: c2_long_reductions",))


# --- the guard where the assets run (a run not started by the CLI) ---------------------------------


@pytest.mark.parametrize(
    ("exp_id", "module", "first"),
    [("C1", "instruction_selection", "selection_input"), ("C3", "rsqrt_iterations", "rsqrt_input")],
)
def test_a_run_outside_the_cli_stores_an_experiment_that_does_not_apply_as_not_applicable(
    tmp_path, monkeypatch, exp_id, module, first
):
    """A Dagster UI run (here: ``dg.materialize``) of C1 or C3 with OpenVINO runs none of the experiment's
    Inductor-only code: its assets materialize nothing, and every check is stored as "not applicable to
    OpenVINO: <why>", as the CLI stores it."""
    import importlib

    from pipeline.definitions import defs

    if OpenVINOAdapter().missing() is not None:
        pytest.skip("OpenVINO is not installed: pip install 'fusion-precision[openvino]'")
    exp = experiment(exp_id)
    inductor_only = importlib.import_module(f"pipeline.experiments.{module}.assets")
    # the code behind the asset must not be reached: it would read Inductor's generated code
    called: list[str] = []
    # ``first``: the first thing the experiment's asset body calls
    monkeypatch.setattr(inductor_only, first, lambda *a, **k: called.append(first) or 1 / 0)
    instance = dg.DagsterInstance.ephemeral()
    settings = ExperimentSettings(profile="smoke", device="cpu", backend="openvino")
    result = dg.materialize(
        [*exp.assets(), *exp.checks()],
        resources=build_resources(settings, base_dir=str(tmp_path)),
        instance=instance,
    )
    assert result.success and called == []
    assert result.get_asset_materialization_events() == []
    assert not list(tmp_path.rglob("*.parquet")) and not list(tmp_path.rglob("*.safetensors"))
    why = not_applicable(exp, "openvino")
    assert why is not None and why.startswith("not applicable to OpenVINO: ")
    outcomes = outcomes_by_compiler(defs, instance, profile="smoke")
    (where,) = [w for w in outcomes if w[0] == "openvino"]
    assert outcomes[where][exp_id].validity == NOT_APPLICABLE and outcomes[where][exp_id].verdict == why
    # every check of the experiment has its not-applicable evaluation
    recorded = {e.check_key for e in _all(instance, defs) if e.backend == "openvino"}
    assert recorded == {k for c in exp.checks() for k in c.check_keys}


def test_a_check_of_a_value_stored_once_counts_for_every_compiler_on_its_device():
    """S's pools and the planted-bug matrix depend on no fused path and are stored once; the check of such
    a value made in Inductor's run counts in OpenVINO's outcomes too, as on the site; a check of a fused
    value does not."""
    from pipeline.definitions import defs
    from pipeline.experiments import EXPERIMENTS
    from pipeline.storage import uses_fused_path

    graph = defs.resolve_asset_graph()
    group_of = {e.group: e.id for e in EXPERIMENTS}
    keys = sorted(graph.asset_check_keys, key=lambda k: k.to_user_string())
    exp_of = {k: group_of.get(graph.get(k.asset_key).group_name or "") for k in keys}
    shared = next(k for k in keys if not uses_fused_path(graph.get(k.asset_key).tags) and exp_of[k])
    fused = next(
        k
        for k in keys
        if uses_fused_path(graph.get(k.asset_key).tags) and exp_of[k] not in (None, "C1", exp_of[shared])
    )
    instance = dg.DagsterInstance.ephemeral()
    for key, device in ((shared, "cpu-a"), (fused, "cpu-a"), (shared, "cpu-b")):
        meta = {"provenance.backend": "inductor", "provenance.device_label": device, "provenance.profile": "smoke"}
        instance.report_runless_asset_event(
            dg.AssetCheckEvaluation(asset_key=key.asset_key, check_name=key.name, passed=True, metadata=meta)
        )
    record_not_applicable(
        instance, EXPERIMENTS, {"C1": OV_C1}, {"backend": "openvino", "device_label": "cpu-a", "profile": "smoke"}
    )
    outcomes = outcomes_by_compiler(defs, instance, profile="smoke")
    assert set(outcomes) == {("inductor", "cpu-a"), ("inductor", "cpu-b"), ("openvino", "cpu-a")}
    openvino = outcomes["openvino", "cpu-a"]
    assert openvino[exp_of[shared]] == outcomes["inductor", "cpu-a"][exp_of[shared]]
    assert exp_of[fused] in outcomes["inductor", "cpu-a"] and exp_of[fused] not in openvino
    assert openvino["C1"].validity == NOT_APPLICABLE
