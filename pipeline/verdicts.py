"""Three outcomes per experiment, never mixed: run validity, claim verdict, findings.

Every asset check of the pipeline is one of three kinds, declared on the check's definition (its
spec metadata ``outcome``), so the kind is fixed before any data is seen:

* **validity**: did the run do what it claims (fused with evidence, no recompiles, inputs as
  recorded, nothing non-finite where the plan says finite)? A failure is ERROR and means
  "invalid run"; it is never read as a verdict on the claim.
* **claim**: the experiment's claim is ``supported``, ``contradicted`` or ``inconclusive`` under a
  :class:`Rule` declared with the check (metric, materiality threshold, confidence, sample size).
  ``contradicted`` fails at ERROR, ``inconclusive`` fails at WARN, ``supported`` passes. The rule's
  parameters travel in the spec metadata (visible in the UI before a run) and in every result.
* **finding**: an observation a human should read (WARN), e.g. a 1-ULP difference that is within
  the rule. A finding never makes a run invalid or a claim contradicted.

The report, the CLI summary and the planted-bug matrix read these three outcomes through
:func:`summarize`; nothing else decides what a check result means.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg

from .runs import plain

VALIDITY, CLAIM, FINDING = "validity", "claim", "finding"
OUTCOMES = (VALIDITY, CLAIM, FINDING)
SUPPORTED, CONTRADICTED, INCONCLUSIVE = "supported", "contradicted", "inconclusive"
VERDICTS = (SUPPORTED, CONTRADICTED, INCONCLUSIVE)
#: Verdict of an experiment whose run is invalid: the claim is not judged.
NOT_JUDGED = "not judged (invalid run)"
#: Run validity of an experiment that does not apply to the run's compiler (it reads what only another
#: compiler produces, e.g. Inductor's generated C++): its checks are stored as not applicable, with the
#: reason, and its verdict is that reason ("not applicable to OpenVINO: ..."), never a pass.
NOT_APPLICABLE = "not applicable"
#: Metadata key of a check result that says its experiment does not apply (the reason, in full).
NOT_APPLICABLE_KEY = "not_applicable"


def not_applicable_reason(metadata: Mapping[str, Any]) -> str:
    """The reason a check result records for its experiment not applying to the run's compiler, or "".
    Only a reason in the stored form counts ("not applicable to <compiler>: <why>"): a check's own metadata
    that happens to use the key for something else (a list of planted bugs, "none") must not turn a judged
    check into a skipped one."""
    value = metadata.get(NOT_APPLICABLE_KEY)
    value = getattr(value, "value", value)
    reason = str(value or "")
    return reason if reason.startswith(NOT_APPLICABLE) else ""


@dataclass(frozen=True)
class Rule:
    """A decision rule stated before the data is seen.

    ``decision`` says in words when the claim is contradicted, supported and inconclusive;
    ``threshold`` (in ``unit``) is the materiality threshold, ``confidence`` the one-sided
    confidence of the statistical statement (``None`` for a deterministic rule, such as a
    derived error bound or "any non-finite output"), ``sample_size`` what the rule needs and
    ``derivation`` where the threshold comes from.
    """

    claim: str
    metric: str
    decision: str
    threshold: float | str
    unit: str
    confidence: float | None
    sample_size: str
    derivation: str

    def metadata(self) -> dict[str, Any]:
        """The rule's parameters as flat metadata entries (``rule.*``)."""
        return {
            "rule.claim": self.claim,
            "rule.metric": self.metric,
            "rule.decision": self.decision,
            "rule.threshold": self.threshold if isinstance(self.threshold, str) else float(self.threshold),
            "rule.unit": self.unit,
            "rule.confidence": "deterministic" if self.confidence is None else float(self.confidence),
            "rule.sample_size": self.sample_size,
            "rule.derivation": self.derivation,
        }


def _spec_metadata(outcome: str, rule: Rule | None) -> dict[str, Any]:
    return {"outcome": outcome, **(rule.metadata() if rule else {})}


#: Op tag of a check that reads other assets than its own (``additional_ins``): when one of them
#: is neither in the run nor stored, the IO manager hands over :data:`NOT_STORED` and the check
#: does not run (it reads as "not yet run"), so any asset selection materializes.
READS_OTHER_ASSETS_TAG = "fusion/reads_other_assets"


class _NotStored:
    def __repr__(self) -> str:
        return "NOT_STORED"


NOT_STORED = _NotStored()


def _skip_unless_stored(fn: Callable[..., Any], inputs: Iterable[str]) -> Callable[..., Any]:
    names = tuple(inputs)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        missing = [n for n in names if kwargs.get(n) is NOT_STORED]
        if missing:
            context = args[0] if args else kwargs.get("context")
            if context is not None:
                context.log.info(f"check not run: {', '.join(missing)} is neither in this run nor stored")
            return None
        return fn(*args, **kwargs)

    # Dagster type-checks inputs by their annotations; these may also receive NOT_STORED.
    signature = inspect.signature(fn, eval_str=True)
    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(annotation=Any) if p.name in names else p for p in signature.parameters.values()]
    )
    return wrapper


def _check(
    outcome: str, rule: Rule | None, kwargs: dict[str, Any]
) -> Callable[[Callable[..., Any]], dg.AssetChecksDefinition]:
    metadata = {**kwargs.pop("metadata", {}), **_spec_metadata(outcome, rule)}
    others = tuple((kwargs.get("additional_ins") or {}).keys())
    if not others:
        return dg.asset_check(metadata=metadata, **kwargs)
    kwargs["op_tags"] = {**kwargs.get("op_tags", {}), READS_OTHER_ASSETS_TAG: ",".join(others)}

    def decorate(fn: Callable[..., Any]) -> dg.AssetChecksDefinition:
        return dg.asset_check(metadata=metadata, **kwargs)(_skip_unless_stored(fn, others))

    return decorate


def validity_check(**kwargs: Any) -> Callable[[Callable[..., Any]], dg.AssetChecksDefinition]:
    """``dg.asset_check`` for a run-validity check; the body returns :func:`validity_result`."""
    return _check(VALIDITY, None, kwargs)


def claim_check(rule: Rule, **kwargs: Any) -> Callable[[Callable[..., Any]], dg.AssetChecksDefinition]:
    """``dg.asset_check`` for a claim judged by ``rule``; the body returns :func:`claim_result`."""
    return _check(CLAIM, rule, kwargs)


def finding_check(**kwargs: Any) -> Callable[[Callable[..., Any]], dg.AssetChecksDefinition]:
    """``dg.asset_check`` for findings a human should read; the body returns :func:`finding_result`."""
    return _check(FINDING, None, kwargs)


def validity_result(problems: Iterable[str], metadata: Mapping[str, Any] | None = None) -> dg.AssetCheckResult:
    """Valid when ``problems`` is empty; otherwise ERROR with every problem listed."""
    problems = list(problems)
    meta = {"outcome": VALIDITY, "validity": "valid" if not problems else "invalid", **(metadata or {})}
    if problems:
        meta["problems"] = "; ".join(problems)
    return dg.AssetCheckResult(passed=not problems, severity=dg.AssetCheckSeverity.ERROR, metadata=meta)


def claim_result(
    verdict: str, rule: Rule, reason: str, metadata: Mapping[str, Any] | None = None
) -> dg.AssetCheckResult:
    """The claim's verdict under ``rule``: contradicted fails at ERROR, inconclusive at WARN."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, not {verdict!r}")
    meta = {"outcome": CLAIM, "verdict": verdict, "reason": reason, **rule.metadata(), **(metadata or {})}
    severity = dg.AssetCheckSeverity.ERROR if verdict == CONTRADICTED else dg.AssetCheckSeverity.WARN
    return dg.AssetCheckResult(passed=verdict == SUPPORTED, severity=severity, metadata=meta)


def finding_result(findings: Iterable[str], metadata: Mapping[str, Any] | None = None) -> dg.AssetCheckResult:
    """Always passes: a finding is an observation for a human, not a failure (a healthy run shows
    no failed check). How many there are is the ``findings`` entry, what they say ``details``."""
    findings = list(findings)
    meta = {"outcome": FINDING, "findings": len(findings), **(metadata or {})}
    if findings:
        meta["details"] = "; ".join(findings)
    return dg.AssetCheckResult(passed=True, severity=dg.AssetCheckSeverity.WARN, metadata=meta)


def not_applicable_result(reason: str, outcome: str, metadata: Mapping[str, Any] | None = None) -> dg.AssetCheckResult:
    """A check of an experiment that does not apply to the run's compiler: it did not pass (nothing was
    judged, so it is not a pass it did not earn) and is no failure either (WARN, marked
    :data:`NOT_APPLICABLE_KEY` with ``reason``: "not applicable to <compiler>: <why>")."""
    meta = {"outcome": outcome, NOT_APPLICABLE_KEY: reason, **(metadata or {})}
    return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, metadata=meta)


def combine(verdicts: Iterable[str]) -> str:
    """Several rows' verdicts as one: any contradicted wins, then any inconclusive."""
    seen = set(verdicts)
    if not seen:
        return INCONCLUSIVE
    if CONTRADICTED in seen:
        return CONTRADICTED
    if INCONCLUSIVE in seen:
        return INCONCLUSIVE
    return SUPPORTED


# --- reading results back ----------------------------------------------------------------------


@dataclass(frozen=True)
class CheckOutcome:
    """One evaluated check as the three outcomes see it."""

    key: str  # "asset:check"
    outcome: str  # validity | claim | finding
    passed: bool
    severity: str  # ERROR | WARN
    verdict: str | None = None  # claims only
    findings: int = 0  # finding checks: how many observations there are to read
    #: Why the check's experiment does not apply to the run's compiler ("" when it does).
    not_applicable: str = ""

    @property
    def to_read(self) -> bool:
        """A finding check with observations (an older record: one that did not pass)."""
        return self.outcome == FINDING and not self.not_applicable and (self.findings > 0 or not self.passed)

    @property
    def is_error(self) -> bool:
        """True when this result makes the run invalid or the claim contradicted."""
        return not self.passed and self.severity == "ERROR"


def check_outcome(
    key: str, passed: bool, severity: Any, metadata: Mapping[str, Any], spec_outcome: str | None = None
) -> CheckOutcome:
    """Classify one evaluation. The outcome kind comes from the check's spec (``spec_outcome``) or,
    failing that, the result's ``outcome`` metadata; a check that declares neither is treated as a
    validity check (an unclassified ERROR must not pass silently as a finding)."""
    meta = plain(metadata)
    outcome = spec_outcome or meta.get("outcome") or VALIDITY
    if outcome not in OUTCOMES:
        raise ValueError(f"check {key}: unknown outcome kind {outcome!r}")
    sev = getattr(severity, "value", severity) or "ERROR"
    reason = not_applicable_reason(meta)
    if reason:
        return CheckOutcome(key, outcome, bool(passed), str(sev), None, 0, reason)
    verdict = None
    if outcome == CLAIM:
        verdict = meta.get("verdict") or (SUPPORTED if passed else (CONTRADICTED if sev == "ERROR" else INCONCLUSIVE))
    findings = int(meta.get("findings") or 0) if outcome == FINDING else 0
    return CheckOutcome(key, outcome, bool(passed), str(sev), verdict, findings)


@dataclass(frozen=True)
class ExperimentOutcome:
    """An experiment's three outcomes."""

    validity: str  # valid | invalid | incomplete | NOT_APPLICABLE
    #: supported | contradicted | inconclusive | NOT_JUDGED | "no claim" | "not applicable to <compiler>: <why>"
    verdict: str
    findings: int
    invalid_checks: tuple[str, ...] = ()
    contradicted_checks: tuple[str, ...] = ()
    finding_checks: tuple[str, ...] = ()


def summarize(
    outcomes: Iterable[CheckOutcome],
    failed_steps: Iterable[str] = (),
    complete: bool = True,
    *,
    not_applicable: bool = False,
) -> ExperimentOutcome:
    """The experiment's validity, verdict and findings from its evaluated checks.

    A failed step (an asset that raised, e.g. ``FusionError`` when fusion evidence is missing) makes
    the run invalid. An invalid run's claims are not judged.

    Checks stored as not applicable to the run's compiler are never a pass: with ``not_applicable``, an
    experiment whose checks are all such records (and no step failed) is :data:`NOT_APPLICABLE`, its
    verdict the stored reason ("not applicable to OpenVINO: ..."); without it (a reader that does not
    know that outcome yet, such as the site before it shows compilers side by side), those checks are
    left out and the experiment reads ``incomplete``, its verdict "not yet run" where nothing else was
    judged."""
    outcomes = list(outcomes)
    failed = tuple(failed_steps)
    skipped = [o for o in outcomes if o.not_applicable]
    if not_applicable and skipped and len(skipped) == len(outcomes) and not failed:
        return ExperimentOutcome(NOT_APPLICABLE, skipped[0].not_applicable, 0)
    outcomes = [o for o in outcomes if not o.not_applicable]
    failed_steps = failed
    if skipped:
        complete = False
        if not outcomes and not failed:
            return ExperimentOutcome("incomplete", "not yet run", 0)
    invalid = tuple(o.key for o in outcomes if o.outcome == VALIDITY and not o.passed) + tuple(
        f"step failed: {s}" for s in failed_steps
    )
    claims = [o for o in outcomes if o.outcome == CLAIM]
    findings = tuple(o.key for o in outcomes if o.to_read)
    validity = "invalid" if invalid else ("valid" if complete else "incomplete")
    if invalid:
        verdict = NOT_JUDGED
    elif not claims:
        verdict = "no claim"
    else:
        verdict = combine(o.verdict or INCONCLUSIVE for o in claims)
    contradicted = tuple(o.key for o in claims if o.verdict == CONTRADICTED)
    return ExperimentOutcome(validity, verdict, len(findings), invalid, contradicted, findings)
