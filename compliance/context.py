"""What every check sees: the tree's inventory, its manifests and the rule set."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from compliance.findings import Finding, Severity
from compliance.inventory import Inventory, Walk
from compliance.layout import Location
from compliance.manifest import KernelDeclaration, Manifest
from compliance.paths import parent_dir, tree_relative
from compliance.rulespecs.registry import spec_for

if TYPE_CHECKING:
    from compliance.ruleset import RuleSet


@dataclass(frozen=True)
class DeclaredKernel:
    """A kernel declaration with the manifest it came from."""

    manifest_path: str
    """Root-relative path of the manifest."""
    manifest: Manifest
    """The manifest."""
    kernel: KernelDeclaration
    """The declaration."""
    location: Location
    """Layout location of the manifest (benchmark, submitter, ...)."""

    @property
    def manifest_dir(self) -> str:
        """Root-relative directory of the manifest (what its paths are relative to)."""
        return parent_dir(self.manifest_path)

    def source_relpaths(self) -> list[tuple[str, str | None]]:
        """(declared source, root-relative path or None if it leaves the tree)."""
        return [(s, tree_relative(self.manifest_dir, s)) for s in self.kernel.sources]

    def glue_relpaths(self) -> list[str]:
        """Root-relative paths of the files the kernel's ``build:`` compiles with it but that are not
        the kernel: ``build_dependencies`` and ``verification_shims`` (those inside the tree)."""
        listed = [f for key in ("build_dependencies", "verification_shims")
                  for f in (self.kernel.build.get(key) or ()) if isinstance(f, str)]
        return [rel for rel in (tree_relative(self.manifest_dir, f) for f in listed) if rel]


def declared_vendored_dirs(manifests: tuple[tuple[str, Manifest], ...]) -> dict[str, str]:
    """Root-relative directories that manifests declare under ``vendored:`` -> the repository named."""
    return {tree: v.repository for rel, manifest in manifests for v in manifest.vendored
            for tree in (tree_relative(parent_dir(rel), v.path),) if tree}


@dataclass(frozen=True)
class CheckContext:
    """Input of every check."""

    root: Path
    """Absolute checked root."""
    ruleset: RuleSet
    """Rule set in force."""
    inventory: Inventory
    """What the tree contains."""
    manifests: tuple[tuple[str, Manifest], ...]
    """(root-relative path, manifest) for every manifest found."""
    level_overrides: dict[str, str] = field(default_factory=dict)
    """Levels set by policy sections (binary_policy) rather than ``checks:``."""
    proof: str = "static"
    """What proves a vendored copy in this run: ``static`` (nothing: copies are unproven
    warnings), ``upstream`` (``--upstream``: declared copies are judged by blob; undeclared ones
    are errors) or ``required`` (``--require-upstream``: every unproven copy is an error)."""
    walk: Walk | None = None
    """The walk the inventory was classified from (to judge the same tree under another round)."""

    def kernels(self) -> Iterator[DeclaredKernel]:
        """Every valid kernel declaration in every manifest."""
        for relpath, manifest in self.manifests:
            location = self.inventory.locate(relpath)
            for kernel in manifest.kernels:
                yield DeclaredKernel(relpath, manifest, kernel, location)

    def level(self, rule_id: str) -> str:
        """Effective level of ``rule_id`` in this run."""
        if rule_id in self.level_overrides:
            return self.level_overrides[rule_id]
        return self.ruleset.check_config(rule_id).level

    def option(self, rule_id: str, name: str) -> Any:
        """A check option's effective value."""
        return self.ruleset.check_config(rule_id).options[name]

    def finding(self, rule_id: str, path: str, message: str, *, line: int | None = None,
                hint: str | None = None, kernel: str | None = None,
                details: dict[str, Any] | None = None, location: Location | None = None) -> Finding | None:
        """A finding of ``rule_id`` at its configured level, or None if the check is off."""
        spec = spec_for(rule_id)
        if spec is None:
            raise KeyError(f"finding for unregistered check {rule_id!r}")
        level = self.level(rule_id)
        if level == "off":
            return None
        where = location or self.inventory.locate(path)
        return Finding(rule_id=rule_id, severity=Severity(level), path=path, line=line,
                       message=message, hint=hint or spec.hint, submitter=where.submitter,
                       benchmark=where.benchmark, kernel=kernel,
                       details=tuple(sorted((details or {}).items())))


class Stage(Protocol):
    """One stage of ``compliance check``: static, upstream or verify.

    A stage is a frozen dataclass holding its own options (``UpstreamOptions``,
    ``VerifyOptions``; the static stage has none) and turns a context into
    findings. The engine runs the stages asked for, in order, and records
    their names in ``CheckReport.stages``.
    """

    @property
    def name(self) -> str:
        """``static``, ``upstream`` or ``verify`` (as the reports print it)."""
        ...

    def run(self, ctx: CheckContext) -> list[Finding]:
        """Every finding of this stage on ``ctx`` (input errors raise ``InputError``)."""
        ...
