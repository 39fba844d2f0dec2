"""The check pipeline: walk once, read manifests, pick the rule set, run checks.

Nothing here imports torch, CUDA bindings or git; the optional stages
(``--upstream``, ``--verify``) import their modules only when asked for.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compliance.checks.builtin import STATIC_CHECKS
from compliance.context import CheckContext, declared_vendored_dirs
from compliance.errors import InputError
from compliance.findings import Finding, Severity
from compliance.inventory import Inventory, Walk, classify, walk_tree
from compliance.manifest import Manifest, load_manifest
from compliance.ruleset import (DEFAULT_RULESET, RuleSet, available_rulesets, load_named_ruleset,
                                load_ruleset)

REPORT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CheckOptions:
    """What the user asked for."""

    rules: str | None = None
    """Rule set id or file (``--rules``); None: the one the manifests name, else the default."""
    upstream: bool = False
    """Prove upstream links with git (``--upstream``)."""
    upstream_cache: Path | None = None
    """Cache directory for upstream clones."""
    offline: bool = False
    """Use only what the upstream cache holds."""
    verify: bool = False
    """Build and numerically verify declared kernels (``--verify``)."""
    seed: int | None = None
    """Seed for verification inputs."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Stage-specific options (e.g. verification time limits)."""


@dataclass(frozen=True)
class RuleSetChoice:
    """Which rule set was used and why."""

    ruleset: RuleSet
    """The resolved rule set."""
    reason: str
    """``--rules``, ``named by <manifest>`` or ``default``."""


@dataclass(frozen=True)
class OrganizationSummary:
    """Counts for one organization."""

    name: str
    """Organization."""
    errors: int
    """Error-level findings."""
    warnings: int
    """Warnings."""

    @property
    def passed(self) -> bool:
        """No error-level findings."""
        return self.errors == 0


@dataclass(frozen=True)
class CheckReport:
    """Result of ``compliance check``: what every reporter renders."""

    root: Path
    """Checked root."""
    choice: RuleSetChoice
    """Rule set used."""
    findings: tuple[Finding, ...]
    """Sorted findings."""
    inventory: Inventory
    """What the tree contains."""
    stages: tuple[str, ...]
    """Stages that ran: static, upstream, verify."""

    @property
    def ruleset(self) -> RuleSet:
        """The rule set used."""
        return self.choice.ruleset

    def count(self, severity: Severity) -> int:
        """Findings at ``severity``."""
        return sum(1 for f in self.findings if f.severity is severity)

    @property
    def passed(self) -> bool:
        """True when no finding is at error level."""
        return self.count(Severity.ERROR) == 0

    @property
    def exit_code(self) -> int:
        """0 compliant, 1 error-level findings."""
        return 0 if self.passed else 1

    def organizations(self) -> list[OrganizationSummary]:
        """A summary per organization found (plus ``-`` for findings outside any)."""
        errors: Counter[str] = Counter()
        warnings: Counter[str] = Counter()
        for f in self.findings:
            bucket = errors if f.severity is Severity.ERROR else warnings if f.severity is Severity.WARNING else None
            if bucket is not None:
                bucket[f.submitter or "-"] += 1
        names = list(dict.fromkeys(o.name for o in self.inventory.organizations))
        names += sorted(n for n in set(errors) | set(warnings) if n not in names)
        return [OrganizationSummary(n, errors[n], warnings[n]) for n in names]


def read_manifests(walk: Walk) -> tuple[tuple[str, Manifest], ...]:
    """Every manifest the walk found, parsed."""
    return tuple((rel, load_manifest(walk.root / rel)) for rel in sorted(walk.manifests))


def _named(manifests: tuple[tuple[str, Manifest], ...]) -> dict[str, tuple[str, int | None]]:
    """Rule-set names the manifests give -> (manifest, line of its ``ruleset:``)."""
    named: dict[str, tuple[str, int | None]] = {}
    for rel, manifest in manifests:
        if manifest.ruleset:
            mark = manifest.document.mark(("ruleset",)) if manifest.document else None
            named.setdefault(manifest.ruleset, (rel, mark.line if mark else None))
    return named


def _detected(root: Path) -> RuleSetChoice:
    """The round read from the tree (``compliance.detect``), else the default."""
    from compliance.detect import detect_ruleset

    candidates = [load_ruleset(ruleset_id) for ruleset_id in available_rulesets()]
    detection = detect_ruleset(root, candidates)
    if detection.ruleset_id is None:
        return RuleSetChoice(load_ruleset(DEFAULT_RULESET), f"default ({detection.reason})")
    return RuleSetChoice(load_ruleset(detection.ruleset_id), f"detected: {detection.reason}")


def choose_ruleset(rules: str | None, manifests: tuple[tuple[str, Manifest], ...],
                   root: Path | None = None) -> RuleSetChoice:
    """``--rules`` wins (an id or a file: the operator's choice); else the rule-set id the
    manifests name (they must agree; an id only, resolved among the rule roots); else
    the round detected from the tree at ``root``; else the default."""
    if rules:
        return RuleSetChoice(load_ruleset(rules), "--rules")
    named = _named(manifests)
    if len(named) > 1:
        listing = "; ".join(f"{rel} names {name!r}" for name, (rel, _) in sorted(named.items()))
        raise InputError(f"manifests name different rule sets ({listing}); choose one with --rules")
    if named:
        name, (rel, line) = next(iter(named.items()))
        return RuleSetChoice(load_named_ruleset(name, rel, line), f"named by {rel}")
    if root is not None:
        return _detected(root)
    return RuleSetChoice(load_ruleset(DEFAULT_RULESET), "default")


def build_context(root: Path, rules: str | None) -> tuple[CheckContext, RuleSetChoice]:
    """Walk ``root`` once and assemble everything checks need."""
    walk = walk_tree(root)
    manifests = read_manifests(walk)
    choice = choose_ruleset(rules, manifests, root)
    ruleset = choice.ruleset
    declared_vendored = declared_vendored_dirs(manifests)
    inventory = classify(walk, ruleset.layout, ruleset.divisions,
                         vendored_markers=ruleset.vendored.markers,
                         min_vendored_native=ruleset.vendored.min_native_files,
                         declared_vendored=declared_vendored)
    overrides = {"binary-without-source": ruleset.binary_policy.without_source,
                 "build-product-with-source": ruleset.binary_policy.build_product_with_source}
    return CheckContext(root.resolve(), ruleset, inventory, manifests, overrides), choice


def run_static_checks(ctx: CheckContext) -> list[Finding]:
    """Every static check's findings (checks switched off yield none)."""
    return [f for check in STATIC_CHECKS for f in check(ctx) if f is not None]


def run_check(root: Path, options: CheckOptions = CheckOptions()) -> CheckReport:
    """The whole ``compliance check``: static checks plus the stages asked for."""
    ctx, choice = build_context(root, options.rules)
    findings = run_static_checks(ctx)
    stages = ["static"]
    if options.upstream:
        from compliance.upstream import run_upstream_checks

        findings += run_upstream_checks(ctx, options)
        stages.append("upstream")
    if options.verify:
        from compliance.verify import run_verification_checks

        findings += run_verification_checks(ctx, options)
        stages.append("verify")
    return CheckReport(ctx.root, choice, tuple(sorted(findings, key=Finding.sort_key)),
                       ctx.inventory, tuple(stages))
