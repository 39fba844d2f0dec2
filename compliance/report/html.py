"""The review page: one self-contained HTML file for a working group's meeting.

``compliance check ROUND --format html --output report.html``. Top to bottom: the rule set, why
it was chosen and its provenance; the verdict; the round's custom kernels by category, the
categories the round's policy decides first (``compliance.kernel_groups``, the order every
reporter shares); the findings per organization and benchmark, each with file:line, severity,
rule id (a link to the rule's entry at the bottom of the page) and the fix; the reference of
every rule the page names. A search box and a severity filter hide what does not match.

Self-contained: the style and the script are inline, nothing is fetched, and the page's
Content-Security-Policy allows only those two blocks (by hash) and no connection at all, so it
works from a ``file://`` URL and an escaping mistake could not run a script either. Every string
from the tree (paths, messages, kernel ids, organization names) goes through :func:`page_text`:
control characters and lone surrogates escaped (``one_line``), bidirectional and zero-width
controls shown as ``\\u202e``-style escapes (a file name holding U+202E must not reorder what a
reviewer reads), then HTML-escaped.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections import defaultdict
from typing import TYPE_CHECKING

from compliance import __version__
from compliance.findings import Finding, Severity
from compliance.kernel_groups import KernelEntry, KernelGroup, kernel_groups
from compliance.report.interface import status_line
from compliance.report.safetext import one_line
from compliance.rulespecs.registry import spec_for

if TYPE_CHECKING:
    from compliance.model import CheckReport

OUTSIDE = "(outside any organization)"
NO_BENCHMARK = "(no benchmark)"
_INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
"""Bidirectional controls (U+202A-U+202E, U+2066-U+2069, marks) and zero-width characters."""
_SAFE_ID = re.compile(r"[^a-z0-9-]")
_LINK = re.compile(r"^https?://[^\s\"'<>]+$")

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328}
body{margin:0 auto;max-width:1200px;padding:0 1.2em 3em}
h1{font-size:1.5em;margin:.8em 0 .2em}
h2{font-size:1.2em;margin:1.6em 0 .4em;border-bottom:1px solid #d0d7de}
h3{font-size:1.05em;margin:1em 0 .3em}
code,.path{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:.92em}
.path{unicode-bidi:isolate;direction:ltr;word-break:break-all}
table{border-collapse:collapse;width:100%;margin:.3em 0 1em}
th,td{border:1px solid #d0d7de;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f6f8fa}
.meta td:first-child{white-space:nowrap;font-weight:600;width:9em}
.FAIL,.error{color:#cf222e;font-weight:600}
.warning{color:#9a6700;font-weight:600}
.pass,.PASS{color:#1a7f37;font-weight:600}
.info{color:#57606a}
.badge{display:inline-block;border-radius:1em;padding:0 .6em;font-size:.85em;background:#ddf4ff;color:#0969da}
.badge.proposal{background:#fff8c5;color:#9a6700}
.verdict{font-size:1.1em;padding:.5em .8em;border-radius:6px;background:#f6f8fa}
.toolbar{position:sticky;top:0;background:#fff;padding:.5em 0;border-bottom:1px solid #d0d7de}
.toolbar{display:flex;gap:1em;align-items:center}
.toolbar input{flex:1;font-size:1em;padding:.3em .5em}
.hidden{display:none}
a code{white-space:nowrap}
.fix{color:#57606a}
details>summary{cursor:pointer;font-weight:600;margin:.4em 0}
.rule{margin:.8em 0;padding:.4em .8em;border-left:3px solid #d0d7de}
"""

_SCRIPT = """
(function () {
  var box = document.getElementById("filter"), level = document.getElementById("level");
  var shown = document.getElementById("shown");
  function apply() {
    var words = box.value.toLowerCase().split(/\\s+/).filter(Boolean), want = level.value, total = 0, visible = 0;
    document.querySelectorAll("tr.row").forEach(function (row) {
      var text = row.textContent.toLowerCase(), ok = words.every(function (w) { return text.indexOf(w) >= 0; });
      if (want && row.getAttribute("data-level") !== want) { ok = false; }
      row.classList.toggle("hidden", !ok); total += 1; if (ok) { visible += 1; }
    });
    document.querySelectorAll("[data-group]").forEach(function (group) {
      group.classList.toggle("hidden", group.querySelector("tr.row:not(.hidden)") === null);
    });
    shown.textContent = visible + " of " + total + " rows shown";
  }
  box.addEventListener("input", apply); level.addEventListener("change", apply); apply();
})();
"""


def page_text(value: object) -> str:
    """A string from the tree, safe as HTML text or attribute value (see the module docstring)."""
    visible = _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}", one_line(str(value)))
    return html.escape(visible, quote=True)


def _rule_anchor(rule_id: str) -> str:
    return "rule-" + _SAFE_ID.sub("-", rule_id.lower())


def _rule_link(rule_id: str) -> str:
    return f'<a href="#{_rule_anchor(rule_id)}"><code>{page_text(rule_id)}</code></a>'


def _hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


def _header(report: CheckReport) -> list[str]:
    rs, choice = report.ruleset, report.choice
    prov = rs.provenance
    decision = (f'<a href="{page_text(prov.decision)}">{page_text(prov.decision)}</a>' if _LINK.match(prov.decision)
                else page_text(prov.decision))
    status = ('<span class="badge proposal">PROPOSAL, not MLPerf policy</span>' if rs.status == "proposal"
              else f'<span class="badge">{page_text(rs.status)}</span>')
    rows = [("rule set", f"<code>{page_text(rs.id)}</code> — {page_text(rs.title)} {status}"),
            ("chosen by", page_text(choice.reason)),
            ("provenance", f"{decision} ({page_text(prov.date)})"
             + "".join(f"; {page_text(v)}" for v in (prov.body, prov.note) if v)),
            ("rule file", f'<span class="path">{page_text(rs.source)}</span>'),
            ("checked tree", f'<span class="path">{page_text(report.root)}</span>'),
            ("checks", page_text(", ".join(report.stages))),
            ("tool", f"compliance {page_text(__version__)}; every rule id links to its entry in the "
                     '<a href="#rules">rule reference</a> below (also <code>compliance rules explain ID</code>)')]
    if choice.stricter:
        rows.insert(2, ("stricter round", f"<code>{page_text(choice.stricter)}</code> also fits this tree"))
    table = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    verdict = "PASS" if report.passed else "FAIL"
    rest = status_line(report).removeprefix(f"{verdict}:")
    return [f"<h1>Custom-kernel compliance: <code>{page_text(rs.id)}</code></h1>",
            f'<table class="meta">{table}</table>',
            f'<p class="verdict"><span class="{verdict}">{verdict}</span>:{page_text(rest)}</p>']


def _toolbar() -> str:
    return ('<div class="toolbar"><input id="filter" type="search" placeholder="Filter: organization, path, '
            'rule id, message…" aria-label="filter rows"><select id="level" aria-label="severity">'
            '<option value="">every level</option><option value="error">errors</option>'
            '<option value="warning">warnings</option><option value="info">infos</option>'
            '<option value="FAIL">kernels that fail</option><option value="pass">kernels that pass</option>'
            '</select><span id="shown"></span></div>')


def _kernel_row(kernel: KernelEntry) -> str:
    rules = ", ".join(_rule_link(r) for r in kernel.rules) or "—"
    declared = f"<code>{page_text(kernel.kernel)}</code>" if kernel.kernel else '<span class="error">undeclared</span>'
    return (f'<tr class="row" data-level="{page_text(kernel.verdict)}">'
            f"<td>{page_text(kernel.organization or OUTSIDE)}</td>"
            f"<td>{page_text(kernel.benchmark or NO_BENCHMARK)}</td>"
            f'<td><span class="path">{page_text(kernel.path)}</span></td><td>{declared}</td>'
            f'<td class="{page_text(kernel.verdict)}">{page_text(kernel.verdict)}</td><td>{rules}</td>'
            f"<td>{page_text(kernel.why)}</td></tr>")


def _kernel_section(groups: tuple[KernelGroup, ...]) -> list[str]:
    lines = ['<h2 id="kernels">Custom kernels by category</h2>']
    if not groups:
        return lines + ["<p>No custom kernel in this tree.</p>"]
    lines.append("<p>The categories the round's policy decides come first; each kernel carries the verdict "
                 "of the findings on its file.</p>")
    for group in groups:
        badge = ('<span class="badge">decided by the round\'s policy</span>' if group.decided
                 else '<span class="badge proposal">in a benchmark the policy covers: not allowlisted</span>'
                 if group.covered else "")
        lines += [f'<section data-group="kernels"><h3>{page_text(group.title)} '
                  f"<code>{page_text(group.category)}</code> {badge} — "
                  f"{len(group.kernels)} kernel(s), {group.failed} failing</h3>",
                  "<table><tr><th>organization</th><th>benchmark</th><th>file</th><th>declared as</th>"
                  "<th>verdict</th><th>rules</th><th>why this category</th></tr>",
                  *(_kernel_row(k) for k in group.kernels), "</table></section>"]
    return lines


def _finding_row(finding: Finding) -> str:
    where = f"{finding.path}:{finding.line}" if finding.line else finding.path
    kernel = f" <span class=\"info\">[kernel <code>{page_text(finding.kernel)}</code>]</span>" if finding.kernel else ""
    level = finding.severity.value
    return (f'<tr class="row" data-level="{level}"><td><span class="path">{page_text(where)}</span></td>'
            f'<td class="{level}">{level}</td><td>{_rule_link(finding.rule_id)}</td>'
            f'<td>{page_text(finding.message)}{kernel}<div class="fix">fix: {page_text(finding.hint)}</div></td></tr>')


def _findings_section(report: CheckReport) -> list[str]:
    lines = ['<h2 id="findings">Findings by organization and benchmark</h2>']
    if not report.findings:
        return lines + ["<p>No findings.</p>"]
    by_org: dict[str, dict[str, list[Finding]]] = defaultdict(lambda: defaultdict(list))
    for finding in report.findings:
        by_org[finding.submitter or OUTSIDE][finding.benchmark or NO_BENCHMARK].append(finding)
    for org in sorted(by_org):
        found = [f for group in by_org[org].values() for f in group]
        errors = sum(1 for f in found if f.severity is Severity.ERROR)
        warnings = sum(1 for f in found if f.severity is Severity.WARNING)
        verdict = "FAIL" if errors else "pass"
        lines.append(f'<details open data-group="organization"><summary>{page_text(org)}: '
                     f'<span class="{verdict}">{verdict}</span> ({errors} error(s), {warnings} warning(s))</summary>')
        for benchmark in sorted(by_org[org]):
            rows = sorted(by_org[org][benchmark], key=lambda f: (f.severity.rank, f.sort_key()))
            lines += [f'<section data-group="benchmark"><h3>{page_text(benchmark)}</h3>',
                      "<table><tr><th>file:line</th><th>severity</th><th>rule</th><th>finding and fix</th></tr>",
                      *(_finding_row(f) for f in rows), "</table></section>"]
        lines.append("</details>")
    return lines


def _rules_section(report: CheckReport, groups: tuple[KernelGroup, ...]) -> list[str]:
    named = {f.rule_id for f in report.findings} | {r for g in groups for k in g.kernels for r in k.rules}
    lines = ['<h2 id="rules">Rule reference</h2>']
    if not named:
        return lines + ["<p>No rule is named on this page; <code>compliance rules ids</code> lists them all.</p>"]
    for rule_id in sorted(named):
        spec = spec_for(rule_id)
        if spec is None:
            lines.append(f'<div class="rule" id="{_rule_anchor(rule_id)}"><code>{page_text(rule_id)}</code></div>')
            continue
        level = report.ruleset.check_config(rule_id).level
        lines.append(f'<div class="rule" id="{_rule_anchor(rule_id)}"><h3><code>{page_text(spec.id)}</code>: '
                     f"{page_text(spec.title)}</h3><p>Level in this rule set: <b>{page_text(level)}</b> "
                     f"(default {page_text(spec.default_level)}).</p><p>{page_text(spec.doc)}</p>"
                     f"<p><b>How to fix:</b> {page_text(spec.hint)}</p></div>")
    return lines


def render_html(report: CheckReport) -> str:
    """The review page of ``report`` (see the module docstring)."""
    groups = kernel_groups(report)
    body = (_header(report) + [_toolbar()] + _kernel_section(groups) + _findings_section(report)
            + _rules_section(report, groups))
    policy = (f"default-src 'none'; style-src {_hash(_STYLE)}; script-src {_hash(_SCRIPT)}; img-src data:; "
              "base-uri 'none'; form-action 'none'")
    head = ['<!DOCTYPE html>', '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>compliance: {page_text(report.ruleset.id)} — {'PASS' if report.passed else 'FAIL'}</title>",
            f"<style>{_STYLE}</style></head><body>"]
    return "\n".join(head + body + [f"<script>{_SCRIPT}</script>", "</body></html>"]) + "\n"
