"""Machine-readable report (versioned: ``schema_version``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from compliance import __version__
from compliance.kernel_groups import kernel_groups

if TYPE_CHECKING:
    from compliance.model import CheckReport
    from compliance.vendored_trees import VendoredTree


def report_dict(report: CheckReport) -> dict[str, Any]:
    """The JSON document as a dict (documented in docs/report-format.md)."""
    from compliance.findings import Severity
    from compliance.model import REPORT_SCHEMA_VERSION

    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": {"name": "compliance", "version": __version__},
        "root": str(report.root),
        "ruleset": {**report.ruleset.summary(), **report.choice.to_dict()},
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
        "custom_kernels": [g.to_dict() for g in kernel_groups(report)],
        "findings": [f.to_dict() for f in report.findings],
        "vendored_trees": [vendored_tree_dict(t) for t in report.inventory.vendored],
        "forks": [{"path": f.path, "project": f.project, "repository": f.repository,
                   "native_files": f.native_files, "submitter": f.location.submitter,
                   "benchmark": f.location.benchmark} for f in report.inventory.forks],
        "shared_sources": [g.to_dict() for g in report.shared_sources],
    }


def vendored_tree_dict(tree: VendoredTree) -> dict[str, Any]:
    """JSON form of one recognised vendored tree."""
    return {"path": tree.path, "project": tree.project, "name": tree.project_name,
            "repository": tree.repository, "reason": tree.reason, "parent": tree.parent,
            "declared": tree.declared, "files": tree.files, "source_files": tree.source_files,
            "native_files": tree.native_files, "unproven_files": tree.unproven,
            "reported_files": tree.reported, "proven_files": tree.proven, "modified_files": tree.modified,
            "release": tree.version,
            "submitter": tree.location.submitter,
            "benchmark": tree.location.benchmark, "implementation": tree.location.implementation}


def render_json(report: CheckReport) -> str:
    """Pretty-printed JSON."""
    return json.dumps(report_dict(report), indent=2, sort_keys=False, default=str) + "\n"
