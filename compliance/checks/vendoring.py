"""Forks of catalogued projects and committed build directories.

Both are reported once per directory, so a reviewer sees one line instead of
hundreds: a fork's native files are still checked one by one by
``undeclared-kernel`` (the fork is never hidden); a build directory's
products are listed in the finding's details.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

# The specs live below the checks (compliance.checks.specs); re-exported under their old names.
from compliance.checks.specs import BUILD_DIRECTORY as BUILD_DIRECTORY
from compliance.checks.specs import FORK as FORK

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding

LISTED_IN_MESSAGE = 5
"""Build products named in a message (details list them all)."""


def _forks(ctx: CheckContext) -> Iterator[Finding | None]:
    for fork in ctx.inventory.forks:
        where = fork.path or "."
        yield ctx.finding(FORK.id, where, f"{where} is a fork of {fork.project_name} ({fork.repository}); "
                          f"its {fork.native_files} native file(s) are checked one by one",
                          details={"project": fork.project, "repository": fork.repository,
                                   "native_files": fork.native_files}, location=fork.location)


def _build_directories(ctx: CheckContext) -> Iterator[Finding | None]:
    for build in ctx.inventory.build_directories:
        names = [p[len(build.path) + 1:] for p, _ in build.products]
        listed = ", ".join(names[:LISTED_IN_MESSAGE])
        more = f" and {len(names) - LISTED_IN_MESSAGE} more" if len(names) > LISTED_IN_MESSAGE else ""
        binaries = sum(1 for _, kind in build.products if kind != "file")
        yield ctx.finding(BUILD_DIRECTORY.id, build.path, f"committed build directory with "
                          f"{len(names)} build product(s) ({binaries} binary): {listed}{more}",
                          details={"products": [{"path": p, "kind": k} for p, k in build.products]})


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """Fork and build-directory findings."""
    yield from _forks(ctx)
    yield from _build_directories(ctx)
