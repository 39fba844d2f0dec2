"""Per-kernel upstream proof: each declared source against its upstream path at the pinned commit."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compliance.blobs import (
    MAX_DIFF_BYTES,
    DiffSummary,
    diff_summary,
    file_blob_hash,
    needs_hash,
    read_small,
)
from compliance.rulespecs import upstream as specs
from compliance.upstream.commits import RULE_OF_FAILURE, Subject, commit_findings
from compliance.upstream.gitcache import CachedRepository, GitFailure, ObjectInfo, askable_path
from compliance.upstream.resolve import CommitState

if TYPE_CHECKING:
    from compliance.context import CheckContext, DeclaredKernel
    from compliance.findings import Finding


@dataclass(frozen=True)
class SourcePair:
    """A submitted source and where it should be upstream."""

    relpath: str
    """Root-relative path of the submitted file."""
    upstream_path: str
    """Path in the upstream repository."""
    size: int
    """The submitted file's size in bytes."""


def upstream_path(path: str) -> str:
    """A declared upstream path as git's ``<rev>:<path>`` syntax wants it."""
    return path.strip().lstrip("/").removeprefix("./")


def source_pairs(ctx: CheckContext, item: DeclaredKernel) -> list[SourcePair]:
    """Sources present in the tree with their upstream paths (static checks report the others)."""
    assert item.kernel.upstream is not None
    pairs = []
    for (_, rel), path in zip(item.source_relpaths(), item.kernel.upstream.paths, strict=False):
        if rel is None or rel not in ctx.inventory.files:
            continue
        try:
            size = os.stat(ctx.root / rel, follow_symlinks=False).st_size
        except OSError:  # unreadable sources are static findings (path-unreadable)
            continue
        pairs.append(SourcePair(rel, upstream_path(path), size))
    return pairs


def local_blob(ctx: CheckContext, pair: SourcePair, info: ObjectInfo | None) -> str | None:
    """The submitted file's blob hash, streamed; None when it cannot be read or is not worth
    hashing (large, and upstream has no blob of its size: see ``needs_hash``)."""
    upstream_size = info.size if info is not None and info.type == "blob" else None
    if not needs_hash(pair.size, upstream_size):
        return None
    return file_blob_hash(ctx.root / pair.relpath)


def _compare(ctx: CheckContext, item: DeclaredKernel, repo: CachedRepository, sha: str,
             pair: SourcePair, info: ObjectInfo | None, local: str | None) -> Finding | None:
    kernel = item.kernel
    where = f"{repo.url} at {sha[:12]}"
    if info is None or info.type != "blob":
        what = "a directory" if info is not None and info.type == "tree" else "no such file"
        if not askable_path(pair.upstream_path):
            what = "not a path inside a repository"
        return ctx.finding(specs.PATH_MISSING.id, item.manifest_path, f"kernel {kernel.id!r}: upstream path "
                           f"{pair.upstream_path!r} (for {pair.relpath}) is {what} in {where}",
                           line=kernel.upstream.line if kernel.upstream else None, kernel=kernel.id,
                           details={"repository": repo.url, "commit": sha, "upstream_path": pair.upstream_path,
                                    "level": "path-missing"})
    if local == info.sha:
        return None
    summary = _summary(ctx, repo, pair, info)
    ours = f"local blob {local[:12]}" if local else f"local file of {pair.size} bytes"
    theirs = f"upstream blob {info.sha[:12]}" + ("" if local else f" of {info.size} bytes")
    return ctx.finding(specs.CONTENT_DIFFERS.id, pair.relpath, f"kernel {kernel.id!r}: differs from "
                       f"{pair.upstream_path} in {where}: {ours} vs {theirs}, {summary.describe()}",
                       kernel=kernel.id,
                       details={"repository": repo.url, "commit": sha, "upstream_path": pair.upstream_path,
                                "local_blob": local, "upstream_blob": info.sha,
                                "lines_added": summary.lines_added, "lines_removed": summary.lines_removed,
                                "first_difference_line": summary.first_difference_line,
                                "only_difference": summary.only, "level": "differs"})


def _summary(ctx: CheckContext, repo: CachedRepository, pair: SourcePair, info: ObjectInfo) -> DiffSummary:
    """Line diff of the two files, unless either is larger than ``MAX_DIFF_BYTES``."""
    local = read_small(ctx.root / pair.relpath) if info.size <= MAX_DIFF_BYTES else None
    if local is None:
        return DiffSummary.too_large()
    return diff_summary(repo.blob(info.sha), local)


def _verified(ctx: CheckContext, item: DeclaredKernel, repo: CachedRepository, state: CommitState,
              pairs: list[SourcePair]) -> Finding | None:
    kernel = item.kernel
    assert state.sha is not None
    return ctx.finding(specs.VERIFIED.id, item.manifest_path, f"kernel {kernel.id!r}: {len(pairs)} source(s) "
                       f"byte-identical to {repo.url} at {state.sha[:12]} (on {state.containing_ref})",
                       line=kernel.upstream.line if kernel.upstream else None, kernel=kernel.id,
                       details={"repository": repo.url, "commit": state.sha, "ref": state.containing_ref,
                                "sources": [p.relpath for p in pairs], "level": "exact"})


def kernel_findings(ctx: CheckContext, item: DeclaredKernel, repo: CachedRepository,
                    state: CommitState, offline: bool) -> list[Finding | None]:
    """Every upstream-stage finding for one declared kernel."""
    kernel = item.kernel
    line = kernel.upstream.line if kernel.upstream else None
    subject = Subject(f"kernel {kernel.id!r}", item.manifest_path, line, kernel.id)
    findings = commit_findings(ctx, subject, repo, state, offline)
    if state.sha is None:
        return findings
    pairs = source_pairs(ctx, item)
    try:
        infos = repo.batch_check([f"{state.sha}:{p.upstream_path}" if askable_path(p.upstream_path) else None
                                  for p in pairs])
        blobs = [local_blob(ctx, p, i) for p, i in zip(pairs, infos, strict=True)]
        findings += [_compare(ctx, item, repo, state.sha, p, i, b)
                     for p, i, b in zip(pairs, infos, blobs, strict=True)]
    except GitFailure as exc:
        return findings + [ctx.finding(RULE_OF_FAILURE[exc.kind], item.manifest_path,
                                       f"kernel {kernel.id!r}: {exc.message}", line=line, kernel=kernel.id)]
    exact = all(i is not None and i.type == "blob" and i.sha == b for i, b in zip(infos, blobs, strict=True))
    if pairs and exact and state.containing_ref is not None:
        findings.append(_verified(ctx, item, repo, state, pairs))
    return findings
