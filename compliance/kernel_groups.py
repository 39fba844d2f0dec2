"""The custom kernels of a checked tree, grouped by category: what a round's reviewer asks first.

A kernel file is a native source the report names one by one (vendored copies folded into one
``vendored-unproven`` finding per tree, and copies with no finding, are the upstream's code, not a
custom kernel). Each is put in a category:

- a kernel declared in a manifest is in the category it declares;
- an undeclared one, in a benchmark that an allowlist entry of the round covers, is in that entry's
  category when its path below the implementation (or its declared kernel id) mentions the entry's
  subject (the words of its id and title: ``embedding``, ``gather``, ``bag`` for the DLRM
  embedding exception, or the usual short form ``emb``);
- everything else is grouped by the benchmark it is in.

The grouping only orders what a reviewer reads; it never changes a verdict: each kernel carries
the verdict of the findings on its file. The round's policy categories come first (in the rule
set's order), then the benchmarks the policy covers, then the rest. Every reporter (text, JSON,
the HTML review page) takes the groups from ``kernel_groups``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compliance.findings import Finding, Severity
from compliance.manifest import load_manifest
from compliance.paths import parent_dir, tree_relative

if TYPE_CHECKING:
    from compliance.inventory import Inventory, NativeFile
    from compliance.model import CheckReport
    from compliance.ruleset import AllowlistEntry, RuleSet

OTHER_PREFIX = "benchmark:"
"""Category id prefix of the groups that no allowlist entry decides (``benchmark:<name>``)."""
NO_BENCHMARK = "(no benchmark)"
GENERIC_WORDS = frozenset({"custom", "kernel", "kernels", "for", "and", "the", "with", "cuda", "gpu",
                           "lookups", "lookup", "ops", "op"})
"""Title words that say nothing about a category's subject."""


@dataclass(frozen=True)
class KernelEntry:
    """One custom kernel file with its verdict."""

    path: str
    """Root-relative path of the file."""
    organization: str | None
    """Organization directory, where the layout tells."""
    benchmark: str | None
    """Benchmark directory name."""
    implementation: str | None
    """Implementation directory name."""
    kernel: str | None
    """Declared kernel id, or None for an undeclared kernel."""
    verdict: str
    """``FAIL`` (an error on the file), ``warning`` or ``pass``."""
    rules: tuple[str, ...]
    """Rule ids of the findings on the file (sorted, each once)."""
    why: str
    """Why it is in its category: ``declared``, ``its path mentions 'gather'`` or ``in <benchmark>``."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"path": self.path, "organization": self.organization, "benchmark": self.benchmark,
                "implementation": self.implementation, "kernel": self.kernel, "verdict": self.verdict,
                "rules": list(self.rules), "why": self.why}


@dataclass(frozen=True)
class KernelGroup:
    """The kernels of one category."""

    category: str
    """An allowlist entry's id, or ``benchmark:<name>`` for kernels no entry decides."""
    title: str
    """What the category is."""
    decided: bool
    """The round's policy decides this category (an allowlist entry of the rule set)."""
    covered: bool
    """In a benchmark an allowlist entry covers, without being of its category (the policy
    decides these too: they are not allowlisted)."""
    kernels: tuple[KernelEntry, ...]
    """Sorted by organization, then path."""

    @property
    def failed(self) -> int:
        """Kernels with an error on their file."""
        return sum(1 for k in self.kernels if k.verdict == "FAIL")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``custom_kernels`` in the report)."""
        return {"category": self.category, "title": self.title, "decided_by_policy": self.decided,
                "in_policy_benchmark": self.covered,
                "count": len(self.kernels), "failed": self.failed,
                "kernels": [k.to_dict() for k in self.kernels]}


def _words(text: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if w}


def subject_words(entry: AllowlistEntry) -> frozenset[str]:
    """The words that say what an allowlist entry is about (benchmark names and generic words left out)."""
    words = _words(entry.id) | _words(entry.title)
    return frozenset(w for w in words - GENERIC_WORDS - set(entry.benchmarks) if len(w) >= 3)


def _mention(subject: frozenset[str], tokens: set[str]) -> str | None:
    """The first subject word the tokens mention (whole, or a long word's 3-letter short form)."""
    for word in sorted(subject):
        if word in tokens or (len(word) >= 6 and word[:3] in tokens):
            return word
    return None


def _kernel_files(inventory: Inventory, by_path: Mapping[str, list[Finding]],
                  declared: Mapping[str, tuple[str, str]]) -> list[NativeFile]:
    """Native files the report names one by one, or that a manifest declares."""
    return [n for n in inventory.native
            if n.path in declared or (not n.unproven and (n.vendored_tree is None or n.path in by_path))]


def _declared_sources(report: CheckReport) -> dict[str, tuple[str, str]]:
    """Root-relative source path -> (kernel id, category) of every kernel the manifests declare."""
    found: dict[str, tuple[str, str]] = {}
    for manifest_path in report.inventory.manifests:
        manifest = load_manifest(report.root / manifest_path)
        for kernel in manifest.kernels:
            for source in kernel.sources:
                rel = tree_relative(parent_dir(manifest_path), source)
                if rel is not None:
                    found.setdefault(rel, (kernel.id, kernel.category))
    return found


def _verdict(found: Iterable[Finding]) -> tuple[str, tuple[str, ...]]:
    listed = list(found)
    levels = {f.severity for f in listed}
    verdict = "FAIL" if Severity.ERROR in levels else "warning" if Severity.WARNING in levels else "pass"
    return verdict, tuple(sorted({f.rule_id for f in listed}))


def _below_implementation(path: str, implementation: str | None) -> str:
    """The part of ``path`` below its implementation directory (the whole path outside one)."""
    if implementation:
        marker = f"/{implementation}/"
        at = path.find(marker)
        if at >= 0:
            return path[at + len(marker):]
    return path


def _category(ruleset: RuleSet, native: NativeFile, declared: tuple[str, str] | None) -> tuple[str, str]:
    """(category id, why) of one kernel file."""
    if declared is not None:
        return declared[1], "declared"
    where = native.location
    benchmark = ruleset.official_benchmark(where.benchmark) if where.benchmark else None
    tokens = _words(_below_implementation(native.path, where.implementation))
    for entry in ruleset.allowlist:
        if entry.covers(benchmark, where.division):
            word = _mention(subject_words(entry), tokens)
            if word is not None:
                return entry.id, f"its path mentions {word!r}"
    return f"{OTHER_PREFIX}{benchmark or where.benchmark or NO_BENCHMARK}", f"in {where.benchmark or NO_BENCHMARK}"


def _order(ruleset: RuleSet, category: str) -> tuple[int, int, str]:
    """Policy categories first (rule-set order), then benchmarks the policy covers, then the rest."""
    ids = [e.id for e in ruleset.allowlist]
    if category in ids:
        return (0, ids.index(category), category)
    covered = {b for e in ruleset.allowlist for b in e.benchmarks}
    name = category.removeprefix(OTHER_PREFIX)
    return (1 if name in covered else 2, 0, name)


def kernel_groups(report: CheckReport) -> tuple[KernelGroup, ...]:
    """The custom kernels the check found, grouped by category (see the module docstring)."""
    ruleset, inventory = report.ruleset, report.inventory
    by_path: dict[str, list[Finding]] = defaultdict(list)
    for finding in report.findings:
        by_path[finding.path].append(finding)
    declared = _declared_sources(report) if inventory.manifests else {}
    members: dict[str, list[KernelEntry]] = defaultdict(list)
    for native in _kernel_files(inventory, by_path, declared):
        category, why = _category(ruleset, native, declared.get(native.path))
        verdict, rules = _verdict(by_path.get(native.path, ()))
        where = native.location
        kernel = declared[native.path][0] if native.path in declared else None
        members[category].append(KernelEntry(native.path, where.submitter, where.benchmark,
                                             where.implementation, kernel, verdict, rules, why))
    groups = []
    for category in sorted(members, key=lambda c: _order(ruleset, c)):
        covered = _order(ruleset, category)[0] == 1
        entry = ruleset.entry(category)
        if entry is not None:
            title, decided = entry.title, True
        elif category.startswith(OTHER_PREFIX):
            title, decided = f"other custom kernels in {category.removeprefix(OTHER_PREFIX)}", False
        else:
            title, decided = f"declared category {category!r} (not in this round's allowlist)", False
        kernels = tuple(sorted(members[category], key=lambda k: (k.organization or "", k.path)))
        groups.append(KernelGroup(category, title, decided, covered, kernels))
    return tuple(groups)
