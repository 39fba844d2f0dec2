"""`compliance vendored identify`: which upstream commit a copy is, from a blob index of the history."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compliance.upstream.identify import (
    INDEX_NAME,
    BlobIndex,
    identify,
    load_index,
    score_commits,
)
from compliance.upstream.stage import UpstreamSettings
from tests.compliance.test_cli import invoke
from tests.conftest import UpstreamBlobs
from tests.upstream.conftest import check
from tests.upstream.history import History, build_history, write_copy
from tests.upstream.repos import KERNEL_V1, KernelUpstream
from tests.upstream.trees import IMPL, kernel_entry, write_tree

COMMITS = 60
K = 37

PAD = "# an NCCL build file of real size (catalogue evidence needs 64 bytes or more)\n"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    return build_history(tmp_path_factory.mktemp("history") / "up.git", COMMITS, snapshots=(20, K, COMMITS - 1))


def cache_settings(tmp_path: Path, offline: bool = False) -> UpstreamSettings:
    return UpstreamSettings(tmp_path / "cache", offline)


def test_copy_of_commit_k_with_two_files_changed_names_k_and_the_two_files(history: History, tmp_path: Path) -> None:
    files = dict(history.snapshots[K])
    files["src/f3.cu"] += "// local tuning\n"
    files["include/h5.h"] = files["include/h5.h"].replace("#pragma once", "#pragma once\n#define LOCAL 1")
    found = identify(write_copy(tmp_path / "copy", files), cache_settings(tmp_path), str(history.path))
    assert found.commit == history.commits[K] and not found.identical
    assert [(m.path, m.diff.lines_added, m.diff.lines_removed) for m in found.modified] == [
        ("include/h5.h", 1, 0), ("src/f3.cu", 1, 0)]
    assert found.added == () and found.removed == () and found.equal == len(files) - 2
    assert found.commits_searched == COMMITS
    assert f"closest commit of {history.path}: {history.commits[K]}, with 2 file(s) modified" in found.describe()


def test_identical_copy_is_identical_and_named_by_its_tag(history: History, tmp_path: Path) -> None:
    found = identify(write_copy(tmp_path / "copy", history.snapshots[20]), cache_settings(tmp_path), str(history.path))
    assert found.identical and found.commit == history.commits[20] and found.tags == ("v0.20",)
    assert found.describe().startswith(f"identical to {history.path} at commit {history.commits[20]} (tag v0.20)")


def test_copy_of_a_subdirectory_finds_where_it_lives_upstream(history: History, tmp_path: Path) -> None:
    src = {rel[len("src/"):]: text for rel, text in history.snapshots[COMMITS - 1].items() if rel.startswith("src/")}
    found = identify(write_copy(tmp_path / "copy", src), cache_settings(tmp_path), str(history.path))
    assert found.upstream_dir == "src" and found.identical and found.commit == history.commits[-1]


def test_added_and_removed_files_are_counted(history: History, tmp_path: Path) -> None:
    files = dict(history.snapshots[K])
    del files["src/f0.cu"]
    files["src/mine.cu"] = "__global__ void mine() {}\n"
    copy = write_copy(tmp_path / "copy", files)
    (copy / "src/outside.cu").symlink_to(tmp_path / "elsewhere.cu")  # never followed, never counted
    write_copy(copy, {"build/temp.linux-x86_64-3.10/.ninja_deps": "x", "__pycache__/m.pyc": "x"})
    found = identify(copy, cache_settings(tmp_path), str(history.path))
    assert (found.commit, found.added, found.removed) == (history.commits[K], ("src/mine.cu",), ("src/f0.cu",))


def test_a_shared_object_in_a_cache_directory_is_not_identical(history: History, tmp_path: Path) -> None:
    """Issue 40 item 11: build caches hide nothing. A compiled module under __pycache__/ (or build/)
    is the copy's own file, so the copy is no longer identical; .pyc files and ninja logs stay out."""
    files = dict(history.snapshots[K])
    copy = write_copy(tmp_path / "copy", files)
    write_copy(copy, {"__pycache__/m.pyc": "x", "build/temp.linux-x86_64-3.10/.ninja_log": "x"})
    assert identify(copy, cache_settings(tmp_path), str(history.path)).identical
    write_copy(copy, {"src/__pycache__/_C.cpython-310-x86_64-linux-gnu.so": "\x7fELF hidden kernel"})
    found = identify(copy, cache_settings(tmp_path), str(history.path))
    assert not found.identical and found.added == ("src/__pycache__/_C.cpython-310-x86_64-linux-gnu.so",)


def test_an_undecodable_name_is_printed_escaped_on_one_line(history: History, tmp_path: Path) -> None:
    """Issue 40 item 11: a file name that is not UTF-8 (or holds a newline) is reported escaped,
    with the exit code of a closest commit, never an internal error."""
    copy = write_copy(tmp_path / "copy", dict(history.snapshots[K]))
    (copy / "src").mkdir(exist_ok=True)
    with open(os.fsencode(copy / "src") + b"/bad\xff\nPASS.cu", "w") as handle:
        handle.write("__global__ void hidden() {}\n")
    code, out, _ = invoke("vendored", "identify", str(copy), "--repository", str(history.path),
                          "--upstream-cache", str(tmp_path / "cache"))
    assert code == 0 and "src/bad\\udcff\\x0aPASS.cu" in out
    assert "\nPASS" not in out and "\udcff" not in out


def test_unrelated_copy_says_it_matches_nothing(history: History, tmp_path: Path) -> None:
    copy = write_copy(tmp_path / "copy", {"a.cu": "__global__ void unrelated() {}\n", "b.h": "#pragma once\n"})
    code, out, _ = invoke("vendored", "identify", str(copy), "--repository", str(history.path),
                          "--upstream-cache", str(tmp_path / "cache"))
    assert code == 1 and f"matches no commit of {history.path}: none of its {COMMITS} commits" in out


def test_index_is_built_once_and_offline_uses_the_cache(history: History, tmp_path: Path) -> None:
    copy = write_copy(tmp_path / "copy", history.snapshots[K])
    code, out, _ = invoke("vendored", "identify", str(copy), "--repository", str(history.path),
                          "--upstream-cache", str(tmp_path / "cache"), "--format", "json")
    assert code == 0 and json.loads(out)["identical"] is True
    index_files = list((tmp_path / "cache").rglob(INDEX_NAME))
    assert len(index_files) == 1
    stamp = index_files[0].stat().st_mtime_ns
    found = identify(copy, cache_settings(tmp_path, offline=True), str(history.path))
    assert found.commit == history.commits[K] and index_files[0].stat().st_mtime_ns == stamp
    repo = cache_settings(tmp_path, offline=True).repository(str(history.path))
    assert load_index(repo).commits[:3] == history.commits[:3]


def test_offline_without_cache_is_an_input_error(history: History, tmp_path: Path) -> None:
    copy = write_copy(tmp_path / "copy", history.snapshots[K])
    code, _, err = invoke("vendored", "identify", str(copy), "--repository", str(history.path),
                          "--upstream-cache", str(tmp_path / "empty"), "--offline")
    assert code == 2 and "holds no copy" in err
    assert not (tmp_path / "empty").exists()


def test_catalogued_copy_needs_no_repository_argument_and_unknown_copy_asks_for_one(tmp_path: Path) -> None:
    copy = write_copy(tmp_path / "copy", {"a.cu": "x\n"})
    code, _, err = invoke("vendored", "identify", str(copy), "--upstream-cache", str(tmp_path / "c"), "--offline")
    assert code == 2 and "--repository" in err
    nccl = write_copy(tmp_path / "nccl", {"src/nccl.h.in": "x\n", "makefiles/version.mk": "NCCL_MAJOR := 2\n"})
    code, _, err = invoke("vendored", "identify", str(nccl), "--upstream-cache", str(tmp_path / "c"), "--offline")
    assert code == 2 and "https://github.com/NVIDIA/nccl" in err


def test_check_upstream_identifies_a_catalogued_tree(history: History, tmp_path: Path,
                                                     kernel_upstream: KernelUpstream,
                                                     upstream_blobs: UpstreamBlobs) -> None:
    copy = {f"third_party/nccl/{rel}": text.encode() for rel, text in history.snapshots[K].items()}
    copy["third_party/nccl/src/nccl.h.in"] = b"#define NCCL_MAJOR ${nccl:Major}\n" + PAD.encode()
    copy["third_party/nccl/makefiles/version.mk"] = b"NCCL_MAJOR := 2\n" + PAD.encode()
    upstream_blobs.add("nccl", {rel.removeprefix("third_party/nccl/"): data for rel, data in copy.items()})
    tree = write_tree(tmp_path / "tree", KERNEL_V1, [kernel_entry(kernel_upstream.url, kernel_upstream.added)],
                      files=copy)
    report = check(tree, tmp_path / "cache", mirrors={"https://github.com/NVIDIA/nccl": str(history.path)})
    (found,) = [f for f in report.findings if f.rule_id == "upstream-vendored-identified"]
    assert found.path == f"{IMPL}/third_party/nccl"
    assert (f"closest commit of https://github.com/NVIDIA/nccl: {history.commits[K]}, with 0 file(s) modified, "
            "2 added, 0 removed") in found.message
    assert dict(found.details)["added"] == ["makefiles/version.mk", "src/nccl.h.in"]


def test_manifest_draft_identify_fills_the_vendored_commit(history: History, tmp_path: Path,
                                                           upstream_blobs: UpstreamBlobs) -> None:
    impl = tmp_path / "impl"
    files = {**history.snapshots[20], "src/nccl.h.in": "x\n" + PAD, "makefiles/version.mk": "NCCL_MAJOR := 2\n" + PAD}
    upstream_blobs.add("nccl", files)  # the synthetic history stands for NCCL's
    write_copy(impl / "third_party/nccl", files)
    nccl = "https://github.com/NVIDIA/nccl"
    mirrored = UpstreamSettings(tmp_path / "cache", mirrors={nccl: str(history.path)})
    assert identify(impl / "third_party/nccl", mirrored).commit == history.commits[20]  # fills the cache
    code, out, _ = invoke("manifest", "draft", str(impl), "--identify", "--offline",
                          "--upstream-cache", str(tmp_path / "cache"))
    assert code == 0 and f"    commit: {history.commits[20]}" in out
    assert "  # NCCL (signature of NCCL); 20 native files; closest commit of" in out
    code, out, _ = invoke("manifest", "draft", str(impl), "--identify", "--offline",
                          "--upstream-cache", str(tmp_path / "empty"))
    assert code == 0 and '    commit: "FILL-IN: full 40-hex commit"' in out
    assert "not identified: the cache holds no copy" in out


PATHS = ["a.cu", "b.h", "src/c.cu", "src/d.cc", "src/e/f.cu", "top.md"]
BLOBS = ["1" * 40, "2" * 40, "3" * 40]


@st.composite
def histories(draw: st.DrawFn) -> tuple[BlobIndex, list[dict[str, str]]]:
    """A random DAG of commits (first parents only matter) and every commit's full tree."""
    count = draw(st.integers(1, 25))
    states: list[dict[str, str]] = []
    parents, diffs = [], []
    for i in range(count):
        parent = draw(st.integers(-1, i - 1)) if i else -1
        state = dict(states[parent]) if parent >= 0 else {}
        diff = []
        for path in draw(st.lists(st.sampled_from(PATHS), unique=True, max_size=4)):
            new = draw(st.sampled_from([None, *BLOBS]))
            if state.get(path) != new:
                diff.append((path, state.get(path), new))
                state.pop(path, None) if new is None else state.__setitem__(path, new)
        states.append(state)
        parents.append(parent)
        diffs.append(tuple(diff))
    index = BlobIndex(tuple(f"{i:040x}" for i in range(count)), tuple(parents), tuple(diffs))
    return index, states


@given(histories(), st.dictionaries(st.sampled_from(PATHS), st.sampled_from(BLOBS)), st.sampled_from(["", "src"]))
@settings(max_examples=300, deadline=None)
def test_one_pass_scores_equal_a_comparison_with_every_full_tree(
        history: tuple[BlobIndex, list[dict[str, str]]], copy: dict[str, str], upstream_dir: str) -> None:
    index, states = history
    prefix = f"{upstream_dir}/" if upstream_dir else ""
    local = {p[len(prefix):]: b for p, b in copy.items() if p.startswith(prefix)}
    for score, tree in zip(score_commits(index, local, upstream_dir), states, strict=True):
        mirrored = {p[len(prefix):]: b for p, b in tree.items() if p.startswith(prefix)}
        assert score.equal == sum(mirrored.get(p) == b for p, b in local.items())
        assert score.present == len(set(local) & set(mirrored))
        assert score.upstream_files == len(mirrored)
