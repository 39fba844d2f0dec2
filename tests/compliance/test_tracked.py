"""``compliance check --tracked``: the files a git index tracks, not the working tree (issue 51, CI)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from compliance.cli.main import cli
from compliance.tracked import tracked_copy
from tests.ci.helpers import EXAMPLE_ORG, IMPLEMENTATION, UNDECLARED_KERNEL, git, submitter_repository

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A submitter's repository: the example organization at its root, committed."""
    return submitter_repository(tmp_path, "Acme", undeclared_kernel=False)


def _check(path: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["check", str(path), "--rules", "training/v0.7", *extra])
    return result.exit_code, result.output


def test_the_copy_holds_the_index_not_the_working_tree(repo: Path) -> None:
    (repo / IMPLEMENTATION / "untracked.cu").write_text(UNDECLARED_KERNEL)
    (repo / IMPLEMENTATION / "staged.cu").write_text(UNDECLARED_KERNEL)
    git(repo, "add", str(IMPLEMENTATION / "staged.cu"))
    (repo / IMPLEMENTATION / "staged.cu").write_text("// changed after staging\n")
    with tracked_copy(repo) as copy:
        assert copy.name == "Acme" and not (copy / ".git").exists()
        assert not (copy / IMPLEMENTATION / "untracked.cu").exists()
        assert (copy / IMPLEMENTATION / "staged.cu").read_text() == UNDECLARED_KERNEL  # the staged content
        assert (copy / "systems" / "dgx_h200_x8.json").is_file()
    assert not copy.exists()


def test_a_directory_inside_the_repository(repo: Path) -> None:
    with tracked_copy(repo / "benchmarks") as copy:
        assert copy.name == "benchmarks" and (copy / "dlrm" / "implementations").is_dir()


def test_untracked_files_and_dot_git_are_not_judged(repo: Path) -> None:
    (repo / IMPLEMENTATION / "scratch.cu").write_text(UNDECLARED_KERNEL)
    code, output = _check(repo)
    assert code == 1 and "undeclared-kernel" in output and "metadata-directory-committed" in output
    code, output = _check(repo, "--tracked")
    assert code == 0, output
    assert f"compliance check {repo.resolve()}" in output and "no findings" in output


def test_a_staged_kernel_is_judged(repo: Path) -> None:
    (repo / IMPLEMENTATION / "scratch.cu").write_text(UNDECLARED_KERNEL)
    git(repo, "add", "-A")
    code, output = _check(repo, "--tracked")
    assert code == 1 and "scratch.cu" in output and "undeclared-kernel" in output


def test_not_a_repository_is_an_input_error(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE_ORG, tmp_path / "Acme")
    code, output = _check(tmp_path / "Acme", "--tracked")
    assert code == 2 and "Error: " in output and "--tracked needs a git repository" in output


def test_the_repository_configuration_runs_nothing(repo: Path, tmp_path: Path) -> None:
    """Blobs are read, never checked out: a smudge filter or a hook the repository names never runs."""
    marker = tmp_path / "ran"
    git(repo, "config", "filter.evil.smudge", f"touch {marker}; cat")
    git(repo, "config", "core.fsmonitor", f"touch {marker}; true")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("systems")
    git(repo, "add", "-A")
    marker.unlink(missing_ok=True)  # `git add` itself may have run them
    with tracked_copy(repo) as copy:
        assert (copy / "run.sh").stat().st_mode & 0o111
        assert (copy / "link").is_symlink() and str((copy / "link").readlink()) == "systems"
    assert not marker.exists()
