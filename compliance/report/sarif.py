"""SARIF 2.1.0, for code-scanning UIs (GitHub, GitLab)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from compliance import __version__
from compliance.rulespecs.registry import all_specs

if TYPE_CHECKING:
    from compliance.findings import Finding
    from compliance.model import CheckReport

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _result(f: Finding) -> dict[str, Any]:
    location: dict[str, Any] = {"artifactLocation": {"uri": f.path, "uriBaseId": "SRCROOT"}}
    if f.line:
        location["region"] = {"startLine": f.line}
    return {"ruleId": f.rule_id, "level": _LEVEL[f.severity.value],
            "message": {"text": f"{f.message} Fix: {f.hint}"}, "locations": [{"physicalLocation": location}]}


def render_sarif(report: CheckReport) -> str:
    """One run; rules from the registry, results from the findings; the rule set and why it was
    chosen in the run's properties.

    Linear in the findings: each result is encoded on its own (compact, one per line) and
    spliced into the document, instead of one indented ``json.dumps`` of a tree holding them
    all (200,000 findings took 25 s and 1.44 GB that way)."""
    rules = [{"id": s.id, "name": s.title, "shortDescription": {"text": s.title},
              "fullDescription": {"text": s.doc}, "help": {"text": s.hint}} for s in all_specs()]
    run = {"tool": {"driver": {"name": "compliance", "version": __version__, "rules": rules}},
           "originalUriBaseIds": {"SRCROOT": {"uri": report.root.as_uri() + "/"}},
           "properties": {"ruleset": report.choice.to_dict(),
                          "shared_sources": [g.to_dict() for g in report.shared_sources]},
           "results": _SPLICE}
    doc = {"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0", "runs": [run]}
    head, tail = json.dumps(doc, indent=2).split(json.dumps(_SPLICE))
    encode = json.JSONEncoder(separators=(",", ":")).encode
    body = ",\n".join(encode(_result(f)) for f in report.findings)
    return "".join((head, "[\n", body, "\n]" if body else "]", tail, "\n"))


_SPLICE = "\u0000results\u0000"
"""Placeholder the results are spliced in for (no finding can produce it: it is JSON-escaped)."""
