"""Build upstream git repositories for the tests, locally and deterministically, with gitpython.

Author, committer and dates are fixed and the user's git configuration is
ignored, so the same files give the same commit hashes on every machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import git

EPOCH = 1_700_000_000
"""First fixture commit time (seconds since 1970, UTC)."""


def fixture_env(tick: int = 0) -> dict[str, str]:
    """Environment for fixture git commands: fixed identity and time, no user/system config."""
    date = f"{EPOCH + 60 * tick} +0000"
    return {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "Upstream Fixture", "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
            "GIT_COMMITTER_NAME": "Upstream Fixture", "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
            "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}


class RepoBuilder:
    """A working repository whose commits are made with fixed identity and increasing fixed times."""

    def __init__(self, path: Path, branch: str = "main") -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.repo = git.Repo.init(path, initial_branch=branch, env=fixture_env())
        self.tick = 0

    def git(self, *args: str) -> str:
        """Run ``git <args>`` in the repository with the fixture environment."""
        return str(self.repo.git.execute(["git", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false",
                                          "-c", "core.autocrlf=false", *args], env=fixture_env(self.tick)))

    def commit(self, files: dict[str, bytes | None], message: str) -> str:
        """Write (bytes) or delete (None) ``files``, commit everything, return the commit hash."""
        for rel, data in files.items():
            target = self.path / rel
            if data is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(0o644)
        self.tick += 1
        self.git("add", "--all")
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def checkout(self, name: str, new: bool = False, start: str | None = None) -> None:
        """Switch branch (``new``: create it at ``start``)."""
        self.git("checkout", "--quiet", *(["-b", name] if new else [name]), *([start] if start else []))

    def url(self) -> str:
        """file:// URL of the repository."""
        return self.path.resolve().as_uri()


@dataclass(frozen=True)
class KernelUpstream:
    """The standard upstream fixture and its interesting commits."""

    path: Path
    """Repository directory."""
    url: str
    """file:// URL."""
    added: str
    """On main: adds csrc/emb.cu (KERNEL_V1) and include/emb.h."""
    modified: str
    """On main, after ``added``: csrc/emb.cu changed upstream (KERNEL_V2)."""
    tagged: str
    """Only a tag (v1.0.1) contains it: a release branch that was deleted."""
    unmerged: str
    """Only refs/pull/7/head points at it: an open pull request (KERNEL_PR)."""


KERNEL_V1 = b"""// Fixture embedding kernel (version 1).
#include <cstdint>

__global__ void emb_sum_kernel(const float* weight, const int64_t* idx, float* out, int L, int D) {
  int b = blockIdx.x, d = threadIdx.x;
  float acc = 0.f;
  for (int l = 0; l < L; ++l) acc += weight[idx[b * L + l] * D + d];
  out[b * D + d] = acc;
}
"""
KERNEL_V2 = KERNEL_V1.replace(b"version 1", b"version 2").replace(b"float acc = 0.f;", b"float acc = 0.0f;")
KERNEL_PR = KERNEL_V2 + b"\n// PR #7: vectorised loads (not merged)\n"
HEADER = b"#pragma once\nvoid emb_sum(const float*, const long*, float*, int, int, int);\n"


def build_kernel_upstream(path: Path) -> KernelUpstream:
    """Branch commits, a modified file, a tag-only commit and an unmerged pull-request head."""
    b = RepoBuilder(path)
    b.commit({"README.md": b"# fixture kernels\n"}, "initial")
    added = b.commit({"csrc/emb.cu": KERNEL_V1, "include/emb.h": HEADER}, "add embedding kernel")
    modified = b.commit({"csrc/emb.cu": KERNEL_V2}, "tune embedding kernel")
    b.checkout("release-1.0", new=True, start=added)
    tagged = b.commit({"RELEASE": b"1.0.1\n"}, "release 1.0.1")
    b.git("tag", "-a", "v1.0.1", "-m", "release 1.0.1")
    b.checkout("pr-7", new=True, start=modified)
    unmerged = b.commit({"csrc/emb.cu": KERNEL_PR}, "PR #7: vectorised loads")
    b.git("update-ref", "refs/pull/7/head", unmerged)
    b.checkout("main")
    b.git("branch", "-D", "release-1.0", "pr-7")
    return KernelUpstream(path, b.url(), added, modified, tagged, unmerged)


def vendored_file(index: int) -> bytes:
    """Content of the ``index``-th file of the synthetic vendored framework."""
    return (f"// framework op {index}\n__global__ void op_{index}(float* x) {{ x[threadIdx.x] *= {index}; }}\n"
            ).encode()


def vendored_relpath(index: int) -> str:
    """Path of the ``index``-th file inside the framework's csrc/ directory."""
    return f"kernels/group_{index // 100:02d}/op_{index:04d}.cu"


def build_vendored_upstream(path: Path, count: int) -> tuple[str, str]:
    """A framework repository with ``count`` .cu files under csrc/; returns (file:// URL, commit)."""
    b = RepoBuilder(path)
    commit = b.commit({f"csrc/{vendored_relpath(i)}": vendored_file(i) for i in range(count)}
                      | {"LICENSE": b"BSD-3-Clause\n"}, "framework release")
    return b.url(), commit
