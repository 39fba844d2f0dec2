"""Human-readable report: organization -> benchmark -> implementation, grouped by rule.

Per implementation each rule id is one block: its count, its fix hint once,
and at most a few findings ("... and N more"). Vendored trees are one line
each (nested trees under their parent), forks are named, and identical native
sources across submitters are listed once per group. ``layout-variant`` notes
are one line per organization (they say how the tree is read, nothing to fix).
Inference code directories that are no model of the round (``code/plugin``,
``code/harness``, ``code/common``) are shown as the organization's shared code,
never as a benchmark. By default the report stays within ``DEFAULT_MAX_LINES``:
when the grouped listing would be longer, fewer findings are shown per block,
then none, then one line per implementation (rule counts inline, hints once in
a legend), then one line per organization. Whatever the length, the default
text shows every shared-source group that spans organizations (one line each)
and every named vendored project (one line each, with where its copies are):
they are the story of a round. ``verbose`` lists every finding; ``summary``
prints the one-screen table (organization x benchmark). JSON and SARIF always
keep every finding. Every part counts organizations by name
(``compliance.layout.organization_names``), so a report gives one count.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compliance.findings import Finding, Severity
from compliance.kernel_groups import KernelEntry, KernelGroup, kernel_groups
from compliance.layout import Location, organization_names
from compliance.report.interface import status_line
from compliance.report.safetext import one_line
from compliance.rulespecs.checks import FORK, VARIANT
from compliance.shared_sources import SharedSource

if TYPE_CHECKING:
    from compliance.inventory import Inventory
    from compliance.model import CheckReport
    from compliance.ruleset import RuleSet
    from compliance.vendored_trees import VendoredTree

DEFAULT_MAX_LINES = 200
"""Upper bound on the default report's length (``--verbose`` lifts it)."""
EXAMPLES_PER_BLOCK = (3, 1, 0)
"""Findings listed per (implementation, rule), tried in this order until the report fits."""
COMPACT = -1
"""Examples value for the most compact listing: one line per implementation, hints in a legend."""
SHARED_GROUPS_LISTED = 10
"""Shared-source groups within one organization listed by default (those spanning
organizations are always listed)."""
ORGANIZATIONS_LISTED = 20
"""Organizations given a verdict line each at the end of the default report."""
KERNELS_LISTED = (40, 12, 4)
"""Kernels listed one by one per policy category by default, tried in this order until the
report fits (the other categories are one line each: their count per organization)."""
OUTSIDE = "(outside any organization)"
NO_BENCHMARK = "(no benchmark)"
NO_IMPLEMENTATION = "(not in an implementation)"
SHARED_CODE = "(shared code)"
"""Summary-table label of inference code directories that are no model of the round."""

Key = tuple[str, str, str]


def _key(submitter: str | None, benchmark: str | None, implementation: str | None) -> Key:
    return (submitter or OUTSIDE, benchmark or NO_BENCHMARK, implementation or NO_IMPLEMENTATION)


def is_shared_code(ruleset: RuleSet, where: Location, benchmark: str | None) -> bool:
    """An inference ``code/<name>/`` directory that is no model of the round (``plugin``,
    ``harness``, ``common``): code the organization's models share, not a benchmark."""
    return (ruleset.layout == "inference" and benchmark is not None and where.area == "code"
            and ruleset.official_benchmark(benchmark) is None)


def _benchmark_label(ruleset: RuleSet, where: Location, benchmark: str | None, table: bool = False) -> str | None:
    """The benchmark a row or heading is under: shared code is named as such, never as a benchmark."""
    if not is_shared_code(ruleset, where, benchmark):
        return benchmark
    return SHARED_CODE if table else f"code/{benchmark}/ {SHARED_CODE}"


@dataclass(frozen=True)
class _View:
    """Everything the text report shows, grouped once."""

    findings: dict[Key, list[Finding]]
    trees: dict[Key, list[VendoredTree]]
    forks: dict[Key, list[str]]
    shared: tuple[SharedSource, ...]
    variants: dict[str, list[Finding]]
    """``layout-variant`` findings per organization (one line each by default)."""


def _implementation_of(inv: Inventory, path: str) -> str | None:
    """The implementation a path is in; a directory (a fork's root) counts as inside itself."""
    return inv.locate(path if path in inv.files else f"{path}/-").implementation


def _view(report: CheckReport) -> _View:
    inv, rs = report.inventory, report.ruleset
    findings: dict[Key, list[Finding]] = defaultdict(list)
    variants: dict[str, list[Finding]] = defaultdict(list)
    for f in report.findings:
        if f.rule_id == VARIANT.id:
            variants[f.submitter or OUTSIDE].append(f)
            continue
        where = inv.locate(f.path if f.path in inv.files else f"{f.path}/-")
        findings[_key(f.submitter, _benchmark_label(rs, where, f.benchmark),
                      _implementation_of(inv, f.path))].append(f)
    trees: dict[Key, list[VendoredTree]] = defaultdict(list)
    for tree in inv.vendored:
        at = tree.location
        trees[_key(at.submitter, _benchmark_label(rs, at, at.benchmark), at.implementation)].append(tree)
    forks: dict[Key, list[str]] = defaultdict(list)
    for fork in inv.forks:
        where = fork.location
        forks[_key(where.submitter, _benchmark_label(rs, where, where.benchmark), where.implementation)].append(
            f"fork of {fork.project_name} ({fork.repository}) at {fork.path or '.'}; "
            f"{fork.native_files} native file(s) checked one by one")
    return _View(findings, trees, forks, report.shared_sources, variants)


def _tree_line(tree: VendoredTree, indent: str) -> str:
    name = f"{tree.project_name} ({tree.repository})" if tree.project_name else f"third-party tree ({tree.reason})"
    declared = "; declared" if tree.declared else ""
    own = tree.reported
    proof = f" ({tree.unproven} unproven, {own} reported one by one)" if tree.unproven and own else (
        f" ({tree.unproven} unproven)" if tree.unproven else (" (reported one by one)" if own else ""))
    if tree.proven or tree.modified:
        release = f" of {tree.version}" if tree.version else ""
        modified = f", {tree.modified} modified upstream file(s)" if tree.modified else ""
        proof = f" ({tree.proven} proven upstream{release}{modified}, {own} reported one by one)" if own else (
            f" ({tree.proven} proven upstream{release})")
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


def _spans_organizations(group: SharedSource) -> bool:
    return len({f.submitter for f in group.files}) > 1


def _shared_lines(shared: tuple[SharedSource, ...], limit: int | None, compact: bool = False) -> list[str]:
    """Every group spanning organizations, then up to ``limit`` groups within one organization
    (None: all). ``compact``: one line per group (its file name, then where each copy is)."""
    if not shared:
        return []
    across = [g for g in shared if _spans_organizations(g)]
    within = [g for g in shared if not _spans_organizations(g)]
    listed = across + (within if limit is None else within[:limit])
    lines = [f"shared sources ({len(shared)} group(s) of identical native files in several implementations, "
             f"{len(across)} across organizations):"]
    for group in listed:
        first, others = group.files[0], group.files[1:]
        if compact:
            copies = "; ".join(f.path for f in group.files)
            lines.append(f"  {first.path.rsplit('/', 1)[-1]} x{len(group.files)} ({group.relation}): {copies}")
            continue
        lines.append(f"  {first.path}")
        lines += [f"    same source: {f.path} ({group.relation})" for f in others]
    if len(shared) > len(listed):
        lines.append(f"  ... and {len(shared) - len(listed)} more group(s) within one organization "
                     "(--verbose lists them)")
    return lines + [""]


def _variant_lines(found: list[Finding], verbose: bool) -> list[str]:
    """An organization's layout variants: one line (every one with ``verbose``)."""
    if verbose:
        return [f"  {VARIANT.id}: {len(found)} warning(s)"] + [
            f"    {f.location()}: {f.severity.value}: {f.message} [{f.rule_id}]" for f in found]
    first = found[0]
    more = f" (and {len(found) - 1} more; --verbose lists them)" if len(found) > 1 else ""
    return [f"  {VARIANT.id}: {len(found)} warning(s), read as the canonical form: {first.location()}: "
            f"{first.message}{more}"]


def _grouped(view: _View, examples: int | None, with_trees: bool, shared_limit: int | None,
             compact_shared: bool = False) -> list[str]:
    keys = sorted(set(view.findings) | set(view.trees) | set(view.forks))
    lines: list[str] = []
    submitter = benchmark = None
    for org in sorted(set(view.variants) - {k[0] for k in keys}):
        lines += [org] + _variant_lines(view.variants[org], examples is None)
    for key in keys:
        if key[0] != submitter:
            submitter, benchmark = key[0], None
            lines.append(key[0])
            if key[0] in view.variants:
                lines += _variant_lines(view.variants[key[0]], examples is None)
        if key[1] != benchmark:
            benchmark = key[1]
            lines.append(f"  {key[1]}")
        lines += _implementation_lines(key, view, examples, with_trees)
    legend = _hint_legend(view) if examples == COMPACT else []
    trees = [] if with_trees else _vendored_projects(view)
    return ((lines + [""] if lines else []) + legend + trees
            + _shared_lines(view.shared, shared_limit, compact_shared))


def _vendored_projects(view: _View) -> list[str]:
    """One line per vendored project: its copies' count and where they are; unnamed trees counted."""
    by_project: dict[str, list[VendoredTree]] = defaultdict(list)
    for trees in view.trees.values():
        for tree in trees:
            name = f"{tree.project_name} ({tree.repository})" if tree.project_name else "third-party trees"
            by_project[name].append(tree)
    if not by_project:
        return []
    lines = [f"vendored trees ({sum(len(t) for t in by_project.values())}; --verbose lists each):"]
    for name, trees in sorted(by_project.items(), key=lambda item: (item[0] == "third-party trees", item[0])):
        kernels = sum(t.native_files for t in trees)
        unproven = sum(t.unproven for t in trees)
        own = sum(t.reported for t in trees)
        where = Counter(t.location.submitter or OUTSIDE for t in trees)
        places = ", ".join(f"{org} x{n}" if n > 1 else org for org, n in sorted(where.items()))
        lines.append(f"  {name}: {len(trees)} tree(s), {kernels} with kernel code ({unproven} unproven, "
                     f"{own} reported one by one) in {places}")
    return lines + [""]


def _organization_lines(view: _View, budget: int) -> list[str]:
    """One line per organization (verdict, counts per rule), at most ``budget`` lines."""
    per_org: dict[str, list[Finding]] = defaultdict(list)
    for key, found in view.findings.items():
        per_org[key[0]] += found
    for org, found in view.variants.items():
        per_org[org] += found
    lines = []
    for org, found in sorted(per_org.items()):
        errors = sum(1 for f in found if f.severity is Severity.ERROR)
        warnings = sum(1 for f in found if f.severity is Severity.WARNING)
        rules = Counter(f.rule_id for f in found)
        lines.append(f"{org}: {'FAIL' if errors else 'pass'} ({errors} error(s), {warnings} warning(s)): "
                     + ", ".join(f"{rule} x{n}" for rule, n in sorted(rules.items())))
    if len(lines) > budget:
        lines = lines[:max(budget - 1, 0)] + [f"... and {len(lines) - budget + 1} more organization(s) "
                                               "(--summary lists them)"]
    return lines


def _count_by(items: Iterable[tuple[str | None, str | None]]) -> Counter[tuple[str, str]]:
    return Counter((s or OUTSIDE, b or NO_BENCHMARK) for s, b in items)


def summary_table(report: CheckReport) -> list[str]:
    """One line per organization x benchmark: verdict, errors, warnings, kernels, trees, binaries.
    Inference code that is no model of the round is one ``(shared code)`` row per organization."""
    inv: Inventory = report.inventory
    rs = report.ruleset

    def cell(submitter: str | None, where: Location, benchmark: str | None) -> tuple[str | None, str | None]:
        return submitter, _benchmark_label(rs, where, benchmark, table=True)

    def at(f: Finding) -> Location:
        return inv.locate(f.path if f.path in inv.files else f"{f.path}/-")

    errors = _count_by(cell(f.submitter, at(f), f.benchmark) for f in report.findings
                       if f.severity is Severity.ERROR)
    warnings = _count_by(cell(f.submitter, at(f), f.benchmark) for f in report.findings
                         if f.severity is Severity.WARNING)
    kernels = _count_by(cell(n.location.submitter, n.location, n.location.benchmark)
                        for n in inv.native if not n.vendored_tree)
    trees = _count_by(cell(t.location.submitter, t.location, t.location.benchmark)
                      for t in inv.vendored if t.parent is None)
    binaries = _count_by(cell(b.location.submitter, b.location, b.location.benchmark) for b in inv.binaries)
    counted = set(errors) | set(warnings) | set(kernels) | set(trees) | set(binaries)
    silent = {(name, NO_BENCHMARK) for name in organization_names(inv.organizations)
              if not any(k[0] == name for k in counted)}
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


def _kernel_line(kernel: KernelEntry, indent: str) -> str:
    rules = f" ({', '.join(kernel.rules)})" if kernel.rules else ""
    declared = f" [kernel {kernel.kernel}]" if kernel.kernel else ""
    return f"{indent}{kernel.organization or OUTSIDE}: {kernel.path}: {kernel.verdict}{rules}{declared}"


def _group_heading(group: KernelGroup) -> str:
    decided = (" [decided by the round's policy]" if group.decided
               else " [not allowlisted in this benchmark]" if group.covered else "")
    return (f"  {group.category} — {group.title}{decided}: {len(group.kernels)} file(s), "
            f"{group.failed} FAIL")


def kernel_lines(groups: tuple[KernelGroup, ...], listed: int | None) -> list[str]:
    """The report's opening: custom kernels by category. Policy categories (and the other kernels
    of the benchmarks they cover) list each kernel (organization, path, verdict; up to ``listed``,
    None: all); the others list each kernel only
    when ``listed`` is None, else one line with their count per organization."""
    if not groups:
        return []
    total = sum(len(g.kernels) for g in groups)
    failed = sum(g.failed for g in groups)
    lines = [f"custom kernels ({total} file(s), {failed} FAIL), by category:"]
    for group in groups:
        lines.append(_group_heading(group))
        if listed is None or group.decided or group.covered:
            shown = group.kernels if listed is None else group.kernels[:listed]
            lines += [_kernel_line(k, "    ") for k in shown]
            if len(group.kernels) > len(shown):
                lines.append(f"    ... and {len(group.kernels) - len(shown)} more (--verbose lists them)")
            continue
        per_org = Counter(k.organization or OUTSIDE for k in group.kernels)
        lines[-1] += ": " + ", ".join(f"{org} x{n}" for org, n in sorted(per_org.items()))
    return lines + [""]


def _fitting_kernels(groups: tuple[KernelGroup, ...], budget: int) -> list[str]:
    """The most detailed kernel section within ``budget`` lines (the policy categories' first
    kernels are kept whatever the length: they are the round's question)."""
    for listed in KERNELS_LISTED:
        lines = kernel_lines(groups, listed)
        if len(lines) <= budget:
            return lines
    return kernel_lines(groups, KERNELS_LISTED[-1])


def _header(report: CheckReport) -> list[str]:
    rs = report.ruleset
    command = "compliance verify" if report.stages == ("verify",) else "compliance check"
    return [f"{command} {report.root}",
            f"rule set: {rs.id} — {rs.title} [{rs.status}] ({report.choice.reason})",
            f"provenance: {rs.provenance.decision} ({rs.provenance.date})", ""]


def _footer(report: CheckReport, verbose: bool, listed_in_body: bool = False) -> list[str]:
    """A verdict line per organization (folded to one line for many, or when the body has them)."""
    orgs = [o for o in report.organizations() if o.name != "-"]
    if len(orgs) <= 1:
        return [status_line(report)]
    if not listed_in_body and (verbose or len(orgs) <= ORGANIZATIONS_LISTED):
        lines = [f"  {o.name}: {'pass' if o.passed else 'FAIL'} ({o.errors} error(s), {o.warnings} warning(s))"
                 for o in orgs]
        return lines + ["", status_line(report)]
    failed = sum(1 for org in orgs if not org.passed)
    return [f"  {len(orgs)} organizations: {len(orgs) - failed} pass, {failed} FAIL "
            "(--summary or --verbose lists them)", "", status_line(report)]


def _fitting_body(view: _View, budget: int) -> tuple[list[str], bool]:
    """The most detailed listing within ``budget`` lines, and whether it is one line per
    organization. Shared groups across organizations and vendored projects are always in."""
    tries = [(examples, True, False) for examples in (*EXAMPLES_PER_BLOCK, COMPACT)]
    tries += [(COMPACT, False, False), (COMPACT, False, True)]
    for examples, with_trees, compact in tries:
        body = _grouped(view, examples, with_trees, SHARED_GROUPS_LISTED, compact)
        if len(body) <= budget:
            return body, False
    kept = _vendored_projects(view) + _shared_lines(view.shared, 0, compact=True)
    note = ["(the grouped listing is longer than one report: one line per organization; --verbose prints "
            "it, --summary gives the table, --format json keeps all)"]
    orgs = _organization_lines(view, budget - len(kept) - len(note) - 1)
    errors = _error_lines(view, budget - len(kept) - len(note) - len(orgs) - 2)
    return note + orgs + [""] + errors + kept, True


def _error_lines(view: _View, budget: int) -> list[str]:
    """Error findings, one line each, as many as ``budget`` allows (a count for the rest)."""
    errors = sorted((f for found in view.findings.values() for f in found if f.severity is Severity.ERROR),
                    key=lambda f: f.sort_key())
    if not errors or budget < 3:
        return []
    shown = errors if len(errors) <= budget - 2 else errors[:budget - 3]
    lines = ["errors:"] + [f"  {f.location()}: {f.message} [{f.rule_id}]" for f in shown]
    if len(errors) > len(shown):
        lines.append(f"  ... and {len(errors) - len(shown)} more error(s) (--verbose lists them)")
    return lines + [""]


def render_text(report: CheckReport, verbose: bool = False, summary: bool = False) -> str:
    """The text report (see the module docstring for what ``verbose`` and ``summary`` change)."""
    head, foot = _header(report), _footer(report, verbose or summary)
    groups = kernel_groups(report)
    if summary:
        body = kernel_lines(groups, 0) + summary_table(report) + [""]
    elif not report.findings and not report.inventory.vendored and not report.inventory.forks:
        body = kernel_lines(groups, None) + ["no findings", ""]
    else:
        view = _view(report)
        if verbose:
            body = kernel_lines(groups, None) + _grouped(view, None, True, None)
        else:
            kernels = _fitting_kernels(groups, (DEFAULT_MAX_LINES - len(head) - len(foot)) // 2)
            body, per_org = _fitting_body(view, DEFAULT_MAX_LINES - len(head) - len(foot) - len(kernels))
            body = kernels + body
            if per_org:
                foot = _footer(report, False, listed_in_body=True)
    # Names, messages and hints come from the tree: each line is escaped once here, so no
    # string from a submission can forge a report line or break the output stream.
    return "\n".join(one_line(line) for line in head + body + foot) + "\n"
