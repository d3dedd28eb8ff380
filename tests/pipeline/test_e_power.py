"""E's rule's measured power, in the shared power-table format: the stored table is what E's own judge does on
simulated runs (a cell measured again gives the same count), the page shows it under E's rule through the shared
renderer, with the table the claim check measures at the run's own noise, and a supported verdict whose test
detects only effects beyond the margin says so on the verdict line."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from pipeline.experiments import experiment
from pipeline.experiments.training import error_rates, power_study, rules
from pipeline.experiments.training import report as e_report
from pipeline.experiments.training.assets import _power_metadata
from pipeline.experiments.training.judge import judge_training
from pipeline.pagekit import power
from pipeline.pagekit.render import CheckRecord, plain_value
from pipeline.reporting.outcomes import rules_section

ROOT = Path(__file__).resolve().parents[2]
CHECK = "training_deviation:fused_learns_like_eager"
STORED = ROOT / "pipeline" / "experiments" / "training" / "power.json"


def _table() -> power.PowerTable:
    (table,) = power.load_power_tables(STORED)
    return table


def _cell(table: power.PowerTable, condition: str, effect: str) -> power.Effect:
    (size,) = [s for s in table.sizes if s.condition == condition]
    (cell,) = [e for e in size.effects if e.effect == effect]
    return cell


def test_the_stored_table_loads_in_the_shared_format_and_is_es_rules():
    table = _table()
    assert json.loads(STORED.read_text())["format"] == power.POWER_TABLE_FORMAT
    assert table.experiment == "E" and table.checks == (CHECK,) and power.table_for(CHECK) == table
    assert (table.kind, table.unit, table.threshold, table.power) == ("measured", "margins", 1.0, 0.8)
    assert table.fields["fingerprint"] == error_rates.rule_fingerprint()
    assert table.fields["command"] == "python -m pipeline.experiments.training.power_study --write"
    assert [(s.n, s.condition, s.level) for s in table.sizes] == [
        (5, "sd 0.25 margin, normal", 0.25),
        (5, "sd 0.25 margin, heavy", 0.25),
        (5, "sd 0.5 margin, normal", 0.5),
        (5, "sd 0.5 margin, heavy", 0.5),
    ]
    for size in table.sizes:
        assert len(size.effects) == len(rules.MEASURED_EFFECTS)
        assert {e.replications for e in size.effects} == {rules.MEASURED_DRAWS}
        # the false-alarm rows: nothing planted or less than the margin
        assert {e.size for e in size.effects if e.healthy} == {0.0, 0.5, 0.9, 0.99}
    plan = _cell(table, "sd 0.25 margin, normal", "shift 1.5 margins (0.015 nats)")
    assert (plan.contradicted, plan.inconclusive, plan.supported) == (216, 284, 0)
    assert _cell(table, "sd 0.25 margin, heavy", "shift 0.99 margins (0.0099 nats)").contradicted == 3
    assert [power.smallest_detected(s) for s in table.sizes] == [2.0, 2.0, 3.0, 3.0]
    assert [power.false_alarms(s) for s in table.sizes] == [(0, 3000), (4, 3000), (0, 3000), (7, 3000)]


def test_a_cell_measured_again_by_es_judge_gives_the_stored_count():
    """The same judge, seed and simulation as the script: the plan's effect at sd 0.25 margin, normal noise."""
    noise = {m: 0.25 * rules.MARGINS[m] for m in rules.JUDGED_METRICS}
    (row,) = error_rates.measured_error_rates(
        noise, effects=[("shift", 1.5)], draws=rules.MEASURED_DRAWS, points=rules.MEASURED_POINTS
    )
    assert (row["contradicted"], row["inconclusive"], row["supported"]) == (216, 284, 0)


def test_the_declared_rows_are_read_back_from_the_power_table():
    rows = {(r["noise"], r["effect"], r["size_in_margins"]): r for r in error_rates.declared_error_rates()}
    assert len(rows) == 4 * len(rules.MEASURED_EFFECTS)
    at_plan = rows[("sd 0.25 margin, normal", "shift", 1.5)]
    assert at_plan["p_contradicted"] == pytest.approx(0.432) and at_plan["se_contradicted"] == pytest.approx(
        0.022, abs=0.001
    )
    assert rows[("sd 0.5 margin, heavy", "shift", 0.99)]["p_contradicted"] == pytest.approx(4 / 500)


def _claim(label: str = "supported", **metadata: Any) -> CheckRecord:
    state = {"supported": "passed", "contradicted": "failed", "inconclusive": "warned"}[label]
    meta = {"outcome": "claim", "verdict": label, "reason": "r", **metadata}
    spec = {"outcome": "claim", **rules.RULE.metadata()}
    return CheckRecord("training_deviation", "fused_learns_like_eager", "", state, meta, "claim", spec)


class _Report:
    def __init__(self, claims: list[CheckRecord]) -> None:
        self.failed: dict[str, str] = {}
        self.claims = claims

    def shows(self, group: str) -> bool:
        return True

    def outcome(self, group: str) -> Any:
        return SimpleNamespace(validity="valid")

    def checks_of(self, group: str) -> list[CheckRecord]:
        return self.claims


def test_es_rule_section_shows_the_table_through_the_shared_renderer():
    claim = _claim(orders=5, paired_noise_in_margins=0.3)
    section = rules_section(_Report([claim]), experiment("E").group)  # type: ignore[arg-type]
    block = power.power_block(claim)
    assert block == power.render_table(_table()) + "\n" and block in section
    assert '??? info "Measured power of this rule (500 replications per cell, 2026-11-29)"' in section
    assert "| n | paired noise | smallest effect detected with ≥ 80% power | false alarms (below the margin) |" in block
    assert "| 5 | sd 0.25 margin, normal | 2 margins | 0/3000 (0.0%) |" in block
    assert "| 5 | sd 0.5 margin, heavy | 3 margins | 7/3000 (0.2%) |" in block
    assert "| 5 | sd 0.25 margin, normal | shift 1.5 margins (0.015 nats) | 1.5 | 216/500 (43.2%) | 284 | 0 |" in block
    assert "| 5 | sd 0.25 margin, heavy | shift 0.99 margins (0.0099 nats) (healthy) | 0.99 | 3/500 (0.6%) |" in block
    assert (
        "Measured 2026-11-29 by `python -m pipeline.experiments.training.power_study --write` (seeds 20240601)."
        in block
    )
    # E's own section and sentence are gone: the shared ones do their work
    assert not hasattr(e_report, "e_power_section") and not hasattr(error_rates, "low_power_note")


def test_a_supported_verdict_whose_test_detects_only_effects_beyond_the_margin_gets_the_shared_note():
    exp = experiment("E")
    note = power.verdict_note(_Report([_claim(orders=5, paired_noise_in_margins=0.3)]), exp)  # type: ignore[arg-type]
    assert note == (
        " **Low power:** `fused_learns_like_eager` is supported, but this test detects only effects of ≥ 2 margins "
        "with 80% power (n = 5; paired noise sd 0.25 margin, normal, nearest measured to this run's 0.3); smaller "
        "ones could pass: a planted drift 1.5 margins (0.015 nats) was detected in 165 of 500 simulated runs, "
        "supported in 0 (materiality 1 margins)."
    )
    noisy = power.claim_note(_claim(orders=5, paired_noise_in_margins=0.45))
    assert "effects of ≥ 3 margins with 80% power (n = 5; paired noise sd 0.5 margin, normal, nearest" in noisy
    assert "a planted drift 2 margins (0.02 nats) was detected in 188 of 500 simulated runs" in noisy
    # a result stored before the run's noise was: the weakest condition measured
    assert "(n = 5; paired noise sd 0.5 margin, normal)" in power.claim_note(_claim(orders=5))
    for label in ("contradicted", "inconclusive"):
        assert power.verdict_note(_Report([_claim(label, orders=5)]), exp) == ""  # type: ignore[arg-type]


def _judgement() -> Any:
    """A judged simulated run (5 data orders, 10 points, paired noise sd 0.3 margin)."""
    noise = {m: 0.3 * rules.MARGINS[m] for m in rules.JUDGED_METRICS}
    steps, metrics, controls = error_rates.simulated_curves(np.random.default_rng(3), noise)
    return judge_training(steps, metrics, controls)


def test_the_claim_stores_its_noise_and_the_power_at_it_in_the_shared_format():
    j = _judgement()
    meta = {k: plain_value(v) for k, v in _power_metadata(j).items()}
    assert error_rates.RUN_POWER_KEY == power.RUN_TABLE_KEY
    level = meta[error_rates.LEVEL_KEY]
    assert level == error_rates.paired_noise_in_margins(j) and 0.1 < level < 1.0
    claim = _claim(orders=j.orders, **meta)
    own = power.run_table(claim)
    assert own is not None and own.checks == (CHECK,) and own.unit == "margins"
    (size,) = own.sizes
    assert (
        size.n == 5
        and size.level == level
        and size.condition == f"this run's, sd {level:.3g} margin (its noisiest metric), normal"
    )
    assert {e.replications for e in size.effects} == {rules.MEASURED_DRAWS_THIS_RUN}
    block = power.power_block(claim)
    stored_at = block.index('??? info "Measured power of this rule (500 replications')
    assert (
        block.index(f"??? info \"Power measured at this run's own conditions ({rules.MEASURED_DRAWS_THIS_RUN} ")
        > stored_at
    )


def test_a_malformed_run_table_is_named_on_the_page_not_raised():
    claim = _claim(orders=5, **{power.RUN_TABLE_KEY: json.dumps({"checks": [CHECK], "kind": "measured"})})
    block = power.power_block(claim)
    assert "The power this run measured could not be read: training_deviation:fused_learns_like_eager: " in block
    assert "missing 'unit'" in block


def test_the_power_study_measures_with_es_judge_and_stores_only_the_declared_measurement(capsys):
    e = power_study
    with pytest.raises(SystemExit):
        e.main(["--draws", "3", "--write"])
    e.main(["--draws", "1"])
    out = capsys.readouterr().out
    assert "56 cells x 1 judged runs" in out and '??? info "Measured power of this rule (1 replications per cell' in out
