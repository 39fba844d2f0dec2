"""The static stage: every built-in static check, in the order they run.

Each static-check module declares its specs and a ``run`` function taking a
``CheckContext`` and yielding findings (None for a check that is switched
off). ``STATIC_CHECKS`` is the order they run in; ``compliance.rulespecs.registry``
lists every rule id of every stage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from compliance.checks import binaries, declarations, layout, readability, upstream_links, vendoring, walk

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding

STATIC_CHECKS: tuple[Callable[[CheckContext], Iterable[Finding | None]], ...] = (
    layout.run, declarations.run, binaries.run, upstream_links.run, vendoring.run, readability.run,
    walk.run,
)


@dataclass(frozen=True)
class StaticStage:
    """The checks that read the tree only (no git, no build); always runs, takes no options."""

    name: ClassVar[str] = "static"

    def run(self, ctx: CheckContext) -> list[Finding]:
        """Every static check's findings (checks switched off yield none)."""
        return [f for check in STATIC_CHECKS for f in check(ctx) if f is not None]
