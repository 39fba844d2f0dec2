"""The tracked tree stays small (issue 52): every device call carries the working tree, and a clone
should not drag raw benchmark output along. Raw results belong on the ``bench-results`` branch
(``python3 -m benchmarks results_branch FILE... -m MESSAGE``; docs/perf/README.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIMIT_BYTES = 5_000_000  # issue 52's bound on `git ls-files | xargs du -cb`: every tracked file counts
# Data the package ships by design has a cap of its own as well (inside the bound, not beside it): the
# blob catalogue (issue 55, incompressible git blob ids) may grow with the rounds it knows, this far.
SHIPPED_DATA = {"compliance/catalogue/blobs.bin": 650_000}
RESULTS = "benchmarks/results/"


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [name for name in listing.decode().split("\0") if name]


def test_no_raw_benchmark_results_are_tracked() -> None:
    stray = [name for name in _tracked() if name.startswith(RESULTS)]
    assert not stray, (f"{len(stray)} result file(s) under {RESULTS} (first: {stray[0]}): store them on the "
                       "bench-results branch with `python3 -m benchmarks results_branch FILE... -m MESSAGE` and "
                       "`git rm` them here")


def test_the_tracked_tree_stays_under_five_megabytes() -> None:
    sizes = {name: (REPO / name).stat().st_size for name in _tracked() if (REPO / name).is_file()}
    over = {name: sizes[name] for name, cap in SHIPPED_DATA.items() if sizes.get(name, 0) > cap}
    assert not over, f"shipped data over its cap: {over} (caps: {SHIPPED_DATA})"
    total = sum(sizes.values())
    largest = sorted(sizes, key=sizes.__getitem__, reverse=True)[:5]
    assert total <= LIMIT_BYTES, (f"tracked tree {total:,} bytes > {LIMIT_BYTES:,}; largest: "
                                  + ", ".join(f"{name} {sizes[name]:,}" for name in largest))
