"""``compliance check --upstream``: prove upstream links with git (see docs/upstream.md).

Importing this package imports no git code; ``UpstreamStage.run`` loads
gitpython when the stage actually runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from compliance.upstream.options import UpstreamOptions

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding


@dataclass(frozen=True)
class UpstreamStage:
    """The ``--upstream`` stage with its options."""

    options: UpstreamOptions = UpstreamOptions()
    """Cache, offline mode, fetch time limit, mirrors."""
    name: ClassVar[str] = "upstream"

    def run(self, ctx: CheckContext) -> list[Finding]:
        """Every finding of the upstream stage (fetches into the cache unless ``options.offline``)."""
        from compliance.upstream.stage import run_upstream_checks

        return run_upstream_checks(ctx, self.options)
