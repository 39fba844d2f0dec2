"""Times `compliance check` on a synthetic whole round: every benchmark of a rule set,
many submitters, no manifest (so the round is detected from the tree, as a user's
first run would).

Usage: python3 -m benchmarks round_speed [--ruleset training/v5.1] [--submitters 19]
       [--files 20000] [--runs 3] [--cores 0,1] [--limit 10]
Prints each run's wall time and the median; exits 1 if the median exceeds --limit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # compliance and tests.compliance from this checkout, however it is started

from compliance.ruleset import load_ruleset  # noqa: E402
from tests.compliance.roundgen import write_round  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ruleset", default="training/v5.1")
    parser.add_argument("--submitters", type=int, default=19)
    parser.add_argument("--files", type=int, default=20_000, help="about this many files in all")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cores", default="0,1", help="CPU list for taskset ('' for all)")
    parser.add_argument("--limit", type=float, default=10.0)
    args = parser.parse_args()
    ruleset = load_ruleset(args.ruleset)
    per_benchmark = max(1, args.files // (args.submitters * len(ruleset.benchmarks)) - 6)
    work = Path(tempfile.mkdtemp(prefix="round-speed-"))
    try:
        tree = write_round(work / "round", ruleset, args.submitters, per_benchmark)
        files = sum(len(f) for _, _, f in os.walk(tree))
        command = [sys.executable, "-m", "compliance", "check", str(tree)]
        if args.cores and shutil.which("taskset"):
            command = ["taskset", "-c", args.cores, *command]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            times.append(time.perf_counter() - start)
            if done.returncode not in (0, 1):
                print(done.stderr, file=sys.stderr)
                return 2
        summary = done.stdout.strip().splitlines()[-1]
        print(f"{args.ruleset}: {args.submitters} submitters, {files} files; cores {args.cores or 'all'}")
        print("runs: " + ", ".join(f"{t:.2f} s" for t in times))
        print(f"median {statistics.median(times):.2f} s (limit {args.limit} s); {summary[:160]}")
        return 0 if statistics.median(times) <= args.limit else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
