"""``check --upstream``: the upstream commit of every vendored tree whose upstream is known.

A catalogued tree (NCCL, CUTLASS, ...) or a declared one is identified with
the blob index of its repository (``compliance.upstream.identify``). The
finding is information for the reviewer; failures to reach a catalogued
repository are reported in its message, not as errors (nothing was declared
that could be wrong), while declared trees keep their own error findings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from compliance.rulespecs import upstream as specs
from compliance.upstream.gitcache import GitFailure
from compliance.upstream.identify import identify_copy
from compliance.upstream.resolve import open_cache
from compliance.upstream.vendored import VendoredTarget

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding
    from compliance.upstream.settings import UpstreamSettings


def _targets(ctx: CheckContext, declared: list[VendoredTarget]) -> dict[str, str]:
    """Tree path -> repository, for every tree with a known upstream.

    The upstream directory is always guessed from where the copy's blobs live
    upstream, so a wrongly declared ``upstream_path`` does not hide the answer.
    """
    found = {t.tree: t.repository for t in declared}
    for tree in ctx.inventory.vendored:
        if tree.repository and tree.parent is None and not tree.declared:
            found[tree.path] = tree.repository
    return found


def identification_findings(ctx: CheckContext, settings: UpstreamSettings, declared: list[VendoredTarget],
                            fetched: set[str]) -> list[Finding | None]:
    """One ``upstream-vendored-identified`` finding per tree (``fetched``: URLs already fetched this run)."""
    findings: list[Finding | None] = []
    failed: dict[str, GitFailure] = {}
    for path, url in sorted(_targets(ctx, declared).items()):
        repo = settings.repository(url)
        try:
            if url in failed:  # one failed fetch per repository and run is enough
                raise failed[url]
            open_cache(repo, settings.offline)
            if not settings.offline and url not in fetched:
                repo.fetch_refs()
                fetched.add(url)
            result = identify_copy(repo, ctx.root / path)
        except GitFailure as exc:
            failed[url] = exc
            findings.append(ctx.finding(specs.VENDORED_IDENTIFIED.id, path, f"vendored tree not identified: "
                                        f"{exc.message}", details={"repository": url, "level": exc.kind.value}))
            continue
        findings.append(ctx.finding(specs.VENDORED_IDENTIFIED.id, path, f"vendored tree {result.describe()}",
                                    details=result.to_dict()))
    return findings
