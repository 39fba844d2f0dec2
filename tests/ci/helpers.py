"""What the CI-recipe tests share: this checkout, fixture repositories of a submitter, git."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLE_ORG = REPOSITORY / "submissions_example" / "Acme"
IMPLEMENTATION = Path("benchmarks/dlrm/implementations/pytorch")
UNDECLARED_KERNEL = "__global__ void scratch_kernel(float* x) { x[threadIdx.x] = 0.f; }\n"
ROUND = "training/v0.7"
"""The published round the fixture repositories are checked against (it admits the example's kernel)."""

GIT_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_IDENTITY})
    return done.stdout.strip()


def submitter_repository(parent: Path, name: str, undeclared_kernel: bool,
                         extra_files: dict[str, str] | None = None) -> Path:
    """A submitter's git repository: the example organization at its root (committed), plus an
    undeclared kernel when asked, and any ``extra_files`` (all committed)."""
    root = parent / name
    shutil.copytree(EXAMPLE_ORG, root)
    if undeclared_kernel:
        (root / IMPLEMENTATION / "scratch.cu").write_text(UNDECLARED_KERNEL)
    for rel, text in (extra_files or {}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "submission")
    return root


def checkout_commit() -> str:
    """A commit of this checkout as it is on disk: HEAD, or HEAD with the tracked files' uncommitted
    changes (``git stash create``: a commit object, nothing in the checkout changes)."""
    return git(REPOSITORY, "stash", "create") or git(REPOSITORY, "rev-parse", "HEAD")


def clone_checkout(dest: Path) -> tuple[Path, str]:
    """A clone of this checkout at :func:`checkout_commit` (its uncommitted changes too), so that
    installing it (pip builds in the source tree) never writes into the checkout."""
    commit = checkout_commit()
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(REPOSITORY), str(dest)], check=True)
    git(dest, "fetch", "-q", str(REPOSITORY), commit)
    git(dest, "checkout", "-q", commit)
    return dest, commit
