"""Vendored trees: thousands of files checked against upstream by blob hash in one batch."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from compliance.engine import build_context, run_check
from compliance.model import CheckOptions
from compliance.upstream.options import UpstreamOptions
from compliance.upstream.stage import UpstreamSettings, vendored_targets
from compliance.upstream.vendored import compare_tree
from tests.upstream.conftest import NETWORK_TIMEOUT_S, VENDORED_FILES, check, upstream_ids
from tests.upstream.repos import (
    KERNEL_V1,
    KernelUpstream,
    vendored_file,
    vendored_relpath,
)
from tests.upstream.trees import IMPL, RULES, kernel_entry, write_tree

COPY = "third_party/framework"
MODIFIED = (7, 1234, 2999)


def _vendored_tree(root: Path, kernel_upstream: KernelUpstream, url: str, commit: str,
                   upstream_path: str = "csrc", modified: tuple[int, ...] = MODIFIED,
                   extra: dict[str, bytes] | None = None) -> Path:
    files = {f"{COPY}/{vendored_relpath(i)}": vendored_file(i) for i in range(VENDORED_FILES)}
    for i in modified:
        files[f"{COPY}/{vendored_relpath(i)}"] = vendored_file(i).replace(b"*=", b"+=")
    files[f"{COPY}/LICENSE"] = b"BSD-3-Clause\n"
    files.update(extra or {})
    entry: dict[str, Any] = {"path": COPY, "repository": url, "commit": commit, "upstream_path": upstream_path}
    return write_tree(root, KERNEL_V1, [kernel_entry(kernel_upstream.url, kernel_upstream.added)],
                      vendored=[entry], files=files)


@pytest.mark.slow  # a copy of thousands of files: 3-5 s
def test_three_modified_files_among_thousands_are_all_found(
        tmp_path: Path, kernel_upstream: KernelUpstream, vendored_upstream: tuple[str, str]) -> None:
    url, commit = vendored_upstream
    tree = _vendored_tree(tmp_path / "tree", kernel_upstream, url, commit)
    start = time.perf_counter()
    report = check(tree, tmp_path / "cache")
    whole = time.perf_counter() - start
    assert upstream_ids(report) == ["upstream-vendored-differs", "upstream-vendored-identified", "upstream-verified"]
    identified = next(f for f in report.findings if f.rule_id == "upstream-vendored-identified")
    assert f"{commit}, with 3 file(s) modified, 1 added, 0 removed" in identified.message  # added: LICENSE
    finding = next(f for f in report.findings if f.rule_id == "upstream-vendored-differs")
    details = dict(finding.details)
    assert (details["files"], details["verbatim"]) == (VENDORED_FILES, VENDORED_FILES - 3)
    listed = sorted(item["path"] for item in details["not_verbatim"])
    assert listed == sorted(f"{IMPL}/{COPY}/{vendored_relpath(i)}" for i in MODIFIED)
    assert all(item["why"] == "modified" for item in details["not_verbatim"])
    assert f"{VENDORED_FILES - 3} of {VENDORED_FILES} native files verbatim" in finding.message

    ctx, _ = build_context(tree, str(RULES))
    ((target, _),) = list(vendored_targets(ctx))
    assert target is not None
    repo = UpstreamSettings(tmp_path / "cache").repository(url)
    start = time.perf_counter()
    verdicts = compare_tree(ctx, target, repo, commit)
    bulk = time.perf_counter() - start
    print(f"\nvendored tree: {len(verdicts)} files, {sum(not v.verbatim for v in verdicts)} not verbatim; "
          f"bulk blob comparison {bulk:.3f}s; whole check --upstream incl. fetch {whole:.2f}s")
    assert len(verdicts) == VENDORED_FILES
    assert bulk < 10, f"bulk comparison of {VENDORED_FILES} files took {bulk:.1f}s"


@pytest.mark.slow  # a copy of thousands of files: 3-5 s
def test_a_verbatim_copy_of_a_repository_the_catalogue_does_not_know_exempts_no_kernel(
        tmp_path: Path, kernel_upstream: KernelUpstream, vendored_upstream: tuple[str, str]) -> None:
    """Issue 50 class 7: the copy is verbatim (verified at info level), but its repository (it could
    be the submitter's own) is no catalogued upstream: its kernel code is the submitter's."""
    url, commit = vendored_upstream
    report = check(_vendored_tree(tmp_path / "tree", kernel_upstream, url, commit, modified=()), tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-vendored-identified", "upstream-vendored-verified", "upstream-verified"]
    undeclared = [f.path for f in report.findings if f.rule_id == "undeclared-kernel"]
    assert len(undeclared) == VENDORED_FILES and report.exit_code == 1


@pytest.mark.slow  # a copy of thousands of files: 3-5 s
def test_a_verbatim_declared_copy_of_a_catalogued_project_passes_with_require_upstream(
        tmp_path: Path, kernel_upstream: KernelUpstream, vendored_upstream: tuple[str, str]) -> None:
    """Issue 50 class 12: a declared copy of a catalogued project (NCCL here, its history stood in by a
    local mirror) that no version the blob catalogue knows matches is reported one by one by a static
    check, proven by --upstream, and --upstream --require-upstream passes it too."""
    local, commit = vendored_upstream
    nccl = "https://github.com/NVIDIA/nccl"
    tree = _vendored_tree(tmp_path / "tree", kernel_upstream, nccl, commit, modified=())
    static = run_check(tree, CheckOptions(rules=str(RULES)))
    assert sum(f.rule_id == "undeclared-kernel" for f in static.findings) == VENDORED_FILES
    upstream = UpstreamOptions(tmp_path / "cache", False, NETWORK_TIMEOUT_S, {nccl: local})
    for require in (False, True):
        report = run_check(tree, CheckOptions(rules=str(RULES), upstream=upstream, require_upstream=require))
        assert "upstream-vendored-verified" in upstream_ids(report)
        assert not {"undeclared-kernel", "vendored-unproven"} & {f.rule_id for f in report.findings}
        assert report.exit_code == 0, [f.message for f in report.findings if f.severity.value == "error"]


@pytest.mark.slow  # a copy of thousands of files: 3-5 s
def test_file_absent_upstream_is_listed_as_not_upstream(
        tmp_path: Path, kernel_upstream: KernelUpstream, vendored_upstream: tuple[str, str]) -> None:
    url, commit = vendored_upstream
    hidden = {f"{COPY}/kernels/group_00/fast_embedding.cu": b"__global__ void hidden(float* x) {}\n"}
    report = check(_vendored_tree(tmp_path / "tree", kernel_upstream, url, commit, modified=(), extra=hidden),
                   tmp_path / "cache")
    finding = next(f for f in report.findings if f.rule_id == "upstream-vendored-differs")
    (item,) = dict(finding.details)["not_verbatim"]
    assert (item["path"].rsplit("/", 1)[-1], item["why"], item["upstream_blob"]) == \
        ("fast_embedding.cu", "not upstream", None)


def test_wrong_upstream_directory(tmp_path: Path, kernel_upstream: KernelUpstream,
                                  vendored_upstream: tuple[str, str]) -> None:
    url, commit = vendored_upstream
    report = check(_vendored_tree(tmp_path / "tree", kernel_upstream, url, commit, upstream_path="src",
                                  modified=()), tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-path-missing", "upstream-vendored-identified", "upstream-verified"]
    identified = next(f for f in report.findings if f.rule_id == "upstream-vendored-identified")
    assert dict(identified.details)["upstream_dir"] == "csrc"  # the declared "src" is wrong; the copy says where


def test_vendored_commit_must_be_pinned(tmp_path: Path, kernel_upstream: KernelUpstream,
                                        vendored_upstream: tuple[str, str]) -> None:
    url, _ = vendored_upstream
    report = check(_vendored_tree(tmp_path / "tree", kernel_upstream, url, "main", modified=()),
                   tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-not-pinned", "upstream-verified"]
