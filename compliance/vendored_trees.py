"""Vendored third-party trees and forks: recognised by what they are, never by a licence alone.

Grouping never lowers what a custom kernel gets (issue 40 item 2): a vendored
tree is a *report* grouping. Inside a catalogued or declared copy, a native file
is *unproven* (one grouped ``vendored-unproven`` finding per tree, with the
count; ``--upstream`` proves it by blob hash) unless the catalogue's list of
upstream native paths shows that upstream never had it: then it is the
submitter's own kernel, reported one by one. Inside a tree grouped by a marker
directory or a licence heuristic alone (nothing can prove those), every native
file is the submitter's own.

Three ways a directory becomes a vendored tree, strongest first:

* a **catalogue** match: it holds the signature paths of an upstream project
  that submissions copy (``compliance/catalogue/vendored.yaml``: NCCL, apex,
  CUTLASS, ...), so the report can name the project and its repository; only
  signature files of real size count (``EVIDENCE_MIN_BYTES``), and at least two;
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
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from compliance.errors import InputError
from compliance.layout import Location
from compliance.schema_validation import problems_as_errors, validate_document
from compliance.yamlsource import parse_yaml

SOURCE_EXTENSIONS = frozenset({".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp",
                               ".hxx", ".inl", ".inc"})
"""What the licence heuristic counts as a source file (C, C++, CUDA)."""
EVIDENCE_MIN_BYTES = 64
"""A signature file proves a copy only with at least this many bytes (an empty or one-line
``include/cutlass/cutlass.h`` is a marker anyone can plant, not a copy of CUTLASS)."""
EVIDENCE_MIN_FILES = 2
"""Signature files of real size a catalogue match needs, whatever the entry's ``min_match``."""


@dataclass(frozen=True)
class UpstreamNative:
    """The native source paths an upstream project has had, for some of its directories."""

    scope: tuple[str, ...]
    """Copy-relative directories (trailing ``/``) the list is complete for."""
    paths: frozenset[str]
    """Copy-relative native paths upstream has had under ``scope``."""
    source: str
    """Where the list comes from (repository and cited commits)."""

    def never_had(self, copy_relative: str) -> bool:
        """True when ``copy_relative`` lies under a scope directory and upstream never had it."""
        return copy_relative not in self.paths and copy_relative.startswith(self.scope)


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
    upstream_native: UpstreamNative | None = None
    """Native paths upstream has had (None: unknown, every native file of a copy is unproven)."""


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
        native = raw.get("upstream_native")
        listed = UpstreamNative(tuple(native["scope"]), frozenset(native["paths"]), native["source"]) \
            if native else None
        entries.append(CatalogueEntry(raw["id"], raw["name"], raw["repository"], signature, min_match, listed))
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
    unproven: int = 0
    """Native files grouped as unproven upstream code in this copy (catalogued or declared trees
    only; a nested copy counts its own)."""
    reported: int = 0
    """Native files inside (nested trees included) reported one by one as the submitter's own."""


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
    size_of: Callable[[str], int] | None = None
    """Size in bytes of a root-relative file (None: sizes unknown, every signature hit counts)."""


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


class _Evidence:
    """Which signature hits are real: files of ``EVIDENCE_MIN_BYTES`` or more, directories
    holding such a file (found through a children index built once)."""

    def __init__(self, facts: TreeFacts) -> None:
        self._size_of = facts.size_of
        self._files_in: dict[str, list[str]] | None = None
        self._dirs_in: dict[str, list[str]] | None = None
        self._facts = facts

    def _index(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        if self._files_in is None or self._dirs_in is None:
            self._files_in, self._dirs_in = {}, {}
            for rel in self._facts.files:
                self._files_in.setdefault(rel.rpartition("/")[0], []).append(rel)
            for rel in self._facts.dirs:
                self._dirs_in.setdefault(rel.rpartition("/")[0], []).append(rel)
        return self._files_in, self._dirs_in

    def real_file(self, rel: str) -> bool:
        """True when the file is large enough to count (always, when sizes are unknown)."""
        if self._size_of is None:
            return True
        try:
            return self._size_of(rel) >= EVIDENCE_MIN_BYTES
        except OSError:
            return False

    def real_dir(self, rel: str) -> bool:
        """True when a file of real size lies anywhere below ``rel``."""
        files_in, dirs_in = self._index()
        pending = [rel]
        while pending:
            current = pending.pop()
            if any(self.real_file(f) for f in files_in.get(current, ())):
                return True
            pending.extend(dirs_in.get(current, ()))
        return False

    def counted(self, root: str, entry: CatalogueEntry) -> tuple[int, int]:
        """(signature paths really present, real files they hold) for a copy at ``root``."""
        prefix = f"{root}/" if root else ""
        present = files = 0
        for sig in entry.signature:
            path = prefix + sig.rstrip("/")
            if sig.endswith("/"):
                held = path in self._facts.dirs and self.real_dir(path)
                present += held
                files += held  # the real file found below it
            elif path in self._facts.files and self.real_file(path):
                present += 1
                files += 1
        if entry.upstream_native is not None:
            files += sum(1 for p in entry.upstream_native.paths
                         if prefix + p in self._facts.files and self.real_file(prefix + p))
        return present, files


def catalogue_matches(facts: TreeFacts,
                      catalogue: tuple[CatalogueEntry, ...]) -> dict[str, CatalogueEntry]:
    """Directory -> the catalogue entry it is a copy of (best match when several fit).

    A match needs ``min_match`` signature paths of real size and at least
    ``EVIDENCE_MIN_FILES`` real files (signature files or upstream native paths), so
    an empty marker file or directory never makes a copy.
    """
    file_index, dir_index = _by_last_name(facts.files), _by_last_name(facts.dirs)
    evidence = _Evidence(facts)
    best: dict[str, tuple[float, int, CatalogueEntry]] = {}
    for order, entry in enumerate(catalogue):
        hits: Counter[str] = Counter()
        for sig in entry.signature:
            hits.update(_roots_holding(sig, dir_index if sig.endswith("/") else file_index))
        for root, count in hits.items():
            if count < entry.min_match:
                continue
            count, real_files = evidence.counted(root, entry)
            if count >= entry.min_match and real_files >= EVIDENCE_MIN_FILES:
                score = (count / len(entry.signature), -order, entry)
                if root not in best or score[:2] > best[root][:2]:
                    best[root] = score
    # A copy's own subdirectory can look like another release of the same project
    # (CUTLASS 2's include/ holds CUTLASS 1's cutlass/ layout): the outer copy wins.
    return {root: score[2] for root, score in best.items()
            if not any(a in best and best[a][2].repository == score[2].repository for a in _ancestors(root + "/-")
                       if a != root)}


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


def _is_source(name: str) -> bool:
    dot = name.rfind(".")
    return dot > 0 and name[dot:].lower() in SOURCE_EXTENSIONS


def _licence_candidates(facts: TreeFacts, min_sources: int) -> dict[str, str]:
    """Licensed directories holding at least ``min_sources`` C/C++/CUDA sources (at any depth).

    Sources are counted per directory in one pass, then each directory's count is added to
    its licensed ancestors only: linear in the files plus the directories, not files x depth."""
    if not facts.licensed_dirs:
        return {}
    per_dir: Counter[str] = Counter()
    for rel in facts.files:
        parent, _, name = rel.rpartition("/")
        if _is_source(name):
            per_dir[parent] += 1
    sources: Counter[str] = Counter()
    for directory, count in per_dir.items():
        for above in (directory, *_ancestors(directory)):
            if above in facts.licensed_dirs:
                sources[above] += count
    return {d: f"licence file and {sources[d]} C/C++/CUDA source files"
            for d in facts.licensed_dirs if d and sources[d] >= min_sources}


@dataclass(frozen=True)
class Recognition:
    """Vendored trees and forks of one tree, and what each native file inside them is."""

    trees: tuple[VendoredTree, ...]
    """Every vendored tree, outer ones before the ones nested in them."""
    forks: tuple[Fork, ...]
    """Organization/implementation roots that are copies of a catalogued project."""
    owner: dict[str, str] = field(default_factory=dict)
    """Native file -> the outermost vendored tree holding it (for grouping in reports)."""
    unproven: frozenset[str] = frozenset()
    """Native files grouped as unproven upstream code (inside a catalogued or declared copy,
    at a path upstream may have had)."""
    not_upstream: dict[str, str] = field(default_factory=dict)
    """Native file -> the catalogued copy it sits in whose upstream never had its path."""


def _ancestors(rel: str) -> Iterator[str]:
    """Every directory above ``rel``, innermost first ("" for the root not included)."""
    cut = rel.rfind("/")
    while cut > 0:
        yield rel[:cut]
        cut = rel.rfind("/", 0, cut)


@dataclass
class _Counts:
    files: Counter[str] = field(default_factory=Counter)
    sources: Counter[str] = field(default_factory=Counter)
    native: Counter[str] = field(default_factory=Counter)
    unproven: Counter[str] = field(default_factory=Counter)
    reported: Counter[str] = field(default_factory=Counter)


def _accepted(candidates: dict[str, str], matches: dict[str, CatalogueEntry],
              declared: tuple[str, ...]) -> dict[str, str | None]:
    """Candidate trees kept -> the accepted tree they are nested in (heuristic ones never nest)."""
    accepted: dict[str, str | None] = {}
    for directory in sorted(candidates, key=lambda d: (d.count("/"), d)):
        parent = next((a for a in _ancestors(directory + "/-") if a in accepted and a != directory), None)
        if parent is not None and directory not in matches and directory not in declared:
            continue  # only catalogued or declared trees are shown nested
        accepted[directory] = parent
    return accepted


def _proof(rel: str, chain: list[str], matches: dict[str, CatalogueEntry],
           declared: tuple[str, ...]) -> tuple[str | None, bool]:
    """(provable tree innermost around ``rel`` or None, whether upstream never had ``rel``)."""
    tree = next((d for d in chain if d in matches or d in declared), None)
    if tree is None:
        return None, False
    entry = matches.get(tree)
    listed = entry.upstream_native if entry else None
    return tree, listed is not None and listed.never_had(rel[len(tree) + 1:])


def _count(facts: TreeFacts, watched: set[str], matches: dict[str, CatalogueEntry],
           declared: tuple[str, ...]) -> tuple[_Counts, dict[str, str], set[str], dict[str, str]]:
    """One pass over every file: per-tree counts, each native file's owner and proof.

    The trees around a file depend only on its directory, so they are looked up once per
    directory (a round has a few thousand directories for its tens of thousands of files)."""
    counts = _Counts()
    owner: dict[str, str] = {}
    unproven: set[str] = set()
    not_upstream: dict[str, str] = {}
    if not watched:
        return counts, owner, unproven, not_upstream
    chains: dict[str, list[str]] = {}
    for rel in facts.files:
        parent, _, name = rel.rpartition("/")
        chain = chains.get(parent)
        if chain is None:
            chain = chains[parent] = [d for d in (parent, *_ancestors(parent)) if d in watched]
        if not chain:
            continue
        is_source = _is_source(name)
        is_native = rel in facts.native
        for directory in chain:
            counts.files[directory] += 1
            counts.sources[directory] += is_source
            counts.native[directory] += is_native
        if not is_native:
            continue
        owner[rel] = chain[-1]
        tree, never_had = _proof(rel, chain, matches, declared)
        if tree is not None and not never_had:
            unproven.add(rel)
            counts.unproven[tree] += 1
            continue
        if tree is not None:
            not_upstream[rel] = tree
        for directory in chain:
            counts.reported[directory] += 1
    return counts, owner, unproven, not_upstream


def _repository_key(url: str) -> str:
    return url.lower().rstrip("/").removesuffix(".git")


def _credible(tree: str, repository: str, matches: dict[str, CatalogueEntry],
              catalogue: tuple[CatalogueEntry, ...]) -> bool:
    """A declaration naming a catalogued repository groups only a tree that really is such a copy
    (its signature, with real evidence); one naming another repository is taken at its word
    (its files are unproven until ``--upstream`` compares them)."""
    named = {e.id for e in catalogue if _repository_key(e.repository) == _repository_key(repository)}
    return not named or (tree in matches and matches[tree].id in named)


def recognise(facts: TreeFacts, protected: Callable[[str], bool], locate: Callable[[str], Location],
              markers: tuple[str, ...], min_sources: int, declared_repositories: Mapping[str, str],
              catalogue: tuple[CatalogueEntry, ...]) -> Recognition:
    """Vendored trees and forks of the walked tree (see the module docstring for the rules).

    Linear: one pass over every file counts what each tree holds and decides each native
    file (owner tree, unproven or not upstream), by looking up its ancestors in a set.
    """
    matches = catalogue_matches(facts, catalogue)
    declared = tuple(d for d, repo in declared_repositories.items() if _credible(d, repo, matches, catalogue))
    fork_dirs = {d: e for d, e in matches.items() if protected(d)}
    candidates: dict[str, str] = {d: "declared in a manifest" for d in declared}
    for directory, match in matches.items():
        if not protected(directory):
            candidates.setdefault(directory, f"signature of {match.name}")
    for directory, reason in {**_licence_candidates(facts, min_sources),
                              **_marker_candidates(facts, markers)}.items():
        if not protected(directory):
            candidates.setdefault(directory, reason)
    accepted = _accepted(candidates, matches, declared)
    provable = {d: e for d, e in matches.items() if d in accepted}
    counts, owner, unproven, not_upstream = _count(facts, set(accepted), provable,
                                                   tuple(d for d in declared if d in accepted))
    fork_native = Counter(a for rel in facts.native for a in (*_ancestors(rel), "") if a in fork_dirs)
    forks = [Fork(d, e.id, e.name, e.repository, fork_native[d], locate(d)) for d, e in sorted(fork_dirs.items())]
    trees = []
    for directory, parent in accepted.items():
        entry = matches.get(directory)
        trees.append(VendoredTree(
            directory, candidates[directory], counts.native[directory], locate(directory),
            directory in declared, entry.id if entry else None, entry.name if entry else None,
            entry.repository if entry else None, parent, counts.files[directory],
            counts.sources[directory], counts.unproven[directory], counts.reported[directory]))
    return Recognition(tuple(trees), tuple(forks), owner, frozenset(unproven), not_upstream)


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
