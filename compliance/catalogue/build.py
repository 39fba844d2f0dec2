"""Build ``blobs.bin`` and ``covered.json`` from the upstream projects' git histories.

One command, run when a project is added to ``vendored.yaml`` (or upstream releases)::

    python3 -m compliance.catalogue.build --mirrors /work/.mirror

For each catalogued repository (``https://github.com/OWNER/NAME`` is read from
``MIRRORS/OWNER+NAME/repo``, a bare clone with history, e.g. what the search tool's ``fetch``
brings; ``--mirror URL=PATH`` names one elsewhere) it covers every release tag and every commit
reachable from them and from the default branch (pull-request refs and other branches are left
out: anyone can push a kernel to a pull request). A repository without a mirror keeps the blobs
and record it has in the shipped files.

Which blobs: every version of every file with a CUDA/PTX extension or at a signature path of the
project (``vendored.yaml``: evidence that a directory is a copy), and every version of any
other file (C/C++ included) in which the checker's own kernel scan finds something (read as a file
at one of the blob's paths is read; ``ANCHORS`` and the run-time compilers' expressions filter
first). A file only a setup.py names, with nothing the scan reports, is not catalogued. Ids are
computed after CRLF->LF, the way the walk hashes native files.
A blob the mirror lacks (``git rev-list --missing=print``: a partial clone leaves out large
blobs) is still catalogued: its id and paths come from the trees that name it, and since its
content cannot be read it is kept whatever its kind, under its raw id (a CRLF variant of it is
not known); ``covered.json`` lists those ids.

Only git's command line is used (no gitpython), and only when this module runs.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compliance.blob_catalogue import (
    ID_BYTES,
    MAX_RELEASES,
    NO_RELEASE,
    ProjectBlobs,
    decode,
    encode,
    shipped_path,
)
from compliance.blobs import normalized_blob_hash
from compliance.inventory import C_SOURCE_EXTENSIONS
from compliance.recognisers import MARKERS, scan_markers
from compliance.vendored_trees import load_catalogue

CATALOGUED_EXTENSIONS = frozenset({".cu", ".cuh", ".ptx"})
"""Files catalogued in every version whatever their content (CUDA: every one is native code)."""
ANCHORS = re.compile(rb"__glo|__location__|__annotate__|__device__|__attribute__|triton|numba|cupy|RawKernel|RawModule|"
                     rb"ElementwiseKernel|ReductionKernel|jiterator|load_inline|cpp_extension|nvrtc|NVRTC|"
                     rb"PYBIND11|TORCH_LIBRARY|extension\.h|\.entry|asm|SourceModule|cuda\.jit|Extension\(")
"""Content that makes any other file (C/C++ included) catalogued: a superset of what the kernel scan
reports, spelled broadly (a C++ file without any of these holds no kernel the scan could report)."""
RUNTIME_COMPILERS = tuple(m for m in MARKERS if m.name in ("tvm", "mxnet-rtc"))
"""Run-time compile families whose literals (``tvm``, ``rtc``) are too common to be anchors (every
TVM file says ``tvm``): their own expressions (or alias imports) are the anchor."""
MAX_READ_BYTES = 8 * 1024 * 1024
"""Larger blobs are catalogued by extension alone (their content is not read)."""
COVERED_NAME = "covered.json"
"""The record of covered commits, next to ``blobs.bin``."""
_NULL = "0" * 40


@dataclass
class _Blob:
    paths: set[str] = field(default_factory=set)
    first: int = NO_RELEASE
    last: int = NO_RELEASE


def _git(git_dir: Path, *args: str, data: bytes | None = None) -> bytes:
    result = subprocess.run(["git", f"--git-dir={git_dir}", *args], input=data, capture_output=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:3])} in {git_dir}: {result.stderr.decode(errors='replace')}")
    return result.stdout


def _releases(git_dir: Path) -> list[tuple[str, str]]:
    """(tag, commit) of every tag naming a commit, oldest commit first (the newest ``MAX_RELEASES``)."""
    out = _git(git_dir, "for-each-ref", "--format=%(refname:strip=2)%00%(*objectname)%00%(objectname)"
               "%00%(*objecttype)%00%(objecttype)%00%(creatordate:unix)", "refs/tags")
    tags = []
    for line in out.decode().splitlines():
        name, peeled, target, peeled_type, target_type, _ = line.split("\0")
        commit = peeled if peeled_type == "commit" else target if target_type == "commit" else None
        if commit:
            tags.append((name, commit))
    if not tags:
        return []
    dates = dict(line.split() for line in _git(git_dir, "show", "-s", "--format=%H %ct", *{c for _, c in tags})
                 .decode().splitlines())
    tags.sort(key=lambda t: (int(dates[t[1]]), t[0]))
    return tags[-MAX_RELEASES:]


def _default_head(git_dir: Path) -> tuple[str, str]:
    ref = _git(git_dir, "symbolic-ref", "HEAD").decode().strip()
    return ref, _git(git_dir, "rev-parse", ref).decode().strip()


def _history_entries(git_dir: Path, revs: Sequence[str]) -> Iterator[tuple[str, str, str]]:
    """(mode, blob id, path) of every file version any covered commit introduced."""
    out = _git(git_dir, "log", "--format=", "--raw", "-z", "--no-renames", "--no-abbrev", "-m", "--root",
               *revs, "--")
    tokens = out.split(b"\0")
    index = 0
    while index < len(tokens):
        meta = tokens[index].lstrip(b"\n")
        index += 1
        if not meta.startswith(b":"):
            continue
        path = tokens[index].decode("utf-8", "surrogateescape")
        index += 1
        fields = meta[1:].split()
        new_mode, new_sha = fields[1].decode(), fields[3].decode()
        if new_sha != _NULL:
            yield new_mode, new_sha, path


def _tree_entries(git_dir: Path, commit: str) -> Iterator[tuple[str, str, str]]:
    for record in _git(git_dir, "ls-tree", "-r", "-z", "--full-tree", commit).split(b"\0"):
        if record:
            meta, _, path = record.partition(b"\t")
            mode, _, sha = meta.decode().split()
            yield mode, sha, path.decode("utf-8", "surrogateescape")


def _is_file(mode: str) -> bool:
    return mode.startswith("100")  # regular files; links (120000) and submodules (160000) hold no code


def _extension(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def _contents(git_dir: Path, shas: Sequence[str]) -> Iterator[tuple[str, bytes | None, int | None]]:
    """(sha, content or None, size or None for missing) in order; content None when too large."""
    proc = subprocess.Popen(["git", f"--git-dir={git_dir}", "cat-file", "--batch"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    stdin = proc.stdin

    def feed() -> None:
        for sha in shas:
            stdin.write(sha.encode() + b"\n")
        stdin.close()

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    for sha in shas:
        head = proc.stdout.readline().split()
        if len(head) < 3:  # "<sha> missing"
            yield sha, None, None
            continue
        size = int(head[2])
        data = proc.stdout.read(size)
        proc.stdout.read(1)
        yield sha, (data if size <= MAX_READ_BYTES else None), size
    writer.join()
    proc.wait()


def _kernel_capable(data: bytes, paths: Iterable[str]) -> bool:
    """The checker's kernel scan reports something in the blob, read as a file at one of ``paths``
    is read (C, C++ and CUDA as the compiler reads them); ``ANCHORS`` first, a cheap superset."""
    if ANCHORS.search(data) is None and not any(
            found is not None and found.search(data) for m in RUNTIME_COMPILERS for found in (m.pattern, m.alias)):
        return False
    return bool(scan_markers(data, any(_extension(p) in C_SOURCE_EXTENSIONS for p in paths)))


def _signature_paths(repository: str) -> frozenset[str]:
    """The signature files of the repository's catalogue entries: catalogued whatever they hold, as
    evidence that a directory holding them is a copy."""
    return frozenset(s for e in load_catalogue() if e.repository == repository for s in e.signature
                     if not s.endswith("/"))


def build_project(repository: str, git_dir: Path) -> tuple[ProjectBlobs, dict[str, object]]:
    """The catalogue of one repository and the record of what it covered."""
    releases = _releases(git_dir)
    signature = _signature_paths(repository)
    head_ref, head = _default_head(git_dir)
    revs = [head, *sorted({c for _, c in releases})]
    paths_of: dict[str, set[str]] = {}
    for mode, sha, path in _history_entries(git_dir, revs):
        if _is_file(mode):
            paths_of.setdefault(sha, set()).add(path)
    spans: dict[str, list[int]] = {}
    for index, (_, commit) in enumerate(releases):
        for mode, sha, path in _tree_entries(git_dir, commit):
            if _is_file(mode):
                paths_of.setdefault(sha, set()).add(path)
                span = spans.setdefault(sha, [index, index])
                span[1] = index
    blobs: dict[bytes, _Blob] = {}
    missing: list[str] = []
    for sha, data, size in _contents(git_dir, sorted(paths_of)):
        paths = paths_of[sha]
        by_extension = any(_extension(p) in CATALOGUED_EXTENSIONS or p in signature for p in paths)
        if size is None:
            missing.append(sha)
            key = sha
        elif data is None:
            if not by_extension:
                continue
            key = sha
        else:
            if not by_extension and not _kernel_capable(data, paths):
                continue
            key = normalized_blob_hash(data)
        entry = blobs.setdefault(bytes.fromhex(key[:2 * ID_BYTES]), _Blob())
        entry.paths |= paths
        if sha in spans:
            first, last = spans[sha]
            entry.first = first if entry.first == NO_RELEASE else min(entry.first, first)
            entry.last = last if entry.last == NO_RELEASE else max(entry.last, last)
    all_paths = sorted({p for b in blobs.values() for p in b.paths})
    path_index = {p: i for i, p in enumerate(all_paths)}
    project = ProjectBlobs(repository, tuple(name for name, _ in releases), tuple(all_paths),
                           {k: (tuple(sorted(path_index[p] for p in b.paths)), b.first, b.last)
                            for k, b in blobs.items()})
    record = {"default_branch": head_ref, "head": head, "tags": {name: commit for name, commit in releases},
              "commits": len(_git(git_dir, "rev-list", *revs, "--").split()),
              "blobs": len(project.blobs), "paths": len(all_paths), "missing_blobs": sorted(missing)}
    return project, record


def mirror_of(repository: str, mirrors: Path) -> Path | None:
    """``MIRRORS/OWNER+NAME/repo`` for a GitHub repository, when it exists."""
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?", repository)
    if match is None:
        return None
    path = mirrors / f"{match[1]}+{match[2]}" / "repo"
    return path if path.is_dir() else None


def catalogued_repositories() -> list[str]:
    """Every repository ``vendored.yaml`` names, once, in its order."""
    return list(dict.fromkeys(entry.repository for entry in load_catalogue()))


def build(repositories: Iterable[str], located: dict[str, Path], previous: dict[str, ProjectBlobs],
          previous_record: dict[str, object], log: bool = False) -> tuple[bytes, str]:
    """(``blobs.bin`` bytes, ``covered.json`` text); a repository without a mirror keeps ``previous``."""
    projects, record = [], {}
    for repository in repositories:
        git_dir = located.get(repository)
        if git_dir is None:
            if repository in previous:
                projects.append(previous[repository])
                record[repository] = previous_record.get(repository, {})
            elif log:
                print(f"{repository}: no mirror, not catalogued", file=sys.stderr)
            continue
        project, covered = build_project(repository, git_dir)
        if log:
            print(f"{repository}: {covered['commits']} commits, {len(project.versions)} releases, "
                  f"{len(project.blobs)} blobs, {len(project.paths)} paths, "
                  f"{len(covered['missing_blobs'])} missing", file=sys.stderr)  # type: ignore[arg-type]
        projects.append(project)
        record[repository] = covered
    text = json.dumps({"id_bytes": ID_BYTES, "repositories": record}, indent=0, sort_keys=True) + "\n"
    return encode(projects), text


def main(argv: Sequence[str] | None = None) -> int:
    """Rebuild the shipped ``blobs.bin`` and ``covered.json``."""
    parser = argparse.ArgumentParser(prog="python3 -m compliance.catalogue.build", description=__doc__.split("\n")[0])
    parser.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"),
                        help="directory of OWNER+NAME/repo git mirrors")
    parser.add_argument("--mirror", action="append", default=[], metavar="URL=PATH",
                        help="the git directory of one repository (repeatable)")
    parser.add_argument("--out", type=Path, default=shipped_path().parent, help="where to write both files")
    args = parser.parse_args(argv)
    repositories = catalogued_repositories()
    located = {r: p for r in repositories if (p := mirror_of(r, args.mirrors)) is not None}
    for item in args.mirror:
        url, _, path = item.partition("=")
        located[url] = Path(path)
    out_bin, out_record = args.out / "blobs.bin", args.out / COVERED_NAME
    previous = {p.id: p for p in decode(out_bin.read_bytes())} if out_bin.exists() else {}
    previous_record = json.loads(out_record.read_text())["repositories"] if out_record.exists() else {}
    data, record = build(repositories, located, previous, previous_record, log=True)
    out_bin.write_bytes(data)
    out_record.write_text(record)
    print(f"wrote {out_bin} ({len(data)} bytes) and {out_record}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
