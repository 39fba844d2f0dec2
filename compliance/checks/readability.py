"""Unreadable is never compliant: paths the walk could not read, setup.py files it could not parse.

The tree's author controls permissions, path lengths and file contents, so a
path the checker cannot read (or a setup.py it cannot parse) is a path whose
kernels it cannot see. Each one is an error-level finding naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from compliance.rulespecs.checks import PATH_UNREADABLE, SETUP_UNPARSEABLE

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """A finding per unreadable path and per unparseable setup.py."""
    for path in ctx.inventory.unreadable:
        yield ctx.finding(PATH_UNREADABLE.id, path, "could not be read or entered; its content was "
                          "not checked")
    for path, why in ctx.inventory.unparseable_setups:
        yield ctx.finding(SETUP_UNPARSEABLE.id, path, f"setup.py could not be parsed ({why}); the "
                          "extensions it builds are unknown")
