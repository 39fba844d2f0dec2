"""Human-readable report: organization -> benchmark -> implementation, grouped by rule.

Per implementation each rule id is one block: its count, its fix hint once,
and at most a few findings ("... and N more"). Vendored trees are one line
each (nested trees under their parent), forks are named, and identical native
sources across submitters are listed once per group. By default the report
stays within ``DEFAULT_MAX_LINES``: when the grouped listing would be longer,
fewer findings are shown per block, then none, then one line per
implementation (rule counts inline, hints once in a legend), and finally only
the summary table. ``verbose`` lists every finding; ``summary`` prints the one-screen
table (organization x benchmark). JSON and SARIF always keep every finding.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compliance.checks.vendoring import FORK
from compliance.findings import Finding, Severity
from compliance.report.interface import status_line
from compliance.report.safetext import one_line
from compliance.shared_sources import SharedSource, shared_sources

if TYPE_CHECKING:
    from compliance.inventory import Inventory
    from compliance.model import CheckReport
    from compliance.vendored_trees import VendoredTree

DEFAULT_MAX_LINES = 200
"""Upper bound on the default report's length (``--verbose`` lifts it)."""
EXAMPLES_PER_BLOCK = (3, 1, 0)
"""Findings listed per (implementation, rule), tried in this order until the report fits."""
COMPACT = -1
"""Examples value for the most compact listing: one line per implementation, hints in a legend."""
SHARED_GROUPS_LISTED = 10
"""Shared-source groups listed by default."""
ORGANIZATIONS_LISTED = 20
"""Organizations given a verdict line each at the end of the default report."""
OUTSIDE = "(outside any organization)"
NO_BENCHMARK = "(no benchmark)"
NO_IMPLEMENTATION = "(not in an implementation)"

Key = tuple[str, str, str]


def _key(submitter: str | None, benchmark: str | None, implementation: str | None) -> Key:
    return (submitter or OUTSIDE, benchmark or NO_BENCHMARK, implementation or NO_IMPLEMENTATION)


@dataclass(frozen=True)
class _View:
    """Everything the text report shows, grouped once."""

    findings: dict[Key, list[Finding]]
    trees: dict[Key, list[VendoredTree]]
    forks: dict[Key, list[str]]
    shared: tuple[SharedSource, ...]


def _implementation_of(inv: Inventory, path: str) -> str | None:
    """The implementation a path is in; a directory (a fork's root) counts as inside itself."""
    return inv.locate(path if path in inv.files else f"{path}/-").implementation


def _view(report: CheckReport) -> _View:
    inv = report.inventory
    findings: dict[Key, list[Finding]] = defaultdict(list)
    for f in report.findings:
        findings[_key(f.submitter, f.benchmark, _implementation_of(inv, f.path))].append(f)
    trees: dict[Key, list[VendoredTree]] = defaultdict(list)
    for tree in inv.vendored:
        trees[_key(tree.location.submitter, tree.location.benchmark, tree.location.implementation)].append(tree)
    forks: dict[Key, list[str]] = defaultdict(list)
    for fork in inv.forks:
        where = fork.location
        forks[_key(where.submitter, where.benchmark, where.implementation)].append(
            f"fork of {fork.project_name} ({fork.repository}) at {fork.path or '.'}; "
            f"{fork.native_files} native file(s) checked one by one")
    return _View(findings, trees, forks, shared_sources(inv))


def _tree_line(tree: VendoredTree, indent: str) -> str:
    name = f"{tree.project_name} ({tree.repository})" if tree.project_name else f"third-party tree ({tree.reason})"
    declared = "; declared" if tree.declared else ""
    own = tree.reported
    proof = f" ({tree.unproven} unproven, {own} reported one by one)" if tree.unproven and own else (
        f" ({tree.unproven} unproven)" if tree.unproven else (" (reported one by one)" if own else ""))
    return (f"{indent}vendored {name}: {tree.path}/ — {tree.files} files, {tree.source_files} C/C++/CUDA "
            f"sources, {tree.native_files} with kernel code{proof}{declared}")


def _trees_lines(trees: list[VendoredTree], indent: str) -> list[str]:
    """One line per tree, each nested tree right under its parent, indented one more step."""
    children: dict[str | None, list[VendoredTree]] = defaultdict(list)
    for tree in trees:
        parent = tree.parent if any(t.path == tree.parent for t in trees) else None
        children[parent].append(tree)
    lines: list[str] = []

    def visit(parent: str | None, depth: int) -> None:
        for tree in sorted(children.get(parent, []), key=lambda t: t.path):
            lines.append(_tree_line(tree, indent + "  " * depth))
            visit(tree.path, depth + 1)

    visit(None, 0)
    return lines


def _rule_block(rule_id: str, group: list[Finding], examples: int | None, indent: str) -> list[str]:
    levels = Counter(f.severity.value for f in group)
    counts = ", ".join(f"{n} {level}(s)" for level, n in sorted(levels.items(), key=lambda i: Severity(i[0]).rank))
    lines = [f"{indent}{rule_id}: {counts}", f"{indent}  fix: {group[0].hint}"]
    shown = group if examples is None else group[:examples]
    for f in shown:
        kernel = f" [kernel {f.kernel}]" if f.kernel else ""
        lines.append(f"{indent}  {f.location()}: {f.severity.value}: {f.message} [{f.rule_id}]{kernel}")
    if len(group) > len(shown):
        lines.append(f"{indent}  ... and {len(group) - len(shown)} more (--verbose lists them)")
    return lines


def _implementation_lines(key: Key, view: _View, examples: int | None, with_trees: bool) -> list[str]:
    found = view.findings.get(key, [])
    errors = sum(1 for f in found if f.severity is Severity.ERROR)
    warnings = sum(1 for f in found if f.severity is Severity.WARNING)
    verdict = "FAIL" if errors else "pass"
    lines = [f"    {key[2]}: {verdict} ({errors} error(s), {warnings} warning(s))"]
    listed = (examples is None or examples > 0) and any(f.rule_id == FORK.id for f in found)
    if not listed:  # a listed implementation-fork finding already names the project
        lines += [f"      {text}" for text in view.forks.get(key, [])]
    trees = view.trees.get(key, [])
    if with_trees:
        lines += _trees_lines(trees, "      ")
    elif trees:
        lines.append(f"      {len(trees)} vendored tree(s) (--verbose lists them)")
    by_rule: dict[str, list[Finding]] = defaultdict(list)
    for f in sorted(found, key=lambda f: (f.severity.rank, f.rule_id, f.sort_key())):
        by_rule[f.rule_id].append(f)
    if examples == COMPACT:
        if by_rule:
            lines[0] += ": " + ", ".join(f"{rule} x{len(group)}" for rule, group in by_rule.items())
        return lines
    for rule_id, group in by_rule.items():
        lines += _rule_block(rule_id, group, examples, "      ")
    return lines


def _hint_legend(view: _View) -> list[str]:
    hints = {f.rule_id: f.hint for group in view.findings.values() for f in group}
    return ["how to fix:"] + [f"  {rule}: {hint}" for rule, hint in sorted(hints.items())] + [""]


def _shared_lines(shared: tuple[SharedSource, ...], limit: int | None) -> list[str]:
    if not shared:
        return []
    lines = [f"shared sources ({len(shared)} group(s) of identical native files in several implementations):"]
    listed = shared if limit is None else shared[:limit]
    for group in listed:
        first, others = group.files[0], group.files[1:]
        lines.append(f"  {first.path}")
        lines += [f"    same source: {f.path} ({group.relation})" for f in others]
    if len(shared) > len(listed):
        lines.append(f"  ... and {len(shared) - len(listed)} more group(s) (--verbose lists them)")
    return lines + [""]


def _grouped(view: _View, examples: int | None, with_trees: bool, shared_limit: int | None) -> list[str]:
    keys = sorted(set(view.findings) | set(view.trees) | set(view.forks))
    lines: list[str] = []
    submitter = benchmark = None
    for key in keys:
        if key[0] != submitter:
            submitter, benchmark = key[0], None
            lines.append(key[0])
        if key[1] != benchmark:
            benchmark = key[1]
            lines.append(f"  {key[1]}")
        lines += _implementation_lines(key, view, examples, with_trees)
    legend = _hint_legend(view) if examples == COMPACT else []
    return (lines + [""] if lines else []) + legend + _shared_lines(view.shared, shared_limit)


def _count_by(items: Iterable[tuple[str | None, str | None]]) -> Counter[tuple[str, str]]:
    return Counter((s or OUTSIDE, b or NO_BENCHMARK) for s, b in items)


def summary_table(report: CheckReport) -> list[str]:
    """One line per organization x benchmark: verdict, errors, warnings, kernels, trees, binaries."""
    inv: Inventory = report.inventory
    errors = _count_by((f.submitter, f.benchmark) for f in report.findings if f.severity is Severity.ERROR)
    warnings = _count_by((f.submitter, f.benchmark) for f in report.findings if f.severity is Severity.WARNING)
    kernels = _count_by((n.location.submitter, n.location.benchmark) for n in inv.native if not n.vendored_tree)
    trees = _count_by((t.location.submitter, t.location.benchmark) for t in inv.vendored if t.parent is None)
    binaries = _count_by((b.location.submitter, b.location.benchmark) for b in inv.binaries)
    counted = set(errors) | set(warnings) | set(kernels) | set(trees) | set(binaries)
    silent = {(o.name, NO_BENCHMARK) for o in inv.organizations if not any(k[0] == o.name for k in counted)}
    rows = sorted(counted | silent)  # an organization with nothing to count still gets its row
    width = max([len("organization / benchmark")] + [len(f"{s} / {b}") for s, b in rows])
    header = (f"{'organization / benchmark':<{width}}  verdict  errors  warnings  custom-kernel-files  "
              "vendored-trees  binaries")
    lines = [header, "-" * len(header)]
    for row in rows:
        verdict = "FAIL" if errors[row] else "pass"
        lines.append(f"{row[0] + ' / ' + row[1]:<{width}}  {verdict:<7}  {errors[row]:>6}  {warnings[row]:>8}  "
                     f"{kernels[row]:>19}  {trees[row]:>14}  {binaries[row]:>8}")
    return lines


def _header(report: CheckReport) -> list[str]:
    rs = report.ruleset
    command = "compliance verify" if report.stages == ("verify",) else "compliance check"
    return [f"{command} {report.root}",
            f"rule set: {rs.id} — {rs.title} [{rs.status}] ({report.choice.reason})",
            f"provenance: {rs.provenance.decision} ({rs.provenance.date})", ""]


def _footer(report: CheckReport, verbose: bool) -> list[str]:
    lines = []
    orgs = report.organizations()
    if len(report.inventory.organizations) > 1 and (verbose or len(orgs) <= ORGANIZATIONS_LISTED):
        for org in orgs:
            verdict = "pass" if org.passed else "FAIL"
            lines.append(f"  {org.name}: {verdict} ({org.errors} error(s), {org.warnings} warning(s))")
        lines.append("")
    elif len(report.inventory.organizations) > 1:
        failed = sum(1 for org in orgs if not org.passed)
        folded = (f"  {len(orgs)} organizations: {len(orgs) - failed} pass, {failed} FAIL "
                  "(--summary or --verbose lists them)")
        lines += [folded, ""]
    return lines + [status_line(report)]


def _fitting_body(report: CheckReport, view: _View, budget: int) -> list[str]:
    """The most detailed grouped listing within ``budget`` lines, else the summary table."""
    tries = [(examples, True) for examples in (*EXAMPLES_PER_BLOCK, COMPACT)] + [(COMPACT, False)]
    for examples, with_trees in tries:
        body = _grouped(view, examples, with_trees, SHARED_GROUPS_LISTED)
        if len(body) <= budget:
            return body
    note = "(the grouped listing is longer than one report; --verbose prints it, --format json keeps all)"
    shared = _shared_lines(view.shared, 3)
    table = summary_table(report)
    room = budget - len(shared) - 4
    if len(table) > room:
        table = table[:room - 1] + [f"... and {len(table) - room + 1} more row(s) (--summary prints all)"]
    return table + ["", note, ""] + shared


def render_text(report: CheckReport, verbose: bool = False, summary: bool = False) -> str:
    """The text report (see the module docstring for what ``verbose`` and ``summary`` change)."""
    head, foot = _header(report), _footer(report, verbose or summary)
    if summary:
        body = summary_table(report) + [""]
    elif not report.findings and not report.inventory.vendored and not report.inventory.forks:
        body = ["no findings", ""]
    else:
        view = _view(report)
        if verbose:
            body = _grouped(view, None, True, None)
        else:
            body = _fitting_body(report, view, DEFAULT_MAX_LINES - len(head) - len(foot))
    # Names, messages and hints come from the tree: each line is escaped once here, so no
    # string from a submission can forge a report line or break the output stream.
    return "\n".join(one_line(line) for line in head + body + foot) + "\n"
