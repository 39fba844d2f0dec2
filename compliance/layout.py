"""Submission layouts: which organization, benchmark and implementation a path is in.

Training: ``<Org>/systems/<system>.json``,
``<Org>/benchmarks/<benchmark>/implementations/<impl>/...``,
``<Org>/results/<system>/<benchmark>/result_N.txt``.
Inference adds a division level and keeps code under ``code/``:
``<division>/<Org>/{systems,code/<benchmark>/<impl>,results/<system>/<benchmark>,...}``.
Training v0.5 (``training-v0.5``): ``<Org>/<entry>/{code/<benchmark>/...,
results/<system>/<benchmark>/result_N.txt}`` with ``entry.json`` and no
``systems/``, possibly under a ``v0.5.0/`` directory; each entry is mapped like
an organization of its own (named after the org).
A checked PATH is one organization or a directory of them (a whole round);
for inference it may also be one division or a directory of divisions.

Variants seen in accepted training rounds are mapped too (the layout checks
report them as warnings naming the canonical form): ``benchmark/`` or ``code/``
for ``benchmarks/`` (``results/<system>/entry.json`` then describes the system);
``benchmarks/<b>/<dir>/`` (``implementation/``, ``implementation_closed/``,
``implementation_open/`` or a system name) as the implementation directory
instead of ``implementations/<impl>/``; and the inverted
``benchmarks/implementations/<system>/<benchmark>/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ORG_DIRS = {"training": ("systems", "benchmarks", "results"),
            "training-v0.5": ("code", "results"),
            "inference": ("systems", "code", "results")}
CODE_DIR = {"training": "benchmarks", "training-v0.5": "code", "inference": "code"}
CODE_DIR_VARIANTS = {"training": ("benchmark", "code")}
"""Directory names read as the code directory: ``benchmark/`` for ``benchmarks/``, and
``code/<benchmark>/<impl>/`` as some Training v0.6 organizations have it."""
ENTRY_FILE = "entry.json"
"""``results/<system>/entry.json``: the system description of Training v0.5/v0.6 trees."""
IMPLEMENTATIONS = "implementations"
V05_ROUND_DIR = "v0.5.0"
FRAMEWORK_NAMES = frozenset({"pytorch", "torch", "tensorflow", "tf", "tf2", "mxnet", "paddle",
                             "paddlepaddle", "jax", "hugectr", "mindspore", "merlin_hugectr"})
"""Directory names of a framework level inside an implementation
(``benchmarks/<b>/implementation/pytorch/``, ``implementations/<system>/mxnet/``): such a
directory is the implementation's own root too, never a vendored copy."""


def implementation_roots(impl_dir: str, children: dict[str, list[str]], with_files: set[str]) -> list[str]:
    """``impl_dir`` and the deeper roots of the same implementation: framework-named child
    directories, and the only child of a directory that holds no file (a chain of single
    directories), recursively. Paths are root-relative POSIX strings."""
    roots, pending = [], [impl_dir]
    while pending:
        current = pending.pop()
        roots.append(current)
        below = children.get(current, [])
        for child in below:
            name = child.rsplit("/", 1)[-1].lower()
            if name in FRAMEWORK_NAMES or (len(below) == 1 and current not in with_files):
                pending.append(child)
    return roots


def code_dirs(style: str) -> tuple[str, ...]:
    """The code directory of ``style`` and the variant names read as it."""
    return (CODE_DIR[style], *CODE_DIR_VARIANTS.get(style, ()))


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


def organization_names(organizations: tuple[Organization, ...] | list[Organization]) -> list[str]:
    """Distinct organization names, in order: an organization in both divisions (``closed/X``,
    ``open/X``) or with several Training v0.5 entries is one organization. Every report counts
    organizations with this, so a report gives one count."""
    return list(dict.fromkeys(o.name for o in organizations))


def _is_org(path: Path, style: str) -> bool:
    names = ORG_DIRS[style] + CODE_DIR_VARIANTS.get(style, ())
    return any((path / d).is_dir() for d in names)


def _v05_units(root: Path) -> list[Organization]:
    """Training v0.5 entries: the root itself, an org's entries, or a round's orgs' entries."""
    style = "training-v0.5"
    if _is_org(root, style):
        return [Organization(root.resolve().name, (), None)]
    if (root / V05_ROUND_DIR).is_dir():
        return [Organization(o.name, (prefix, *o.prefix), None) for prefix in (V05_ROUND_DIR,)
                for o in _v05_units(root / V05_ROUND_DIR)]
    entries = [e for e in subdirs(root) if _is_org(e, style)]
    if entries:
        return [Organization(root.resolve().name, (e.name,), None) for e in entries]
    return [Organization(o.name, (o.name, e.name), None)
            for o in subdirs(root) for e in subdirs(o) if _is_org(e, style)]


def subdirs(path: Path) -> list[Path]:
    """Real (non-link, non-hidden) subdirectories of ``path``, sorted; none if it is no directory."""
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if p.is_dir() and not p.is_symlink()
                  and not p.name.startswith("."))


def find_organizations(root: Path, style: str, divisions: tuple[str, ...]) -> list[Organization]:
    """Organizations under ``root``: the root itself, its children, or (inference) per division."""
    if style == "training-v0.5":
        return _v05_units(root)
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


DOC_SUFFIXES = (".md", ".txt", ".rst", ".pdf", ".png", ".jpg", ".svg", ".json", ".yaml", ".yml")
"""Files that do not make a benchmark directory an implementation by themselves."""


def flat_benchmarks(files: frozenset[str] | set[str], organizations: list[Organization],
                    style: str) -> frozenset[tuple[str, ...]]:
    """Training benchmark directories that are implementations themselves: code files directly
    in ``benchmarks/<b>/`` and no ``implementations/`` there. Their subdirectories
    (``mlperf_logger/``, ``configs/``, ...) are parts of that implementation, not implementations."""
    if style != "training":
        return frozenset()
    prefixes = {org.prefix: org for org in organizations}
    with_code: set[tuple[str, ...]] = set()
    with_impls: set[tuple[str, ...]] = set()
    depths = {len(p) for p in prefixes}
    code = code_dirs(style)
    for rel in files:
        parts = tuple(rel.split("/"))
        for depth in depths:
            if parts[:depth] not in prefixes or len(parts) < depth + 3 or parts[depth] not in code:
                continue
            bench = parts[:depth + 2]
            if len(parts) == depth + 3 and not parts[-1].lower().endswith(DOC_SUFFIXES) \
                    and not parts[-1].upper().startswith(("LICENSE", "README")):
                with_code.add(bench)
            elif parts[depth + 2] == IMPLEMENTATIONS:
                with_impls.add(bench)
    return frozenset(with_code - with_impls)


class LayoutMapper:
    """Maps root-relative path parts to a ``Location``."""

    def __init__(self, organizations: list[Organization], style: str,
                 flat: frozenset[tuple[str, ...]] = frozenset()) -> None:
        self.style = style
        self._flat = flat
        self._by_prefix = {org.prefix: org for org in organizations}
        self._depths = sorted({len(p) for p in self._by_prefix}, reverse=True)

    def is_flat(self, bench_parts: tuple[str, ...]) -> bool:
        """True when the root-relative benchmark directory is an implementation itself."""
        return bench_parts in self._flat

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
        if base.area in code_dirs(self.style):
            return self._code_location(base, rest, org.prefix)
        if base.area == "results" and len(rest) >= 3:
            return Location(org.division, org.name, "results",
                            benchmark=rest[2] if len(rest) > 3 else None, system=rest[1])
        return base

    def _code_location(self, base: Location, rest: tuple[str, ...], prefix: tuple[str, ...]) -> Location:
        impl = self._implementation_parts(rest, prefix)
        if impl is None:
            benchmark = rest[1] if len(rest) > 2 else None
            return Location(base.division, base.submitter, base.area, benchmark, None)
        if len(impl) == 2:  # flat: the benchmark directory is the implementation
            return Location(base.division, base.submitter, base.area, impl[1], impl[1])
        if self.style == "training" and rest[1] == IMPLEMENTATIONS:  # inverted
            return Location(base.division, base.submitter, base.area, impl[3], impl[2])
        return Location(base.division, base.submitter, base.area, impl[1], impl[-1])

    def _implementation_parts(self, rest: tuple[str, ...], prefix: tuple[str, ...] = ()) -> tuple[str, ...] | None:
        """Org-relative parts of the implementation directory holding ``rest``, if any.

        Training: ``benchmarks/<b>/implementations/<impl>``, the inverted
        ``benchmarks/implementations/<system>/<b>``, or ``benchmarks/<b>/<dir>``
        (a variant: ``implementation*/`` or a system name). Other styles:
        ``code/<b>/<impl>``.
        """
        if not rest or rest[0] not in code_dirs(self.style):
            return None
        if len(rest) > 2 and prefix + rest[:2] in self._flat:
            return rest[:2]  # a benchmark directory that is the implementation itself
        if self.style != "training":
            return rest[:3] if len(rest) > 3 else None
        if len(rest) > 4 and IMPLEMENTATIONS in rest[1:3]:
            return rest[:4]
        if len(rest) > 3 and IMPLEMENTATIONS not in rest[1:3]:
            return rest[:3]
        return None

    def implementation_dir(self, parts: tuple[str, ...]) -> tuple[str, ...] | None:
        """Root-relative parts of the implementation directory containing ``parts``."""
        found = self.org_of(parts)
        if found is None:
            return None
        org, rest = found
        impl = self._implementation_parts(rest, org.prefix)
        return None if impl is None else org.prefix + impl
