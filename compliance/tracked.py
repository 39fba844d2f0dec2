"""The files git tracks in a repository, copied out: what a commit or a push submits.

A submitter's CI (pre-commit, a GitHub workflow) checks a git checkout. Its working tree also
holds what git ignores or does not track (a local build's ``.so`` files, caches) and the
repository's own ``.git``: none of it is submitted, so none of it should be judged.
:func:`tracked_copy` writes the index's files under the directory given (git itself writes
them: ``git checkout-index``, which takes content from the index, never from the working tree,
and skips submodules) into a fresh temporary directory, under the repository's own directory
name (a tree of one organization is named by its directory), and yields the copy of that directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from compliance.errors import InputError

GIT_TIMEOUT_S = 600
"""Longest a git command may take (a large index is written in seconds)."""


def _git(path: Path, *args: str, stdin: bytes | None = None) -> bytes:
    if shutil.which("git") is None:
        raise InputError("--tracked needs git, which is not installed", path)
    # No hooks, pager or configured external tools: the repository is the submitter's.
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1"}
    try:
        done = subprocess.run(["git", "-C", str(path), *args], input=stdin, capture_output=True,
                              timeout=GIT_TIMEOUT_S, check=False, env=env)
    except subprocess.TimeoutExpired as exc:
        raise InputError(f"git {args[0]} took longer than {GIT_TIMEOUT_S} s", path) from exc
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "backslashreplace").strip().splitlines()
        raise InputError(f"--tracked needs a git repository: git {args[0]} failed: "
                         f"{message[-1] if message else f'exit {done.returncode}'}", path)
    return done.stdout


@contextmanager
def tracked_copy(path: Path) -> Iterator[Path]:
    """A temporary copy of the files the git index tracks under ``path`` (a repository or a
    directory in one), laid out as under ``path``; removed when the block ends."""
    prefix = _git(path, "rev-parse", "--show-prefix").decode("utf-8", "surrogateescape").strip()
    names = _git(path, "ls-files", "-z", "--cached", "--", ".")
    with tempfile.TemporaryDirectory(prefix="compliance-tracked-") as temporary:
        # The copy keeps the repository's directory name: a tree of one organization is named by it.
        top = Path(_git(path, "rev-parse", "--show-toplevel").decode("utf-8", "surrogateescape").strip())
        export = Path(temporary) / (top.name or "repository")
        export.mkdir()
        if names:
            _git(path, "checkout-index", "-z", "--stdin", f"--prefix={export}/", stdin=names)
        yield export / prefix if prefix else export
