"""``compliance check --upstream``: prove upstream links with git (see docs/upstream.md).

Importing this package imports no git code; ``run_upstream_checks`` loads
gitpython when the stage actually runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.engine import CheckOptions
    from compliance.findings import Finding


def run_upstream_checks(ctx: CheckContext, options: CheckOptions) -> list[Finding]:
    """Every finding of the upstream stage (fetches into the cache unless ``options.offline``)."""
    from compliance.upstream.runner import run_upstream_checks as run

    return run(ctx, options)
