"""What the kernel's process may see and what it may leave behind (the verifier's side; no torch).

* ``kernel_environment``: an allowlisted environment for every process that runs or builds submission
  code: what compilers, CUDA and Python need, nothing else (no operator secrets, no variable of this
  tool: the kernel cannot tell a verification from a plain run by its environment).
* ``scrub``: the operator's environment values that the kernel's process was *not* given, replaced
  by ``$NAME`` in any text that came from that process (exception messages, log excerpts), because
  it can still read them elsewhere (``/proc/<pid>/environ`` of its ancestors).
* ``Reaper``: this process becomes a child subreaper, so that a daemon the kernel forks (double
  fork, ``setsid``) is reparented here rather than to init; every descendant that appeared during a
  kernel's run is killed when the run ends.
* ``TreeSnapshot``: the checked tree's files before and after a kernel's run.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ALLOWED_VARIABLES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
    "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
    "CC", "CXX", "CUDAHOSTCXX", "MAX_JOBS", "TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "CUDA_PATH", "CUDA_ROOT",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_MODULE_LOADING", "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED",
    "VIRTUAL_ENV", "CONDA_PREFIX", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS", "XDG_CACHE_HOME",
})
"""Variables passed on as they are: the toolchain's and the device's settings, and the machine's
safety settings (KINDS.md's multicast switches)."""
ALLOWED_PREFIXES = ("LC_",)
"""Locale variables."""
SCRUB_MIN_LENGTH = 6
"""Shorter values ("1", "true", "dev") are words, not secrets; replacing them would garble messages."""


def code_root() -> Path:
    """The directory holding this tool's ``compliance`` package (the kernel's process imports the
    verifier's own code from there, never from the checked tree)."""
    return Path(__file__).resolve().parents[2]


def kernel_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that builds or runs submission code."""
    source = os.environ if environ is None else environ
    env = {k: v for k, v in source.items() if k in ALLOWED_VARIABLES or k.startswith(ALLOWED_PREFIXES)}
    env["PYTHONPATH"] = str(code_root())
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def scrub(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with the value of every operator variable the kernel was not given replaced by ``$NAME``
    (longest values first, so that a value containing another is replaced whole)."""
    source = os.environ if environ is None else environ
    given = kernel_environment(source)
    secrets = sorted(((k, v) for k, v in source.items() if k not in given and len(v.strip()) >= SCRUB_MIN_LENGTH),
                     key=lambda kv: -len(kv[1]))
    for name, value in secrets:
        if value in text:
            text = text.replace(value, f"${name}")
    return text


def _children_map() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """Every living descendant of ``pid``."""
    if not Path("/proc").is_dir():
        return []
    tree, out, todo = _children_map(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


_PR_SET_CHILD_SUBREAPER = 36


@dataclass
class Reaper:
    """Kills, at the end of a kernel's run, every process that appeared under this one during it."""

    before: frozenset[int]
    """Descendants this process already had (not ours to kill: e.g. the test runner's)."""
    subreaper: bool
    """Whether orphans are reparented here (Linux); without it a detached daemon may escape."""

    @classmethod
    def start(cls) -> Reaper:
        """Become a child subreaper (once per process; harmless to repeat) and remember the living children."""
        subreaper = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            except (OSError, AttributeError):
                subreaper = False
        return cls(frozenset(descendants(os.getpid())), subreaper)

    def kill_new(self, also: Iterable[int] = ()) -> list[int]:
        """SIGKILL every descendant that appeared since ``start`` (and ``also``), repeatedly until none is
        left (a process may fork while we kill), and reap them. Returns the pids killed."""
        killed: list[int] = []
        for _ in range(50):
            targets = [p for p in (*descendants(os.getpid()), *also) if p not in self.before and p not in killed]
            also = ()
            if not targets:
                break
            for pid in targets:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)
        for pid in killed:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        return killed


@dataclass(frozen=True)
class TreeSnapshot:
    """Every regular file of a tree: relative path -> (size, mtime_ns, sha256 for the watched files)."""

    root: Path
    files: Mapping[str, tuple[int, int, str]]

    @classmethod
    def take(cls, root: Path, watched: Iterable[str] = ()) -> TreeSnapshot:
        """Stat every file; hash the ``watched`` ones (the declared inputs) and every file under 1 MiB."""
        wanted = set(watched)
        files: dict[str, tuple[int, int, str]] = {}
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            for name in filenames:
                path = Path(dirpath, name)
                rel = path.relative_to(root).as_posix()
                try:
                    st = path.lstat()
                    digest = ""
                    if path.is_file() and not path.is_symlink() and (rel in wanted or st.st_size < 1 << 20):
                        digest = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError:
                    continue
                files[rel] = (st.st_size, st.st_mtime_ns, digest)
        return cls(root, files)

    def changes(self, after: TreeSnapshot) -> list[str]:
        """Files added, removed or changed (content, size or modification time) between two snapshots."""
        out = [f"added {p}" for p in sorted(set(after.files) - set(self.files))]
        out += [f"removed {p}" for p in sorted(set(self.files) - set(after.files))]
        out += [f"changed {p}" for p in sorted(set(self.files) & set(after.files)) if self.files[p] != after.files[p]]
        return out

