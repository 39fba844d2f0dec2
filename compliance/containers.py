"""Containers opened and judged by their members: zip (wheels, eggs, Office documents, PyTorch
tensor archives), tar with or without compression, gzip/bzip2/xz (and zstd where the
``zstandard`` module is installed), and ``ar`` archives (``.deb`` packages, static libraries).

A container is a binary only when a member is one (ELF, Mach-O, PE, cubin, fatbin, an ELF
behind a prefix or in base64), at any nesting depth; every other member is examined like a file of
the tree (kernel markers, hidden binaries), so a CUDA source in a pure-Python wheel is kernel code.
Documents, tensors, images and data hold neither and are data.

Everything is bounded: nesting depth, members, bytes expanded in all (a member is read in chunks;
a nested zip is held in memory up to ``MAX_NESTED_BYTES``). Past a bound the container is
``over_limit`` (the walk reports it ``path-unscanned``); a container that cannot be opened at all
(corrupt, encrypted, 7z, zstd without the module) stays an opaque archive, a binary finding as
before. Nothing is extracted to disk and no member name is used as a path.
"""

from __future__ import annotations

import bz2
import io
import lzma
import os
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, cast

from compliance import recognisers
from compliance.blobs import normalized_blob_hash
from compliance.recognisers import binary_kind, embedded_binary

CONTAINER_KINDS = ("zip", "gzip", "bzip2", "xz", "zstd", "tar", "ar-archive")
"""Binary kinds whose members are examined instead of the container being judged as a whole."""
MAX_DEPTH = 4
"""Containers inside containers, deepest level opened (a wheel in a tarball in a .deb is 3)."""
MAX_MEMBERS = 50_000
"""Members examined per outermost container, all levels together."""
MAX_EXPANDED_BYTES = 1024 * 1024 * 1024
"""Bytes read out of one outermost container in all (as large as the largest file scanned)."""
MAX_NESTED_BYTES = 256 * 1024 * 1024
"""Largest nested zip held in memory to be opened (zip needs random access)."""
CHUNK_BYTES = 8 * 1024 * 1024
SEPARATOR = "!/"
"""Between a container's path and a member's name in reported paths (``dist/x.whl!/pkg/k.cu``)."""
_TAR_MAGIC_AT = 257
_CUDA_SUFFIXES = (".cu", ".cuh", ".ptx")
_DATA_SUFFIXES = (".json", ".log", ".csv", ".txt", ".pbtxt")


class OverLimit(Exception):
    """A bound was reached: the container cannot be examined whole."""


@dataclass
class Contents:
    """What one container holds, member by member (names joined with ``SEPARATOR`` when nested)."""

    kind: str
    """The container's own kind."""
    binaries: list[tuple[str, str]] = field(default_factory=list)
    """(member, binary kind) of every compiled member."""
    sources: list[tuple[str, list[tuple[str, int]], str | None]] = field(default_factory=list)
    """(member, kernel markers with lines, normalised blob hash or None) of members with kernel code."""
    unopened: str | None = None
    """Why the container (or a nested one) could not be opened: it stays an opaque archive."""
    over_limit: str | None = None
    """The bound that stopped the examination (reported ``path-unscanned``)."""
    members: int = 0
    expanded: int = 0


def container_kind(head: bytes) -> str | None:
    """The container kind of a stream starting with ``head`` (``tar`` by its ustar magic), or None."""
    kind = binary_kind(head[:64])
    if kind in CONTAINER_KINDS:
        return kind
    if head[_TAR_MAGIC_AT:_TAR_MAGIC_AT + 5] == b"ustar":
        return "tar"
    return None


def _safe_name(name: str) -> str:
    """A member name as reported: no empty, ``.`` or ``..`` component (never used as a path)."""
    parts = [p if p != ".." else "(..)" for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts) or "(unnamed)"


class _Reader:
    """Reads members within the bounds of one outermost container."""

    def __init__(self, contents: Contents) -> None:
        self.contents = contents

    def count_member(self) -> None:
        self.contents.members += 1
        if self.contents.members > MAX_MEMBERS:
            raise OverLimit(f"more than {MAX_MEMBERS} members")

    def read(self, stream: IO[bytes], size: int) -> bytes:
        data = stream.read(size)
        self.contents.expanded += len(data)
        if self.contents.expanded > MAX_EXPANDED_BYTES:
            raise OverLimit(f"expands past {MAX_EXPANDED_BYTES >> 20} MiB")
        return data

    def member(self, name: str, stream: IO[bytes], depth: int) -> None:
        """Examine one member (a leaf, or a container opened one level deeper)."""
        self.count_member()
        first = self.read(stream, CHUNK_BYTES)
        kind = container_kind(first)
        if kind is not None:
            if depth >= MAX_DEPTH:
                raise OverLimit(f"containers nested deeper than {MAX_DEPTH}")
            rejoined = io.BufferedReader(_Rejoined(first, stream), CHUNK_BYTES)
            self.container(kind, name, name.rsplit("/", 1)[-1], rejoined, depth + 1)
            return
        found = binary_kind(first[:64])
        if found is not None:
            self.contents.binaries.append((name, found))
            return
        self.leaf(name, first, stream)

    def leaf(self, name: str, first: bytes, stream: IO[bytes]) -> None:
        """A member that is no container and starts like no binary: scanned like a file of the tree."""
        is_data = name.lower().endswith(_DATA_SUFFIXES)
        scanner = recognisers.MarkerScanner(recognisers.DATA_MARKER_SET if is_data else recognisers.CODE_MARKERS)
        base64_too = not is_data or len(first) <= recognisers.DATA_BASE64_LIMIT
        whole = first if len(first) < CHUNK_BYTES else None
        embedded = scan_windows(lambda n: self.read(stream, n), first, scanner, base64_too)
        if embedded is not None:
            self.contents.binaries.append((name, embedded))
            return
        markers = scanner.markers()
        if name.lower().endswith(_CUDA_SUFFIXES):
            markers = [("extension-file", 0), *markers]
        if markers:
            self.contents.sources.append((name, markers, normalized_blob_hash(whole) if whole is not None else None))

    def container(self, kind: str, name: str, filename: str, stream: IO[bytes], depth: int) -> None:
        """Examine the members of the container ``name`` (empty for the tree's own file, called
        ``filename``)."""
        prefix = f"{name}{SEPARATOR}" if name else ""
        if kind == "zip":
            self.zip_members(prefix, stream, depth)
        elif kind == "tar":
            self.tar_members(prefix, stream, depth)
        elif kind == "ar-archive":
            self.ar_members(prefix, stream, depth)
        else:
            opened = _decompressor(kind, stream)
            if opened is None:
                raise _Unopened(f"{kind} stream (no decompressor for it here)")
            self.member(f"{prefix}{_inner_name(filename)}", opened, depth)

    def zip_members(self, prefix: str, stream: IO[bytes], depth: int) -> None:
        seekable = stream if _seekable(stream) else io.BytesIO(self._whole(stream))
        with zipfile.ZipFile(seekable) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                if info.flag_bits & 0x1:
                    raise _Unopened(f"encrypted member {_safe_name(info.filename)}")
                with archive.open(info) as member:
                    self.member(prefix + _safe_name(info.filename), member, depth)

    def tar_members(self, prefix: str, stream: IO[bytes], depth: int) -> None:
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for info in archive:
                if not info.isfile():
                    self.count_member()
                    continue
                member = archive.extractfile(info)
                if member is not None:
                    self.member(prefix + _safe_name(info.name), member, depth)

    def ar_members(self, prefix: str, stream: IO[bytes], depth: int) -> None:
        """An ``ar`` archive (``.deb``, ``.a``): 60-byte headers, GNU long names from ``//``."""
        if self.read(stream, 8) != b"!<arch>\n":
            raise _Unopened("not an ar archive")
        long_names = b""
        while True:
            header = self.read(stream, 60)
            if len(header) < 60:
                return
            raw_name, size_text = header[:16].rstrip(b" "), header[48:58].strip()
            if not size_text.isdigit() or header[58:60] != b"`\n":
                raise _Unopened("damaged ar member header")
            size = int(size_text)
            if raw_name in (b"/", b"/SYM64/"):  # the symbol table
                self.read(stream, size + size % 2)
                continue
            if raw_name == b"//":
                long_names = self.read(stream, size + size % 2)
                continue
            name = raw_name
            if raw_name.startswith(b"/") and raw_name[1:].isdigit():
                start = int(raw_name[1:])
                name = long_names[start:long_names.find(b"/\n", start)] if start < len(long_names) else raw_name
            bounded = _Bounded(stream, size)
            self.member(prefix + _safe_name(name.rstrip(b"/").decode("utf-8", "replace")),
                        io.BufferedReader(bounded, CHUNK_BYTES), depth)
            bounded.skip_rest(self)
            if size % 2:
                self.read(stream, 1)

    def _whole(self, stream: IO[bytes]) -> bytes:
        data = self.read(stream, MAX_NESTED_BYTES + 1)
        if len(data) > MAX_NESTED_BYTES:
            raise OverLimit(f"a nested zip larger than {MAX_NESTED_BYTES >> 20} MiB")
        return data


class _Unopened(Exception):
    """The container (or one inside it) cannot be opened: it stays an opaque archive."""


class _Rejoined(io.RawIOBase):
    """A member's stream with its first chunk (already read to tell its kind) put back in front."""

    def __init__(self, first: bytes, rest: IO[bytes]) -> None:
        self.first, self.rest, self.offset = first, rest, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        wanted = len(buffer)
        if self.offset < len(self.first):
            piece = self.first[self.offset:self.offset + wanted]
        else:
            piece = self.rest.read(wanted)
        self.offset += len(piece)
        buffer[:len(piece)] = piece
        return len(piece)


class _Bounded(io.RawIOBase):
    """The next ``size`` bytes of a stream (one ``ar`` member)."""

    def __init__(self, stream: IO[bytes], size: int) -> None:
        self.stream, self.left = stream, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        piece = self.stream.read(min(len(buffer), self.left))
        self.left -= len(piece)
        buffer[:len(piece)] = piece
        return len(piece)

    def skip_rest(self, reader: _Reader) -> None:
        while self.left > 0:
            piece = reader.read(self.stream, min(self.left, CHUNK_BYTES))
            if not piece:
                return
            self.left -= len(piece)


def _seekable(stream: IO[bytes]) -> bool:
    """Only the tree's own file is opened in place; a nested zip is read into memory first."""
    return isinstance(stream, io.BufferedReader) and isinstance(stream.raw, io.FileIO)


def _decompressor(kind: str, stream: IO[bytes]) -> IO[bytes] | None:
    if kind == "gzip":
        import gzip
        return cast(IO[bytes], gzip.GzipFile(fileobj=stream))
    if kind == "bzip2":
        return bz2.BZ2File(stream)
    if kind == "xz":
        return lzma.LZMAFile(stream)
    if kind == "zstd":
        try:
            import zstandard  # type: ignore[import-not-found]
        except ImportError:
            return None
        reader: IO[bytes] = zstandard.ZstdDecompressor().stream_reader(stream)
        return reader
    return None


def _inner_name(name: str) -> str:
    """What a single compressed stream holds: ``x.tar`` for ``x.tar.gz``/``x.tgz``, ``x`` for ``x.gz``."""
    lower = name.lower()
    for suffix, replacement in ((".tgz", ".tar"), (".tbz2", ".tar"), (".txz", ".tar"), (".gz", ""), (".bz2", ""),
                                (".xz", ""), (".zst", "")):
        if lower.endswith(suffix):
            return name[:-len(suffix)] + replacement
    return f"{name} (content)"


def scan_windows(read: Callable[[int], bytes], first: bytes, scanner: recognisers.MarkerScanner,
                 base64_too: bool) -> str | None:
    """Scan a stream whose first chunk is ``first`` and whose next chunks ``read`` gives, in windows
    that overlap by ``recognisers.OVERLAP`` bytes (nothing across an edge is missed). Returns the kind
    of binary hidden in it, if any."""
    window, lines_before, embedded = first, 0, None
    while True:
        scanner.scan(window, lines_before)
        embedded = embedded or embedded_binary(window, window is first, base64_too)
        more = read(CHUNK_BYTES) if len(first) >= CHUNK_BYTES or window is not first else b""
        if not more:
            return embedded
        lines_before += window.count(b"\n", 0, max(0, len(window) - recognisers.OVERLAP))
        window = window[-recognisers.OVERLAP:] + more


def examine_container(kind: str, handle: IO[bytes], name: str) -> Contents:
    """Open the container ``handle`` (of ``kind``, its file called ``name``) and examine every member."""
    contents = Contents(kind)
    reader = _Reader(contents)
    try:
        reader.container(kind, "", name, handle, 1)
    except OverLimit as exc:
        contents.over_limit = str(exc)
    except _Unopened as exc:
        contents.unopened = str(exc)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, tarfile.TarError, lzma.LZMAError, zlib.error,
            struct.error, NotImplementedError, RuntimeError) as exc:
        contents.unopened = f"cannot be read as {kind}: {type(exc).__name__}"
    return contents


def member_path(container: str, member: str) -> str:
    """The reported path of ``member`` inside the tree file ``container``."""
    return f"{container}{SEPARATOR}{member}"


def open_file(fd: int) -> IO[bytes]:
    """A buffered, seekable reader on an open file descriptor (its own copy, read from the start)."""
    handle = os.fdopen(os.dup(fd), "rb")
    handle.seek(0)
    return handle
