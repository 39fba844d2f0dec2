"""Timing of `identify` on a long synthetic history (not part of the test run).

    PYTHONPATH=$PWD python3 -m tests.upstream.identify_timing --commits 20000 --files 500

Builds the history with ``git fast-import`` (tests/upstream/history.py), then
identifies a copy of commit k with two files changed: once with an empty cache
(fetch + blob index built) and once more (index read from the cache).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from compliance.upstream.identify import identify
from compliance.upstream.settings import UpstreamSettings
from tests.upstream.history import build_history, write_copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--commits", type=int, default=20000)
    parser.add_argument("--files", type=int, default=500)
    args = parser.parse_args()
    os.environ.update({"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})
    k = args.commits * 2 // 3
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        history = build_history(root / "up.git", args.commits, args.files, snapshots=(k,))
        built = time.perf_counter() - start
        files = dict(history.snapshots[k])
        files["src/f1.cu"] += "// changed\n"
        files["include/h2.h"] += "// changed\n"
        copy = write_copy(root / "copy", files)
        timings = []
        for offline, drop_index in ((False, False), (True, True), (True, False)):
            if drop_index:
                next((root / "cache").rglob("compliance-blob-index")).unlink()
            start = time.perf_counter()
            found = identify(copy, UpstreamSettings(root / "cache", offline), str(history.path))
            timings.append(time.perf_counter() - start)
            assert found.commit == history.commits[k], found.describe()
            assert sorted(m.path for m in found.modified) == ["include/h2.h", "src/f1.cu"]
        index = next((root / "cache").rglob("compliance-blob-index"))
        print(f"history: {args.commits} commits, {2 * args.files + 1}+ files, built in {built:.1f} s; "
              f"copy of commit {k} ({len(files)} files, 2 changed)")
        print(f"identify, empty cache (git fetch of every branch and tag + index + search): {timings[0]:.2f} s")
        print(f"identify, offline, index rebuilt (git log --raw + parse + search):         {timings[1]:.2f} s "
              f"(index {index.stat().st_size / 1e6:.1f} MB)")
        print(f"identify, offline, index cached (search only):                             {timings[2]:.2f} s")
        print(found.describe())


if __name__ == "__main__":
    main()
