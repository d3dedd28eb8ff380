"""The pipeline's reproducers: cases from an experiment's declared rows (D's), fuzzer seeds and planted bugs;
folders, reports, re-runs."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import polars as pl
import pytest

from pipeline.experiments import experiment
from pipeline.experiments.data_movement.repro_cases import case as d_case
from pipeline.experiments.data_movement.repro_cases import contradictions as d_contradictions
from pipeline.experiments.data_movement.repro_cases import row_id as d_repro_id
from pipeline.instruments.diagnostics import repro_build as repros
from pipeline.instruments.diagnostics.cases import fuzz_case
from pipeline.instruments.diagnostics.reproducers import cases_to_build
from pipeline.instruments.regression.probes import planted_case
from precisionkit import specials
from precisionkit.repro import Case, Input, lines_of, make_inputs, minimization_text, render, write

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "precisionkit"))
from repro_backends import SETUP, register

register()


def test_d_case_is_the_subgraph_in_plain_code_on_the_rows_own_inputs() -> None:
    c = d_case("transpose_concat", "float16", (4, 128, 256), "contiguous")
    assert c.id == "d-transpose_concat-float16-4x128x256-contiguous"
    assert c.rule == "bitwise" and c.backend == "inductor"
    assert "torch.cat([transpose, transpose_1], dim = -1)" in c.source
    # The row's salted inputs carry their drawing code (the file needs only torch); the rest stays short.
    plain = c.with_(inputs=tuple(dataclasses.replace(i, values="normal") for i in c.inputs))
    assert lines_of(plain) <= 30 and specials.SOURCE in render(c)
    t = d_case("reshape_concat", "bfloat16", (2, 7, 24), "transposed_view")
    x, y = make_inputs(t)
    assert x.shape == (2, 7, 24) and not x.is_contiguous() and y.dtype.is_floating_point
    with pytest.raises(ValueError, match="unknown D subgraph 'spin'"):
        d_case("spin", "float16", (1, 2, 3), "contiguous")
    with pytest.raises(ValueError, match="unknown D layout"):
        d_case("transpose_concat", "float16", (1, 2, 3), "diagonal")


def test_fuzz_case_keeps_the_fuzzers_inputs_and_tolerance() -> None:
    from precisionkit import fuzz

    c = fuzz_case(5)
    graph = fuzz.generate(5)
    assert c.rule == "fp64" and c.atol == graph.tolerance()[0].atol
    mine, theirs = make_inputs(c), graph.make_inputs()
    assert len(mine) == len(theirs) and all(a.equal(b) for a, b in zip(mine, theirs, strict=True))


D_TABLE = "data_movement_check_table"


def _d_table() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "subgraph": ["transpose_concat", "transpose_concat", "rope_rotate_half", "scaled_add_concat"],
            "dtype": ["float16", "float16", "float16", "float16"],
            "shape": ["4x128x256", "2x77x200", "4x128x256", "1x333x96"],
            "layout": ["contiguous", "contiguous", "contiguous", "contiguous"],
            "has_implicit_computation": [False, False, False, True],
            "bit_equal": [False, True, False, False],
            "mismatched_elements": [252900, 0, 3, 40],
            "nan_encoding_mismatches": [10, 0, 3, 0],
        }
    )


def test_only_contradictions_and_mismatches_get_reproducers() -> None:
    table = _d_table()
    assert d_contradictions(table)["shape"].to_list() == ["4x128x256"]  # not the NaN-payload row, not arithmetic
    fuzz = pl.DataFrame(
        {"seed": [3, 4, 9], "dtype": ["float32", "float16", "bfloat16"], "class": ["ok", "mismatch", "crash"]}
    )
    diff = pl.DataFrame(
        {
            "generator": ["typed", "typed", "norm", "typed"],
            "seed": [5, 6, 7, 8],
            "dtype": ["float32", "float16", "float32", "bfloat16"],
            "class": ["mismatch", "mismatch", "ok", "mismatch"],
            "features": ["cast, fp16_bf16", "cast, fp16_bf16", "layer_norm", "argmin_argmax"],
        }
    )
    built = cases_to_build({D_TABLE: table}, fuzz, diff, "inductor", cap=2)
    assert [(src, c.id) for src, c in built] == [
        ("D", "d-transpose_concat-float16-4x128x256-contiguous"),
        ("fuzzer", "fuzz-4-float16"),
        ("differential tester", "typed-5-float32"),  # one per feature set: seed 6 repeats seed 5's
        ("differential tester", "typed-8-bfloat16"),
    ]
    assert [c.id for _, c in cases_to_build({D_TABLE: table}, fuzz, diff, "inductor", cap=0)] == [built[0][1].id]
    assert [src for src, _ in cases_to_build({D_TABLE: table}, fuzz, diff, "inductor", cap=1, contradiction_cap=0)] == [
        "fuzzer",
        "differential tester",
    ]
    assert d_repro_id(d_contradictions(table).row(0, named=True)) == built[0][1].id
    assert {c.device for _, c in built} == {"cpu"}
    # the fuzzers' cases run on the device they were found on: the row's where it has one, else the run's
    on_cuda = cases_to_build(
        {D_TABLE: table}, fuzz, diff.with_columns(device=pl.lit("cuda:1")), "inductor", cap=2, device="cuda"
    )
    assert [c.device for _, c in on_cuda] == ["cuda", "cuda", "cuda:1", "cuda:1"]


def test_the_reproducers_read_what_an_experiments_record_declares() -> None:
    from types import SimpleNamespace

    from pipeline.experiment import Experiment, Reproducers
    from pipeline.instruments.diagnostics.reproducers import SOURCES, bisect_options, reproducers, source_metadata

    d = experiment("D")
    assert d.reproducers is not None and d.reproducers.table == D_TABLE and d.reproducers.prefix == "d"
    assert [e.id for e in SOURCES] == ["D"]
    # the asset's inputs are the declared tables and the fuzzers' outcomes, by name, from the records
    assert set(reproducers.keys_by_input_name) == {D_TABLE, "fuzz_outcomes", "difftest_outcomes"}
    assert bisect_options("D") == {"knobs": True, "max_checks": 40}
    assert bisect_options("fuzzer") == bisect_options("differential tester") == {"knobs": False, "max_checks": 25}
    meta = source_metadata({D_TABLE: _d_table()}, cap=0)
    assert meta == {"d_contradicting_rows": 1, "cap_d": 0, "d_not_built": 1}
    # another experiment's declaration is read the same way: its table, its rows, its grouping, its cases
    cases = SimpleNamespace(
        ONE_PER=("k",),
        contradictions=lambda t: t.filter(pl.col("bad")),
        row_case=lambda row, backend, device, seed: Case(
            f"z-{row['k']}-{row['n']}",
            "def graph(x):\n    return x\n",
            (Input("x", (2,)),),
            backend=backend,
            device=device,
        ),
    )
    z = Experiment(
        id="Z",
        title="z",
        group="z",
        slug="z",
        sections=(),
        load=lambda: (),
        reproducers=Reproducers(table="z_table", prefix="z", load=lambda: cases, knobs=False, max_checks=5),  # type: ignore[arg-type]
    )
    rows = pl.DataFrame({"k": ["a", "a", "b", "c"], "n": [1, 2, 3, 4], "bad": [True, True, False, True]})
    none = pl.DataFrame(schema={"class": pl.String, "features": pl.String})
    made = cases_to_build({"z_table": rows}, none, none, "aot_eager", cap=0, contradiction_cap=5, sources=(z,))
    assert [(src, c.id, c.backend) for src, c in made] == [("Z", "z-a-1", "aot_eager"), ("Z", "z-c-4", "aot_eager")]


def test_environment_names_what_a_compiler_bug_report_needs() -> None:
    env = repros.environment()
    assert env["device"] == "cpu" and repros.environment("meta")["device"] == "meta"  # the case's, not a constant
    assert set(env) >= {"torch", "cpu_model", "aten_cpu_capability", "inductor_vec_isa", "cxx", "march_native"}
    assert env["aten_cpu_capability"] in ("DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256", "NO AVX")
    assert env["cxx"].split(":")[0]


def test_rerun_records_the_status_per_torch_version(tmp_path: Path) -> None:
    import torch

    c = Case("no-kernel", "def graph(x):\n    return x * 2.0\n", (Input("x", (3,)),), backend="eager", rule="compiled")
    write(c, tmp_path / "no-kernel")
    (tmp_path / ".staging").mkdir()  # a folder being built is not listed
    rows = repros.rerun(tmp_path)
    assert [(r["id"], r["status"]) for r in rows] == [("no-kernel", "reproduces")]
    meta = json.loads((tmp_path / "no-kernel" / "meta.json").read_text())
    assert meta["versions"] == {torch.__version__: "reproduces"}
    with pytest.raises(ValueError, match="cannot import torch"):
        repros.torch_version_of("/bin/false")


@pytest.mark.slow
def test_build_writes_a_minimized_bisected_reproducer_and_its_report(tmp_path: Path) -> None:
    src = "def graph(x):\n    y = x * 1.5\n    y = torch.relu(y)\n    return y * 2.0\n"
    c = Case("tail", src, (Input("x", (6, 20), "float32", 4),), backend="pk_test_tail", rule="bitwise", setup=SETUP)
    meta = repros.build(c, tmp_path, control="eager", knobs=False)
    folder = tmp_path / "tail"
    assert sorted(p.name for p in folder.iterdir()) == [
        "case.json",
        "case.original.json",
        "meta.json",
        "report.md",
        "repro.py",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the staging folder is gone
    assert (meta["ops_before"], meta["ops_after"], meta["shapes_after"]) == (3, 1, [[1, 10]])
    assert (meta["minimize_ended"], meta["minimize_max_checks"]) == ("exhausted", 40)
    # the report and the file's docstring say what minimizing did from the one record (meta.json)
    said = (
        f"Minimized from 3 to 1 ops and from shapes [[6, 20]] to [[1, 10]] ({meta['minimize_checks']} candidates, "
        f"{meta['minimize_seconds']} s)."
    )
    assert (
        minimization_text(meta) == said
        and json.loads((folder / "meta.json").read_text())["minimize_ended"] == "exhausted"
    )
    assert (folder / "repro.py").read_text().splitlines()[1] == said + '"""'
    assert meta["lines"] == len((folder / "repro.py").read_text().splitlines())
    assert meta["status"] == "reproduces"
    assert meta["layer_at_fault"] == "the backend 'pk_test_tail' (wraps the layers above)"
    report = (folder / "report.md").read_text()
    for part in ("## Environment", "## Reproducer", "## Observed", "## Expected", "## Bisection", "march_native"):
        assert part in report
    assert "REPRODUCES: 2 of 10 elements differ" in report and f"\n\n{said}\n\n```python\n" in report


@pytest.mark.slow
def test_planted_fallback_is_found_by_the_compiled_rule_first() -> None:
    case, tried = planted_case("planted_fallback_to_eager")
    assert case is not None and tried == 1 and case.rule == "compiled"
    with pytest.raises(ValueError, match="unknown planted bug 'planted_nothing'"):
        planted_case("planted_nothing")


def test_cli_specs_name_d_rows_fuzzer_seeds_and_tester_programs() -> None:
    from pipeline.cli import _repro_case

    assert _repro_case("d/transpose_concat/bfloat16/2x7x24/transposed_view", "inductor").id == (
        "d-transpose_concat-bfloat16-2x7x24-transposed_view"
    )
    assert _repro_case("fuzz/9/float16", "inductor").id == "fuzz-9-float16"
    made = _repro_case("difftest/norm/4/float32", "aot_eager")
    assert made.id == "norm-4-float32" and made.rule == "diff" and made.backend == "aot_eager"
    for bad in ("difftest/typed/x", "d/transpose_concat/float16/4x128/contiguous/extra", "fuzz"):
        with pytest.raises(ValueError, match="expected d/"):
            _repro_case(bad, "inductor")
    with pytest.raises(ValueError, match="generator must be one of"):
        _repro_case("difftest/conv/3", "inductor")
    # every kind of case carries the device the command names (a fake device: no GPU needed to see it)
    for spec in ("d/transpose_concat/bfloat16/2x7x24/transposed_view", "fuzz/9/float16", "difftest/norm/4/float32"):
        assert _repro_case(spec, "inductor", "meta").device == "meta"
    assert _repro_case("fuzz/9/float16", "inductor").device == "cpu"


def test_repros_command_refuses_a_device_this_machine_lacks_in_one_line(capsys) -> None:
    from pipeline import cli

    code = cli.main(["repros", "--device", "tpu9", "--make", "fuzz/9/float16"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("repros: --device tpu9: ")


def test_every_rule_has_an_expected_outcome_for_the_report() -> None:
    from precisionkit.repro import RULES

    phrase = {
        "bitwise": "bit-identical to eager",
        "ulp": "than eager (+2 ULP)",
        "fp64": "within the tolerance against fp64",
        "repeat": "same bits",
        "compiled": "at least one kernel",
        "diff": "integer and bool outputs equal to eager's",
    }
    assert set(phrase) == set(RULES)
    for rule, words in phrase.items():
        assert words in repros._expected(rule, 2)


def test_bisection_variants_run_side_by_side_on_an_accelerator_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert repros.bisect_workers("cpu") == 2  # the run's other work keeps the CPU's cores
    assert repros.bisect_workers("cuda") == 8 and repros.bisect_workers("cuda:1") == 8
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert repros.bisect_workers("cuda") == 2


def test_reproducers_are_built_side_by_side_only_on_an_accelerator_host(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from pipeline.instruments.diagnostics.reproducers import build_workers

    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert build_workers(torch.device("cpu"), 23) == 1
    assert build_workers(torch.device("cuda"), 23) == 4 and build_workers(torch.device("cuda"), 2) == 2
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert build_workers(torch.device("cuda"), 23) == 1


@pytest.mark.heavy
def test_a_reproducer_built_in_a_worker_is_the_one_built_here(tmp_path: Path) -> None:
    """As on an accelerator host, where builds are compile-pool tasks: the same row (timings aside)."""
    import torch

    from pipeline.compile_pool import run_tasks
    from pipeline.instruments.diagnostics.reproducers import build_row

    case, _ = planted_case("planted_off_by_one_ulp")
    assert case is not None
    here = build_row("fuzzer", case, tmp_path / "here")
    (pooled,) = run_tasks(build_row, [("fuzzer", case, tmp_path / "pooled")], torch.device("cpu"), 1, here=False)
    timing = ("minimize_seconds", "bisect_seconds", "folder")
    assert {k: v for k, v in here.items() if k not in timing} == {k: v for k, v in pooled.items() if k not in timing}
    assert here["status"] == "reproduces" and (tmp_path / "pooled" / here["id"] / "repro.py").is_file()


def test_the_asset_reads_each_declared_table_by_name_and_builds_nothing_for_a_healthy_run(tmp_path: Path) -> None:
    import dagster as dg

    from pipeline.definitions import build_resources
    from pipeline.instruments.diagnostics.reproducers import reproducers
    from pipeline.resources import ExperimentSettings

    clean = _d_table().with_columns(bit_equal=pl.lit(True))
    fuzz = pl.DataFrame({"seed": [3], "dtype": ["float32"], "class": ["ok"]})
    diff = pl.DataFrame({"generator": ["typed"], "seed": [5], "dtype": ["float32"], "class": ["ok"], "features": ["x"]})

    @dg.asset(name=D_TABLE)
    def d_table() -> pl.DataFrame:
        return clean

    @dg.asset
    def fuzz_outcomes() -> pl.DataFrame:
        return fuzz

    @dg.asset
    def difftest_outcomes() -> pl.DataFrame:
        return diff

    settings = ExperimentSettings(profile="smoke", device="cpu")
    result = dg.materialize(
        [d_table, fuzz_outcomes, difftest_outcomes, reproducers],
        resources=build_resources(settings, base_dir=str(tmp_path)),
    )
    assert result.success
    assert result.output_for_node("reproducers").height == 0
    (mat,) = [m for m in result.asset_materializations_for_node("reproducers")]
    meta = {k: v.value for k, v in mat.metadata.items()}
    assert (meta["d_contradicting_rows"], meta["d_not_built"], meta["reproducers"]) == (0, 0, 0)


def test_the_reproducers_table_of_the_site_says_why_a_case_did_not_shrink(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from pipeline.instruments.diagnostics.report import reproducers_section
    from pipeline.instruments.diagnostics.reproducers import SCHEMA

    row = {
        "id": "fuzz-7-float32",
        "source": "fuzzer",
        "title": "",
        "backend": "inductor",
        "rule": "diff",
        "ops_before": 12,
        "ops_after": 12,
        "shapes_before": "[[4, 8]]",
        "shapes_after": "[[4, 8]]",
        "minimize_checks": 25,
        "minimize_accepted": 0,
        "minimize_ended": "budget",
        "minimize_max_checks": 25,
        "lines": 30,
        "status": "reproduces",
        "first_layer": "inductor",
        "layer_at_fault": "Inductor",
        "workaround": "",
        "minimize_seconds": 61.5,
        "bisect_seconds": 90.0,
        "folder": str(tmp_path / "fuzz-7-float32"),
    }
    text = reproducers_section(SimpleNamespace(data_dir=tmp_path), pl.DataFrame([row], schema=SCHEMA))  # type: ignore[arg-type]
    assert (
        "Not minimized: could not shrink its 12 ops because its budget of 25 candidates ran out (25 tried in 61.5 s)."
        in text
    )
    assert "Minimized from" not in text
