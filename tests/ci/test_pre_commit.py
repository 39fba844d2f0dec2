"""The pre-commit hook (.pre-commit-hooks.yaml), run by pre-commit itself on submitters' repositories.

pre-commit installs the hook's environment as a submitter's machine would: a virtual environment
with this repository pip-installed from a git clone (a local path, so only the package index is
reached). One environment serves the module (``PRE_COMMIT_HOME`` per module).

The hook needs the round (``args: [training/v0.7]``): a configuration without ``args`` (what
``pre-commit try-repo`` runs, which passes none) shows that the hook refuses to run without one;
``pre-commit run`` with a configuration as docs/ci.md gives it checks the clean and the failing
repository. All three name the same repository and commit, so pre-commit installs the hook's
environment once (try-repo itself would install a second one from its own shadow commit).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .helpers import ROUND, clone_checkout, git, submitter_repository

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("pre-commit") is None or shutil.which("git") is None,
                                 reason="needs pre-commit and git (pip install -e '.[dev]')")]

HOOK = "compliance-check"


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture(scope="module")
def hook_repository(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A clone of this checkout with its uncommitted changes (as try-repo makes one), and its commit."""
    return clone_checkout(tmp_path_factory.mktemp("hook-repository") / "compliance")


def _pre_commit(repo: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PRE_COMMIT_COLOR": "never"}
    return subprocess.run(["pre-commit", *args], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=900, check=False)


def _configured(repo: Path, hook_repository: tuple[Path, str], args: str = f"\n        args: [{ROUND}]") -> Path:
    clone, commit = hook_repository
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {clone}\n    rev: {commit}\n    hooks:\n      - id: {HOOK}{args}\n")
    git(repo, "add", ".pre-commit-config.yaml")
    return repo


def test_the_hook_refuses_without_a_named_round(tmp_path: Path, pre_commit_home: Path,
                                                hook_repository: tuple[Path, str]) -> None:
    repo = _configured(submitter_repository(tmp_path, "Acme", undeclared_kernel=False), hook_repository, args="")
    run = _pre_commit(repo, pre_commit_home, "run", "--all-files")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Failed" in run.stdout and "Error: Option '--rules' requires an argument." in run.stdout, run.stdout


def test_a_clean_repository_passes(tmp_path: Path, pre_commit_home: Path, hook_repository: tuple[Path, str]) -> None:
    repo = _configured(submitter_repository(tmp_path, "Acme", undeclared_kernel=False), hook_repository)
    # An untracked build output in the working tree is not what a commit submits: not judged.
    (repo / "benchmarks" / "dlrm" / "implementations" / "pytorch" / "scratch.cu").write_text(
        "__global__ void untracked(float* x) {}\n")
    run = _pre_commit(repo, pre_commit_home, "run", "--all-files")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Passed" in run.stdout


def test_an_undeclared_kernel_fails_the_commit(tmp_path: Path, pre_commit_home: Path,
                                               hook_repository: tuple[Path, str]) -> None:
    repo = _configured(submitter_repository(tmp_path, "Acme", undeclared_kernel=True), hook_repository)
    run = _pre_commit(repo, pre_commit_home, "run", "--all-files")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Failed" in run.stdout and "exit code: 1" in run.stdout
    assert "scratch.cu" in run.stdout and "[undeclared-kernel]" in run.stdout
    assert f"rule set {ROUND} (adopted; --rules)" in run.stdout
