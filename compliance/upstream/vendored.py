"""Bulk proof of a vendored tree: every native file's blob hash against the upstream tree.

Local blob hashes are computed in-process; the upstream side is one
``git cat-file --batch-check`` call for the whole tree, so a few thousand
files take well under a second once the commit is cached.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compliance.blobs import file_blob_hash, needs_hash
from compliance.rulespecs import upstream as specs
from compliance.upstream.commits import RULE_OF_FAILURE, Subject, commit_findings
from compliance.upstream.gitcache import CachedRepository, GitFailure, ObjectInfo, askable_path
from compliance.upstream.resolve import CommitState

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding

LISTED_IN_MESSAGE = 10
"""Non-verbatim files named in the message (details list them all)."""


@dataclass(frozen=True)
class VendoredTarget:
    """A declared vendored tree, located in the checked tree."""

    manifest_path: str
    """Root-relative manifest path."""
    line: int | None
    """Line of the ``vendored`` entry."""
    tree: str
    """Root-relative directory of the copy."""
    upstream_dir: str
    """Directory in the upstream repository it mirrors ('' for the top)."""
    repository: str
    """Upstream URL."""
    commit: str
    """Pinned commit."""


@dataclass(frozen=True)
class FileVerdict:
    """One native file of the tree compared with upstream."""

    path: str
    """Root-relative path."""
    local_blob: str | None
    """Its blob hash (None: unreadable)."""
    upstream_blob: str | None
    """Blob hash upstream (None: no such file upstream)."""
    unhashed: bool = False
    """Not hashed: larger than ``MAX_DIFF_BYTES`` and of another size than the upstream blob
    (or with no upstream blob): it cannot be verbatim, and hashing a huge file costs minutes."""

    @property
    def verbatim(self) -> bool:
        """True when both hashes exist and are equal."""
        return self.local_blob is not None and self.local_blob == self.upstream_blob

    @property
    def why(self) -> str:
        """modified, not upstream or unreadable."""
        if self.unhashed:
            return "not upstream" if self.upstream_blob is None else "modified"
        if self.local_blob is None:
            return "unreadable"
        return "not upstream" if self.upstream_blob is None else "modified"


def native_files(ctx: CheckContext, tree: str) -> list[str]:
    """Native files the inventory found under ``tree``."""
    prefix = tree + "/"
    return sorted(n.path for n in ctx.inventory.native if n.path.startswith(prefix))


def compare_tree(ctx: CheckContext, target: VendoredTarget, repo: CachedRepository,
                 sha: str) -> list[FileVerdict]:
    """Verdicts for every native file of the tree (one batch lookup)."""
    files = native_files(ctx, target.tree)
    base = f"{target.upstream_dir}/" if target.upstream_dir else ""
    specs_ = [f"{sha}:{base}{path[len(target.tree) + 1:]}" if askable_path(f"{base}{path[len(target.tree) + 1:]}")
              else None for path in files]
    infos = repo.batch_check(specs_)
    return [_verdict(ctx, path, info if info is not None and info.type == "blob" else None)
            for path, info in zip(files, infos, strict=True)]


def _verdict(ctx: CheckContext, path: str, info: ObjectInfo | None) -> FileVerdict:
    try:
        size = os.stat(ctx.root / path, follow_symlinks=False).st_size
    except OSError:
        return FileVerdict(path, None, info.sha if info else None)
    if not needs_hash(size, info.size if info else None):
        return FileVerdict(path, None, info.sha if info else None, unhashed=True)
    return FileVerdict(path, file_blob_hash(ctx.root / path), info.sha if info else None)


def _summary(ctx: CheckContext, target: VendoredTarget, repo: CachedRepository, state: CommitState,
             verdicts: list[FileVerdict]) -> Finding | None:
    assert state.sha is not None
    bad = [v for v in verdicts if not v.verbatim]
    where = f"{repo.url} at {state.sha[:12]}" + (f" ({target.upstream_dir}/)" if target.upstream_dir else "")
    counts = f"{len(verdicts) - len(bad)} of {len(verdicts)} native files verbatim upstream in {where}"
    details = {"repository": repo.url, "commit": state.sha, "upstream_dir": target.upstream_dir,
               "files": len(verdicts), "verbatim": len(verdicts) - len(bad)}
    if not bad:
        if state.containing_ref is None:
            return None
        return ctx.finding(specs.VENDORED_VERIFIED.id, target.tree, counts, details=details)
    named = ", ".join(f"{v.path[len(target.tree) + 1:]} ({v.why})" for v in bad[:LISTED_IN_MESSAGE])
    more = f" and {len(bad) - LISTED_IN_MESSAGE} more" if len(bad) > LISTED_IN_MESSAGE else ""
    listing = [{"path": v.path, "why": v.why, "local_blob": v.local_blob, "upstream_blob": v.upstream_blob}
               for v in bad]
    return ctx.finding(specs.VENDORED_DIFFERS.id, target.tree, f"{counts}; {len(bad)} are not: {named}{more}",
                       details={**details, "not_verbatim": listing})


def _upstream_dir_missing(ctx: CheckContext, target: VendoredTarget, repo: CachedRepository,
                          sha: str) -> Finding | None:
    return ctx.finding(specs.PATH_MISSING.id, target.manifest_path, f"vendored tree {target.tree!r}: upstream "
                       f"directory {target.upstream_dir!r} is not a directory in {repo.url} at {sha[:12]}",
                       line=target.line, details={"repository": repo.url, "commit": sha,
                                                  "upstream_path": target.upstream_dir})


def vendored_findings(ctx: CheckContext, target: VendoredTarget, repo: CachedRepository,
                      state: CommitState, offline: bool) -> list[Finding | None]:
    """Every upstream-stage finding for one declared vendored tree."""
    subject = Subject(f"vendored tree {target.tree!r}", target.manifest_path, target.line, None)
    findings = commit_findings(ctx, subject, repo, state, offline)
    if state.sha is None:
        return findings
    try:
        if target.upstream_dir:
            top = repo.batch_check([f"{state.sha}:{target.upstream_dir}" if askable_path(target.upstream_dir)
                                    else None])[0]
            if top is None or top.type != "tree":
                return findings + [_upstream_dir_missing(ctx, target, repo, state.sha)]
        verdicts = compare_tree(ctx, target, repo, state.sha)
    except GitFailure as exc:
        return findings + [ctx.finding(RULE_OF_FAILURE[exc.kind], target.manifest_path,
                                       f"{subject.label}: {exc.message}", line=target.line)]
    return findings + [_summary(ctx, target, repo, state, verdicts)]
