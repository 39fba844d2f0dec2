"""Submission layouts: which organization, benchmark and implementation a path is in.

Training: ``<Org>/systems/<system>.json``,
``<Org>/benchmarks/<benchmark>/implementations/<impl>/...``,
``<Org>/results/<system>/<benchmark>/result_N.txt``.
Inference adds a division level and keeps code under ``code/``:
``<division>/<Org>/{systems,code/<benchmark>/<impl>,results/<system>/<benchmark>,...}``.
A checked PATH is one organization or a directory of them (a whole round);
for inference it may also be one division or a directory of divisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ORG_DIRS = {"training": ("systems", "benchmarks", "results"),
            "inference": ("systems", "code", "results")}
CODE_DIR = {"training": "benchmarks", "inference": "code"}


@dataclass(frozen=True)
class Location:
    """Where a path sits in the submission layout (None where it does not apply)."""

    division: str | None = None
    """closed/open (inference layout)."""
    submitter: str | None = None
    """Organization directory name."""
    area: str | None = None
    """systems, benchmarks/code, results, or another top-level directory of the org."""
    benchmark: str | None = None
    """Benchmark directory name."""
    implementation: str | None = None
    """Implementation directory name (training: under implementations/)."""
    system: str | None = None
    """System name (results area)."""

    @property
    def implementation_key(self) -> tuple[str | None, str | None, str | None, str | None]:
        """Identifies one implementation directory."""
        return (self.division, self.submitter, self.benchmark, self.implementation)


@dataclass(frozen=True)
class Organization:
    """One organization's tree found under the checked root."""

    name: str
    """Directory name."""
    prefix: tuple[str, ...]
    """Path parts from the checked root to the org directory (empty if root is the org)."""
    division: str | None
    """Division for inference layouts."""


def _is_org(path: Path, style: str) -> bool:
    return any((path / d).is_dir() for d in ORG_DIRS[style])


def subdirs(path: Path) -> list[Path]:
    """Real (non-link, non-hidden) subdirectories of ``path``, sorted; none if it is no directory."""
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.is_symlink()
                  and not p.name.startswith("."))


def find_organizations(root: Path, style: str, divisions: tuple[str, ...]) -> list[Organization]:
    """Organizations under ``root``: the root itself, its children, or (inference) per division."""
    if _is_org(root, style):
        return [Organization(root.resolve().name, (), None)]
    if style == "inference":
        div_dirs = [d for d in subdirs(root) if d.name in (divisions or ("closed", "open"))]
        if div_dirs:
            return [Organization(o.name, (d.name, o.name), d.name)
                    for d in div_dirs for o in subdirs(d) if _is_org(o, style)]
        if root.name in (divisions or ("closed", "open")):
            return [Organization(o.name, (o.name,), root.name) for o in subdirs(root) if _is_org(o, style)]
    return [Organization(o.name, (o.name,), None) for o in subdirs(root) if _is_org(o, style)]


class LayoutMapper:
    """Maps root-relative path parts to a ``Location``."""

    def __init__(self, organizations: list[Organization], style: str) -> None:
        self.style = style
        self._by_prefix = {org.prefix: org for org in organizations}
        self._depths = sorted({len(p) for p in self._by_prefix}, reverse=True)

    def org_of(self, parts: tuple[str, ...]) -> tuple[Organization, tuple[str, ...]] | None:
        """The organization a path is in and the path parts below it."""
        for depth in self._depths:
            org = self._by_prefix.get(parts[:depth])
            if org is not None and len(parts) >= depth:
                return org, parts[depth:]
        return None

    def locate(self, parts: tuple[str, ...]) -> Location:
        """Location of the path with these root-relative parts."""
        found = self.org_of(parts)
        if found is None:
            return Location()
        org, rest = found
        base = Location(division=org.division, submitter=org.name,
                        area=rest[0] if len(rest) > 1 else None)
        if base.area == CODE_DIR[self.style]:
            return self._code_location(base, rest)
        if base.area == "results" and len(rest) >= 3:
            return Location(org.division, org.name, "results",
                            benchmark=rest[2] if len(rest) > 3 else None, system=rest[1])
        return base

    def _code_location(self, base: Location, rest: tuple[str, ...]) -> Location:
        benchmark = rest[1] if len(rest) > 2 else None
        implementation = None
        if self.style == "training":
            if len(rest) > 4 and rest[2] == "implementations":
                implementation = rest[3]
        elif len(rest) > 3:
            implementation = rest[2]
        return Location(base.division, base.submitter, base.area, benchmark, implementation)

    def implementation_dir(self, parts: tuple[str, ...]) -> tuple[str, ...] | None:
        """Root-relative parts of the implementation directory containing ``parts``."""
        found = self.org_of(parts)
        if found is None:
            return None
        org, rest = found
        depth = 4 if self.style == "training" else 3
        if len(rest) > depth and rest[0] == CODE_DIR[self.style] and \
                (self.style != "training" or rest[2] == "implementations"):
            return org.prefix + rest[:depth]
        return None
