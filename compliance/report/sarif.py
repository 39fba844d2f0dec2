"""SARIF 2.1.0, for code-scanning UIs (GitHub, GitLab)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from compliance import __version__
from compliance.checks.registry import all_specs
from compliance.shared_sources import shared_sources

if TYPE_CHECKING:
    from compliance.model import CheckReport

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def render_sarif(report: CheckReport) -> str:
    """One run; rules from the registry, results from the findings."""
    rules = [{"id": s.id, "name": s.title, "shortDescription": {"text": s.title},
              "fullDescription": {"text": s.doc}, "help": {"text": s.hint}} for s in all_specs()]
    results: list[dict[str, Any]] = []
    for f in report.findings:
        region = {"startLine": f.line} if f.line else {}
        location: dict[str, Any] = {"artifactLocation": {"uri": f.path, "uriBaseId": "SRCROOT"}}
        if region:
            location["region"] = region
        results.append({"ruleId": f.rule_id, "level": _LEVEL[f.severity.value],
                        "message": {"text": f"{f.message} Fix: {f.hint}"},
                        "locations": [{"physicalLocation": location}]})
    doc = {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0",
           "runs": [{"tool": {"driver": {"name": "compliance", "version": __version__, "rules": rules}},
                     "originalUriBaseIds": {"SRCROOT": {"uri": report.root.as_uri() + "/"}},
                     "results": results,
                     "properties": {"shared_sources": [g.to_dict() for g in shared_sources(report.inventory)]}}]}
    return json.dumps(doc, indent=2) + "\n"
