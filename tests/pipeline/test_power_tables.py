"""A claim rule's stored power table: the loader refuses a malformed one by name, the page shows the smallest
effect detected with 80% power, the verdict line's low-power note appears exactly when it should, and M's
power study measures with M's own judge."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pipeline.pagekit import power
from pipeline.pagekit.render import CheckRecord

ROOT = Path(__file__).resolve().parents[2]
CHECK = "model_verdicts:fused_not_worse_than_eager_on_models"


def _effect(size: float | None, contradicted: int, supported: int, reps: int = 100, **extra: Any) -> dict[str, Any]:
    name = f"k = {size}" if size is not None else extra.pop("name")
    row = {"effect": name, "size": size, "replications": reps, "contradicted": contradicted}
    row.update(inconclusive=reps - contradicted - supported, supported=supported, **extra)
    return row


def _measured(check: str = CHECK) -> dict[str, Any]:
    return {
        "checks": [check],
        "kind": "measured",
        "unit": "sULP",
        "threshold": 1.0,
        "effect": "fused k sULP worse on every unit",
        "sample_size": "rows of the table",
        "n_key": "rows_judged",
        "replications": 100,
        "seeds": [0, 99],
        "command": "python -m pipeline.experiments.models.power_study --replications 100",
        "date": "2026-11-29",
        "sizes": [
            {"n": 7, "effects": [_effect(0.0, 1, 90), _effect(2.0, 40, 0), _effect(3.0, 85, 0), _effect(5.0, 100, 0)]},
            {"n": 21, "effects": [_effect(0.0, 0, 88), _effect(2.0, 30, 0), _effect(3.0, 70, 0), _effect(5.0, 99, 0)]},
        ],
    }


def _file(tables: list[dict[str, Any]], experiment: str = "M") -> dict[str, Any]:
    return {"format": power.POWER_TABLE_FORMAT, "experiment": experiment, "tables": tables}


def _store(root: Path, data: dict[str, Any], folder: str = "models") -> Path:
    (root / folder).mkdir(parents=True, exist_ok=True)
    path = root / folder / "power.json"
    path.write_text(json.dumps(data))
    return path


def _refusal(tmp_path: Path, data: Any) -> str:
    path = tmp_path / "power.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    with pytest.raises(power.PowerTableError) as e:
        power.load_power_tables(path)
    assert str(e.value).startswith(str(path))
    return str(e.value)


def test_the_loader_refuses_a_malformed_table_naming_the_problem(tmp_path):
    bad_counts = _file([_measured()])
    bad_counts["tables"][0]["sizes"][1]["effects"][2]["supported"] = 5
    message = _refusal(tmp_path, bad_counts)
    assert message.endswith("tables[0].sizes[1].effects[2]: contradicted + inconclusive + supported = 105, not "
                            "replications 100")  # fmt: skip
    no_command = _file([_measured()])
    del no_command["tables"][0]["command"]
    assert _refusal(tmp_path, no_command).endswith("tables[0]: missing 'command'")
    wrong_format = {**_file([_measured()]), "format": "power/0"}
    assert "'format' must be 'fusion-precision/power-table/1', not 'power/0'" in _refusal(tmp_path, wrong_format)
    bare_check = _file([{**_measured(), "checks": ["fused_not_worse_than_eager_on_models"]}])
    assert "'checks' must list the claim checks it is for, as 'asset:check'" in _refusal(tmp_path, bare_check)
    no_statement = _file([{"checks": ["a:b"], "kind": "deterministic", "unit": "ULP", "threshold": 0}])
    assert _refusal(tmp_path, no_statement).endswith("tables[0]: missing 'statement'")
    text_size = _file([_measured()])
    text_size["tables"][0]["sizes"][0]["effects"][1]["size"] = "2"
    assert "sizes[0].effects[1]: 'size' must be a finite number or null, not '2'" in _refusal(tmp_path, text_size)
    assert "not valid JSON" in _refusal(tmp_path, "{")


def test_write_refuses_to_store_a_malformed_table(tmp_path):
    table = _measured()
    table["sizes"] = []
    with pytest.raises(power.PowerTableError, match="'sizes' is empty"):
        power.write_power_tables(tmp_path / "power.json", "M", [table])
    assert not (tmp_path / "power.json").exists()


def test_the_smallest_effect_detected_with_80_percent_power_counts_only_a_run_of_detections():
    (table,) = power.parse_tables(_file([_measured()]), "t")
    assert [power.smallest_detected(s) for s in table.sizes] == [3.0, 5.0]
    assert power.false_alarms(table.sizes[0]) == (1, 100)
    bumpy = power.Size(7, tuple(power.parse_tables(_file([_measured()]), "t")[0].sizes[0].effects))
    effects = list(bumpy.effects)
    effects[1] = power.Effect("k = 2", 2.0, False, 100, 90, 10, 0, {})  # 90% at 2, 85% at 3: from 2 on
    effects[2] = power.Effect("k = 3", 3.0, False, 100, 70, 30, 0, {})  # 70% at 3: only 5 is a run of detections
    assert power.smallest_detected(power.Size(7, tuple(effects))) == 5.0
    assert power.smallest_detected(power.Size(7, tuple(effects)), power=0.65) == 2.0


def test_the_renderer_shows_the_80_percent_power_effect_and_every_count():
    (table,) = power.parse_tables(_file([_measured()]), "t")
    text = power.render_table(table)
    assert text.startswith('??? info "Measured power of this rule (100 replications per cell, 2026-11-29)"')
    assert "| n | smallest effect detected with ≥ 80% power | false alarms (no effect) |" in text
    assert "| 7 | 3 sULP | 1/100 (1.0%) |" in text and "| 21 | 5 sULP | 0/100 (0.0%) |" in text
    assert "| 7 | k = 3.0 | 3 | 85/100 (85.0%) | 15 | 0 |" in text
    assert "| 7 | k = 0.0 (healthy) | 0 | 1/100 (1.0%) | 9 | 90 |" in text
    measured = "Measured 2026-11-29 by `python -m pipeline.experiments.models.power_study --replications 100`"
    assert f"{measured} (seeds 0, 99)." in text


def test_named_effects_have_no_80_percent_size():
    table = _measured("s:c")
    table["sizes"] = [{"n": 200, "effects": [_effect(None, 3, 0, reps=3, name="gelu_tanh")]}]
    (parsed,) = power.parse_tables(_file([table], "B"), "t")
    assert "| 200 | not defined (named effects) | — |" in power.render_table(parsed)


def _claim(label: str, confidence: Any = 0.99, threshold: Any = 1.0, **metadata: Any) -> CheckRecord:
    state = {"supported": "passed", "contradicted": "failed", "inconclusive": "warned"}[label]
    meta = {"outcome": "claim", "verdict": label, **metadata}
    spec = {"outcome": "claim", "rule.confidence": confidence, "rule.threshold": threshold}
    return CheckRecord("model_verdicts", "fused_not_worse_than_eager_on_models", "", state, meta, "claim", spec)


def test_the_low_power_note_appears_exactly_when_a_supported_claim_detects_only_effects_above_its_threshold(tmp_path):
    _store(tmp_path, _file([_measured()]))
    note = power.claim_note(_claim("supported", rows_judged=7), tmp_path)
    assert note == (
        "`fused_not_worse_than_eager_on_models` is supported, but this test detects only effects of ≥ 3 sULP with "
        "80% power (n = 7); smaller ones could pass: a planted 2 sULP was detected in 40 of 100 simulated rows, "
        "supported in 0 (materiality 1 sULP)."
    )
    at_21 = power.claim_note(_claim("supported", rows_judged=21), tmp_path)
    assert "effects of ≥ 5 sULP with 80% power (n = 21)" in at_21 and "a planted 3 sULP was detected in 70" in at_21
    assert "(n = 21, nearest measured to this run's 40)" in power.claim_note(
        _claim("supported", rows_judged=40), tmp_path
    )
    assert power.claim_note(_claim("contradicted", rows_judged=7), tmp_path) == ""
    assert power.claim_note(_claim("inconclusive", rows_judged=7), tmp_path) == ""
    assert power.claim_note(_claim("supported", threshold=3.0, rows_judged=7), tmp_path) == ""  # 3 is not above 3
    assert "≥ 3 sULP" in power.claim_note(_claim("supported", threshold=2.5, rows_judged=7), tmp_path)
    line = power.claims_low_power_note([_claim("supported", rows_judged=7)], tmp_path)
    assert line.startswith(" **Low power:** `fused_not_worse_than_eager_on_models` is supported, but")


def test_no_low_power_note_without_a_size_in_the_rules_unit_or_for_a_deterministic_rule(tmp_path):
    named = _measured()
    named["sizes"] = [{"n": 7, "effects": [_effect(None, 0, 0, reps=3, name="gelu_tanh")]}]
    _store(tmp_path / "a", _file([named]))
    assert power.claim_note(_claim("supported", rows_judged=7), tmp_path / "a") == ""
    declared = {"checks": [CHECK], "kind": "deterministic", "unit": "ULP", "threshold": 0, "statement": "bits."}
    _store(tmp_path / "b", _file([declared]))
    assert power.claim_note(_claim("supported", confidence="deterministic", threshold=0.0), tmp_path / "b") == ""
    none_detected = _measured()
    none_detected["sizes"] = [{"n": 7, "effects": [_effect(0.0, 0, 90), _effect(2.0, 10, 0)]}]
    _store(tmp_path / "c", _file([none_detected]))
    note = power.claim_note(_claim("supported", rows_judged=7), tmp_path / "c")
    assert "detects only none of the measured effects with 80% power" in note


def test_a_deterministic_declaration_is_shown_only_under_a_rule_of_confidence_none(tmp_path):
    declared = {
        "checks": [CHECK],
        "kind": "deterministic",
        "unit": "ULP",
        "threshold": 0,
        "statement": "every element is compared bit for bit.",
    }
    _store(tmp_path, _file([declared]))
    block = power.power_block(_claim("supported", confidence="deterministic", threshold=0.0), tmp_path)
    assert block.startswith('??? info "Power of this rule: by construction (deterministic)"')
    assert "every element is compared bit for bit. It detects any difference of one bit/ULP" in block
    assert "a false alarm is 0 by construction" in block
    assert power.power_block(_claim("supported", confidence=0.99), tmp_path) == ""


def test_a_measured_table_is_shown_under_its_claims_rule(tmp_path):
    _store(tmp_path, _file([_measured()]))
    block = power.power_block(_claim("supported", rows_judged=7), tmp_path)
    assert "| 7 | 3 sULP | 1/100 (1.0%) |" in block
    other = CheckRecord("model_verdicts", "another_claim", "", "passed", {}, "claim", {"rule.confidence": 0.99})
    assert power.power_block(other, tmp_path) == ""


def test_two_tables_for_one_check_are_refused(tmp_path):
    _store(tmp_path, _file([_measured()]), "models")
    _store(tmp_path, _file([copy.deepcopy(_measured())]), "other")
    with pytest.raises(power.PowerTableError, match="already has a table"):
        power.table_for(CHECK, tmp_path)


def test_every_stored_table_loads_and_is_for_a_claim_check_of_its_kind():
    from pipeline.definitions import defs

    confidence = {
        f"{spec.asset_key.to_user_string()}:{spec.name}": (spec.metadata or {}).get("rule.confidence")
        for checks in defs.asset_checks or []
        for spec in checks.check_specs
        if (spec.metadata or {}).get("outcome") == "claim"
    }
    stored = sorted((ROOT / "pipeline" / "experiments").glob("*/power.json"))
    assert stored
    for path in stored:
        for table in power.load_power_tables(path):
            for check in table.checks:
                assert check in confidence, f"{path}: {check} is not a claim check"
                assert (confidence[check] == "deterministic") == (table.kind == "deterministic"), check


def test_m_power_study_detects_a_huge_effect_every_time_and_rarely_alarms_on_a_healthy_table():
    """M's own judge on simulated float64 tables (fixed seeds): a fused path 50 sULP worse is contradicted in
    every replication; the healthy row is contradicted at most as often as the rule's 1% allows in 20 tables."""
    from pipeline.experiments.models import power_study as m

    huge = m.measure(7, 50.0, 4, 0)
    assert (huge["contradicted"], huge["inconclusive"], huge["supported"]) == (4, 0, 0)
    assert huge["healthy"] is False and huge["size"] == 50.0
    healthy = m.measure(7, 0.0, 20, 0)
    assert healthy["healthy"] is True and healthy["replications"] == 20
    assert healthy["contradicted"] == 0  # expectation at most 0.2 (1% of 20)
    assert healthy["figures"]["tables with any row contradicted (family-wise false alarms)"] == 0
    assert healthy["supported"] + healthy["inconclusive"] == 20 and healthy["supported"] >= 10


class _Report:
    """What the verdict line reads of a report: failures, what it shows, the outcome and the checks."""

    def __init__(self, validity: str, claims: list[CheckRecord], failed: bool = False) -> None:
        self.failed = {"M_models": "boom"} if failed else {}
        self.validity, self.claims = validity, claims

    def shows(self, group: str) -> bool:
        return True

    def outcome(self, group: str) -> Any:
        return SimpleNamespace(validity=self.validity)

    def checks_of(self, group: str) -> list[CheckRecord]:
        return self.claims


def test_the_verdict_line_carries_the_note_only_for_a_judged_experiment(tmp_path):
    from pipeline.experiments import experiment

    _store(tmp_path, _file([_measured()]))
    exp = experiment("M")
    claims = [_claim("supported", rows_judged=7)]
    valid = power.verdict_note(_Report("valid", claims), exp, tmp_path)  # type: ignore[arg-type]
    assert valid.startswith(" **Low power:** `fused_not_worse_than_eager_on_models` is supported, but this test")
    for report in (_Report("invalid", claims), _Report("not applicable", claims), _Report("valid", claims, True)):
        assert power.verdict_note(report, exp, tmp_path) == ""  # type: ignore[arg-type]


def test_the_h200_pages_show_the_stored_power_under_each_rule_and_m_low_power_note(tmp_path):
    """The committed H200 gpu bundle: M's 8 rows are supported, and its page shows M's measured table under the
    rule and, on the verdict line, that the test detects only effects above 1 sULP; A's page shows its
    deterministic rules' power by construction."""
    import dagster as dg

    from pipeline.bundle import import_bundle
    from pipeline.definitions import defs
    from pipeline.experiments import experiment
    from pipeline.reporting.asset import device_reports
    from pipeline.reporting.pages import experiment_page

    graph = defs.resolve_asset_graph()
    data = tmp_path / "data"
    with dg.DagsterInstance.ephemeral() as instance:
        import_bundle(instance, ROOT / "results" / "bundles" / "2026-11-27-h200-gpu", data, graph)
        (h200,) = device_reports(instance, graph, data, tmp_path / "docs", "default", "")
        m_page = experiment_page(h200, experiment("M"))
        a_page = experiment_page(h200, experiment("A"))
    line = next(x for x in m_page.splitlines() if x.startswith("**Verdict: supported**"))
    assert " **Low power:** `fused_not_worse_than_eager_on_models` is supported, but this test detects only" in line
    assert "with 80% power (n = 7, nearest measured to this run's 8)" in line
    assert '??? info "Measured power of this rule (200 replications per cell,' in m_page
    assert m_page.count("Power of this rule: by construction") == 0
    assert a_page.count('??? info "Power of this rule: by construction (deterministic)"') == 3
    assert "Low power" not in a_page


def _conditioned() -> dict[str, Any]:
    """A table measured under two noise conditions at one n, as E's is: the noisier one detects less."""
    table = {**_measured("e:c"), "unit": "margins", "level_key": "noise", "condition_name": "noise"}
    table.update(healthy_label="below the margin", replication_noun="runs", n_key="orders")
    quiet = [_effect(0.5, 0, 90), _effect(1.5, 40, 0), _effect(2.0, 90, 0)]
    loud = [_effect(0.5, 1, 60), _effect(1.5, 10, 0), _effect(2.0, 50, 0), _effect(3.0, 95, 0)]
    for e in (quiet[0], loud[0]):
        e["healthy"] = True  # below the margin: immaterial, so a contradicted is a false alarm
    table["sizes"] = [
        {"n": 5, "condition": "sd 0.25", "level": 0.25, "effects": quiet},
        {"n": 5, "condition": "sd 0.5", "level": 0.5, "effects": loud},
    ]
    return table


def test_conditions_at_one_n_get_a_column_and_their_own_wording():
    (table,) = power.parse_tables(_file([_conditioned()], "E"), "t")
    assert [(s.n, s.condition, s.level) for s in table.sizes] == [(5, "sd 0.25", 0.25), (5, "sd 0.5", 0.5)]
    text = power.render_table(table)
    assert "| n | noise | smallest effect detected with ≥ 80% power | false alarms (below the margin) |" in text
    assert "| 5 | sd 0.25 | 2 margins | 0/100 (0.0%) |" in text and "| 5 | sd 0.5 | 3 margins | 1/100 (1.0%) |" in text
    assert (
        "| 5 | sd 0.5 | k = 1.5 (healthy) |" not in text and "| 5 | sd 0.5 | k = 1.5 | 1.5 | 10/100 (10.0%) |" in text
    )
    titled = power.render_table(table, "Power measured at this run's own conditions")
    assert titled.startswith("??? info \"Power measured at this run's own conditions (100 replications per cell, ")


def test_a_run_is_placed_at_its_nearest_level_and_else_at_the_condition_that_detects_least():
    (table,) = power.parse_tables(_file([_conditioned()], "E"), "t")
    assert table.size_for(5, 0.3) == table.sizes[0] and table.size_for(5, 0.45) == table.sizes[1]
    assert table.size_for(5, 0.375) == table.sizes[1]  # halfway: the noisier
    assert table.size_for(5) == table.sizes[1] and table.size_for(None) == table.sizes[1]
    # M's tables, one size per n: as before
    (m,) = power.parse_tables(_file([_measured()]), "t")
    assert m.size_for(14) == m.sizes[0] and m.size_for(15) == m.sizes[1] and m.size_for(None, 0.3) == m.sizes[1]


def test_the_low_power_note_names_the_condition_and_the_runs_level(tmp_path):
    _store(tmp_path, _file([_conditioned()], "E"), "training")
    record = CheckRecord("e", "c", "", "passed", {"outcome": "claim", "verdict": "supported", "orders": 5, "noise": 0.3},
                         "claim", {"outcome": "claim", "rule.confidence": 0.95, "rule.threshold": "0.01 nats"})  # fmt: skip
    assert power.claim_note(record, tmp_path) == (
        "`c` is supported, but this test detects only effects of ≥ 2 margins with 80% power (n = 5; noise sd 0.25, "
        "nearest measured to this run's 0.3); smaller ones could pass: a planted 1.5 margins was detected in 40 of "
        "100 simulated runs, supported in 0 (materiality 1 margins)."
    )
    record.metadata["noise"] = 0.5
    assert "(n = 5; noise sd 0.5); smaller ones could pass: a planted 2 margins was detected in 50 of 100" in (
        power.claim_note(record, tmp_path)
    )


def test_the_loader_refuses_a_malformed_condition(tmp_path):
    twice = _conditioned()
    twice["sizes"][1]["condition"] = "sd 0.25"
    assert _refusal(tmp_path, _file([twice])).endswith("sizes[1]: n 5 with condition 'sd 0.25' is measured twice")
    bare = _conditioned()
    del bare["sizes"][0]["condition"]
    assert _refusal(tmp_path, _file([bare])).endswith("sizes[0]: a 'level' needs the 'condition' it is the level of")
    text_level = _conditioned()
    text_level["sizes"][0]["level"] = "0.25"
    assert "sizes[0]: 'level' must be a finite number or null, not '0.25'" in _refusal(tmp_path, _file([text_level]))
    wording = {**_conditioned(), "healthy_label": 3}
    assert "tables[0]: 'healthy_label' must be a string, not 3" in _refusal(tmp_path, _file([wording]))


def test_a_claims_own_measured_table_follows_the_stored_one(tmp_path):
    _store(tmp_path, _file([_measured()]))
    own = {**_conditioned(), "checks": [CHECK]}
    own["sizes"] = own["sizes"][:1]
    claim = _claim("supported", rows_judged=7, **{power.RUN_TABLE_KEY: json.dumps(own)})
    block = power.power_block(claim, tmp_path)
    stored_at = block.index('??? info "Measured power of this rule (100 replications per cell, 2026-11-29)"')
    assert block.index("??? info \"Power measured at this run's own conditions (100 replications per cell") > stored_at
    assert "| 5 | sd 0.25 | 2 margins | 0/100 (0.0%) |" in block
    # the note reads only the stored table
    assert "(n = 7)" in power.claim_note(claim, tmp_path)
