"""The compilers beside Inductor, end to end through the CLI: for each of OpenVINO and IREE (skipped with the
reason where it is not installed), ``report --profile smoke`` in a fresh folder runs S, one of B's chains and a
few of D's subgraphs (``--select``: the whole of B and D at smoke size is minutes of compiles on a 2-core
CPU), and every experiment it ran is valid or stored as not applicable to that compiler with its reason,
never invalid; the fusion evidence it stored names that compiler.

What each compiler does with the selected parts is part of what is tested: OpenVINO fuses none of a
transpose/concat (a finding, not judged as fused), and runs every bfloat16 chain in torch (B's bfloat16 rows
are not run as fused, with OpenVINO's error); IREE keeps casts by default (its faithful-casts path is its
plain fused path).

Time (``make test`` budget: under 90 s per compiler on 2 idle cores): see ``wall`` in each test's output.
"""

from __future__ import annotations

import time

import polars as pl
import pytest

from pipeline import cli, storage
from pipeline.verdicts import NOT_APPLICABLE

pytestmark = [pytest.mark.slow, pytest.mark.materializes]

#: The parts run: one chain of B, and of D one pure graph and one that hides arithmetic.
SELECT = ["B:softmax", "D:transpose_concat,scaled_add_concat"]
RAN = ("S", "B", "D")


def _missing(backend: str) -> str | None:
    """Why ``backend``'s compiler cannot run here (its adapter's words, with the install command), or None."""
    from precisionkit.backends import get_adapter

    return get_adapter(backend, require_installed=False).missing()


@pytest.mark.parametrize("backend", ["openvino", "iree"])
def test_a_compiler_runs_s_one_b_chain_and_d_valid_or_not_applicable(backend, tmp_path, monkeypatch, capsys):
    from pipeline.cli import local
    from pipeline.compilers import failed_steps_by_compiler, outcomes_by_compiler
    from pipeline.definitions import defs

    if (why := _missing(backend)) is not None:
        pytest.skip(why)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FUSION_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("FUSION_SITE_DIR", str(tmp_path / "site"))
    monkeypatch.delenv("FUSION_SELECT", raising=False)  # set by --select; undone after the test
    argv = ["report", "--profile", "smoke", "--device", "cpu", "--backend", backend, "--only", ",".join(RAN)]
    start = time.perf_counter()
    status = cli.main([*argv, *(a for s in SELECT for a in ("--select", s))])
    wall = time.perf_counter() - start
    out = capsys.readouterr().out
    print(f"{backend}: wall {wall:.1f} s, exit status {status}")

    instance = local.local_instance()
    failed = failed_steps_by_compiler(instance, "smoke").get(backend, {})
    assert not {e: why for e, why in failed.items() if e in RAN}, out
    outcomes = outcomes_by_compiler(defs, instance, "smoke")
    (where,) = [w for w in outcomes if w[0] == backend]
    for exp_id in RAN:
        outcome = outcomes[where][exp_id]
        assert outcome.validity in ("valid", NOT_APPLICABLE), (exp_id, outcome)
        if outcome.validity == NOT_APPLICABLE:
            assert outcome.verdict.startswith(f"not applicable to {_title(backend)}: "), outcome

    # The stored fusion evidence is this compiler's: B's fused paths and D's rows name it.
    folder = tmp_path / "data" / "smoke" / "compilers" / backend
    evidence = storage.read_value(folder / "accumulated_error_fusion_evidence")
    assert set(evidence["chain"]) == {"softmax"}
    ran = evidence.filter(pl.col("path").is_in(["fused", "fused_emulate"]) & pl.col("unavailable").is_null())
    assert ran.height and set(ran["compiler"]) == {backend} and ran["kernel_count"].min() > 0
    table = storage.read_value(folder / "data_movement_check_table")
    assert set(table["subgraph"]) == {"transpose_concat", "scaled_add_concat"}
    assert set(table["compiler"]) == {backend}
    fused = table.filter(pl.col("not_fused").is_null())
    assert fused.height and fused["kernel_count"].min() > 0
    # every path not run as fused says why, in the compiler's words
    for why in [*evidence["unavailable"].drop_nulls(), *table["not_fused"].drop_nulls()]:
        title = _title(backend)
        assert why.startswith(
            (f"not fused by {title}: ", f"not applicable to {title}: ", f"compile failed with {title}: ")
        )


def _title(backend: str) -> str:
    from pipeline.compilers import compiler_title

    return compiler_title(backend)
