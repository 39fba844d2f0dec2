"""Times `compliance check` on published MLPerf results rounds (checked-out trees), one row per round.

Usage: python3 -m benchmarks published_rounds DIR [DIR ...] [--runs 3] [--cores 0,1] [--limit 8]
       [--memory-limit-mb 300] [--rules training/v0.7]

Each DIR is a round's working tree (``git --work-tree=DIR checkout HEAD -- .`` from a mirror of
mlcommons/training_results_vX.Y or inference_results_vX.Y). Every run is a fresh process pinned to
``--cores`` (``taskset``); a first, untimed run warms the page cache. Prints, per round: files,
bytes, each run's wall time and the median, the CPU seconds of the median run (user + system, all
worker processes), the peak resident memory of the largest process, the error and warning counts
and the exit code. Exits 1 when a median exceeds ``--limit`` seconds or a peak exceeds
``--memory-limit-mb``. The CPU seconds say what the wall time would be on free cores (the machine
this was written on was shared: its wall times depend on the load, printed with each row).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    wall_s: float
    cpu_s: float
    peak_mb: float
    exit_code: int
    errors: int
    warnings: int


def _tree_size(tree: Path) -> tuple[int, int]:
    files = size = 0
    for directory, _, names in os.walk(tree):
        for name in names:
            try:
                size += os.lstat(os.path.join(directory, name)).st_size
                files += 1
            except OSError:
                continue
    return files, size


def _run(tree: Path, cores: str, rules: str | None) -> Run:
    command = [sys.executable, "-m", "compliance", "check", str(tree), "--format", "json"]
    if rules:
        command += ["--rules", rules]
    if cores and shutil.which("taskset"):
        command = ["taskset", "-c", cores, *command]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    with tempfile.TemporaryFile() as errors_file:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors_file, env=env)
        assert process.stdout is not None
        output = process.stdout.read()
        process.stdout.close()
        # wait4 gives this run's own usage: its CPU and its largest process (workers included)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    try:
        summary = json.loads(output)["summary"]
        errors, warnings = summary["errors"], summary["warnings"]
    except (ValueError, KeyError):
        errors = warnings = -1
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, process.returncode, errors, warnings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cores", default="0,1", help="CPU list for taskset ('' for all)")
    parser.add_argument("--limit", type=float, default=8.0, help="seconds a median may take")
    parser.add_argument("--memory-limit-mb", type=float, default=300.0)
    parser.add_argument("--rules", default=None, help="rule set for every tree (default: detected)")
    args = parser.parse_args()
    failed = False
    print("| round | files | GB | runs (s) | median (s) | CPU-s | peak MB | errors | warnings | exit | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for tree in args.trees:
        files, size = _tree_size(tree)
        _run(tree, args.cores, args.rules)  # warms the page cache
        runs = [_run(tree, args.cores, args.rules) for _ in range(args.runs)]
        median = statistics.median(r.wall_s for r in runs)
        middle = min(runs, key=lambda r: abs(r.wall_s - median))
        peak = max(r.peak_mb for r in runs)
        print(f"| {tree.name} | {files} | {size / 1e9:.2f} | {', '.join(f'{r.wall_s:.2f}' for r in runs)} | "
              f"{median:.2f} | {middle.cpu_s:.2f} | {peak:.0f} | {middle.errors} | {middle.warnings} | "
              f"{middle.exit_code} | {os.getloadavg()[0]:.1f} |")
        failed |= median > args.limit or peak > args.memory_limit_mb
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
