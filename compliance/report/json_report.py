"""Machine-readable report (versioned: ``schema_version``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from compliance import __version__

if TYPE_CHECKING:
    from compliance.engine import CheckReport


def report_dict(report: "CheckReport") -> dict[str, Any]:
    """The JSON document as a dict (documented in docs/report-format.md)."""
    from compliance.engine import REPORT_SCHEMA_VERSION
    from compliance.findings import Severity

    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": {"name": "compliance", "version": __version__},
        "root": str(report.root),
        "ruleset": {**report.ruleset.summary(), "chosen_by": report.choice.reason},
        "stages": list(report.stages),
        "summary": {
            "passed": report.passed,
            "errors": report.count(Severity.ERROR),
            "warnings": report.count(Severity.WARNING),
            "infos": report.count(Severity.INFO),
            "organizations": [{"name": o.name, "passed": o.passed, "errors": o.errors,
                               "warnings": o.warnings} for o in report.organizations()],
            "files": report.inventory.file_count,
        },
        "findings": [f.to_dict() for f in report.findings],
    }


def render_json(report: "CheckReport") -> str:
    """Pretty-printed JSON."""
    return json.dumps(report_dict(report), indent=2, sort_keys=False, default=str) + "\n"
