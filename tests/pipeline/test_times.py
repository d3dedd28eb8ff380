"""Where a run's time went: the table from step events, the last run of a profile, ``cli times``,
the site's section and the report-time benchmark's plumbing (with a tiny job, never a real report)."""

import importlib.util
import subprocess
from pathlib import Path

import dagster as dg
import pytest

from pipeline import cli
from pipeline.profiles import PROFILES
from pipeline.timing import (
    OUTSIDE_STEPS,
    StepEvent,
    build_table,
    last_run,
    markdown_section,
    site_table,
    table_for_run,
    text_table,
)

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0


def _events() -> list[StepEvent]:
    """Three steps one after another: a (60 s), b (180 s, two assets), a separate check (10 s)."""
    return [
        StepEvent("start", "a", T0),
        StepEvent("asset", "a", T0 + 59, "toolkit/inputs"),
        StepEvent("success", "a", T0 + 60),
        StepEvent("start", "b", T0 + 60),
        StepEvent("asset", "b", T0 + 200, "b_table"),
        StepEvent("asset", "b", T0 + 239, "b_summary"),
        StepEvent("success", "b", T0 + 240),
        StepEvent("start", "b_check", T0 + 240),
        StepEvent("check", "b_check", T0 + 249, "b_table:rows_present"),
        StepEvent("failure", "b_check", T0 + 250),
    ]


def test_rows_longest_first_with_shares_of_the_run_and_time_outside_steps():
    table = build_table(_events(), "run1", "default", run_start=T0 - 5, run_end=T0 + 260)
    assert table.wall == 265.0 and table.total == 265.0
    assert [r.step for r in table.rows] == ["b", "a", "b_check", OUTSIDE_STEPS]
    assert [r.seconds for r in table.rows] == [180.0, 60.0, 10.0, 15.0]
    assert [round(r.share, 2) for r in table.rows] == [67.92, 22.64, 3.77, 5.66]
    assert sum(r.share for r in table.rows) == pytest.approx(100.0)
    assert [r.what for r in table.rows[:3]] == ["b_table, b_summary", "toolkit/inputs", "check b_table:rows_present"]
    assert [r.status for r in table.rows] == ["done", "done", "failed", ""]
    assert not table.in_progress
    # default profile: 20 minutes
    assert table.budget is not None and table.budget.seconds == 1200
    assert table.budget_line() == (
        "budget of profile default: 20m 00s; this run took 4m 25s (22 % of it), 15m 35s under"
    )


def test_text_table():
    text = text_table(build_table(_events(), "run1", "default", run_start=T0 - 5, run_end=T0 + 260))
    assert text.splitlines() == [
        "where the time went: run run1 (profile default), 4m 25s",
        "  step             asset(s)                       wall time    share",
        "  b                b_table, b_summary                3m 00s    67.9%",
        "  a                toolkit/inputs                    1m 00s    22.6%",
        "  b_check          check b_table:rows_present         10.0s     3.8%  failed",
        "  (outside steps)  start-up, waits between steps      15.0s     5.7%",
        "  total                                              4m 25s   100.0%",
        "budget of profile default: 20m 00s; this run took 4m 25s (22 % of it), 15m 35s under",
    ]


def test_over_budget_and_the_run_span_from_events_when_the_record_has_none():
    events = [StepEvent("start", "x", T0), StepEvent("success", "x", T0 + 150)]
    table = build_table(events, "r", "smoke")
    assert table.wall == 150.0 and [r.step for r in table.rows] == ["x"]  # no time outside the only step
    assert table.rows[0].share == 100.0
    assert table.budget_line().endswith("(125 % of it), OVER by 30.0s")


def test_overlapping_steps_share_the_summed_step_time():
    events = [
        StepEvent("start", "p", T0),
        StepEvent("start", "q", T0),
        StepEvent("success", "q", T0 + 30),
        StepEvent("success", "p", T0 + 90),
    ]
    table = build_table(events, "r", "seed", run_start=T0, run_end=T0 + 90)
    assert table.total == 120.0 and [r.step for r in table.rows] == ["p", "q"]
    assert [r.share for r in table.rows] == [75.0, 25.0]


def test_a_step_still_going_counts_until_now():
    events = [StepEvent("start", "x", T0), StepEvent("success", "x", T0 + 10), StepEvent("start", "y", T0 + 10)]
    table = build_table(events, "r", "default", run_start=T0, now=T0 + 40)
    assert table.in_progress and table.wall == 40.0
    assert [(r.step, r.seconds, r.status) for r in table.rows] == [("y", 30.0, "running"), ("x", 10.0, "done")]
    # a run that ended (killed) without the step's end: counted to the run's end, marked unfinished
    ended = build_table(events, "r", "default", run_start=T0, run_end=T0 + 25)
    assert not ended.in_progress and ended.rows[0].status == "unfinished" and ended.rows[0].seconds == 15.0


def test_many_assets_of_one_step_are_shortened():
    events = [StepEvent("start", "m", T0), StepEvent("success", "m", T0 + 1)]
    events += [StepEvent("asset", "m", T0 + 0.5, f"m{i}") for i in range(5)]
    assert build_table(events, "r", "smoke").rows[0].what == "m0, m1, m2 +2 more"


def test_every_profile_has_a_budget_with_its_reason():
    budgets = {name: p.budget for name, p in PROFILES.items()}
    assert all(b is not None and b.reason for b in budgets.values())
    assert {n: b.seconds for n, b in budgets.items() if b is not None and n != "gpu"} == {
        "smoke": 120,
        "default": 1200,
        "seed": 3600,
    }
    if "gpu" in PROFILES:
        assert PROFILES["gpu"].budget is not None and PROFILES["gpu"].budget.seconds == 600


def test_markdown_section():
    table = build_table(_events(), "run1", "default", run_start=T0 - 5, run_end=T0 + 260)
    text = markdown_section(table, "default")
    assert text.startswith("## Where the time went\n")
    assert "| `b` | b_table, b_summary | 3m 00s | 67.9 % | done |" in text
    assert "| *(outside steps)* | start-up, waits between steps | 15.0s | 5.7 % |  |" in text
    assert "| **total** | | **4m 25s** | 100 % | |" in text
    assert "Budget of profile default: 20m 00s; this run took 4m 25s (22 % of it), 15m 35s under." in text
    assert "15m 35s under. Why this budget: a first run on a 2-core CPU" in text
    assert "No run of profile **seed**" in markdown_section(None, "seed")


def test_site_section_shows_the_longest_steps_then_the_rest_and_the_report_step_is_not_a_run_still_going():
    events = [
        StepEvent(k, f"s{i:02d}", T0 + i * (i + 1) / 2 + (i + 1 if k == "success" else 0))
        for i in range(12)
        for k in ("start", "success")
    ]
    events += [StepEvent("start", "report_site", T0 + 100)]  # the report's own step builds the page: open
    table = build_table(events, "run1", "smoke", run_start=T0, now=T0 + 120)
    text = markdown_section(table, "smoke", top=10)
    rows = [line for line in text.splitlines() if line.startswith("| ")][1:]  # after the header
    assert len(rows) == 10 + 3  # the ten longest of 13 steps, "the rest", the time outside steps, the total
    assert rows[10].startswith("| *the rest* | 3 more steps | ")
    assert rows[11].startswith("| *(outside steps)* |") and rows[12].startswith("| **total** |")
    assert "still running" not in text and "still going" not in text
    assert "Every other step had ended; the report's own step is counted until this page was built." in text
    open_step = build_table(
        [*events, StepEvent("start", "late", T0 + 110)], "run1", "smoke", run_start=T0, now=T0 + 120
    )
    assert "1 step(s) besides the report's were still running" in markdown_section(open_step, "smoke")


# --- from a real (ephemeral) Dagster instance: a tiny job whose config names a profile --------------


class _Settings(dg.ConfigurableResource):
    profile: str = "default"


@dg.asset
def tiny(settings: _Settings) -> int:
    return 1


@dg.asset(deps=[tiny])
def report_site(settings: _Settings) -> int:
    return 2


_JOB = dg.Definitions(
    assets=[tiny, report_site],
    jobs=[dg.define_asset_job("all_assets_job")],
    resources={"settings": _Settings.configure_at_launch()},
).resolve_job_def("all_assets_job")


def _run(instance: dg.DagsterInstance, profile: str, only_report: bool = False) -> str:
    job = _JOB.get_subset(asset_selection={dg.AssetKey("report_site")}) if only_report else _JOB
    config = {"resources": {"settings": {"config": {"profile": profile}}}}
    return job.execute_in_process(instance=instance, run_config=config).run_id


def test_table_of_a_run_from_the_event_log_and_the_last_run_of_a_profile():
    with dg.DagsterInstance.ephemeral() as instance:
        first = _run(instance, "smoke")
        _run(instance, "default")
        rebuilt = _run(instance, "smoke", only_report=True)
        table = table_for_run(instance, first)
        assert table is not None and table.profile == "smoke" and not table.in_progress
        assert {r.step: (r.what, r.status) for r in table.rows if r.step != OUTSIDE_STEPS} == {
            "tiny": ("tiny", "done"),
            "report_site": ("report_site", "done"),
        }
        assert sum(r.share for r in table.rows) == pytest.approx(100.0)
        # a run that only rebuilt the report is skipped: the last smoke run is the first one
        record = last_run(instance, "smoke")
        assert record is not None and record.dagster_run.run_id == first
        assert last_run(instance, "seed") is None
        shown = site_table(instance, rebuilt, "smoke")  # the site built by the rebuild shows the run before
        assert shown is not None and shown.run_id == first
        assert table_for_run(instance, "no-such-run") is None


def test_cli_times_prints_the_last_run_and_fails_clearly_without_one(monkeypatch, capsys):
    with dg.DagsterInstance.ephemeral() as instance:
        run_id = _run(instance, "smoke")
        monkeypatch.setattr(cli.local, "local_instance", lambda: instance)
        assert cli.main(["times", "--profile", "smoke"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith(f"where the time went: run {run_id} (profile smoke), ")
        assert [line.split()[0] for line in out[2:-1]][-1] == "total"
        assert out[-1].startswith("budget of profile smoke: 2m 00s; this run took ")
        assert cli.main(["times", "--profile", "seed"]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert len(captured.err.strip().splitlines()) == 1
        assert captured.err.startswith("times: no run of profile seed recorded in the Dagster instance")


# --- the report-time benchmark, with a fake report ---------------------------------------------------


def _benchmark():
    spec = importlib.util.spec_from_file_location("report_time", ROOT / "benchmarks" / "report_time.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_report_time_arguments_and_environment(tmp_path):
    bench = _benchmark()
    args = bench.parse_args([])
    assert (args.profile, args.native, args.warm_cache, args.keep) == ("default", False, False, False)
    env = bench.child_env(args, tmp_path, base={"PATH": "/bin"})
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["DAGSTER_HOME"] == str(tmp_path / "home") and env["FUSION_DATA_DIR"] == str(tmp_path / "data")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "inductor") and env["PATH"] == "/bin"
    native = bench.child_env(bench.parse_args(["--native", "--warm-cache"]), tmp_path, base={})
    assert not {"ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "TORCHINDUCTOR_CACHE_DIR"} & set(native)
    assert bench.report_command("default")[1:] == ["-m", "pipeline.cli", "report", "--profile", "default", "--all"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--profile", "huge"])


def test_report_time_prints_the_table_of_the_run_it_made(capsys):
    bench = _benchmark()
    seen = {}

    def fake_report(command, env, cwd, check):
        """Stands in for the report: runs the tiny job in the instance the benchmark prepared."""
        seen.update(command=command, env=env)
        from dagster._core.instance.ref import InstanceRef

        with dg.DagsterInstance.from_ref(InstanceRef.from_dir(env["DAGSTER_HOME"])) as instance:
            _run(instance, "default")
        return subprocess.CompletedProcess(command, 0)

    assert bench.main([], runner=fake_report) == 0
    out = capsys.readouterr().out
    assert "report-time: profile default, slow path (AVX2), empty Inductor cache" in out
    assert "where the time went: run " in out and "budget of profile default: 20m 00s" in out
    assert seen["env"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert not Path(seen["env"]["DAGSTER_HOME"]).exists()  # the temporary folder is removed
