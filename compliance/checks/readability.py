"""Unreadable is never compliant: paths the walk could not read, setup.py files it could not parse.

The tree's author controls permissions, path lengths and file contents, so a
path the checker cannot read (or a setup.py it cannot parse) is a path whose
kernels it cannot see. Each one is an error-level finding naming it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from compliance.checks.interface import CheckSpec

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding

PATH_UNREADABLE = CheckSpec(
    id="path-unreadable", title="Path the checker could not read", default_level="error",
    doc="The walk could not enter a directory or read a file (no permission, a path longer than "
        "the system's PATH_MAX, an I/O error), or a declared kernel source could not be read. "
        "Whatever it holds was not checked, so the tree cannot be shown compliant.",
    hint="Make every file and directory of the submission readable (`chmod -R a+rX`), and keep "
         "paths shorter than 4096 bytes.",
    passing="every directory mode 755, every file mode 644",
    failing="Acme/benchmarks/dlrm/implementations/pt/kernels/ with mode 000",
)
SETUP_UNPARSEABLE = CheckSpec(
    id="setup-py-unparseable", title="setup.py could not be parsed", default_level="error",
    doc="A setup.py that mentions extensions could not be parsed as Python (a syntax error, or "
        "nesting or size that exhausts the parser), so the CUDAExtension/CppExtension sources it "
        "may build are unknown. setup.py is only ever parsed, never run.",
    hint="Make setup.py plain, valid Python 3 that lists its extension sources literally.",
    passing="setup(ext_modules=[CUDAExtension('emb', ['emb.cu'])])",
    failing="setup.py with a syntax error, or an expression nested 100,000 levels deep",
)


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """A finding per unreadable path and per unparseable setup.py."""
    for path in ctx.inventory.unreadable:
        yield ctx.finding(PATH_UNREADABLE.id, path, "could not be read or entered; its content was "
                          "not checked")
    for path, why in ctx.inventory.unparseable_setups:
        yield ctx.finding(SETUP_UNPARSEABLE.id, path, f"setup.py could not be parsed ({why}); the "
                          "extensions it builds are unknown")
