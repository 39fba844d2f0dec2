"""The blob catalogue: which file contents each catalogued upstream project has ever had.

For every project of ``vendored.yaml`` that has been built (``python3 -m compliance.catalogue.build``),
``blobs.bin`` holds the git blob ids of every version of every catalogued file in the covered
history (every release tag and every commit of the default branch; ``covered.json`` lists them),
with the paths each blob had and the release tags whose trees hold it. Ids are taken *after*
CRLF->LF normalisation (what the walk computes for every native file), truncated to ``ID_BYTES``
bytes; docs/upstream.md argues the collision and forgery margin.

Format (all integers little-endian; varint = LEB128)::

    MAGIC, then an lzma (xz) stream of:
      u32 header length, header (JSON: format, id_bytes, projects: [{id, blobs, paths, versions}])
      per project, in header order:
        paths      varint byte length + UTF-8 paths joined by "\\n" (sorted; a blob's paths index them)
        ids        sorted ascending, each as a varint gap between its first GAP_BYTES bytes (read as
                   a big-endian number) and the previous id's, then its other id_bytes - GAP_BYTES bytes
        versions   blobs x 2 bytes: first and last release (index into the header's versions, in
                   release order) whose tree holds the blob; NO_RELEASE twice for a blob no release holds
        paths of   per blob: varint count, then that many varint path indices (ascending)

Loading is lazy (``load_blob_catalogue``): nothing is read until a recognised copy asks.
"""

from __future__ import annotations

import functools
import json
import lzma
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

MAGIC = b"MLPCBLOB"
"""First bytes of ``blobs.bin``."""
FORMAT = 1
"""Format version (in the header; a reader refuses another)."""
ID_BYTES = 10
"""Bytes kept of each 20-byte blob id (80 bits; docs/upstream.md, "The blob catalogue")."""
GAP_BYTES = 3
"""Leading id bytes stored as gaps between sorted ids (they are nearly sequential: ~8 % smaller)."""
NO_RELEASE = 255
"""Version index of a blob that no release tag's tree holds (it lies between releases)."""
MAX_RELEASES = 255
"""Releases a project can list (one byte per index; older ones are dropped first)."""


@dataclass(frozen=True)
class ProjectBlobs:
    """The catalogue of one upstream project, as built from its history."""

    id: str
    """Catalogue id (``vendored.yaml``)."""
    versions: tuple[str, ...]
    """Release tags, oldest first."""
    paths: tuple[str, ...]
    """Every path a catalogued blob had, sorted."""
    blobs: dict[bytes, tuple[tuple[int, ...], int, int]]
    """Truncated blob id -> (path indices, first release index, last release index)."""

    def knows(self, digest: str) -> bool:
        """True when the (LF-normalised) blob id ``digest`` is a version of some upstream file."""
        return _short(digest) in self.blobs

    @functools.cached_property
    def _path_index(self) -> dict[str, int]:
        return {path: index for index, path in enumerate(self.paths)}

    @functools.cached_property
    def _versions_at(self) -> dict[int, list[bytes]]:
        at: dict[int, list[bytes]] = {}
        for short, (paths, _, _) in self.blobs.items():
            for index in paths:
                at.setdefault(index, []).append(short)
        return at

    def had_path(self, path: str) -> bool:
        """True when upstream had a catalogued file at ``path`` (copy-relative) in some version."""
        return path in self._path_index

    def releases_of(self, digest: str) -> tuple[int, int] | None:
        """(first, last) release index holding the blob; None when unknown or in no release."""
        entry = self.blobs.get(_short(digest))
        if entry is None or entry[1] == NO_RELEASE:
            return None
        return entry[1], entry[2]

    def nearest_version(self, path: str, release: int | None) -> tuple[str, str | None] | None:
        """(blob id prefix, release name or None) of the upstream version of ``path`` nearest to
        ``release`` (the copy's identified release); None when upstream never had ``path``."""
        index = self._path_index.get(path)
        if index is None:
            return None
        candidates = self._versions_at.get(index, [])
        if not candidates:
            return None

        def distance(short: bytes) -> tuple[int, int]:
            first, last = self.blobs[short][1:]
            if first == NO_RELEASE:
                return (1_000, 0)
            if release is None:
                return (0, -last)
            return (0 if first <= release <= last else min(abs(first - release), abs(last - release)), -last)

        best = min(candidates, key=distance)
        first, last = self.blobs[best][1:]
        name = None
        if first != NO_RELEASE:
            name = self.versions[release] if release is not None and first <= release <= last else self.versions[last]
        return best.hex(), name

    def identify(self, digests: Iterable[str]) -> tuple[int | None, int]:
        """(release holding the most of ``digests``, how many it holds); (None, 0) when none."""
        votes = [0] * len(self.versions)
        for digest in digests:
            span = self.releases_of(digest)
            if span is not None:
                for release in range(span[0], span[1] + 1):
                    votes[release] += 1
        if not votes or max(votes) == 0:
            return None, 0
        best = max(range(len(votes)), key=lambda r: (votes[r], r))
        return best, votes[best]


def _short(digest: str) -> bytes:
    try:
        return bytes.fromhex(digest[:2 * ID_BYTES])
    except ValueError:
        return b""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, count: int) -> bytes:
        if self.at + count > len(self.data):
            raise ValueError("blob catalogue is truncated")
        chunk = self.data[self.at:self.at + count]
        self.at += count
        return chunk

    def varint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7


def encode(projects: Sequence[ProjectBlobs]) -> bytes:
    """``blobs.bin``'s bytes for ``projects`` (deterministic: same input, same bytes)."""
    header = {"format": FORMAT, "id_bytes": ID_BYTES, "gap_bytes": GAP_BYTES,
              "projects": [{"id": p.id, "blobs": len(p.blobs), "paths": len(p.paths),
                            "versions": list(p.versions)} for p in projects]}
    body = bytearray()
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    body += struct.pack("<I", len(head)) + head
    for project in projects:
        text = "\n".join(project.paths).encode()
        body += _varint(len(text)) + text
        ids = sorted(project.blobs)
        previous = 0
        for short in ids:
            lead = int.from_bytes(short[:GAP_BYTES], "big")
            body += _varint(lead - previous) + short[GAP_BYTES:]
            previous = lead
        body += b"".join(bytes(project.blobs[i][1:]) for i in ids)
        for short in ids:
            paths = sorted(project.blobs[short][0])
            body += _varint(len(paths)) + b"".join(_varint(p) for p in paths)
    return MAGIC + lzma.compress(bytes(body), preset=9 | lzma.PRESET_EXTREME)


def decode(data: bytes) -> tuple[ProjectBlobs, ...]:
    """The projects in ``blobs.bin``'s bytes (ValueError on anything else)."""
    if not data.startswith(MAGIC):
        raise ValueError("not a blob catalogue (bad magic)")
    try:
        body = lzma.decompress(data[len(MAGIC):])
    except lzma.LZMAError as exc:
        raise ValueError(f"blob catalogue does not decompress: {exc}") from exc
    reader = _Reader(body)
    header = json.loads(reader.take(struct.unpack("<I", reader.take(4))[0]))
    if header.get("format") != FORMAT or header.get("id_bytes") != ID_BYTES or header.get("gap_bytes") != GAP_BYTES:
        raise ValueError(f"blob catalogue format {header.get('format')} / {header.get('id_bytes')}-byte ids "
                         f"is not this reader's ({FORMAT} / {ID_BYTES})")
    projects = []
    for meta in header["projects"]:
        text = reader.take(reader.varint()).decode()
        paths = tuple(text.split("\n")) if text else ()
        count = meta["blobs"]
        ids, lead = [], 0
        for _ in range(count):
            lead += reader.varint()
            ids.append(lead.to_bytes(GAP_BYTES, "big") + reader.take(ID_BYTES - GAP_BYTES))
        spans = reader.take(count * 2)
        blobs = {}
        for index, short in enumerate(ids):
            held = tuple(reader.varint() for _ in range(reader.varint()))
            blobs[short] = (held, spans[2 * index], spans[2 * index + 1])
        projects.append(ProjectBlobs(meta["id"], tuple(meta["versions"]), paths, blobs))
    return tuple(projects)


def shipped_path() -> Path:
    """Where the package's ``blobs.bin`` lies."""
    return Path(str(resources.files("compliance.catalogue").joinpath("blobs.bin")))


@functools.cache
def load_blob_catalogue(path: Path | None = None) -> dict[str, ProjectBlobs]:
    """Catalogue id -> its blobs, read once on first use (an absent file: no project has blobs)."""
    source = path or shipped_path()
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        return {}
    return {p.id: p for p in decode(data)}


def iter_ids(project: ProjectBlobs) -> Iterator[str]:
    """Every truncated id of ``project`` as hex (for tests and the build's record)."""
    return (short.hex() for short in sorted(project.blobs))
