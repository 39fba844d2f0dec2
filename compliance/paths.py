"""Root-relative POSIX path helpers shared by the inventory, checks and stages."""

from __future__ import annotations

import os
from pathlib import Path


def parent_dir(relpath: str) -> str:
    """Directory part of a root-relative path (``""`` for a file at the root)."""
    return relpath.rsplit("/", 1)[0] if "/" in relpath else ""


def tree_relative(base: str, relpath: str) -> str | None:
    """``base/relpath`` normalised, or None when it is absolute or climbs out of the tree."""
    if relpath.startswith("/") or os.path.isabs(relpath):
        return None
    joined = os.path.normpath(f"{base}/{relpath}" if base else relpath).replace(os.sep, "/")
    return None if joined == ".." or joined.startswith("../") else joined


def is_inside(path: Path, root: Path) -> bool:
    """True when ``path`` is ``root`` or lies under it (both resolved, links followed)."""
    resolved, top = os.path.realpath(path), os.path.realpath(root)
    return resolved == top or resolved.startswith(top.rstrip(os.sep) + os.sep)
