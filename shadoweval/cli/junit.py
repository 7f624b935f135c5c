"""A verdict as JUnit XML, so a CI system shows which check held or failed.

One ``<testcase>`` per task type × check: ``classname`` is the task type (``pooled`` for
the pooled analysis), ``name`` the metric. A FAIL is a ``<failure>``, an INCONCLUSIVE check
is ``<skipped>`` (it blocks promotion without showing harm), a PASS is a plain test case.
Each carries the check's reason. The suite's properties hold the decision, run id, policy
hash and look number. Format: the de-facto JUnit XML schema read by Jenkins, GitLab and
GitHub Actions reporters.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from shadoweval.records import POOLED, CheckOutcome, Verdict


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
        )
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


def _details(
    estimate: float | None, low: float | None, high: float | None, margin: float | None
) -> str:
    return f"estimate={estimate} interval=[{low}, {high}] margin={margin}"


def write_junit(verdict: Verdict, path: Path) -> None:
    """Write :func:`verdict_junit_xml` to ``path`` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(verdict_junit_xml(verdict), encoding="utf-8")
