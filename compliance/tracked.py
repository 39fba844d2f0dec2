"""The files git tracks in a repository, copied out: what a commit or a push submits.

A submitter's CI (pre-commit, a GitHub workflow) checks a git checkout. Its working tree also
holds what git ignores or does not track (a local build's ``.so`` files, caches) and the
repository's own ``.git``: none of it is submitted, so none of it should be judged.
:func:`tracked_copy` writes the files the index lists under the directory given into a fresh
temporary directory, named like the repository's top directory (a tree of one organization is
named by its directory), and yields the copy of that directory.

The content is each index entry's blob as git stores it (``git ls-files --stage``, then ``git
cat-file --batch``): no checkout, so no smudge filter, hook or other command that the
repository's own configuration could name runs. Symbolic links are written as links (the checks
judge them), submodules are left out, and an entry whose path could leave the copy (``..``, an
absolute path, a ``.git`` component) is an input error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from compliance.errors import InputError

GIT_TIMEOUT_S = 600
"""Longest a git command that returns at once may take."""
_HARDENING = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")
"""No fsmonitor command and no hooks from the repository's configuration."""
_REGULAR, _EXECUTABLE, _SYMLINK = "100644", "100755", "120000"


def _command(path: Path, *args: str) -> list[str]:
    if shutil.which("git") is None:
        raise InputError("--tracked needs git, which is not installed", path)
    return ["git", *_HARDENING, "-C", str(path), *args]


def _environment() -> dict[str, str]:
    return {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}


def _git(path: Path, *args: str) -> bytes:
    try:
        done = subprocess.run(_command(path, *args), capture_output=True, timeout=GIT_TIMEOUT_S, check=False,
                              env=_environment())
    except subprocess.TimeoutExpired as exc:
        raise InputError(f"git {args[0]} took longer than {GIT_TIMEOUT_S} s", path) from exc
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "backslashreplace").strip().splitlines()
        raise InputError(f"--tracked needs a git repository: git {args[0]} failed: "
                         f"{message[-1] if message else f'exit {done.returncode}'}", path)
    return done.stdout


def _entries(path: Path) -> list[tuple[str, str, str]]:
    """(mode, blob id, path relative to the repository's top) of each index entry under ``path``."""
    listing = _git(path, "ls-files", "--stage", "-z", "--full-name", "--", ".")
    entries = []
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, name = record.partition(b"\t")
        mode, blob, _stage = meta.decode("ascii").split()
        entries.append((mode, blob, name.decode("utf-8", "surrogateescape")))
    return entries


def _safe_relative(name: str, path: Path) -> Path:
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
        raise InputError(f"the git index names a path outside the repository's tree: {name!r}", path)
    return Path(*parts)


def _write_blobs(path: Path, wanted: list[tuple[str, str, Path]], export: Path) -> None:
    """Each (mode, blob, relative path) written under ``export`` from ``git cat-file --batch``."""
    process = subprocess.Popen(_command(path, "cat-file", "--batch"), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_environment())
    assert process.stdin is not None and process.stdout is not None

    def feed(stdin: IO[bytes]) -> None:
        try:
            stdin.write(b"".join(f"{blob}\n".encode() for _, blob, _ in wanted))
        finally:
            stdin.close()

    writer = threading.Thread(target=feed, args=(process.stdin,), daemon=True)
    writer.start()
    try:
        for mode, blob, rel in wanted:
            header = process.stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                raise InputError(f"git cat-file could not read the blob {blob} of {rel}", path)
            data = process.stdout.read(int(header[2]))
            process.stdout.read(1)  # the newline after each object
            target = export / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if mode == _SYMLINK:
                os.symlink(os.fsdecode(data), target)
            else:
                target.write_bytes(data)
                if mode == _EXECUTABLE:
                    target.chmod(0o755)
    finally:
        writer.join(timeout=GIT_TIMEOUT_S)
        process.stdout.close()
        process.wait(timeout=GIT_TIMEOUT_S)


@contextmanager
def tracked_copy(path: Path) -> Iterator[Path]:
    """A temporary copy of the files the git index tracks under ``path`` (a repository or a
    directory in one), laid out as under ``path``; removed when the block ends."""
    prefix = _git(path, "rev-parse", "--show-prefix").decode("utf-8", "surrogateescape").strip()
    top = Path(_git(path, "rev-parse", "--show-toplevel").decode("utf-8", "surrogateescape").strip())
    wanted = [(mode, blob, _safe_relative(name, path)) for mode, blob, name in _entries(path)
              if mode in (_REGULAR, _EXECUTABLE, _SYMLINK)]  # 160000: a submodule, not in this tree
    with tempfile.TemporaryDirectory(prefix="compliance-tracked-") as temporary:
        export = Path(temporary) / (top.name or "repository")
        export.mkdir()
        _write_blobs(path, wanted, export)
        yield export / prefix if prefix else export
