"""The check's data model: what the user asks for and what every reporter renders.

Stages and reporters import these types from here, never from the orchestrator
(``compliance.engine``), so the dependency runs one way: engine -> stages -> model.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from compliance.findings import Finding, Severity
from compliance.inventory import Inventory
from compliance.layout import organization_names
from compliance.ruleset import RuleSet
from compliance.shared_sources import SharedSource, shared_sources
from compliance.upstream.options import UpstreamOptions
from compliance.verify.options import VerifyOptions

REPORT_SCHEMA_VERSION = 1
"""Version of the JSON report (docs/report-format.md)."""


@dataclass(frozen=True)
class CheckOptions:
    """What the user asked ``compliance check`` for: the rule set and the optional stages."""

    rules: str | None = None
    """Rule set id or file (``--rules``); None: the one the manifests name, else the detected or default one."""
    rules_dirs: tuple[Path, ...] = ()
    """The operator's rule directories (``--rules-dir``), searched before ``$COMPLIANCE_RULES_PATH``
    and the shipped rule sets."""
    upstream: UpstreamOptions | None = None
    """Prove upstream links with git (``--upstream``); None: the stage does not run."""
    verify: VerifyOptions | None = None
    """Build and numerically verify declared kernels (``--verify``); None: the stage does not run."""
    require_upstream: bool = False
    """``--require-upstream``: vendored copies not proven by ``--upstream`` are errors."""
    scan_cache: Path | None = None
    """Directory of the scan cache (``compliance.scan_cache``): unchanged files are not read again;
    None (the default of the library, ``--no-scan-cache``): every file is read."""

    @property
    def proof(self) -> str:
        """What proves a vendored copy: ``required``, ``upstream`` or ``static`` (see CheckContext.proof)."""
        if self.upstream is not None:  # --upstream judges declared copies, --require-upstream or not
            return "upstream"
        return "required" if self.require_upstream else "static"


@dataclass(frozen=True)
class RuleSetChoice:
    """Which rule set was used and why."""

    ruleset: RuleSet
    """The resolved rule set."""
    reason: str
    """``--rules``, ``named by <manifest>``, ``detected: ...`` or ``default``."""
    signal: str = "rules-option"
    """What decided: rules-option, manifest, readme, file-name, v0.5-directory, benchmarks or default."""
    source: str = ""
    """Root-relative path of what named it (the manifest, README or file), when a file did."""
    stricter: str | None = None
    """A stricter round that also fits the tree, when the tree itself named the round (else None)."""
    rules_dirs: tuple[Path, ...] = ()
    """The operator's rule directories (``--rules-dir``) the choice searched first; the stricter
    round is loaded from them too, so both verdicts read the same rule sets."""

    def to_dict(self) -> dict[str, str | None]:
        """The rule set and why it was chosen, for every machine-readable format."""
        return {"id": self.ruleset.id, "chosen_by": self.reason, "signal": self.signal,
                "stricter_round_fits": self.stricter}


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

    @cached_property
    def shared_sources(self) -> tuple[SharedSource, ...]:
        """Identical native sources across implementations or organizations: computed (files read
        and hashed) once per report, whichever reporters render it."""
        return shared_sources(self.inventory)

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
        names = organization_names(self.inventory.organizations)
        names += sorted(n for n in set(errors) | set(warnings) if n not in names)
        return [OrganizationSummary(n, errors[n], warnings[n]) for n in names]
