"""What the walk found in each file, kept between runs while the file is unchanged.

A file's entry is reused only when the file is the same one, unchanged: same root-relative path,
device, inode, size, modification time and status-change time (``st_ctime_ns``, which no user can
set: any write, rename or ``utime`` moves it to the present). Anything else is read and examined
again. The entries of one checked root are one JSON file under ``cachedir.SCAN`` (the operator's
cache, never inside the checked tree), named by a hash of the root's real path, and stamped with a
fingerprint of the code that decides a file's outcome (the tool's version and the bytes of the
modules that examine a file): a new version, or an edited recogniser, starts afresh. A cache that
cannot be read, or is not what this version writes, is ignored; one that cannot be written is
skipped. The cache only repeats what the same code found in the same bytes; it decides nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from compliance import __version__

FORMAT = 1
_EXAMINING_MODULES = ("recognisers.py", "preprocessor.py", "containers.py", "inventory.py", "setup_sources.py",
                      "scan_cache.py", "blobs.py", "vendored_trees.py")
"""Modules whose code decides what a file's entry holds."""

Entry = str | list[Any]
"""``stat_key`` alone (the file held nothing), or [``stat_key``, record]."""
Entries = dict[str, Entry]
"""Root-relative path -> entry (one string per file for most files: a round's 150,000 entries
stay a few tens of MB in memory)."""


@functools.cache
def fingerprint() -> str:
    """The tool's version and the bytes of every module that examines a file, hashed."""
    digest = hashlib.sha256(f"{FORMAT}:{__version__}".encode())
    here = Path(__file__).resolve().parent
    for name in _EXAMINING_MODULES:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes())
    return digest.hexdigest()


def stat_key(status: os.stat_result) -> str:
    """What must be equal for an entry to be reused: device, inode, size, mtime and ctime (ns)."""
    return f"{status.st_dev}:{status.st_ino}:{status.st_size}:{status.st_mtime_ns}:{status.st_ctime_ns}"


def make_entry(key: str, record: dict[str, Any] | None) -> Entry:
    """The entry of a file whose examination recorded ``record``."""
    return key if record is None else [key, record]


def entry_record(entry: Entry, key: str) -> tuple[bool, dict[str, Any] | None]:
    """(whether ``entry`` was made from the file ``key`` describes, its record)."""
    if isinstance(entry, str):
        return entry == key, None
    return entry[0] == key, entry[1]


def cache_path(directory: Path, root: Path) -> Path:
    """The file holding the entries of ``root``."""
    name = hashlib.sha256(os.fsencode(os.path.realpath(root))).hexdigest()[:32]
    return directory / f"{name}.json"


def load(path: Path) -> Entries:
    """The entries stored at ``path`` (empty when absent, unreadable or not this version's)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint():
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {rel: entry for rel, entry in entries.items()
            if isinstance(entry, str) or (isinstance(entry, list) and len(entry) == 2
                                          and isinstance(entry[0], str) and isinstance(entry[1], dict))}


def save(path: Path, entries: Entries) -> None:
    """Replace the entries at ``path`` (atomically; a failure to write is no error)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, suffix=".tmp",
                                         delete=False) as handle:
            json.dump({"fingerprint": fingerprint(), "entries": entries}, handle, separators=(",", ":"))
        os.replace(handle.name, path)
    except OSError:
        try:
            os.unlink(handle.name)
        except (OSError, UnboundLocalError):
            pass
