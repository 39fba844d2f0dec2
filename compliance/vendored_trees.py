"""Vendored third-party trees and forks: recognised by what they are, never by a licence alone.

Three ways a directory becomes a vendored tree, strongest first:

* a **catalogue** match: it holds the signature paths of an upstream project
  that submissions copy (``compliance/catalogue/vendored.yaml``: NCCL, apex,
  CUTLASS, ...), so the report can name the project and its repository;
* a **marker** directory: a library directly under ``third_party/``,
  ``vendor/``, ... (the rule set's ``vendored.markers``), unless the marker
  directory is a Python package of the implementation itself (it has an
  ``__init__.py``: NeMo's own ``submodules/``, say);
* a **licence** heuristic: a directory with a licence file and at least
  ``vendored.min_native_files`` C/C++/CUDA source files (counted by file
  name, not only those with kernel markers: NCCL has few ``__global__``).

An organization's root, an implementation's root and every directory above
them are never made vendored by a heuristic: when such a directory matches a
catalogue entry, the implementation is reported as a *fork* of the project and
its native files are still checked one by one. Trees nest (CUTLASS inside
TransformerEngine); a native file belongs to its outermost tree.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from compliance.errors import InputError
from compliance.layout import Location
from compliance.schema_validation import problems_as_errors, validate_document
from compliance.yamlsource import parse_yaml

SOURCE_EXTENSIONS = frozenset({".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp",
                               ".hxx", ".inl", ".inc"})
"""What the licence heuristic counts as a source file (C, C++, CUDA)."""


@dataclass(frozen=True)
class CatalogueEntry:
    """An upstream project that submissions copy, with a cheap signature."""

    id: str
    """Short id, e.g. ``nccl``."""
    name: str
    """Display name, e.g. ``NCCL``."""
    repository: str
    """Upstream clone URL."""
    signature: tuple[str, ...]
    """Paths a copy has relative to its top (trailing ``/``: a directory)."""
    min_match: int
    """How many signature paths must exist."""


@functools.cache
def load_catalogue(path: Path | None = None) -> tuple[CatalogueEntry, ...]:
    """The catalogue shipped in the package (or the file at ``path``), schema-validated."""
    if path is None:
        text = resources.files("compliance.catalogue").joinpath("vendored.yaml").read_text("utf-8")
        source = Path(str(resources.files("compliance.catalogue").joinpath("vendored.yaml")))
    else:
        text, source = path.read_text("utf-8"), path
    document = parse_yaml(text, source)
    problems = validate_document(document, "catalogue")
    if problems:
        raise problems_as_errors(document, problems)[0]
    entries = []
    for raw in document.data["projects"]:
        signature = tuple(raw["signature"])
        min_match = int(raw.get("min_match", len(signature)))
        if min_match > len(signature):
            raise InputError(f"catalogue entry {raw['id']!r}: min_match {min_match} exceeds its "
                             f"{len(signature)} signature paths", source)
        entries.append(CatalogueEntry(raw["id"], raw["name"], raw["repository"], signature, min_match))
    return tuple(entries)


@dataclass(frozen=True)
class VendoredTree:
    """A directory of third-party code, shown as one line so the report stays readable."""

    path: str
    """Root-relative POSIX path."""
    reason: str
    """Why it was grouped (catalogue signature, marker directory, licence + size, declaration)."""
    native_files: int
    """Native files inside (nested trees included)."""
    location: Location
    """Where it sits in the layout."""
    declared: bool = False
    """A manifest declares its upstream under ``vendored:``."""
    project: str | None = None
    """Catalogue id when recognised (e.g. ``nccl``)."""
    project_name: str | None = None
    """Catalogue display name (e.g. ``NCCL``)."""
    repository: str | None = None
    """Upstream repository of the catalogued project."""
    parent: str | None = None
    """Path of the vendored tree it is nested in, if any."""
    files: int = 0
    """Regular files inside."""
    source_files: int = 0
    """C/C++/CUDA source files inside."""


@dataclass(frozen=True)
class Fork:
    """An organization or implementation root that is itself a copy of a catalogued project."""

    path: str
    """Root-relative POSIX path ("" for the checked root)."""
    project: str
    """Catalogue id."""
    project_name: str
    """Catalogue display name."""
    repository: str
    """Upstream repository."""
    native_files: int
    """Native files inside (all still checked one by one)."""
    location: Location
    """Where it sits in the layout."""


@dataclass(frozen=True)
class TreeFacts:
    """What the walk found that recognition needs (plain data: no walk object)."""

    files: frozenset[str]
    """Every regular file, root-relative."""
    dirs: frozenset[str]
    """Every directory walked, root-relative."""
    native: frozenset[str]
    """Files holding native kernel code."""
    licensed_dirs: frozenset[str]
    """Directories with a LICENSE/COPYING file."""


def _by_last_name(paths: Iterable[str]) -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    for path in paths:
        index.setdefault(path.rsplit("/", 1)[-1], []).append(path)
    return index


def _roots_holding(signature_path: str, index: dict[str, list[str]]) -> set[str]:
    """Directories ``d`` such that ``d/signature_path`` exists (``""`` for the root)."""
    wanted = signature_path.rstrip("/")
    roots = set()
    for path in index.get(wanted.rsplit("/", 1)[-1], ()):
        if path == wanted:
            roots.add("")
        elif path.endswith("/" + wanted):
            roots.add(path[:-len(wanted) - 1])
    return roots


def catalogue_matches(facts: TreeFacts,
                      catalogue: tuple[CatalogueEntry, ...]) -> dict[str, CatalogueEntry]:
    """Directory -> the catalogue entry it is a copy of (best match when several fit)."""
    file_index, dir_index = _by_last_name(facts.files), _by_last_name(facts.dirs)
    best: dict[str, tuple[float, int, CatalogueEntry]] = {}
    for order, entry in enumerate(catalogue):
        hits: Counter[str] = Counter()
        for sig in entry.signature:
            hits.update(_roots_holding(sig, dir_index if sig.endswith("/") else file_index))
        for root, count in hits.items():
            if count >= entry.min_match:
                score = (count / len(entry.signature), -order, entry)
                if root not in best or score[:2] > best[root][:2]:
                    best[root] = score
    return {root: score[2] for root, score in best.items()}


def _is_python_package(directory: str, files: frozenset[str]) -> bool:
    return f"{directory}/__init__.py" in files if directory else "__init__.py" in files


def _marker_candidates(facts: TreeFacts, markers: tuple[str, ...]) -> dict[str, str]:
    """Libraries in marker directories (third_party/<lib>) and marker directories with native files."""
    found: dict[str, str] = {}
    for rel in facts.native:
        parts = rel.split("/")[:-1]
        for depth, name in enumerate(parts):
            if name not in markers or _is_python_package("/".join(parts[:depth + 1]), facts.files):
                continue
            marker_dir = "/".join(parts[:depth + 1])
            if depth + 1 < len(parts):
                found.setdefault("/".join(parts[:depth + 2]), f"library in {name}/")
            else:
                found.setdefault(marker_dir, f"files directly in {name}/")
            break
    return found


def _licence_candidates(facts: TreeFacts, min_sources: int) -> dict[str, str]:
    sources: Counter[str] = Counter()
    for rel in facts.files:
        if os.path.splitext(rel)[1].lower() in SOURCE_EXTENSIONS:
            parts = rel.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                sources["/".join(parts[:depth])] += 1
    return {d: f"licence file and {sources[d]} C/C++/CUDA source files"
            for d in facts.licensed_dirs if d and sources[d] >= min_sources}


@dataclass(frozen=True)
class Recognition:
    """Vendored trees and forks of one tree."""

    trees: tuple[VendoredTree, ...]
    """Every vendored tree, outer ones before the ones nested in them."""
    forks: tuple[Fork, ...]
    """Organization/implementation roots that are copies of a catalogued project."""

    def outermost(self, rel: str) -> str | None:
        """Path of the outermost vendored tree holding ``rel``, or None."""
        return next((t.path for t in self.trees if t.parent is None and rel.startswith(t.path + "/")), None)


def _count_under(directory: str, paths: Iterable[str]) -> int:
    prefix = directory + "/" if directory else ""
    return sum(1 for p in paths if p.startswith(prefix))


def recognise(facts: TreeFacts, protected: Callable[[str], bool], locate: Callable[[str], Location],
              markers: tuple[str, ...], min_sources: int, declared: tuple[str, ...],
              catalogue: tuple[CatalogueEntry, ...]) -> Recognition:
    """Vendored trees and forks of the walked tree (see the module docstring for the rules)."""
    matches = catalogue_matches(facts, catalogue)
    forks = [Fork(d, e.id, e.name, e.repository, _count_under(d, facts.native), locate(d))
             for d, e in sorted(matches.items()) if protected(d)]
    candidates: dict[str, str] = {d: "declared in a manifest" for d in declared}
    for directory, match in matches.items():
        if not protected(directory):
            candidates.setdefault(directory, f"signature of {match.name}")
    for directory, reason in {**_licence_candidates(facts, min_sources),
                              **_marker_candidates(facts, markers)}.items():
        if not protected(directory):
            candidates.setdefault(directory, reason)
    trees: list[VendoredTree] = []
    accepted: list[str] = []
    for directory in sorted(candidates, key=lambda d: (d.count("/"), d)):
        parent = max((a for a in accepted if directory.startswith(a + "/")), key=len, default=None)
        heuristic = directory not in matches and directory not in declared
        if parent is not None and heuristic:
            continue  # only catalogued or declared trees are shown nested
        entry = matches.get(directory)
        prefix = directory + "/"
        trees.append(VendoredTree(
            directory, candidates[directory], _count_under(directory, facts.native), locate(directory),
            directory in declared, entry.id if entry else None, entry.name if entry else None,
            entry.repository if entry else None, parent, _count_under(directory, facts.files),
            sum(1 for f in facts.files if f.startswith(prefix)
                and os.path.splitext(f)[1].lower() in SOURCE_EXTENSIONS)))
        accepted.append(directory)
    return Recognition(tuple(trees), tuple(forks))


# --------------------------------------------------------------------------- build output

BUILD_LOG_NAMES = frozenset({".ninja_deps", ".ninja_log", "build.ninja"})
"""Files a build writes that are never source, whatever they contain."""
BUILD_NOISE_DIR_SUFFIXES = (".egg-info",)
"""Directories of packaging metadata (``*.egg-info``)."""
BUILD_NOISE_DIRS = frozenset({"__pycache__"})
"""Directories of interpreter caches."""


def build_directory_of(rel: str) -> str | None:
    """The committed build directory (``build/temp.*``, ``build/lib.*``) holding ``rel``, if any."""
    parts = rel.split("/")
    for depth in range(len(parts) - 2):
        if parts[depth] == "build" and parts[depth + 1].startswith(("temp.", "lib.")):
            return "/".join(parts[:depth + 2])
    return None


def is_build_noise(rel: str) -> bool:
    """True for build logs and packaging/interpreter caches: never kernel source."""
    parts = rel.split("/")
    if parts[-1] in BUILD_LOG_NAMES:
        return True
    return any(p in BUILD_NOISE_DIRS or p.endswith(BUILD_NOISE_DIR_SUFFIXES) for p in parts[:-1])
