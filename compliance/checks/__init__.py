"""Built-in static checks. Importing this package registers every check spec.

Each module declares its specs (``register(CheckSpec(...))``) and a ``run``
function taking a ``CheckContext`` and yielding findings (None for a check
that is switched off). ``STATIC_CHECKS`` is the order they run in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from compliance.checks import binaries, kernels, layout, upstream_links
from compliance.verify import specs as _verify_specs  # noqa: F401  (verify-* rule ids; no torch)
from compliance.upstream import specs as upstream_specs  # noqa: F401  (registers the --upstream rule ids)

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding

STATIC_CHECKS: tuple[Callable[["CheckContext"], Iterable["Finding | None"]], ...] = (
    layout.run, kernels.run, binaries.run, upstream_links.run,
)
