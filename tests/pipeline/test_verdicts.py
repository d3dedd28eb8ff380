import dagster as dg
import pytest

from pipeline import verdicts as v

RULE = v.Rule(
    claim="x <= y",
    metric="m",
    decision="contradicted when m > 1",
    threshold=1.0,
    unit="sULP",
    confidence=0.99,
    sample_size="100 sets",
    derivation="one ULP at scale",
)


def test_rule_metadata_carries_every_parameter():
    meta = RULE.metadata()
    assert meta["rule.threshold"] == 1.0 and meta["rule.confidence"] == 0.99 and meta["rule.unit"] == "sULP"
    assert meta["rule.sample_size"] == "100 sets" and meta["rule.decision"].startswith("contradicted")
    deterministic = v.Rule("c", "m", "d", 0, "bits", None, "n", "exact")
    assert deterministic.metadata()["rule.confidence"] == "deterministic"


def test_claim_results_map_verdicts_to_severity():
    supported = v.claim_result(v.SUPPORTED, RULE, "fine")
    contradicted = v.claim_result(v.CONTRADICTED, RULE, "worse")
    inconclusive = v.claim_result(v.INCONCLUSIVE, RULE, "too few sets")
    assert supported.passed
    assert not contradicted.passed and contradicted.severity == dg.AssetCheckSeverity.ERROR
    assert not inconclusive.passed and inconclusive.severity == dg.AssetCheckSeverity.WARN
    assert contradicted.metadata["verdict"].value == "contradicted"
    assert contradicted.metadata["rule.threshold"].value == 1.0
    with pytest.raises(ValueError, match="verdict must be one of"):
        v.claim_result("maybe", RULE, "")


def test_validity_and_finding_results():
    bad = v.validity_result(["2 graph breaks", "eager non-finite"])
    assert not bad.passed and bad.severity == dg.AssetCheckSeverity.ERROR
    assert bad.metadata["problems"].value == "2 graph breaks; eager non-finite"
    assert v.validity_result([]).passed
    # A finding is an observation, never a failure: it passes, and says how many there are to read.
    finding = v.finding_result(["1-ULP difference"])
    assert finding.passed and finding.metadata["findings"].value == 1
    assert finding.metadata["details"].value == "1-ULP difference"
    assert v.finding_result([]).passed and v.finding_result([]).metadata["findings"].value == 0
    seen = v.check_outcome("a:f", finding.passed, finding.severity, finding.metadata)
    assert seen.to_read and not seen.is_error and seen.findings == 1
    assert not v.check_outcome("a:f", True, "WARN", v.finding_result([]).metadata).to_read


def test_decorators_declare_the_outcome_on_the_check_spec():
    @dg.asset
    def thing() -> int:
        return 1

    @v.claim_check(rule=RULE, asset=thing, description="d")
    def claim(thing: int) -> dg.AssetCheckResult:
        return v.claim_result(v.SUPPORTED, RULE, "")

    @v.validity_check(asset=thing)
    def valid(thing: int) -> dg.AssetCheckResult:
        return v.validity_result([])

    spec = next(iter(claim.check_specs))
    assert spec.metadata["outcome"] == "claim" and spec.metadata["rule.threshold"] == 1.0
    assert next(iter(valid.check_specs)).metadata == {"outcome": "validity"}


def _o(key, outcome, passed, severity="ERROR", verdict=None):
    meta = {"verdict": verdict} if verdict else {}
    return v.check_outcome(key, passed, severity, meta, outcome)


def test_summarize_keeps_validity_verdict_and_findings_apart():
    healthy = v.summarize(
        [_o("a", "validity", True), _o("b", "claim", True, verdict="supported"), _o("c", "finding", False, "WARN")]
    )
    assert (healthy.validity, healthy.verdict, healthy.findings) == ("valid", "supported", 1)
    contradicted = v.summarize(
        [
            _o("a", "validity", True),
            _o("b", "claim", False, verdict="contradicted"),
            _o("b2", "claim", False, "WARN", verdict="inconclusive"),
        ]
    )
    assert contradicted.verdict == "contradicted" and contradicted.contradicted_checks == ("b",)
    # An invalid run is never a verdict on the claim, even when a claim check also failed.
    invalid = v.summarize([_o("a", "validity", False), _o("b", "claim", False, verdict="contradicted")])
    assert (invalid.validity, invalid.verdict) == ("invalid", v.NOT_JUDGED)
    # A failed step (e.g. FusionError) makes the run invalid.
    crashed = v.summarize([_o("b", "claim", True, verdict="supported")], failed_steps=["accumulated_error_runs"])
    assert crashed.validity == "invalid" and crashed.invalid_checks == ("step failed: accumulated_error_runs",)
    assert v.summarize([_o("a", "validity", True)]).verdict == "no claim"


def test_check_outcome_classification():
    # An undeclared check that fails at ERROR counts as a validity failure, never as a silent finding.
    assert _o("x", None, False).outcome == "validity" and _o("x", None, False).is_error
    assert not _o("f", "finding", False, "WARN").is_error
    assert _o("c", "claim", False, "WARN").verdict == "inconclusive"
    assert _o("c", "claim", False, "ERROR").verdict == "contradicted"
    with pytest.raises(ValueError, match="unknown outcome"):
        v.check_outcome("k", True, "ERROR", {}, "opinion")


def test_the_outcome_table_lists_findings_apart_from_failures():
    """A healthy run: no check under "did not pass"; findings are listed as observations."""
    from pipeline.definitions import defs
    from pipeline.run_summary import outcome_table

    key = next(k for k in defs.resolve_asset_graph().asset_check_keys if k.name == "fused_worse_within_rule")
    finding = v.finding_result(["softmax/normal/float16: P99 1.2 vs 1.1"])
    evaluation = dg.AssetCheckEvaluation(
        asset_key=key.asset_key,
        check_name=key.name,
        passed=finding.passed,
        severity=finding.severity,
        metadata=finding.metadata,
    )
    table = outcome_table(defs, [evaluation], [])
    assert "checks that did not pass" not in table
    assert "findings to read (observations, not failures):" in table
    assert "accumulated_error_summary:fused_worse_within_rule" in table.split("findings to read")[1]
    row = next(line for line in table.splitlines() if line.startswith("B "))
    assert row.split()[-1] == "1"
