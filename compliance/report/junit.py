"""JUnit XML: one test case per check and organization; error findings are failures."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from compliance.report.safetext import one_line, xml_safe
from compliance.rulespecs.registry import all_specs

if TYPE_CHECKING:
    from compliance.findings import Finding
    from compliance.model import CheckReport


def render_junit(report: CheckReport) -> str:
    """CI systems show each (organization, rule) as a test; errors fail it, others are logged."""
    from compliance.findings import Severity

    orgs = [o.name for o in report.inventory.organizations] or ["-"]
    by_case: dict[tuple[str, str], list[Finding]] = {}
    for f in report.findings:  # one pass: linear in the findings
        by_case.setdefault((f.submitter or "-", f.rule_id), []).append(f)
    suites = ET.Element("testsuites", name="compliance")
    for org in orgs:
        suite = ET.SubElement(suites, "testsuite", name=one_line(f"compliance.{org}"))
        properties = ET.SubElement(suite, "properties")
        for key, value in report.choice.to_dict().items():
            ET.SubElement(properties, "property", name=f"ruleset.{key}", value=one_line(str(value or "")))
        failures = 0
        for spec in all_specs():
            found = by_case.get((org, spec.id), [])
            case = ET.SubElement(suite, "testcase", classname=one_line(f"compliance.{org}"), name=spec.id)
            errors = [f for f in found if f.severity is Severity.ERROR]
            if errors:
                failures += 1
                failure = ET.SubElement(case, "failure", message=f"{len(errors)} finding(s)", type=spec.id)
                failure.text = "\n".join(one_line(f"{f.location()}: {f.message} (fix: {f.hint})") for f in errors)
            others = [f for f in found if f.severity is not Severity.ERROR]
            if others:
                ET.SubElement(case, "system-out").text = "\n".join(
                    one_line(f"{f.severity.value}: {f.location()}: {f.message}") for f in others)
        suite.set("tests", str(len(suite) - 1))
        suite.set("failures", str(failures))
    return xml_safe(ET.tostring(suites, encoding="unicode", xml_declaration=True)) + "\n"
