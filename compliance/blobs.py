"""Git blob hashes of local files and a short line-diff summary (no git process needed)."""

from __future__ import annotations

import difflib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

MAX_DIFF_LINES = 50_000
"""Files with more lines than this get blob hashes only, no line counts."""
MAX_DIFF_BYTES = 8 * 1024 * 1024
"""Files (local or upstream) larger than this get blob hashes only: no line diff is read."""
HASH_CHUNK = 1024 * 1024
"""Bytes read at a time while hashing (memory stays this size whatever the file's)."""


def blob_hash(data: bytes) -> str:
    """The id ``git hash-object`` gives ``data`` (SHA-1 object format)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def file_blob_hash(path: Path) -> str | None:
    """Blob hash of the file at ``path``, streamed; None when it cannot be read (or changes size)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            digest = hashlib.sha1(b"blob %d\0" % size)
            read = 0
            while chunk := handle.read(HASH_CHUNK):
                digest.update(chunk)
                read += len(chunk)
    except OSError:
        return None
    return digest.hexdigest() if read == size else None


def needs_hash(local_size: int, upstream_size: int | None) -> bool:
    """Whether a local file's blob hash is worth computing: always for files up to
    ``MAX_DIFF_BYTES``, and for larger ones only when upstream has a blob of the same size
    (otherwise they differ; hashing a 64 GiB sparse file would take a minute)."""
    return local_size <= MAX_DIFF_BYTES or local_size == upstream_size


def read_small(path: Path, limit: int = MAX_DIFF_BYTES) -> bytes | None:
    """The whole file when it has at most ``limit`` bytes; None when larger or unreadable."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError:
        return None
    return data if len(data) <= limit else None


def normalized_blob_hash(data: bytes) -> str:
    """Blob hash of ``data`` with CRLF line endings made LF (same source, any checkout)."""
    return blob_hash(data.replace(b"\r\n", b"\n"))


def file_normalized_blob_hash(path: Path, limit: int = 64 * 1024 * 1024) -> str | None:
    """``normalized_blob_hash`` of the file at ``path``; None when unreadable or over ``limit`` bytes."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError:
        return None
    return None if len(data) > limit else normalized_blob_hash(data)


@dataclass(frozen=True)
class DiffSummary:
    """How a submitted file differs from the upstream one, in lines."""

    lines_added: int | None
    """Lines in the submitted file that upstream lacks (None: file too large to diff)."""
    lines_removed: int | None
    """Upstream lines missing from the submitted file (None: file too large to diff)."""
    first_difference_line: int | None
    """First line (1-based, submitted file) where they differ."""
    only: str | None
    """``line endings`` or ``whitespace`` when that is the only difference, else None."""

    @classmethod
    def too_large(cls) -> DiffSummary:
        """The summary of files too large to diff (hashes only)."""
        return cls(None, None, None, None)

    def describe(self) -> str:
        """E.g. ``+3 -1 lines, first difference at line 12``."""
        if self.lines_added is None:
            text = "too large for a line diff"
        else:
            text = f"+{self.lines_added} -{self.lines_removed} lines"
        if self.first_difference_line is not None:
            text += f", first difference at line {self.first_difference_line}"
        if self.only:
            text += f"; they differ only in {self.only}"
        return text


def _only_difference(upstream: bytes, local: bytes) -> str | None:
    if upstream.replace(b"\r\n", b"\n") == local.replace(b"\r\n", b"\n"):
        return "line endings"
    if [line.rstrip() for line in upstream.splitlines()] == [line.rstrip() for line in local.splitlines()]:
        return "whitespace"
    return None


def _first_difference(a: list[bytes], b: list[bytes]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):  # lengths may differ
        if x != y:
            return index + 1
    return min(len(a), len(b)) + 1 if len(a) != len(b) else None


def diff_summary(upstream: bytes, local: bytes) -> DiffSummary:
    """Lines added/removed going from ``upstream`` to ``local`` (the submitted file)."""
    a, b = upstream.splitlines(keepends=True), local.splitlines(keepends=True)
    only = _only_difference(upstream, local)
    first = _first_difference(a, b)
    if max(len(a), len(b)) > MAX_DIFF_LINES:
        return DiffSummary(None, None, first, only)
    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return DiffSummary(added, removed, first, only)
