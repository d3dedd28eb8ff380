"""A compiler whose native code crashes the process (here: SIGSEGV while compiling) is an invalid run
of the experiment it crashed in, with the signal as its reason, and the rest of the report is built:
``report`` runs any compiler but Inductor in a child process it watches (pipeline/cli/supervise.py)."""

from __future__ import annotations

import sys

import pytest

from pipeline import cli

CRASHING = """
import os
import signal

from precisionkit.backends.base import BackendAdapter


class Crashing(BackendAdapter):
    name, title = "crashing", "Crashing"

    def compiler(self, options):
        def compile_graph(gm, example_inputs):
            os.kill(os.getpid(), signal.SIGSEGV)

        return compile_graph
"""


@pytest.fixture
def crashing(tmp_path, monkeypatch):
    """A compiler registered through its entry point, from a folder on ``sys.path``."""
    from precisionkit.backends import _entry_points_on

    root = tmp_path / "dist"
    (root / "crashing_compilers-0.1.dist-info").mkdir(parents=True)
    (root / "crashing_compilers.py").write_text(CRASHING)
    info = root / "crashing_compilers-0.1.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: crashing-compilers\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fusion_precision.backends]\ncrashing = crashing_compilers:Crashing\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, "crashing_compilers", raising=False)
    for name in ("DAGSTER_HOME", "FUSION_DATA_DIR", "FUSION_SITE_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    _entry_points_on.cache_clear()
    yield
    _entry_points_on.cache_clear()


def test_a_compiler_that_crashes_the_process_is_an_invalid_run_and_the_report_is_built(tmp_path, capfd, crashing):
    from pipeline.cli import local
    from pipeline.compilers import failed_steps_by_compiler, outcomes_by_compiler
    from pipeline.definitions import defs

    argv = ["report", "--profile", "smoke", "--device", "cpu", "--only", "C2", "--backend", "crashing"]
    assert cli.main(argv) == 1
    out = capfd.readouterr().out
    assert "crashing crashed the process (SIGSEGV) in C2: recorded as an invalid run with that reason" in out
    assert "C2            invalid        not judged (invalid run)" in out
    reason = (
        "step c2_long_reductions: NativeCrash: the process died of SIGSEGV while running this step "
        "(native code: the compiler's or a library's)"
    )
    instance = local.local_instance()
    assert failed_steps_by_compiler(instance, "smoke") == {"crashing": {"C2": ("c2_long_reductions", reason)}}
    outcome = outcomes_by_compiler(defs, instance, "smoke")["crashing", ""]["C2"]
    assert (outcome.validity, outcome.invalid_checks) == ("invalid", ("step failed: c2_long_reductions",))
    # The rest of the report is built, and C2's page says why it is invalid.
    page = (tmp_path / "fusion_site_dir" / "build" / "results" / "reduction-order.html").read_text()
    assert f"failed: {reason}" in page
    # No run is left in progress: the crashed one is marked failed.
    assert local.release_interrupted_runs(instance) == []


def test_the_supervisor_names_a_signal_and_leaves_inductor_in_this_process(monkeypatch):
    from pipeline.cli.supervise import IN_PROCESS_ENV, isolated, signal_name

    assert signal_name(-11) == "SIGSEGV" and signal_name(-6) == "SIGABRT" and signal_name(-99) == "signal 99"
    monkeypatch.delenv(IN_PROCESS_ENV, raising=False)
    assert not isolated("inductor") and isolated("openvino") and isolated("crashing")
    monkeypatch.setenv(IN_PROCESS_ENV, "1")
    assert not isolated("openvino")


def test_the_child_refuses_an_argument_report_does_not_take(capsys):
    from pipeline.cli.child import main

    assert main(['{"profile": "smoke", "colour": "red"}']) == 2
    assert "not an argument of report: colour" in capsys.readouterr().err
