"""A verdict as JUnit XML, so a CI system shows which check held or failed.

One ``<testcase>`` per task type × check: ``classname`` is the task type (``pooled`` for
the pooled analysis), ``name`` the metric. A FAIL is a ``<failure message=reason>``, an
INCONCLUSIVE check is ``<skipped message=reason>`` (it blocks promotion without showing
harm), a PASS is a plain test case. Each case carries the check's reason in
``<system-out>`` and its numbers as ``<properties>`` (``statistic``, ``estimate``,
``interval_low``, ``interval_high``, ``margin``, ``n``, ``p_value``, ``critical``; a value
the check did not compute is left out). The suite's properties hold the decision, run id,
policy hash, look number and coverage share; its ``<system-out>`` starts with the
decision. Format: the de-facto JUnit XML schema read by Jenkins, GitLab and GitHub
Actions reporters (test-case properties as pytest writes them).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from shadoweval.records import POOLED, Check, CheckOutcome, Verdict


def verdict_junit_xml(verdict: Verdict) -> str:
    """Render ``verdict`` as a JUnit XML document (UTF-8 text)."""
    failures = sum(c.outcome is CheckOutcome.FAIL for c in verdict.checks)
    skipped = sum(c.outcome is CheckOutcome.INCONCLUSIVE for c in verdict.checks)
    suites = ET.Element("testsuites", name="shadow-eval gate")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"shadow-eval gate run {verdict.run_id}",
        tests=str(len(verdict.checks)),
        failures=str(failures),
        skipped=str(skipped),
        errors="0",
        timestamp=verdict.decided_at.isoformat(),
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("decision", verdict.decision.value),
        ("run_id", verdict.run_id),
        ("policy_hash", verdict.policy_hash),
        ("look", str(verdict.look)),
        ("coverage_share", f"{verdict.coverage.share:.4f}"),
    ):
        ET.SubElement(properties, "property", name=name, value=value)
    for check in verdict.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            classname="pooled" if check.task_type == POOLED else check.task_type,
            name=check.metric,
            time="0",
        )
        case_properties = ET.SubElement(case, "properties")
        for name, value in _check_properties(check):
            ET.SubElement(case_properties, "property", name=name, value=value)
        if check.outcome is CheckOutcome.FAIL:
            failure = ET.SubElement(case, "failure", message=check.reason, type="fail")
            failure.text = _details(check.estimate, check.ci_low, check.ci_high, check.margin)
        elif check.outcome is CheckOutcome.INCONCLUSIVE:
            ET.SubElement(case, "skipped", message=check.reason)
        ET.SubElement(case, "system-out").text = check.reason
    out = ET.SubElement(suite, "system-out")
    out.text = f"{verdict.decision.value.upper()}\n" + "\n".join(verdict.reasons)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _check_properties(check: Check) -> list[tuple[str, str]]:
    """(name, value) of a check's numbers, leaving out those it did not compute."""
    values: list[tuple[str, float | int | str | None]] = [
        ("outcome", check.outcome.value),
        ("statistic", check.statistic),
        ("estimate", check.estimate),
        ("interval_low", check.ci_low),
        ("interval_high", check.ci_high),
        ("margin", check.margin),
        ("n", check.n),
        ("p_value", check.p_value),
        ("critical", "true" if check.critical else "false"),
    ]
    return [(name, _number(value)) for name, value in values if value is not None]


def _number(value: float | int | str | None) -> str:
    """A value as text; a float to 12 significant digits, so binary noise does not show
    (``1 - 0.7`` is ``0.3``, not ``0.30000000000000004``) and nothing a reader needs is cut."""
    return f"{value:.12g}" if isinstance(value, float) else str(value)


def _details(
    estimate: float | None, low: float | None, high: float | None, margin: float | None
) -> str:
    return (
        f"estimate={_number(estimate)} interval=[{_number(low)}, {_number(high)}] "
        f"margin={_number(margin)}"
    )


def write_junit(verdict: Verdict, path: Path) -> None:
    """Write :func:`verdict_junit_xml` to ``path`` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(verdict_junit_xml(verdict), encoding="utf-8")
