"""Issue 23: hostile upstream declarations are labelled by their real cause, never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

from tests.upstream.conftest import check, upstream_ids
from tests.upstream.repos import KERNEL_V1, KernelUpstream
from tests.upstream.trees import IMPL, SOURCE, kernel_entry, write_tree


def test_upstream_path_climbing_out_is_path_missing_not_a_corrupt_cache(
        tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    """git answers ``<rev>:../x`` with a fatal error for the whole batch; before issue 23 that
    read as ``upstream-cache-corrupt``."""
    for index, bad in enumerate(["../csrc/emb.cu", "csrc/../../emb.cu", "csrc/\0emb.cu"]):
        tree = write_tree(tmp_path / f"tree{index}", KERNEL_V1,
                          [kernel_entry(kernel_upstream.url, kernel_upstream.added, [bad])])
        report = check(tree, tmp_path / "cache")
        assert upstream_ids(report) == ["upstream-path-missing"], bad
        assert "not a path inside a repository" in report.findings[0].message


def test_commit_with_trailing_newline_is_not_pinned_and_not_fetched(
        tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    """Before issue 23 ``<40 hex>\\n`` counted as pinned and the fetch then failed as
    ``upstream-unreachable``."""
    tree = write_tree(tmp_path / "tree", KERNEL_V1,
                      [kernel_entry(kernel_upstream.url, kernel_upstream.added + "\n")])
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-not-pinned"]
    assert not (tmp_path / "cache").exists()


def test_huge_sparse_source_is_hashed_streamed_and_not_diffed(
        tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    """A 256 MiB declared source: blob hash streamed, no line diff (over MAX_DIFF_BYTES)."""
    tree = write_tree(tmp_path / "tree", KERNEL_V1, [kernel_entry(kernel_upstream.url, kernel_upstream.added)])
    with open(tree / IMPL / SOURCE, "r+b") as handle:
        handle.truncate(256 << 20)
    report = check(tree, tmp_path / "cache")
    assert upstream_ids(report) == ["upstream-content-differs"]
    assert "too large for a line diff" in report.findings[0].message


def test_vendored_file_names_git_cannot_be_asked_about(
        tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    """A vendored native file whose name holds a newline or invalid UTF-8 is "not upstream",
    not a ValueError/UnicodeEncodeError out of the batch lookup."""
    copy = "third_party/framework"
    files = {f"{copy}/LICENSE": b"MIT\n", f"{copy}/ok.cu": b"__global__ void ok() {}\n"}
    tree = write_tree(tmp_path / "tree", KERNEL_V1, [kernel_entry(kernel_upstream.url, kernel_upstream.added)],
                      vendored=[{"path": copy, "repository": kernel_upstream.url,
                                 "commit": kernel_upstream.added}], files=files)
    folder = os.fsencode(tree / IMPL / copy)
    for name in (b"bad\nname.cu", b"bad\xffname.cu"):
        with open(folder + b"/" + name, "wb") as handle:
            handle.write(b"__global__ void bad() {}\n")
    report = check(tree, tmp_path / "cache")
    differs = [f for f in report.findings if f.rule_id == "upstream-vendored-differs"]
    assert len(differs) == 1
    whys = {item["path"].rsplit("/", 1)[-1]: item["why"] for item in dict(differs[0].details)["not_verbatim"]}
    assert whys["bad\nname.cu"] == "not upstream" and whys["bad\udcffname.cu"] == "not upstream"


def test_huge_vendored_files_are_not_hashed(tmp_path: Path, kernel_upstream: KernelUpstream) -> None:
    """A 64 GiB sparse vendored file (absent upstream) is listed as not upstream at once;
    hashing it would take about a minute."""
    import time

    copy = "third_party/framework"
    files = {f"{copy}/LICENSE": b"MIT\n", f"{copy}/huge.cu": b"__global__ void huge() {}\n"}
    tree = write_tree(tmp_path / "tree", KERNEL_V1, [kernel_entry(kernel_upstream.url, kernel_upstream.added)],
                      vendored=[{"path": copy, "repository": kernel_upstream.url,
                                 "commit": kernel_upstream.added}], files=files)
    with open(tree / IMPL / copy / "huge.cu", "r+b") as handle:
        handle.truncate(64 << 30)
    started = time.monotonic()
    report = check(tree, tmp_path / "cache")
    assert time.monotonic() - started < 20
    (differs,) = [f for f in report.findings if f.rule_id == "upstream-vendored-differs"]
    assert [(i["why"], i["local_blob"]) for i in dict(differs.details)["not_verbatim"]] == [("not upstream", None)]
