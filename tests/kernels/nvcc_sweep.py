"""Which variants the nvcc compile sweeps compile, and the record of those that passed.

A variant is one nvcc compile: a kernel source, an architecture, its ``-D`` options and the
criterion its test judges it by (no spill, or the spills a table allows). Its key hashes all four,
the source's code with every header it includes (comments left out: a comment edit compiles the
same), so a key names one compile and one verdict.

- ``NVCC_SWEEP=changed`` (the default under ``-m nvcc_sweep``): a variant whose key is neither in
  the committed manifest (``golden/nvcc_sweep.keys``: the keys of the last exhaustive sweep that
  passed) nor in the local cache of passed keys is compiled; so is a random sample of
  ``NVCC_SWEEP_SAMPLE`` (12) of the known ones per test, seeded per run (``NVCC_SWEEP_SEED``
  reproduces a run; the seed is printed in the header and the summary). On a clean clone (CI)
  the cache is empty: what changed is what differs from the manifest, so a kernel edit compiles
  every variant of that kernel (and of those including an edited header) until the manifest is
  refreshed.
- ``NVCC_SWEEP=all``: every variant (the exhaustive sweep, on demand).
- ``NVCC_SWEEP_RECORD=1`` (either mode): each test rewrites its lines of the manifest to the keys
  of its current variants that passed, in this run or before (the cache); commit it with the
  kernel change. After a kernel edit, ``NVCC_SWEEP_RECORD=1 python3 -m pytest -q -m nvcc_sweep``
  compiles what changed and records it.

The cache lives outside the tree (``NVCC_SWEEP_CACHE``, else
``$XDG_CACHE_HOME/mlperf-kernel-compliance/nvcc-sweep``): one empty file per passed key, written
as each compile passes, so an interrupted sweep keeps its progress. The key does not hold nvcc's
version, which the manifest's first line records. ``NVCC_SWEEP_JOBS`` sets how many nvcc
processes run at once (default: one per core).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import secrets
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from reference_kernels import KERNEL_DIR

MANIFEST = Path(__file__).parent / "golden" / "nvcc_sweep.keys"
SAMPLE = int(os.environ.get("NVCC_SWEEP_SAMPLE", "12"))
SEED = int(os.environ.get("NVCC_SWEEP_SEED") or secrets.randbelow(2**31))
SUMMARY: list[str] = []  # one line per sweep test of this run (tests/conftest.py prints them)


def mode() -> str:
    chosen = os.environ.get("NVCC_SWEEP", "changed")
    if chosen not in ("changed", "all"):
        raise ValueError(f"NVCC_SWEEP={chosen!r}: one of 'changed', 'all'")
    return chosen


def workers() -> int:
    """Parallel nvcc processes: ``NVCC_SWEEP_JOBS``, else one per core."""
    return int(os.environ.get("NVCC_SWEEP_JOBS") or os.cpu_count() or 2)


def cache_dir() -> Path:
    named = os.environ.get("NVCC_SWEEP_CACHE")
    if named:
        return Path(named)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "mlperf-kernel-compliance" / "nvcc-sweep"


# C and C++ comments (a string literal holding "//" or "/*" would be cut too: kernel sources hold
# none that matter, and a wrong cut could only make two sources look different)
COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", flags=re.DOTALL)


def code_text(text: str) -> str:
    """The source without its comments and trailing blanks: a comment edit compiles the same."""
    return "\n".join(line.rstrip() for line in COMMENTS.sub("", text).splitlines() if line.strip())


@cache
def source_digest(name: str) -> str:
    """The source's code (comments left out) and, recursively, every local header it includes."""
    text = (KERNEL_DIR / name).read_text()
    headers = sorted(set(re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, flags=re.MULTILINE)))
    parts = [code_text(text), *(f"{header}:{source_digest(header)}" for header in headers)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


@dataclass(frozen=True)
class Job:
    source: str
    flags: str
    arch: str
    criterion: str = "no spill"  # what the test accepts; part of the key

    @property
    def key(self) -> str:
        text = "\0".join((source_digest(self.source), self.arch, " ".join(self.flags.split()), self.criterion))
        return hashlib.sha256(text.encode()).hexdigest()[:24]


def manifest() -> dict[str, str]:
    """Key -> the test whose exhaustive sweep recorded it (the file: a ``[test]`` line, then its keys)."""
    if not MANIFEST.exists():
        return {}
    keys: dict[str, str] = {}
    test = ""
    for number, line in enumerate(MANIFEST.read_text().splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            test = line[1:-1]
        elif test:
            keys[line] = test
        else:
            raise ValueError(f"{MANIFEST}:{number}: a key before the first [test] line")
    return keys


def select(test: str, jobs: list[Job]) -> list[Job]:
    """The jobs this run compiles (changed ones first, then the sample), and a summary line."""
    if mode() == "all":
        SUMMARY.append(f"{test}: all {len(jobs)} variants (NVCC_SWEEP=all)")
        return jobs
    cached = cache_dir()
    known = set(manifest())
    fresh = [job for job in jobs if job.key not in known and not (cached / job.key).exists()]
    settled = [job for job in jobs if job not in fresh]
    sample = random.Random(f"{SEED}:{test}").sample(settled, min(SAMPLE, len(settled)))
    SUMMARY.append(f"{test}: {len(fresh)} changed + {len(sample)} sampled of {len(jobs)} variants "
                   f"(seed {SEED})")
    return fresh + sample


def remember(passed: list[Job]) -> None:
    """Mark these keys as passed in the local cache (outside the tree)."""
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    for job in passed:
        (target / job.key).touch()


def nvcc_version() -> str:
    done = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if "release" in line]
    return lines[-1].strip() if lines else "unknown"


def record(test: str, jobs: list[Job], passed: list[Job]) -> None:
    """With ``NVCC_SWEEP_RECORD=1``: the manifest's lines of ``test`` become the keys of its current
    variants that passed, in this run or before (keys of variants no longer swept drop out)."""
    if os.environ.get("NVCC_SWEEP_RECORD") != "1":
        return
    current = {job.key for job in jobs}
    cached = cache_dir()
    proven = {key for key, name in manifest().items() if name == test and key in current}
    proven |= {job.key for job in passed} | {key for key in current if (cached / key).exists()}
    others = {key: name for key, name in manifest().items() if name != test}
    by_test: dict[str, list[str]] = {}
    for key, name in {**others, **dict.fromkeys(proven, test)}.items():
        by_test.setdefault(name, []).append(key)
    lines = [f"# nvcc sweep manifest (tests/kernels/nvcc_sweep.py): each [test] and the keys of its variants "
             f"that passed; swept with {nvcc_version()}"]
    for name in sorted(by_test):
        lines += [f"[{name}]", *sorted(by_test[name])]
    MANIFEST.write_text("\n".join(lines) + "\n")
