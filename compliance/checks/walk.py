"""What the walk could not scan, and the metadata directories it found (and examined).

The tree's author controls sizes, depths and file types, so anything the walk
could not scan within its documented limits (``compliance.inventory``:
``MAX_FILE_BYTES``, ``MAX_DEPTH``; a FIFO, socket or device, or a file swapped
for something else between listing and opening) is an error: its kernels are
unseen. Version-control directories and caches are examined like any other
directory; committing them is reported so the reviewer knows they are there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from compliance.rulespecs.checks import METADATA_DIRECTORY, PATH_UNSCANNED

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """A finding per unscanned path and per metadata directory."""
    for path, why in ctx.inventory.unscanned:
        yield ctx.finding(PATH_UNSCANNED.id, path, f"not scanned ({why}); its content was not checked")
    for path in ctx.inventory.metadata_dirs:
        yield ctx.finding(METADATA_DIRECTORY.id, path, "version-control, cache or packaging metadata "
                          "directory committed (its files were examined)")
