"""Findings about a pinned commit itself: fetch failures, unknown, unmerged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from compliance.rulespecs import upstream as specs
from compliance.upstream.gitcache import CachedRepository, FailureKind
from compliance.upstream.resolve import CommitState

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding

RULE_OF_FAILURE = {
    FailureKind.UNREACHABLE: specs.UNREACHABLE.id,
    FailureKind.AUTH: specs.AUTH.id,
    FailureKind.CORRUPT: specs.CACHE_CORRUPT.id,
    FailureKind.NOT_CACHED: specs.NOT_CACHED.id,
    FailureKind.NOT_FOUND: specs.COMMIT_UNKNOWN.id,
}
"""Rule id reported for each failure kind."""


@dataclass(frozen=True)
class Subject:
    """What a commit finding is about: a kernel's upstream or a vendored tree."""

    label: str
    """E.g. ``kernel 'acme-emb'`` or ``vendored tree 'third_party/apex'``."""
    path: str
    """Root-relative path the finding points at (the manifest)."""
    line: int | None
    """Line of the upstream/vendored entry in the manifest."""
    kernel: str | None
    """Kernel id, for kernel upstreams."""


def commit_findings(ctx: CheckContext, subject: Subject, repo: CachedRepository, state: CommitState,
                    offline: bool) -> list[Finding | None]:
    """Findings about the commit; content comparison may go on only if the commit was found."""
    details = {"repository": repo.url, "commit": state.requested, "cache": str(repo.git_dir)}
    if state.failure is not None:
        rule = RULE_OF_FAILURE[state.failure.kind]
        return [ctx.finding(rule, subject.path, f"{subject.label}: {state.failure.message}", line=subject.line,
                            kernel=subject.kernel, details={**details, "level": state.failure.kind.value})]
    if state.sha is None:
        return [ctx.finding(specs.COMMIT_UNKNOWN.id, subject.path, f"{subject.label}: {repo.url} has no commit "
                            f"{state.requested}", line=subject.line, kernel=subject.kernel,
                            details={**details, "level": "commit-unknown"})]
    if state.containing_ref is None:
        basis = f"none of the branches or tags cached at {repo.fetched_at() or 'an unknown time'} contains it" \
            if offline else "none of its branches or tags contains it"
        return [ctx.finding(specs.COMMIT_UNMERGED.id, subject.path, f"{subject.label}: commit {state.sha} "
                            f"exists in {repo.url} but {basis}; an unmerged pull request head is not "
                            f"upstreamed", line=subject.line, kernel=subject.kernel,
                            details={**details, "level": "unmerged"})]
    return []
