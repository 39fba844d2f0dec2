"""Synthetic upstream histories of many commits, written with one ``git fast-import``.

Commit k (0-based) rewrites two files (``src/f{k % files}.cu`` and
``include/h{(3 * k) % files}.h``), adds ``extra/x{k}.txt`` every 7th commit
and removes the one added 14 commits earlier; every 10th commit is tagged
``v0.<k>``. The file set at any commit is known without git, so tests can
write a copy of commit k and know what ``identify`` must answer.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

GIT_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin:/usr/local/bin"}


def _changes(k: int, files: int) -> Iterator[tuple[str, str | None]]:
    """(path, new content or None for a deletion) of commit ``k``."""
    if k == 0:
        for i in range(files):
            yield f"src/f{i}.cu", f"// f{i} v0\n__global__ void f{i}() {{}}\n"
            yield f"include/h{i}.h", f"#pragma once\n// h{i} v0\n"
        yield "README.md", "synthetic upstream\n"
        return
    yield f"src/f{k % files}.cu", f"// f{k % files} v{k}\n__global__ void f{k % files}() {{ /* {k} */ }}\n"
    yield f"include/h{(3 * k) % files}.h", f"#pragma once\n// h{(3 * k) % files} v{k}\n"
    if k % 7 == 0:
        yield f"extra/x{k}.txt", f"extra {k}\n"
        if k >= 14:
            yield f"extra/x{k - 14}.txt", None


@dataclass(frozen=True)
class History:
    """A built repository and the file contents at the commits asked for."""

    path: Path
    """The (bare) repository."""
    commits: tuple[str, ...]
    """Commit ids, commit k at index k."""
    snapshots: dict[int, dict[str, str]]
    """k -> path -> content, for the commits given to ``build_history``."""


def _data(text: bytes) -> bytes:
    return b"data %d\n" % len(text) + text + b"\n"


def build_history(path: Path, commits: int, files: int = 20, snapshots: tuple[int, ...] = ()) -> History:
    """A bare repository of ``commits`` commits on ``main`` (see the module docstring)."""
    subprocess.run(["git", "init", "--bare", "-q", "-b", "main", str(path)], check=True, env=GIT_ENV)
    stream = bytearray()
    state: dict[str, str] = {}
    kept: dict[int, dict[str, str]] = {}
    for k in range(commits):
        stream += b"commit refs/heads/main\nmark :%d\n" % (k + 1)
        stream += b"committer Up Stream <up@example.com> %d +0000\n" % (1_600_000_000 + 60 * k)
        stream += _data(b"commit %d" % k)
        if k:
            stream += b"from :%d\n" % k
        for rel, content in _changes(k, files):
            if content is None:
                stream += b"D %s\n" % rel.encode()
                state.pop(rel, None)
            else:
                stream += b"M 100644 inline %s\n" % rel.encode() + _data(content.encode())
                state[rel] = content
        if k % 10 == 0:
            stream += b"reset refs/tags/v0.%d\nfrom :%d\n\n" % (k, k + 1)
        if k in snapshots:
            kept[k] = dict(state)
    marks = path / "marks"
    subprocess.run(["git", f"--git-dir={path}", "fast-import", "--quiet", f"--export-marks={marks}"],
                   input=bytes(stream), check=True, env=GIT_ENV)
    ids = dict(line.split(" ") for line in marks.read_text().splitlines())
    marks.unlink()
    return History(path, tuple(ids[f":{k + 1}"] for k in range(commits)), kept)


def write_copy(directory: Path, files: dict[str, str]) -> Path:
    """Write ``files`` under ``directory``."""
    for rel, content in files.items():
        target = directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    return directory
