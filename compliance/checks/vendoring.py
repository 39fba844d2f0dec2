"""Forks of catalogued projects: reported once per fork, so a reviewer sees where the code came
from; a fork's native files are still checked one by one by ``undeclared-kernel`` (the fork is
never hidden). Committed build products are the binary check's (``compliance.checks.binaries``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from compliance.rulespecs.checks import FORK

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding


def _forks(ctx: CheckContext) -> Iterator[Finding | None]:
    for fork in ctx.inventory.forks:
        where = fork.path or "."
        proven = f", {fork.proven} of them versions of upstream files" if fork.proven else ""
        yield ctx.finding(FORK.id, where, f"{where} is a fork of {fork.project_name} ({fork.repository}); "
                          f"its {fork.native_files} native file(s) are checked one by one{proven}",
                          details={"project": fork.project, "repository": fork.repository,
                                   "native_files": fork.native_files, "proven": fork.proven},
                          location=fork.location)


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """Fork findings."""
    yield from _forks(ctx)
