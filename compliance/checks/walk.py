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

from compliance.checks.interface import CheckSpec

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding

PATH_UNSCANNED = CheckSpec(
    id="path-unscanned", title="Path the checker could not scan", default_level="error",
    doc="A file larger than the walk's limit for one file (1 GiB), a directory deeper than its "
        "limit (256 levels), or an entry that is not a regular file, directory or symlink (a "
        "FIFO, socket or device; also a kernel manifest that is any of these) could not be "
        "scanned. Whatever it holds was not checked, so the tree cannot be shown compliant.",
    hint="Remove the entry, or split the data so that no file exceeds the limit.",
    passing="every file under 1 GiB, plain files and directories only",
    failing="a 2 GiB results.json, or a FIFO named kernel_manifest.yaml",
)
METADATA_DIRECTORY = CheckSpec(
    id="metadata-directory-committed", title="Version-control or cache directory committed",
    default_level="warning",
    doc="A version-control directory (`.git`, `.hg`, `.svn`), an interpreter cache "
        "(`__pycache__`) or packaging metadata (`*.egg-info`) is part of the tree. Its files are "
        "examined like any other (a kernel or binary there is reported as such); this finding "
        "tells the reviewer it is there.",
    hint="Remove the directory from the submission (`git archive` or a clean copy never has it).",
    passing="a tree exported with `git archive`",
    failing="Acme/benchmarks/dlrm/implementations/torch/__pycache__/",
)


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """A finding per unscanned path and per metadata directory."""
    for path, why in ctx.inventory.unscanned:
        yield ctx.finding(PATH_UNSCANNED.id, path, f"not scanned ({why}); its content was not checked")
    for path in ctx.inventory.metadata_dirs:
        yield ctx.finding(METADATA_DIRECTORY.id, path, "version-control, cache or packaging metadata "
                          "directory committed (its files were examined)")
