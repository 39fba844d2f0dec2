"""Human-readable report: findings grouped by submitter and benchmark."""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING

from compliance.report.interface import status_line
from compliance.report.safetext import one_line

if TYPE_CHECKING:
    from compliance.engine import CheckReport
    from compliance.findings import Finding


def _group_key(f: "Finding") -> tuple[str, str]:
    return (one_line(f.submitter or "(outside any organization)"), one_line(f.benchmark or "(no benchmark)"))


def render_text(report: "CheckReport") -> str:
    """Findings per submitter/benchmark with path:line and hint, then per-org and summary lines."""
    rs = report.ruleset
    lines = [f"compliance check {one_line(str(report.root))}",
             f"rule set: {rs.id} — {rs.title} [{rs.status}] ({one_line(report.choice.reason)})",
             f"provenance: {rs.provenance.decision} ({rs.provenance.date})", ""]
    ordered = sorted(report.findings, key=lambda f: (_group_key(f), f.sort_key()))
    for (submitter, benchmark), group in groupby(ordered, key=_group_key):
        lines.append(f"{submitter} / {benchmark}")
        for f in group:
            kernel = f" [kernel {one_line(f.kernel)}]" if f.kernel else ""
            lines.append(f"  {one_line(f.location())}: {f.severity.value}: {one_line(f.message)} "
                         f"[{f.rule_id}]{kernel}")
            lines.append(f"      fix: {one_line(f.hint)}")
        lines.append("")
    if not report.findings:
        lines += ["no findings", ""]
    if len(report.inventory.organizations) > 1:
        for org in report.organizations():
            verdict = "pass" if org.passed else "FAIL"
            lines.append(f"  {org.name}: {verdict} ({org.errors} error(s), {org.warnings} warning(s))")
        lines.append("")
    lines.append(status_line(report))
    return "\n".join(lines) + "\n"
