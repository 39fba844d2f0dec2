"""Offline mode, fetching only what is needed, and the failures that must never hang or prompt."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from compliance.cli.main import cli
from tests.upstream.conftest import check, upstream_ids
from tests.upstream.repos import (
    KERNEL_PR,
    KERNEL_V1,
    KernelUpstream,
    build_kernel_upstream,
)
from tests.upstream.servers import auth_server, closed_port, silent_server
from tests.upstream.trees import RULES, kernel_entry, write_tree


def _tree(tmp_path: Path, url: str, commit: str) -> Path:
    return write_tree(tmp_path / "tree", KERNEL_V1, [kernel_entry(url, commit)])


def test_offline_with_empty_cache_reports_not_cached_and_creates_nothing(
        tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    report = check(_tree(tmp_path, kernel_upstream.url, kernel_upstream.added), tmp_path / "cache", offline=True)
    assert upstream_ids(report) == ["upstream-not-cached"]
    assert report.exit_code == 1
    assert not (tmp_path / "cache").exists()


def test_offline_with_warm_cache_needs_no_upstream(tmp_path: Path) -> None:
    upstream = build_kernel_upstream(tmp_path / "upstream")
    tree = _tree(tmp_path, upstream.url, upstream.added)
    assert upstream_ids(check(tree, tmp_path / "cache")) == ["upstream-verified"]
    shutil.rmtree(upstream.path)
    assert upstream_ids(check(tree, tmp_path / "cache", offline=True)) == ["upstream-verified"]


def test_offline_warm_cache_without_the_pinned_commit(tmp_path: Path) -> None:
    upstream = build_kernel_upstream(tmp_path / "upstream")
    check(_tree(tmp_path, upstream.url, upstream.added), tmp_path / "cache")
    other = write_tree(tmp_path / "other", KERNEL_V1, [kernel_entry(upstream.url, "2" * 40)])
    report = check(other, tmp_path / "cache", offline=True)
    assert upstream_ids(report) == ["upstream-not-cached"]
    assert "does not hold commit" in report.findings[0].message


def test_online_run_answered_by_the_cache_does_not_fetch(tmp_path: Path) -> None:
    upstream = build_kernel_upstream(tmp_path / "upstream")
    tree = _tree(tmp_path, upstream.url, upstream.added)
    check(tree, tmp_path / "cache")
    shutil.rmtree(upstream.path)
    assert upstream_ids(check(tree, tmp_path / "cache")) == ["upstream-verified"]


def test_unmerged_commit_merged_later_is_refetched(tmp_path: Path) -> None:
    upstream = build_kernel_upstream(tmp_path / "upstream")
    tree = write_tree(tmp_path / "tree", KERNEL_PR, [kernel_entry(upstream.url, upstream.unmerged)])
    assert upstream_ids(check(tree, tmp_path / "cache")) == ["upstream-commit-unmerged"]
    offline = check(tree, tmp_path / "cache", offline=True)
    assert upstream_ids(offline) == ["upstream-commit-unmerged"]
    assert "none of the branches or tags cached at 20" in offline.findings[0].message
    subprocess.run(["git", "-C", str(upstream.path), "branch", "merged-pr-7", upstream.unmerged], check=True)
    assert upstream_ids(check(tree, tmp_path / "cache")) == ["upstream-verified"]


def test_missing_repository_is_unreachable(tmp_path: Path) -> None:
    report = check(_tree(tmp_path, (tmp_path / "no-such-repo").as_uri(), "3" * 40), tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-unreachable"]


def test_refused_connection_is_unreachable(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/acme/kernels.git"
    report = check(_tree(tmp_path, url, "4" * 40), tmp_path / "cache", network_timeout_s=10)
    assert upstream_ids(report) == ["upstream-unreachable"]


def test_host_that_never_answers_hits_the_time_limit(tmp_path: Path) -> None:
    with silent_server() as url:
        start = time.monotonic()
        report = check(_tree(tmp_path, url, "5" * 40), tmp_path / "cache", network_timeout_s=2)
        elapsed = time.monotonic() - start
    assert upstream_ids(report) == ["upstream-unreachable"]
    assert elapsed < 20, f"took {elapsed:.1f}s with a 2s limit"


def test_authentication_required_never_prompts(tmp_path: Path) -> None:
    with auth_server() as url:
        report = check(_tree(tmp_path, url, "6" * 40), tmp_path / "cache", network_timeout_s=20)
    assert upstream_ids(report) == ["upstream-auth-required"]


def _warm_cache(tmp_path: Path) -> tuple[Path, Path]:
    upstream = build_kernel_upstream(tmp_path / "upstream")
    tree = _tree(tmp_path, upstream.url, upstream.added)
    assert upstream_ids(check(tree, tmp_path / "cache")) == ["upstream-verified"]
    (entry,) = (tmp_path / "cache").glob("*/*.git")
    return tree, entry


def test_cache_entry_that_is_not_a_repository_is_corrupt(tmp_path: Path) -> None:
    tree, entry = _warm_cache(tmp_path)
    shutil.rmtree(entry)
    entry.mkdir()
    (entry / "HEAD").write_text("garbage\n")
    for offline in (False, True):
        report = check(tree, tmp_path / "cache", offline=offline)
        assert upstream_ids(report) == ["upstream-cache-corrupt"]
        assert str(entry) in report.findings[0].message


def test_damaged_objects_in_the_cache_are_corrupt(tmp_path: Path) -> None:
    tree, entry = _warm_cache(tmp_path)
    for obj in (entry / "objects").rglob("*"):
        if obj.is_file() and obj.parent.name != "info":
            obj.chmod(0o644)
            obj.write_bytes(b"\x00" * 16)
    report = check(tree, tmp_path / "cache", offline=True)
    assert upstream_ids(report) == ["upstream-cache-corrupt"]


def test_cache_inside_the_checked_tree_is_refused(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = _tree(tmp_path, kernel_upstream.url, kernel_upstream.added)
    result = CliRunner().invoke(cli, ["check", str(tree), "--rules", str(RULES), "--upstream",
                                      "--upstream-cache", str(tree / "cache")])
    assert result.exit_code == 2, result.output
    assert not (tree / "cache").exists()


def test_plain_check_never_imports_git(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = _tree(tmp_path, kernel_upstream.url, kernel_upstream.added)
    code = ("import sys; from pathlib import Path; from compliance.engine import run_check; "
            "from compliance.model import CheckOptions; "
            f"run_check(Path({str(tree)!r}), CheckOptions(rules={str(RULES)!r})); "
            "from compliance.rulespecs.registry import all_specs; all_specs(); "
            "print('git' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
