"""The ``--upstream`` stage: gather every upstream link, resolve each repository once, compare."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from compliance.cachedir import UPSTREAM
from compliance.checks.upstream_links import (
    FULL_COMMIT,
    repository_problem,
)
from compliance.errors import InputError
from compliance.paths import parent_dir, tree_relative
from compliance.rulespecs.checks import NOT_PINNED
from compliance.upstream.gitcache import (
    LOCAL_TIMEOUT_S,
)
from compliance.upstream.identified import identification_findings
from compliance.upstream.kernel_sources import kernel_findings
from compliance.upstream.options import UpstreamOptions
from compliance.upstream.resolve import CommitState, resolve_commits

# Below the stage (identify and identified need it too); re-exported under its old place.
from compliance.upstream.settings import UpstreamSettings
from compliance.upstream.vendored import VendoredTarget, vendored_findings

if TYPE_CHECKING:
    from compliance.context import CheckContext, DeclaredKernel
    from compliance.findings import Finding


def settings_from(options: UpstreamOptions, root: Path) -> UpstreamSettings:
    """The stage's options as settings; the cache must lie outside the checked tree ``root``."""
    cache = UPSTREAM.resolve(options.cache_dir)
    root = root.resolve()
    if cache == root or root in cache.parents:
        raise InputError("the upstream cache must be outside the checked tree (nothing is written into "
                         "the tree); choose another --upstream-cache", cache)
    timeout = options.network_timeout_s
    return UpstreamSettings(cache, options.offline, timeout, min(LOCAL_TIMEOUT_S, max(timeout, 10.0)),
                            dict(options.mirrors))


def checkable_kernels(ctx: CheckContext) -> list[DeclaredKernel]:
    """Kernels whose upstream link passes the static checks (the others are reported there)."""
    policy = ctx.ruleset.upstream_policy
    return [item for item in ctx.kernels() if item.kernel.upstream is not None
            and repository_problem(item.kernel.upstream.repository, policy) is None
            and (FULL_COMMIT.fullmatch(item.kernel.upstream.commit) or not policy.require_commit)]


def vendored_targets(ctx: CheckContext) -> Iterator[tuple[VendoredTarget | None, Finding | None]]:
    """Declared vendored trees: a target, or a finding when the declaration cannot be checked."""
    policy = ctx.ruleset.upstream_policy
    for relpath, manifest in ctx.manifests:
        for entry in manifest.vendored:
            tree = tree_relative(parent_dir(relpath), entry.path)
            problem = repository_problem(entry.repository, policy)
            if problem is not None:
                yield None, ctx.finding(problem[0], relpath, f"vendored {entry.path!r}: {problem[1]}",
                                        line=entry.line)
            elif policy.require_commit and not FULL_COMMIT.fullmatch(entry.commit):
                yield None, ctx.finding(NOT_PINNED.id, relpath, f"vendored {entry.path!r}: commit "
                                        f"{entry.commit!r} is not a full 40-hex commit", line=entry.line)
            elif tree is not None:
                yield VendoredTarget(relpath, entry.line, tree, entry.upstream_path, entry.repository,
                                     entry.commit), None


def _resolve_all(settings: UpstreamSettings, wanted: dict[str, set[str]]) -> dict[tuple[str, str], CommitState]:
    """(url, commit) -> state, one cache entry and at most one refs fetch per repository."""
    if not settings.offline and wanted:
        try:
            settings.cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the upstream cache: {exc.strerror}", settings.cache_dir) from exc
    states = {}
    for url, commits in sorted(wanted.items()):
        for commit, state in resolve_commits(settings.repository(url), commits, settings.offline).items():
            states[(url, commit)] = state
    return states


def run_upstream_checks(ctx: CheckContext, options: UpstreamOptions) -> list[Finding]:
    """Every finding of the ``--upstream`` stage."""
    settings = settings_from(options, ctx.root)
    kernels = checkable_kernels(ctx)
    pairs = list(vendored_targets(ctx))
    findings: list[Finding | None] = [f for _, f in pairs]
    trees = [t for t, _ in pairs if t is not None]
    wanted: dict[str, set[str]] = {}
    for url, commit in [(k.kernel.upstream.repository, k.kernel.upstream.commit) for k in kernels
                        if k.kernel.upstream] + [(t.repository, t.commit) for t in trees]:
        wanted.setdefault(url, set()).add(commit)
    states = _resolve_all(settings, wanted)
    for item in kernels:
        upstream = item.kernel.upstream
        assert upstream is not None
        findings += kernel_findings(ctx, item, settings.repository(upstream.repository),
                                    states[(upstream.repository, upstream.commit)], settings.offline)
    for tree in trees:
        findings += vendored_findings(ctx, tree, settings.repository(tree.repository),
                                      states[(tree.repository, tree.commit)], settings.offline)
    findings += identification_findings(ctx, settings, trees, set(wanted))
    return [f for f in findings if f is not None]
