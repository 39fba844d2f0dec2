"""The blob catalogue: built from a small git history made here, and the shipped one read back.

The shipped ``blobs.bin`` must be exactly what the build's encoder writes for what it holds (a
rebuild from the same histories gives the same bytes), and ``covered.json`` must record every
project it holds; the build itself is tried on a repository made in the test.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from compliance.blob_catalogue import ID_BYTES, decode, encode, load_blob_catalogue, shipped_path
from compliance.blobs import blob_hash, normalized_blob_hash
from compliance.catalogue.build import COVERED_NAME, build, build_project, catalogued_repositories

KERNEL_V1 = b"__global__ void scale(float* x) { x[0] *= 2.0f; }\n"
KERNEL_V2 = b"__global__ void scale(float* x) { x[0] *= 3.0f; }\n"
KERNEL_DEV = b"__global__ void scale(float* x) { x[0] *= 4.0f; }\n"
HEADER_CRLF = b"#pragma once\r\n__global__ void helper(float* x);\r\n"
DEVICE_ONLY_H = b"#pragma once\n__device__ int lane();\n"
PLAIN_PY = b"print('no kernel here')\n"
TRITON_PY = b"import triton\n@triton.jit\ndef k(x):\n    pass\n"
TVM_PY = b"import tvm\nf = tvm.build(schedule, [A, B], target='cuda')\n"
TVM_CC = b"namespace tvm {\nint answer() { return 42; }\n}  // namespace tvm\n"
MXNET_RTC_PY = b"import mxnet as mx\nmodule = mx.rtc.CudaModule(source)\n"


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _commit(repo: Path, files: dict[str, bytes], message: str, date: str) -> None:
    for rel, data in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    _git(repo, "add", "-A")
    _git(repo, "-c", "core.autocrlf=false", "commit", "-q", "-m", message, f"--date={date}")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with two releases, a commit after them, a CRLF header and a moved file."""
    repo = tmp_path_factory.mktemp("upstream") / "project"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _commit(repo, {"src/scale.cu": KERNEL_V1, "src/helper.h": HEADER_CRLF, "tools/plain.py": PLAIN_PY},
            "one", "2020-01-01T00:00:00")
    _git(repo, "tag", "v1.0")
    _commit(repo, {"src/scale.cu": KERNEL_V2, "tools/fast.py": TRITON_PY, "tools/tvm_build.py": TVM_PY,
                   "src/answer.cc": TVM_CC, "src/lane.h": DEVICE_ONLY_H, "tools/rtc.py": MXNET_RTC_PY},
            "two", "2020-02-01T00:00:00")
    _git(repo, "tag", "-a", "v2.0", "-m", "release 2")
    (repo / "include").mkdir()
    _git(repo, "mv", "src/helper.h", "include/helper.h")
    _commit(repo, {"src/scale.cu": KERNEL_DEV}, "three", "2020-03-01T00:00:00")
    _git(repo, "checkout", "-q", "-b", "pull-request")  # a branch: not covered
    _commit(repo, {"src/scale.cu": b"__global__ void planted() {}\n"}, "four", "2020-04-01T00:00:00")
    _git(repo, "checkout", "-q", "main")
    return repo / ".git"


def test_every_version_of_every_catalogued_file_with_its_paths_and_releases(history: Path) -> None:
    project, record = build_project("https://example.invalid/acme/project", history)
    assert project.versions == ("v1.0", "v2.0")
    for data in (KERNEL_V1, KERNEL_V2, KERNEL_DEV, TRITON_PY, TVM_PY, MXNET_RTC_PY):  # run-time compilers too
        assert project.knows(normalized_blob_hash(data))
    assert not project.knows(blob_hash(TVM_CC))  # TVM's name alone is no kernel
    assert not project.knows(blob_hash(DEVICE_ONLY_H))  # the scan reports no kernel there
    assert project.knows(blob_hash(HEADER_CRLF.replace(b"\r\n", b"\n")))  # kept after CRLF->LF
    assert not project.knows(blob_hash(PLAIN_PY))  # no kernel anchor, no C/C++/CUDA extension
    assert not project.knows(blob_hash(b"__global__ void planted() {}\n"))  # another branch
    assert project.releases_of(blob_hash(KERNEL_V1)) == (0, 0)
    assert project.releases_of(blob_hash(KERNEL_V2)) == (1, 1)
    assert project.releases_of(blob_hash(KERNEL_DEV)) is None  # between releases
    header = project.blobs[bytes.fromhex(normalized_blob_hash(HEADER_CRLF)[:2 * ID_BYTES])]
    assert sorted(project.paths[i] for i in header[0]) == ["include/helper.h", "src/helper.h"]
    assert project.had_path("src/scale.cu") and not project.had_path("src/other.cu")
    assert project.nearest_version("src/scale.cu", 0) == (blob_hash(KERNEL_V1)[:2 * ID_BYTES], "v1.0")
    assert project.identify([blob_hash(KERNEL_V2), normalized_blob_hash(TRITON_PY)]) == (1, 2)
    assert record["tags"] == {"v1.0": _git(history.parent, "rev-parse", "v1.0"),
                              "v2.0": _git(history.parent, "rev-parse", "v2.0^{commit}")}
    assert record["head"] == _git(history.parent, "rev-parse", "main")
    assert record["commits"] == 3 and record["missing_blobs"] == []


def test_encoding_round_trips_and_is_deterministic(history: Path) -> None:
    url = "https://example.invalid/acme/project"
    data, covered = build([url], {url: history}, {}, {})
    again, _ = build([url], {url: history}, {}, {})
    assert data == again
    (project,) = decode(data)
    rebuilt, _ = build_project(url, history)
    assert project == rebuilt
    assert json.loads(covered)["repositories"][url]["blobs"] == len(rebuilt.blobs)


def test_a_repository_without_a_mirror_keeps_what_was_shipped(history: Path) -> None:
    url, other = "https://example.invalid/acme/project", "https://example.invalid/acme/other"
    first, covered = build([url], {url: history}, {}, {})
    (kept,) = decode(first)
    data, record = build([other, url], {}, {url: kept}, json.loads(covered)["repositories"])
    assert decode(data) == (kept,)
    assert json.loads(record)["repositories"][url]["head"] == json.loads(covered)["repositories"][url]["head"]


def test_the_shipped_catalogue_is_what_the_build_writes_for_it() -> None:
    shipped = shipped_path().read_bytes()
    projects = decode(shipped)
    assert encode(projects) == shipped
    covered = json.loads((shipped_path().parent / COVERED_NAME).read_text())
    assert covered["id_bytes"] == ID_BYTES
    assert {p.id for p in projects} == set(covered["repositories"])
    assert set(covered["repositories"]) <= set(catalogued_repositories())
    for project in projects:
        record = covered["repositories"][project.id]
        assert (record["blobs"], len(record["tags"])) == (len(project.blobs), len(project.versions))
    assert len(shipped) < 1_000_000
    assert load_blob_catalogue()["https://github.com/NVIDIA/nccl"].had_path("src/device/generate.py")


def test_a_damaged_catalogue_is_refused() -> None:
    with pytest.raises(ValueError, match="magic"):
        decode(b"not a catalogue")
    with pytest.raises(ValueError, match="decompress"):
        decode(b"MLPCBLOB" + b"\x00" * 20)
