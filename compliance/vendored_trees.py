"""Vendored third-party trees and forks: recognised by what they are, never by a name alone.

Grouping never lowers what a custom kernel gets (issue 40 item 2): a vendored
tree is a *report* grouping. Inside a copy of a catalogued project, each native
file is judged by its content against the blob catalogue (``compliance/catalogue/
blobs.bin``: every version of every catalogued file in the project's history):

* its content is a version upstream had: **proven** upstream, no finding (and it
  votes for the release the copy is identified as);
* upstream had its path but never this content: a **modified upstream file**,
  reported one by one as the submitter's kernel (with the nearest upstream version);
* upstream never had its path: the submitter's own file, reported one by one.

A project the blob catalogue lacks (no mirror to build it from) keeps the old
behaviour: its native files are *unproven* (one grouped ``vendored-unproven``
finding per tree; ``--upstream`` proves a declared copy by blob hash) unless its
list of upstream native paths shows upstream never had them. Inside a tree
grouped by a marker directory or a licence heuristic alone (nothing can prove
those), and inside a tree declared under ``vendored:`` with a repository the
catalogue does not know, every native file is the submitter's own.

Three ways a directory becomes a vendored tree, strongest first:

* a **catalogue** match: its names hold the signature paths of an upstream
  project that submissions copy (``compliance/catalogue/vendored.yaml``: NCCL,
  apex, CUTLASS, ...), which only *nominates* it; it is a copy when at least
  ``EVIDENCE_MIN_FILES`` of its files (its native files and signature files) are
  blobs of that project's history (for a project without blobs: signature files
  of real size, ``EVIDENCE_MIN_BYTES``). Planted signature files prove nothing;
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
TransformerEngine); a native file belongs to its outermost tree for reports and
is proven by any catalogued copy around it.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from compliance.blob_catalogue import ProjectBlobs, load_blob_catalogue
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
"""Files a catalogue match needs as evidence, whatever the entry's ``min_match``: upstream blobs
(projects in the blob catalogue), else signature files of real size."""


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
    proven: int = 0
    """Native files of this copy whose content is a version upstream had (the blob catalogue)."""
    modified: int = 0
    """Native files of this copy at paths upstream had, with content no upstream version had."""
    version: str | None = None
    """The release most of its proven files belong to (None: unknown or between releases)."""


@dataclass(frozen=True)
class ModifiedFile:
    """A file of a recognised copy at a path upstream had, with content no upstream version had."""

    tree: str
    """Root-relative path of the copy."""
    project_name: str
    """Catalogue display name."""
    upstream_path: str
    """Its path in the upstream repository."""
    nearest_blob: str | None
    """Id prefix of the upstream version nearest the copy's release (None: unknown)."""
    nearest_release: str | None
    """The release holding that version (None: it lies between releases)."""

    def describe(self) -> str:
        """E.g. ``a modified copy of NCCL's src/init.cc (nearest upstream version: blob 1a2b… in v2.19.3-1)``."""
        nearest = ""
        if self.nearest_blob:
            where = f" in {self.nearest_release}" if self.nearest_release else " (between releases)"
            nearest = f" (nearest upstream version: blob {self.nearest_blob}{where})"
        return (f"a modified copy of {self.project_name}'s {self.upstream_path}: no upstream version has "
                f"this content{nearest}")


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
    """Native files inside (each checked one by one)."""
    location: Location
    """Where it sits in the layout."""
    proven: int = 0
    """Native files inside whose content is a version of an upstream file (the blob catalogue)."""


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
    digest_of: Callable[[str], str | None] | None = None
    """LF-normalised git blob id of a root-relative file (None: contents unknown, the blob
    catalogue is not used and copies are recognised by signature files of real size)."""


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

    def files_in(self) -> dict[str, list[str]]:
        """Directory -> the files directly in it."""
        return self._index()[0]

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


def blobs_of(entry: CatalogueEntry) -> ProjectBlobs | None:
    """The blob catalogue of ``entry``'s repository (read on first use; None: not built)."""
    return load_blob_catalogue().get(entry.repository)


def _content_evidence(facts: TreeFacts, root: str, entry: CatalogueEntry, blobs: ProjectBlobs,
                      evidence: _Evidence) -> int:
    """How many files of real size under ``root`` (signature files, the files directly in signature
    directories, then native files) are blobs of the project's history, counted up to
    ``EVIDENCE_MIN_FILES``."""
    assert facts.digest_of is not None
    prefix = f"{root}/" if root else ""
    candidates = [prefix + s for s in entry.signature if not s.endswith("/")]
    files_in = evidence.files_in()
    candidates += sorted(f for s in entry.signature if s.endswith("/") for f in files_in.get(prefix + s[:-1], ()))
    candidates += sorted(rel for rel in facts.native if rel.startswith(prefix))
    found = 0
    for rel in dict.fromkeys(candidates):
        if rel in facts.files and evidence.real_file(rel):
            digest = facts.digest_of(rel)
            found += digest is not None and blobs.knows(digest)
            if found >= EVIDENCE_MIN_FILES:
                break
    return found


def catalogue_matches(facts: TreeFacts, catalogue: tuple[CatalogueEntry, ...],
                      named_only: Callable[[str], bool] | None = None) -> dict[str, CatalogueEntry]:
    """Directory -> the catalogue entry it is a copy of (best match when several fit).

    Names only nominate: a directory holding ``min_match`` signature paths is a copy when at
    least ``EVIDENCE_MIN_FILES`` of its files of real size are blobs of the project's history
    (projects in the blob catalogue, when contents are known), else when its signature paths
    hold that many files of real size. An empty or planted marker file never makes a copy.
    Directories ``named_only`` accepts (an organization's or implementation's root: a *fork*,
    which exempts nothing and is only named) need the signature files of real size alone.
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
            by_content = facts.digest_of is not None and not (named_only is not None and named_only(root))
            blobs = blobs_of(entry) if by_content else None
            if blobs is not None:
                real_files = _content_evidence(facts, root, entry, blobs, evidence)
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
    proven: frozenset[str] = frozenset()
    """Native files whose content is a version of an upstream file (the blob catalogue)."""
    modified: dict[str, ModifiedFile] = field(default_factory=dict)
    """Native file -> what upstream had at its path (it never had this content)."""
    awaiting: frozenset[str] = frozenset()
    """Native files not proven, in a tree declared as a copy of a catalogued project: ``--upstream``
    compares them with the declared commit (and names those that differ)."""


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
    proven: Counter[str] = field(default_factory=Counter)
    modified: Counter[str] = field(default_factory=Counter)


@dataclass
class _Judged:
    """What one pass decided for the native files inside provable trees."""

    owner: dict[str, str] = field(default_factory=dict)
    unproven: set[str] = field(default_factory=set)
    not_upstream: dict[str, str] = field(default_factory=dict)
    proven: dict[str, str] = field(default_factory=dict)
    """Native file -> the copy whose project had its content."""
    modified: dict[str, str] = field(default_factory=dict)
    """Native file -> the copy whose project had its path but never its content."""
    awaiting: set[str] = field(default_factory=set)
    """Native files not proven, in a tree declared as a copy of a catalogued project (``--upstream``
    compares them with the declared commit)."""


def _accepted(candidates: dict[str, str], matches: dict[str, CatalogueEntry],
              declared: Collection[str]) -> dict[str, str | None]:
    """Candidate trees kept -> the accepted tree they are nested in (heuristic ones never nest)."""
    accepted: dict[str, str | None] = {}
    for directory in sorted(candidates, key=lambda d: (d.count("/"), d)):
        parent = next((a for a in _ancestors(directory + "/-") if a in accepted and a != directory), None)
        if parent is not None and directory not in matches and directory not in declared:
            continue  # only catalogued or declared trees are shown nested
        accepted[directory] = parent
    return accepted


def _judge(rel: str, chain: list[str], matches: dict[str, CatalogueEntry],
           declared: Mapping[str, CatalogueEntry | None],
           digest_of: Callable[[str], str | None] | None) -> tuple[str | None, str]:
    """(provable tree deciding ``rel`` or None, verdict): ``proven``, ``modified``, ``not-upstream``,
    ``unknown`` (in a tree declared as a copy of a catalogued project that is no copy by content:
    ``--upstream`` compares it), ``unproven`` (a project without blobs) or ``own`` (nothing around
    it can prove it: the submitter's)."""
    projects = [(d, entry) for d in chain if (entry := matches.get(d) or declared.get(d)) is not None]
    with_blobs = [(d, blobs) for d, entry in projects
                  if (blobs := blobs_of(entry) if digest_of is not None else None) is not None]
    if with_blobs:
        assert digest_of is not None
        digest = digest_of(rel)
        proven = next((d for d, blobs in with_blobs if digest is not None and blobs.knows(digest)), None)
        if proven is not None:
            return proven, "proven"
        tree, blobs = with_blobs[0]
        if tree not in matches:
            return tree, "unknown"
        return tree, "modified" if blobs.had_path(rel[len(tree) + 1:]) else "not-upstream"
    if not projects:
        return None, "own"  # declared with a repository the catalogue does not know: nothing proves it
    tree, entry = projects[0]
    listed = entry.upstream_native
    return tree, "not-upstream" if listed is not None and listed.never_had(rel[len(tree) + 1:]) else "unproven"


def _count(facts: TreeFacts, watched: set[str], matches: dict[str, CatalogueEntry],
           declared: Mapping[str, CatalogueEntry | None]) -> tuple[_Counts, _Judged]:
    """One pass over every file: per-tree counts, each native file's owner and proof.

    The trees around a file depend only on its directory, so they are looked up once per
    directory (a round has a few thousand directories for its tens of thousands of files)."""
    counts, judged = _Counts(), _Judged()
    if not watched:
        return counts, judged
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
        judged.owner[rel] = chain[-1]
        tree, verdict = _judge(rel, chain, matches, declared, facts.digest_of)
        if tree is not None and verdict in ("proven", "unproven"):
            (counts.proven if verdict == "proven" else counts.unproven)[tree] += 1
            if verdict == "proven":
                judged.proven[rel] = tree
            else:
                judged.unproven.add(rel)
            continue
        if verdict == "modified" and tree is not None:
            judged.modified[rel] = tree
            counts.modified[tree] += 1
        elif verdict in ("not-upstream", "unknown") and tree is not None:
            judged.not_upstream[rel] = tree
        if tree is not None and tree in declared and declared[tree] is not None:
            judged.awaiting.add(rel)
        for directory in chain:
            counts.reported[directory] += 1
    return counts, judged


def _repository_key(url: str) -> str:
    return url.lower().rstrip("/").removesuffix(".git")


def _declared_entry(tree: str, repository: str, matches: dict[str, CatalogueEntry],
                    catalogue: tuple[CatalogueEntry, ...]) -> tuple[bool, CatalogueEntry | None]:
    """(whether the declaration groups ``tree``, the catalogued project it names or None).

    One naming a catalogued project with blobs is judged file by file by content; one naming a
    catalogued project without blobs groups only a tree that really is such a copy (its signature,
    with real evidence); one naming another repository groups the tree but proves nothing (its
    kernel code is the submitter's)."""
    named = [e for e in catalogue if _repository_key(e.repository) == _repository_key(repository)]
    if not named:
        return True, None
    if tree in matches and matches[tree] in named:
        return True, matches[tree]
    with_blobs = next((e for e in named if blobs_of(e) is not None), None)
    return with_blobs is not None, with_blobs


def recognise(facts: TreeFacts, protected: Callable[[str], bool], locate: Callable[[str], Location],
              markers: tuple[str, ...], min_sources: int, declared_repositories: Mapping[str, str],
              catalogue: tuple[CatalogueEntry, ...]) -> Recognition:
    """Vendored trees and forks of the walked tree (see the module docstring for the rules).

    Linear: one pass over every file counts what each tree holds and decides each native
    file (owner tree, unproven or not upstream), by looking up its ancestors in a set.
    """
    matches = catalogue_matches(facts, catalogue, protected)
    declared: dict[str, CatalogueEntry | None] = {}
    for directory, repository in declared_repositories.items():
        groups, entry = _declared_entry(directory, repository, matches, catalogue)
        if groups:
            declared[directory] = entry
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
    counts, judged = _count(facts, set(accepted), provable, {d: e for d, e in declared.items() if d in accepted})
    fork_proven = _judge_forks(facts, fork_dirs, judged)
    versions = _identified(facts, judged, {**fork_dirs, **provable})
    modified = {rel: _modified(rel, tree, provable.get(tree) or fork_dirs[tree], versions.get(tree))
                for rel, tree in judged.modified.items()}
    fork_native = Counter(a for rel in facts.native for a in (*_ancestors(rel), "") if a in fork_dirs)
    forks = [Fork(d, e.id, e.name, e.repository, fork_native[d], locate(d), fork_proven[d])
             for d, e in sorted(fork_dirs.items())]
    trees = []
    for directory, parent in accepted.items():
        entry = matches.get(directory)
        release = versions.get(directory)
        blobs = blobs_of(entry) if entry is not None and release is not None else None
        trees.append(VendoredTree(
            directory, candidates[directory], counts.native[directory], locate(directory),
            directory in declared, entry.id if entry else None, entry.name if entry else None,
            entry.repository if entry else None, parent, counts.files[directory],
            counts.sources[directory], counts.unproven[directory], counts.reported[directory],
            counts.proven[directory], counts.modified[directory],
            blobs.versions[release] if blobs is not None and release is not None else None))
    return Recognition(tuple(trees), tuple(forks), judged.owner, frozenset(judged.unproven), judged.not_upstream,
                       frozenset(judged.proven), modified, frozenset(judged.awaiting))


def _judge_forks(facts: TreeFacts, forks: dict[str, CatalogueEntry], judged: _Judged) -> Counter[str]:
    """Judge by content the native files of forks (a fork is an implementation root, so it is never
    grouped away) that no catalogued copy inside them decided: a version of an upstream file is
    proven, other content at a path upstream had is a modified upstream file, a path upstream never
    had is the submitter's (said only outside a tree grouped by a marker or licence, which the
    report names instead). Returns the proven files per fork."""
    proven: Counter[str] = Counter()
    if facts.digest_of is None:
        return proven
    decided = judged.proven.keys() | judged.modified.keys() | judged.not_upstream.keys() | judged.unproven
    for rel in facts.native:
        fork = next((d for d in _ancestors(rel) if d in forks), None) if rel not in decided else None
        if fork is None:
            continue
        tree, verdict = _judge(rel, [fork], forks, {}, facts.digest_of)
        if tree is None:
            continue
        if verdict == "proven":
            judged.proven[rel] = tree
            proven[tree] += 1
        elif verdict == "modified":
            judged.modified[rel] = tree
        elif verdict == "not-upstream" and rel not in judged.owner and blobs_of(forks[tree]) is not None:
            judged.not_upstream[rel] = tree
    return proven


def _identified(facts: TreeFacts, judged: _Judged, provable: dict[str, CatalogueEntry]) -> dict[str, int]:
    """Copy -> the release of its project holding most of its proven files (copies with any)."""
    digests: dict[str, list[str]] = {}
    if facts.digest_of is None:
        return {}
    for rel, tree in judged.proven.items():
        digest = facts.digest_of(rel)
        if digest is not None:
            digests.setdefault(tree, []).append(digest)
    found = {}
    for tree, known in digests.items():
        blobs = blobs_of(provable[tree])
        release = blobs.identify(known)[0] if blobs is not None else None
        if release is not None:
            found[tree] = release
    return found


def _modified(rel: str, tree: str, entry: CatalogueEntry, release: int | None) -> ModifiedFile:
    upstream_path = rel[len(tree) + 1:]
    blobs = blobs_of(entry)
    nearest = blobs.nearest_version(upstream_path, release) if blobs is not None else None
    return ModifiedFile(tree, entry.name, upstream_path, nearest[0] if nearest else None,
                        nearest[1] if nearest else None)


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
