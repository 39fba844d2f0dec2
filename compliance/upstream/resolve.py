"""Bring the pinned commits of one upstream repository into the cache and classify them.

Online, the network is used only when the cache cannot answer: a commit the
cache already holds and a cached branch or tag already contains needs no
fetch. Otherwise branches and tags are fetched (full history: reachability
needs it), then any commit still missing is fetched by hash. Offline, only
the cache is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from compliance.upstream.gitcache import CachedRepository, FailureKind, GitFailure

FULL_HASH = re.compile(r"[0-9a-f]{40}")
"""A full commit hash; use with ``fullmatch`` only."""


@dataclass(frozen=True)
class CommitState:
    """What the cache says about one pinned commit."""

    requested: str
    """The manifest's ``commit`` value."""
    sha: str | None = None
    """Full hash when the commit was found."""
    containing_ref: str | None = None
    """A branch or tag containing it (None: unmerged)."""
    failure: GitFailure | None = None
    """Why it could not be looked up (repository or commit level)."""

    @property
    def found(self) -> bool:
        """True when the commit is in the cache."""
        return self.sha is not None


def _lookup(repo: CachedRepository, name: str) -> tuple[str | None, str | None]:
    """(full hash, containing ref) of ``name`` in the cache."""
    sha = name if FULL_HASH.fullmatch(name) and repo.has_commit(name) else None
    if sha is None and not FULL_HASH.fullmatch(name):
        sha = repo.resolve(name)
    return sha, (repo.containing_ref(sha) if sha else None)


def _answered(repo: CachedRepository, names: Iterable[str]) -> bool:
    """True when every name is a cached full hash that a cached branch or tag contains."""
    return all(FULL_HASH.fullmatch(n) and _lookup(repo, n)[1] for n in names)


def _open(repo: CachedRepository, offline: bool) -> None:
    if repo.exists():
        repo.validate()
    elif offline:
        raise GitFailure(FailureKind.NOT_CACHED, f"the cache holds no copy of {repo.url} "
                         f"(looked in {repo.git_dir})")
    else:
        repo.create()


def open_cache(repo: CachedRepository, offline: bool) -> None:
    """Validate the cache entry, or create it (online); offline, a missing entry is ``NOT_CACHED``."""
    _open(repo, offline)


def _fetch_missing(repo: CachedRepository, names: list[str]) -> dict[str, GitFailure]:
    """Fetch what the cache lacks; per-commit failures (the repository itself was reached)."""
    if not _answered(repo, names):
        repo.fetch_refs()
    failures = {}
    for name in names:
        if FULL_HASH.fullmatch(name) and not repo.has_commit(name):
            try:
                repo.fetch_commit(name)
            except GitFailure as exc:
                failures[name] = exc
    return failures


def _state(repo: CachedRepository, name: str, offline: bool, failure: GitFailure | None) -> CommitState:
    if failure is not None and failure.kind is not FailureKind.NOT_FOUND:
        return CommitState(name, failure=failure)
    sha, ref = _lookup(repo, name)
    if sha is None and offline:
        when = repo.fetched_at() or "never"
        return CommitState(name, failure=GitFailure(
            FailureKind.NOT_CACHED, f"the cache of {repo.url} (branches fetched: {when}) does not hold "
            f"commit {name}"))
    return CommitState(name, sha, ref)


def resolve_commits(repo: CachedRepository, names: set[str], offline: bool) -> dict[str, CommitState]:
    """The state of every commit name in ``names`` (a repository failure applies to all)."""
    ordered = sorted(names)
    try:
        _open(repo, offline)
        failures = {} if offline else _fetch_missing(repo, ordered)
        return {n: _state(repo, n, offline, failures.get(n)) for n in ordered}
    except GitFailure as exc:
        return {n: CommitState(n, failure=exc) for n in ordered}
