"""One test per level a kernel's upstream can reach, against a locally built upstream repository."""

from __future__ import annotations

from pathlib import Path

from compliance.engine import run_check
from compliance.findings import Severity
from compliance.model import CheckOptions
from compliance.upstream.options import UpstreamOptions
from tests.upstream.conftest import check, upstream_ids
from tests.upstream.repos import KERNEL_PR, KERNEL_V1, KERNEL_V2, KernelUpstream
from tests.upstream.trees import RULES, SOURCE, kernel_entry, write_tree


def test_exact_match_is_verified_and_passes(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = write_tree(tmp_path / "tree", KERNEL_V1, [kernel_entry(kernel_upstream.url, kernel_upstream.added)])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-verified"]
    (finding,) = report.findings
    assert finding.severity is Severity.INFO
    assert dict(finding.details)["ref"] == "refs/heads/main"
    assert dict(finding.details)["level"] == "exact"
    assert report.exit_code == 0


def test_source_modified_by_submitter_reports_blobs_and_line_counts(
        tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    local = KERNEL_V1.replace(b"out[b * D + d] = acc;", b"out[b * D + d] = acc;\n  __syncthreads();")
    tree = write_tree(tmp_path / "tree", local, [kernel_entry(kernel_upstream.url, kernel_upstream.added)])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-content-differs"]
    details = dict(report.findings[0].details)
    assert (details["lines_added"], details["lines_removed"]) == (1, 0)
    assert details["local_blob"] != details["upstream_blob"]
    assert len(details["upstream_blob"]) == 40
    assert report.findings[0].path.endswith(SOURCE)
    assert report.exit_code == 1


def test_file_modified_upstream_after_the_pinned_copy(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = write_tree(tmp_path / "tree", KERNEL_V1, [kernel_entry(kernel_upstream.url, kernel_upstream.modified)])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-content-differs"]
    details = dict(report.findings[0].details)
    assert (details["lines_added"], details["lines_removed"]) == (2, 2)
    assert details["first_difference_line"] == 1
    assert "+2 -2 lines" in report.findings[0].message


def test_line_ending_only_difference_is_not_normalized(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = write_tree(tmp_path / "tree", KERNEL_V1.replace(b"\n", b"\r\n"),
                      [kernel_entry(kernel_upstream.url, kernel_upstream.added)])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-content-differs"]
    assert "differ only in line endings" in report.findings[0].message


def test_missing_path(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = write_tree(tmp_path / "tree", KERNEL_V1,
                      [kernel_entry(kernel_upstream.url, kernel_upstream.added, ["src/emb.cu"])])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-path-missing"]
    assert "'src/emb.cu'" in report.findings[0].message
    assert report.findings[0].line is not None


def test_directory_where_a_file_is_declared(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    entry = kernel_entry(kernel_upstream.url, kernel_upstream.added, ["csrc"])
    tree = write_tree(tmp_path / "tree", KERNEL_V1, [entry])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-path-missing"]
    assert "a directory" in report.findings[0].message


def test_unknown_commit(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = write_tree(tmp_path / "tree", KERNEL_V1, [kernel_entry(kernel_upstream.url, "1" * 40)])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-commit-unknown"]
    assert report.exit_code == 1


def test_unmerged_pull_request_head(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = write_tree(tmp_path / "tree", KERNEL_PR, [kernel_entry(kernel_upstream.url, kernel_upstream.unmerged)])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-commit-unmerged"], "content matches, but unmerged is not upstreamed"
    assert "none of its branches or tags contains it" in report.findings[0].message
    assert report.exit_code == 1


def test_unmerged_and_different_reports_both(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = write_tree(tmp_path / "tree", KERNEL_V2, [kernel_entry(kernel_upstream.url, kernel_upstream.unmerged)])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-commit-unmerged", "upstream-content-differs"]


def test_commit_only_a_tag_contains_counts_as_upstream(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = write_tree(tmp_path / "tree", KERNEL_V1, [kernel_entry(kernel_upstream.url, kernel_upstream.tagged)])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-verified"]
    assert dict(report.findings[0].details)["ref"] == "refs/tags/v1.0.1"


def test_branch_name_where_a_commit_is_required(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = write_tree(tmp_path / "tree", KERNEL_V2, [kernel_entry(kernel_upstream.url, "main")])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-not-pinned"], "a branch is not proof, even if it matches today"
    assert report.exit_code == 1
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("HEAD")), \
        "nothing is fetched for an unpinned link"


def test_path_form_repository_works_like_a_file_url(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    tree = write_tree(tmp_path / "tree", KERNEL_V1,
                      [kernel_entry(str(kernel_upstream.path.resolve()), kernel_upstream.added)])
    assert upstream_ids(check(tree, tmp_path / "cache")) == ["upstream-verified"]


def test_two_kernels_one_repository_one_cache_entry(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    second = kernel_entry(kernel_upstream.url, kernel_upstream.modified) | {"id": "acme-emb-v2"}
    tree = write_tree(tmp_path / "tree", KERNEL_V1, [kernel_entry(kernel_upstream.url, kernel_upstream.added),
                                                     second])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-content-differs", "upstream-verified"]
    assert len(list((tmp_path / "cache").glob("*/*.git"))) == 1


def test_branch_or_tag_name_resolves_when_the_rule_set_allows_it(
        tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    rules = str(RULES.with_name("rules-local-branches.yaml"))
    for name, source, ref in (("main", KERNEL_V2, "refs/heads/main"), ("v1.0.1", KERNEL_V1, "refs/tags/v1.0.1")):
        tree = write_tree(tmp_path / name, source, [kernel_entry(kernel_upstream.url, name)])
        report = run_check(tree, CheckOptions(rules=rules, upstream=UpstreamOptions(tmp_path / "cache")))
        assert upstream_ids(report) == ["upstream-verified"], name
        details = dict(report.findings[0].details)
        assert (details["ref"], details["commit"]) == (ref, kernel_upstream.modified if name == "main"
                                                       else kernel_upstream.tagged)
    tree = write_tree(tmp_path / "nope", KERNEL_V1, [kernel_entry(kernel_upstream.url, "no-such-branch")])
    report = run_check(tree, CheckOptions(rules=rules, upstream=UpstreamOptions(tmp_path / "cache")))
    assert upstream_ids(report) == ["upstream-commit-unknown"]
