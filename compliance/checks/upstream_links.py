"""Static upstream-link checks: present, well formed, on an allowed host, pinned to a commit.

These look at the manifest text only; ``compliance check --upstream`` goes
further and proves the link with git (``compliance.upstream``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from compliance.rulespecs.checks import HOST, MALFORMED, MISSING, NOT_PINNED

if TYPE_CHECKING:
    from compliance.context import CheckContext, DeclaredKernel
    from compliance.findings import Finding
    from compliance.ruleset import UpstreamPolicy

FULL_COMMIT = re.compile(r"[0-9a-f]{40}")
"""A full commit hash; use with ``fullmatch`` only (``$`` would accept a trailing newline)."""
_SCP_LIKE = re.compile(r"(?P<user>[\w.-]+)@(?P<host>[\w.-]+):(?P<path>\S+)")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
"""Whitespace and control characters: urlparse silently drops some of them, git would not."""


@dataclass(frozen=True)
class ParsedUrl:
    """The parts of a clone URL a check needs."""

    host: str | None
    """Host name, lower case (None for local paths)."""
    path: str
    """Repository path."""
    local: bool
    """file:// URL or filesystem path."""
    scheme: str = "https"
    """URL scheme (``ssh`` for the scp form ``user@host:path``)."""


def parse_repository(url: str) -> ParsedUrl | None:
    """Parse a clone URL; None when it is not one."""
    if _CONTROL.search(url):
        return None
    scp = _SCP_LIKE.fullmatch(url)
    if scp:
        return ParsedUrl(scp["host"].lower(), scp["path"], False, "ssh")
    try:
        parsed = urlparse(url)
        hostname = parsed.hostname  # raises ValueError for a malformed IPv6 literal or port
    except ValueError:
        return None
    if parsed.scheme == "file" or (not parsed.scheme and url.startswith(("/", "./", "../"))):
        return ParsedUrl(None, parsed.path or url, True)
    if parsed.scheme in ("https", "http", "ssh", "git") and hostname:
        return ParsedUrl(hostname.lower(), parsed.path, False, parsed.scheme)
    return None


def repository_problem(url: str, policy: UpstreamPolicy) -> tuple[str, str] | None:
    """(rule id, message) when ``url`` is not an acceptable upstream under ``policy``."""
    parsed = parse_repository(url)
    if parsed is None:
        return MALFORMED.id, f"{url!r} is not a clone URL"
    if parsed.local:
        return None if policy.allow_local else (MALFORMED.id, f"{url!r} is a local path; the rule set "
                                                "does not allow local upstreams")
    if len([p for p in parsed.path.strip("/").removesuffix(".git").split("/") if p]) < 2:
        return MALFORMED.id, f"{url!r} names no owner/repository"
    if parsed.scheme not in policy.allowed_schemes:
        return HOST.id, (f"{parsed.scheme}:// is not allowed (allowed: "
                         f"{', '.join(s + '://' for s in policy.allowed_schemes)})")
    if parsed.host not in policy.allowed_hosts:
        return HOST.id, f"host {parsed.host!r} is not allowed (allowed: {', '.join(policy.allowed_hosts)})"
    return None


def _kernel_findings(ctx: CheckContext, item: DeclaredKernel) -> Iterator[Finding | None]:
    kernel, upstream = item.kernel, item.kernel.upstream
    entry = ctx.ruleset.entry(kernel.category)
    if upstream is None:
        if entry is not None and entry.requires_upstream:
            yield ctx.finding(MISSING.id, item.manifest_path, f"kernel {kernel.id!r} declares no upstream; "
                              f"category {entry.id!r} requires one", line=kernel.line, kernel=kernel.id)
        return
    policy = ctx.ruleset.upstream_policy
    problem = repository_problem(upstream.repository, policy)
    if problem:
        yield ctx.finding(problem[0], item.manifest_path, f"kernel {kernel.id!r}: {problem[1]}",
                          line=upstream.line, kernel=kernel.id)
    if policy.require_commit and not FULL_COMMIT.fullmatch(upstream.commit):
        what = "a short hash" if re.fullmatch(r"[0-9a-f]{4,39}", upstream.commit) else "a branch or tag name"
        yield ctx.finding(NOT_PINNED.id, item.manifest_path, f"kernel {kernel.id!r}: commit "
                          f"{upstream.commit!r} looks like {what}, not a full 40-hex commit",
                          line=upstream.line, kernel=kernel.id)


def _vendored_findings(ctx: CheckContext) -> Iterator[Finding | None]:
    """A ``vendored:`` declaration is a claim to prove: an acceptable repository, a full commit."""
    policy = ctx.ruleset.upstream_policy
    for relpath, manifest in ctx.manifests:
        for entry in manifest.vendored:
            problem = repository_problem(entry.repository, policy)
            if problem:
                yield ctx.finding(problem[0], relpath, f"vendored {entry.path!r}: {problem[1]}", line=entry.line)
            if policy.require_commit and not FULL_COMMIT.fullmatch(entry.commit):
                yield ctx.finding(NOT_PINNED.id, relpath, f"vendored {entry.path!r}: commit {entry.commit!r} is "
                                  "not a full 40-hex commit", line=entry.line)


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """Upstream link findings for every declared kernel and every declared vendored copy."""
    for item in ctx.kernels():
        yield from _kernel_findings(ctx, item)
    if ctx.proof != "upstream":  # the upstream stage reports a bad declaration itself
        yield from _vendored_findings(ctx)
