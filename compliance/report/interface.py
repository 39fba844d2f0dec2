"""A reporter turns a ``CheckReport`` into the text of one output format."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compliance.model import CheckReport

Reporter = Callable[["CheckReport"], str]


def status_line(report: CheckReport) -> str:
    """The one summary line every human-facing format ends with."""
    from compliance.findings import Severity
    from compliance.layout import organization_names
    from compliance.report.safetext import one_line

    errors, warnings = report.count(Severity.ERROR), report.count(Severity.WARNING)
    verdict = "PASS" if report.passed else "FAIL"
    rs = report.ruleset
    status = "PROPOSAL, not MLPerf policy" if rs.status == "proposal" else rs.status
    return (f"{verdict}: {errors} error(s), {warnings} warning(s) in "
            f"{len(organization_names(report.inventory.organizations))} organization(s); rule set {rs.id} ({status}; "
            f"{one_line(report.choice.reason)}); checks: {', '.join(report.stages)}")
