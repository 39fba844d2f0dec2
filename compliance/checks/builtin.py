"""The built-in checks. Importing this module registers every check spec.

Each static-check module declares its specs (``register(CheckSpec(...))``)
and a ``run`` function taking a ``CheckContext`` and yielding findings (None
for a check that is switched off). ``STATIC_CHECKS`` is the order they run in.
The --upstream and --verify stages only declare their specs here (light
modules: no git, no torch); their code is imported when the stage runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from compliance.checks import binaries, kernels, layout, readability, upstream_links, vendoring
from compliance.upstream import specs as _upstream_specs  # noqa: F401  (upstream-* rule ids)
from compliance.verify import specs as _verify_specs  # noqa: F401  (verify-* rule ids)

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding

STATIC_CHECKS: tuple[Callable[["CheckContext"], Iterable["Finding | None"]], ...] = (
    layout.run, kernels.run, binaries.run, upstream_links.run, vendoring.run, readability.run,
)
