"""Which upstream commit is this copy? (``compliance vendored identify``)

The history of a cached repository is read once, with one ``git log --raw``
(every commit as its diff against its first parent, blob ids included), and
kept next to the cache as the repository's *blob index*, keyed by the state
of its refs. Identifying a copy then needs no git call per commit: walking
the commits parents-first, the number of the copy's files each commit holds
with the same content is the parent's number plus what the commit's own diff
changes, so one pass over the index scores every commit (linear in the
history's size; tens of thousands of commits take well under a second once
the index exists). The best commit is the one that differs from the copy in
the fewest files (modified + added + removed), then the one with most equal
files, then a tagged one, then the oldest. Only that commit is read from git
again, for the list of differing files and their diff sizes.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compliance.blobs import DiffSummary, diff_summary, file_blob_hash, read_small
from compliance.errors import InputError
from compliance.upstream.gitcache import CachedRepository, FailureKind, GitFailure
from compliance.upstream.resolve import open_cache
from compliance.vendored_trees import (
    BUILD_LOG_NAMES,
    CatalogueEntry,
    TreeFacts,
    catalogue_matches,
    load_catalogue,
)

if TYPE_CHECKING:
    from compliance.upstream.settings import UpstreamSettings

INDEX_NAME = "compliance-blob-index"
"""File in a cached repository holding its blob index (gzip, keyed by the refs' state)."""
INDEX_FORMAT = b"compliance-blob-index 1\n"
"""First line of the index file (its format version)."""
SKIP_DIRS = frozenset({".git", ".hg", ".svn"})
"""Not part of a copy's content."""
GITLINK = "160000"
"""Mode of a submodule entry (a commit, not a blob)."""

Change = tuple[str, str | None, str | None]
"""(path, blob in the first parent or None, blob in the commit or None)."""


@dataclass(frozen=True)
class BlobIndex:
    """A repository's history as first-parent diffs, parents before children."""

    commits: tuple[str, ...]
    """Commit ids, every commit after its first parent."""
    parents: tuple[int, ...]
    """Index of each commit's first parent in ``commits`` (-1: a root commit)."""
    changes: tuple[tuple[Change, ...], ...]
    """Each commit's diff against its first parent."""
    tags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Commit -> tag names pointing at it."""

    def blob_paths(self) -> dict[str, set[str]]:
        """Blob -> every path it ever had (for guessing where a copy sits upstream)."""
        found: dict[str, set[str]] = {}
        for diff in self.changes:
            for path, _, new in diff:
                if new is not None:
                    found.setdefault(new, set()).add(path)
        return found


# --------------------------------------------------------------------------- building the index

def _refs_state(repo: CachedRepository) -> tuple[str, dict[str, tuple[str, ...]]]:
    """(hash of every ref, commit -> tag names)."""
    out = repo.runner.run("for-each-ref", "--format=%(objectname) %(*objectname) %(refname)")
    tags: dict[str, list[str]] = {}
    for line in out.decode("utf-8", "surrogateescape").splitlines():
        parts = line.split(" ")
        if len(parts) == 3 and parts[2].startswith("refs/tags/"):
            commit = parts[1] or parts[0]
            tags.setdefault(commit, []).append(parts[2][len("refs/tags/"):])
    return hashlib.sha256(out).hexdigest(), {c: tuple(sorted(t)) for c, t in tags.items()}


def _git_log(repo: CachedRepository) -> bytes:
    return repo.runner.run("log", "--all", "--topo-order", "--reverse", "--root", "--raw", "--no-renames",
                           "--no-abbrev", "-z", "--diff-merges=first-parent", "--format=%x01%H %P")


def _blob(sha: str, mode: str) -> str | None:
    return None if mode in ("000000", GITLINK) or set(sha) == {"0"} else sha


def parse_log(raw: bytes) -> tuple[list[str], list[str | None], list[tuple[Change, ...]]]:
    """(commits, first parents, diffs) from ``git log --raw -z`` output as ``_git_log`` asks for it."""
    commits: list[str] = []
    parents: list[str | None] = []
    diffs: list[tuple[Change, ...]] = []
    for chunk in raw.split(b"\x01")[1:]:
        header, _, body = chunk.partition(b"\0")
        ids = header.decode().split()
        commits.append(ids[0])
        parents.append(ids[1] if len(ids) > 1 else None)
        fields = body.lstrip(b"\n").split(b"\0")
        diff = []
        for meta, path in zip(fields[0::2], fields[1::2], strict=False):  # a trailing field pairs with nothing
            parts = meta.decode().lstrip(":").split(" ")
            if len(parts) < 5:
                continue
            old, new = _blob(parts[2], parts[0]), _blob(parts[3], parts[1])
            if old != new:
                diff.append((path.decode("utf-8", "surrogateescape"), old, new))
        diffs.append(tuple(diff))
    return commits, parents, diffs


def _from_raw(raw: bytes, tags: dict[str, tuple[str, ...]]) -> BlobIndex:
    commits, parents, diffs = parse_log(raw)
    position = {sha: i for i, sha in enumerate(commits)}
    parent_index = []
    for i, parent in enumerate(parents):
        p = position.get(parent, -1) if parent else -1
        if p >= i:
            raise GitFailure(FailureKind.CORRUPT, "git log did not list a parent before its child")
        parent_index.append(p)
    return BlobIndex(tuple(commits), tuple(parent_index), tuple(diffs), tags)


def load_index(repo: CachedRepository) -> BlobIndex:
    """The repository's blob index: read from the cache when its refs are unchanged, else built and kept."""
    key, tags = _refs_state(repo)
    path = repo.git_dir / INDEX_NAME
    expected = INDEX_FORMAT + key.encode() + b"\n"
    try:
        stored = gzip.decompress(path.read_bytes())
        if stored.startswith(expected):
            return _from_raw(stored[len(expected):], tags)
    except (OSError, EOFError, gzip.BadGzipFile):
        pass
    raw = _git_log(repo)
    tmp = path.with_name(f".{INDEX_NAME}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(gzip.compress(expected + raw, compresslevel=1))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a read-only cache still answers, just without keeping the index
    return _from_raw(raw, tags)


# --------------------------------------------------------------------------- the copy

HASH_LIMIT = 64 * 1024 * 1024
"""Copy files larger than this are not hashed (a 64 GiB sparse file takes about a minute):
they are recorded as ``unhashed:<size>``, which matches no upstream blob, so such a file
counts as differing from every commit."""


def _copy_blob(path: Path, size: int) -> str | None:
    """Streamed blob hash (memory bounded by its chunk); a size marker past HASH_LIMIT."""
    return f"unhashed:{size}" if size > HASH_LIMIT else file_blob_hash(path)


def _codeless_build_output(rel: str) -> bool:
    """Build output that holds no code: ninja's logs, ``*.pyc``, an egg-info's text files."""
    parts = rel.split("/")
    name = parts[-1]
    if name in BUILD_LOG_NAMES or name.endswith((".pyc", ".pyo")):
        return True
    return any(p.endswith(".egg-info") for p in parts[:-1]) and (name.endswith(".txt") or name == "PKG-INFO")


def copy_blobs(directory: Path) -> dict[str, str]:
    """Relative path -> git blob hash of every regular file of the copy (no links followed).

    Only build output that cannot hold code is left out: ninja's logs, compiled
    Python (``*.pyc``) and packaging metadata text (``*.egg-info/*.txt``,
    ``PKG-INFO``). Anything else in ``__pycache__``, ``*.egg-info`` or
    ``build/`` (a shared object, an object file, a source) is the copy's own
    and makes it differ from upstream. What cannot be read is left out too
    (the inventory reports unreadable paths; here they would only count as
    "removed").
    """
    found: dict[str, str] = {}
    stack = [(directory, "")]
    while stack:
        current, prefix = stack.pop()
        try:
            with os.scandir(current) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode) and entry.name not in SKIP_DIRS:
                    stack.append((Path(entry.path), rel + "/"))
                elif stat.S_ISREG(mode) and not _codeless_build_output(rel):
                    digest = _copy_blob(Path(entry.path), entry.stat(follow_symlinks=False).st_size)
                    if digest is not None:
                        found[rel] = digest
            except OSError:
                continue
    return found


def guess_upstream_dir(index: BlobIndex, copy: dict[str, str]) -> str:
    """The upstream directory the copy mirrors most often ('' for the repository's top)."""
    paths_of = index.blob_paths()
    votes: Counter[str] = Counter()
    for rel, blob in copy.items():
        for path in paths_of.get(blob, ()):
            if path == rel:
                votes[""] += 1
            elif path.endswith("/" + rel):
                votes[path[:-len(rel) - 1]] += 1
    return votes.most_common(1)[0][0] if votes else ""


# --------------------------------------------------------------------------- scoring

@dataclass(frozen=True)
class Score:
    """How one commit's tree compares with the copy."""

    index: int
    """Position of the commit in the index."""
    equal: int
    """Files of the copy present upstream with the same content."""
    present: int
    """Files of the copy present upstream at the same path."""
    upstream_files: int
    """Files upstream under the mirrored directory."""

    def differing(self, copy_files: int) -> int:
        """Modified + added + removed files."""
        return (self.present - self.equal) + (copy_files - self.present) + (self.upstream_files - self.present)


def score_commits(index: BlobIndex, copy: dict[str, str], upstream_dir: str) -> list[Score]:
    """Every commit's score, in one pass over the index (see the module docstring)."""
    prefix = f"{upstream_dir}/" if upstream_dir else ""
    wanted = {prefix + rel: blob for rel, blob in copy.items()}
    equal = [0] * len(index.commits)
    present = [0] * len(index.commits)
    size = [0] * len(index.commits)
    for i, (parent, diff) in enumerate(zip(index.parents, index.changes, strict=False)):  # one of each per commit
        e, p, s = (equal[parent], present[parent], size[parent]) if parent >= 0 else (0, 0, 0)
        for path, old, new in diff:
            if not path.startswith(prefix):
                continue
            s += (new is not None) - (old is not None)
            blob = wanted.get(path)
            if blob is not None:
                p += (new is not None) - (old is not None)
                e += (new == blob) - (old == blob)
        equal[i], present[i], size[i] = e, p, s
    return [Score(i, equal[i], present[i], size[i]) for i in range(len(index.commits))]


def best_commit(index: BlobIndex, scores: list[Score], copy_files: int) -> Score | None:
    """Fewest differing files, then most equal files, then tagged, then oldest; None when nothing is equal."""
    candidates = [s for s in scores if s.equal > 0]
    if not candidates:
        return None
    return min(candidates, key=lambda s: (s.differing(copy_files), -s.equal,
                                          index.commits[s.index] not in index.tags, s.index))


# --------------------------------------------------------------------------- the answer

@dataclass(frozen=True)
class ModifiedFile:
    """A file of the copy whose content differs from the commit's."""

    path: str
    """Path relative to the copy."""
    local_blob: str
    """Blob hash of the copy's file."""
    upstream_blob: str
    """Blob hash at the commit."""
    diff: DiffSummary
    """Lines added/removed relative to upstream."""


@dataclass(frozen=True)
class Identification:
    """The answer of ``identify`` for one copy."""

    repository: str
    """Upstream URL."""
    upstream_dir: str
    """Directory of the repository the copy mirrors ('' for its top)."""
    copy_files: int
    """Files in the copy."""
    commits_searched: int
    """Commits in the index."""
    commit: str | None
    """Best commit (None: no commit shares a file with the copy)."""
    tags: tuple[str, ...] = ()
    """Tags pointing at the commit."""
    equal: int = 0
    """Files equal to the commit's."""
    modified: tuple[ModifiedFile, ...] = ()
    """Files present at the commit with other content."""
    added: tuple[str, ...] = ()
    """Files of the copy the commit lacks."""
    removed: tuple[str, ...] = ()
    """Files the commit has (under ``upstream_dir``) that the copy lacks."""

    @property
    def identical(self) -> bool:
        """The copy is exactly the commit's tree (under ``upstream_dir``)."""
        return self.commit is not None and not (self.modified or self.added or self.removed)

    def describe(self) -> str:
        """One sentence for reports."""
        where = f"{self.repository}" + (f" ({self.upstream_dir}/)" if self.upstream_dir else "")
        if self.commit is None:
            return (f"matches no commit of {where}: none of its {self.commits_searched} commits has any of the "
                    f"copy's {self.copy_files} files with the same content")
        tag = f" (tag {', '.join(self.tags)})" if self.tags else ""
        if self.identical:
            return f"identical to {where} at commit {self.commit}{tag} ({self.copy_files} files)"
        return (f"closest commit of {where}: {self.commit}{tag}, with {len(self.modified)} file(s) modified, "
                f"{len(self.added)} added, {len(self.removed)} removed ({self.equal} of {self.copy_files} "
                f"files equal; {self.commits_searched} commits searched)")

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"repository": self.repository, "upstream_dir": self.upstream_dir, "commit": self.commit,
                "tags": list(self.tags), "identical": self.identical, "copy_files": self.copy_files,
                "equal": self.equal, "commits_searched": self.commits_searched,
                "modified": [{"path": m.path, "local_blob": m.local_blob, "upstream_blob": m.upstream_blob,
                              "lines_added": m.diff.lines_added, "lines_removed": m.diff.lines_removed,
                              "only": m.diff.only} for m in self.modified],
                "added": list(self.added), "removed": list(self.removed), "summary": self.describe()}


def _upstream_files(repo: CachedRepository, sha: str, upstream_dir: str) -> dict[str, str]:
    """Path relative to ``upstream_dir`` -> blob, at ``sha``."""
    args = ["ls-tree", "-r", "-z", "--full-tree", sha] + (["--", upstream_dir] if upstream_dir else [])
    found = {}
    prefix = f"{upstream_dir}/" if upstream_dir else ""
    for entry in repo.runner.run(*args).split(b"\0"):
        meta, _, path = entry.partition(b"\t")
        parts = meta.decode().split(" ")
        if len(parts) == 3 and parts[1] == "blob":
            name = path.decode("utf-8", "surrogateescape")
            if name.startswith(prefix):
                found[name[len(prefix):]] = parts[2]
    return found


def identify_copy(repo: CachedRepository, directory: Path, upstream_dir: str | None = None,
                  copy: dict[str, str] | None = None) -> Identification:
    """Identify the copy at ``directory`` (blobs ``copy`` if already hashed) against the cached ``repo``."""
    index = load_index(repo)
    copy = copy_blobs(directory) if copy is None else copy
    where = guess_upstream_dir(index, copy) if upstream_dir is None else upstream_dir.strip("/")
    best = best_commit(index, score_commits(index, copy, where), len(copy))
    if best is None:
        return Identification(repo.url, where, len(copy), len(index.commits), None)
    sha = index.commits[best.index]
    upstream = _upstream_files(repo, sha, where)
    modified = tuple(ModifiedFile(rel, blob, upstream[rel], _diff(repo, upstream[rel], directory / rel))
                     for rel, blob in sorted(copy.items()) if rel in upstream and upstream[rel] != blob)
    return Identification(repo.url, where, len(copy), len(index.commits), sha, index.tags.get(sha, ()),
                          best.equal, modified, tuple(sorted(set(copy) - set(upstream))),
                          tuple(sorted(set(upstream) - set(copy))))


def _diff(repo: CachedRepository, upstream_blob: str, local: Path) -> DiffSummary:
    """Line diff of a modified file; files over the diff limit (read bounded) get hashes only."""
    data = read_small(local)
    return DiffSummary.too_large() if data is None else diff_summary(repo.blob(upstream_blob), data)


# --------------------------------------------------------------------------- entry point

def recognised_project(directory: Path, copy: dict[str, str]) -> CatalogueEntry | None:
    """The catalogue entry whose signature the copy's top directory holds, if any."""
    files = frozenset(copy)
    dirs = frozenset("/".join(p.split("/")[:d]) for p in files for d in range(1, p.count("/") + 1))
    facts = TreeFacts(files, dirs, frozenset(), frozenset())
    return catalogue_matches(facts, load_catalogue()).get("")


def identify(directory: Path, settings: UpstreamSettings, repository: str | None = None,
             upstream_dir: str | None = None) -> Identification:
    """Identify ``directory``: the repository given, else the catalogued project it is a copy of.

    Fetches branches and tags into the cache first unless ``settings.offline``;
    raises ``InputError`` when no repository is known and ``GitFailure`` when
    git cannot answer.
    """
    if not directory.is_dir():
        raise InputError("not a directory (give the copy's top directory)", directory)
    copy = copy_blobs(directory)
    if repository is None:
        entry = recognised_project(directory, copy)
        if entry is None:
            raise InputError("the copy matches no catalogue signature; name its upstream with --repository",
                             directory)
        repository = entry.repository
    repo = settings.repository(repository)
    if not settings.offline:
        settings.cache_dir.mkdir(parents=True, exist_ok=True)
    open_cache(repo, settings.offline)
    if not settings.offline:
        repo.fetch_refs()
    return identify_copy(repo, directory, upstream_dir, copy)
