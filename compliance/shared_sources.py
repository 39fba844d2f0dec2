"""Kernels traced across submitters: the same native source in several implementations.

Two files are the same source when their git blob hashes agree after CRLF line
endings are made LF (the inventory computes that hash while it reads each
native file once). A group is reported when its files lie in more than one
implementation (or organization); files inside vendored trees are left out,
since the trees themselves are reported as copies of their upstream.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from compliance.blobs import file_blob_hash
from compliance.inventory import Inventory, NativeFile


@dataclass(frozen=True)
class SharedFile:
    """One file of a shared-source group."""

    path: str
    """Root-relative path."""
    submitter: str | None
    """Organization."""
    benchmark: str | None
    """Benchmark."""
    implementation: str | None
    """Implementation directory name."""
    blob: str | None
    """Git blob hash of the bytes as committed (None: unreadable)."""


@dataclass(frozen=True)
class SharedSource:
    """Native files with the same content in several implementations."""

    normalized_blob: str
    """Blob hash of the content with LF line endings."""
    files: tuple[SharedFile, ...]
    """The files, sorted by path (the first is named as the original)."""

    @property
    def byte_identical(self) -> bool:
        """True when every file has the same bytes (not just the same lines)."""
        return len({f.blob for f in self.files}) == 1

    @property
    def relation(self) -> str:
        """``identical`` or ``identical modulo line endings``."""
        return "identical" if self.byte_identical else "identical modulo line endings"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``shared_sources`` in the report)."""
        return {"normalized_blob": self.normalized_blob, "relation": self.relation,
                "files": [{"path": f.path, "submitter": f.submitter, "benchmark": f.benchmark,
                           "implementation": f.implementation, "blob": f.blob} for f in self.files]}


def _owner(native: NativeFile) -> tuple[str | None, ...]:
    where = native.location
    return (where.division, where.submitter, where.benchmark, where.implementation)


def shared_sources(inventory: Inventory) -> tuple[SharedSource, ...]:
    """Groups of identical native sources spanning more than one implementation or organization."""
    groups: dict[str, list[NativeFile]] = defaultdict(list)
    for native in inventory.native:
        digest = inventory.digests.get(native.path)
        if digest is not None and native.vendored_tree is None:
            groups[digest].append(native)
    found = []
    for digest, members in groups.items():
        if len({_owner(m) for m in members}) < 2:
            continue
        files = tuple(SharedFile(m.path, m.location.submitter, m.location.benchmark,
                                 m.location.implementation, file_blob_hash(inventory.root / m.path))
                      for m in sorted(members, key=lambda m: m.path))
        found.append(SharedSource(digest, files))
    return tuple(sorted(found, key=lambda g: (-len(g.files), g.files[0].path)))
