"""benchmarks/results_branch.py commits result files onto the bench-results branch of a repository
without touching its working tree or index, creating the branch (with its README) the first time."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks import results_branch


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    for key, value in (("user.name", "t"), ("user.email", "t@example.com")):
        _git(root, "config", key, value)
    (root / "source.py").write_text("x = 1\n")
    _git(root, "add", "source.py")
    _git(root, "commit", "-q", "-m", "source")
    monkeypatch.chdir(root)
    return root


def test_files_land_on_the_orphan_branch_at_the_cited_paths(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "run1.txt").write_text("12.5 us\n")
    charts = tmp_path / "charts"
    (charts / "sub").mkdir(parents=True)
    (charts / "sub" / "a.png").write_bytes(b"PNG\x00\x01")
    status_before = _git(repo, "status", "--porcelain")

    first = results_branch.store([tmp_path / "run1.txt", charts], "first run")
    assert _git(repo, "show", "bench-results:benchmarks/results/run1.txt") == "12.5 us\n"
    assert _git(repo, "show", "bench-results:benchmarks/results/charts/sub/a.png") == "PNG\x00\x01"
    assert "git show bench-results:" in _git(repo, "show", "bench-results:README.md")
    assert _git(repo, "rev-list", "--count", "bench-results").strip() == "1"  # an orphan: no parent

    (tmp_path / "run2.txt").write_text("11.0 us\n")
    second = results_branch.store([tmp_path / "run2.txt"], "second run")
    assert _git(repo, "rev-parse", f"{second}^").strip() == first
    names = _git(repo, "ls-tree", "-r", "--name-only", "bench-results").split()
    assert names == ["README.md", "benchmarks/results/charts/sub/a.png", "benchmarks/results/run1.txt",
                     "benchmarks/results/run2.txt"]
    assert _git(repo, "status", "--porcelain") == status_before  # main's tree and index untouched
    assert _git(repo, "ls-files").split() == ["source.py"]


def test_a_missing_file_is_an_error_and_the_branch_is_not_created(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(results_branch.ResultsBranchError, match="no such file"):
        results_branch.store([tmp_path / "absent.json"], "nothing")
    assert _git(repo, "branch", "--list", "bench-results") == ""
