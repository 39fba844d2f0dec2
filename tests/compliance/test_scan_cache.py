"""The scan cache repeats what the same code found in the same, unchanged file, and nothing else."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from compliance import inventory, scan_cache
from compliance.engine import run_check
from compliance.model import CheckOptions
from compliance.report.json_report import report_dict
from tests.compliance.test_inventory import make
from tests.compliance.test_round_report import kernel
from tests.compliance.treeutil import archive_bytes, fake_binary, tree_digest

SETUP = ("from setuptools import setup\nfrom torch.utils.cpp_extension import CUDAExtension\n"
         "setup(name='x', ext_modules=[CUDAExtension('fast', ['csrc/fast.cu', 'csrc/gone.cu'])])\n")


def _tree(root: Path) -> Path:
    base = "Acme/benchmarks/dlrm/implementations/torch"
    return make(root, {
        "Acme/systems/sys1.json": "{}\n", "Acme/results/sys1/dlrm/result_0.txt": ":::MLLOG {}\n",
        f"{base}/csrc/fast.cu": kernel("fast"), f"{base}/setup.py": SETUP,
        f"{base}/lib/blob.so": fake_binary("elf-so"),
        f"{base}/dist/k.whl": archive_bytes({"format": "zip", "members": {"pkg/k.cu": kernel("inner")}}),
        f"{base}/notes.txt": "nothing here\n"})


def _report(root: Path, cache: Path | None) -> dict:
    found = report_dict(run_check(root, CheckOptions(rules="training/v0.7", scan_cache=cache)))
    found.pop("root")
    return found


def test_a_warm_cache_gives_the_same_report_without_reading_unchanged_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, cache = _tree(tmp_path / "round"), tmp_path / "cache"
    cold = _report(root, None)
    assert _report(root, cache) == cold
    stored = json.loads(next(cache.iterdir()).read_text())
    assert stored["fingerprint"] == scan_cache.fingerprint() and len(stored["entries"]) == 7
    before = tree_digest(root)
    read: list[str] = []
    original = inventory._read_stream
    monkeypatch.setattr(inventory, "_read_stream", lambda fd, size, rel, *rest: (read.append(rel),
                                                                                  original(fd, size, rel, *rest)))
    assert _report(root, cache) == cold and read == []  # every entry replayed, no file read
    assert tree_digest(root) == before


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    root, cache = _tree(tmp_path / "round"), tmp_path / "cache"
    _report(root, cache)
    notes = root / "Acme/benchmarks/dlrm/implementations/torch/notes.txt"
    stat = notes.stat()
    notes.write_text("__global__ void hidden(float* x) { x[0] = 2.f; }\n")
    os.utime(notes, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the old mtime: ctime still moves
    found = _report(root, cache)
    assert any(f["path"].endswith("notes.txt") and f["rule_id"] == "undeclared-kernel" for f in found["findings"])
    assert found == _report(root, None)


def test_a_foreign_or_damaged_cache_is_ignored(tmp_path: Path) -> None:
    root, cache = _tree(tmp_path / "round"), tmp_path / "cache"
    cold = _report(root, None)
    path = scan_cache.cache_path(cache, root)
    path.parent.mkdir(parents=True)
    path.write_text('{"fingerprint": "someone else", "entries": {"Acme/systems/sys1.json": "0:0:0:0:0"}}')
    assert _report(root, cache) == cold
    path.write_text("{not json")
    assert _report(root, cache) == cold
    # entries this code did not make from these files (right fingerprint, wrong file identity)
    forged = {p.relative_to(root).as_posix(): ["1:2:3:4:5", {"native": {"x.cu": [["cuda", 1]]}}]
              for p in root.rglob("*") if p.is_file()}
    path.write_text(json.dumps({"fingerprint": scan_cache.fingerprint(), "entries": forged}))
    assert _report(root, cache) == cold


def test_a_cache_directory_inside_the_checked_tree_is_not_used(tmp_path: Path) -> None:
    root = _tree(tmp_path / "round")
    before = tree_digest(root)
    _report(root, root / "Acme" / ".cache")
    assert tree_digest(root) == before
