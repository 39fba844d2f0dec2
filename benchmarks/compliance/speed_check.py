"""Times `compliance check` on a synthetic 20,000-file tree (a few hundred .cu among them).

Usage: python3 -m benchmarks speed_check [--files 20000] [--runs 5] [--keep DIR]
Prints each run's wall time and the median; exits 1 if the median exceeds --limit seconds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNEL = 'extern "C" __global__ void k{n}(float* x) {{ x[threadIdx.x] += {n}; }}\n'
PY = "def f{n}(x):\n    return x + {n}\n" * 3


def generate(root: Path, files: int, seed: int = 0) -> None:
    """An organization with a declared kernel, a vendored framework copy and bulk files."""
    rng = random.Random(seed)
    org = root / "Acme"
    impl = org / "benchmarks" / "dlrm" / "implementations" / "pytorch"
    (org / "systems").mkdir(parents=True)
    (org / "systems" / "sys.json").write_text("{}")
    for n in range(5):
        result = org / "results" / "sys" / "dlrm" / f"result_{n}.txt"
        result.parent.mkdir(parents=True, exist_ok=True)
        result.write_text(":::MLLOG {}\n" * 200)
    (impl / "kernels").mkdir(parents=True)
    (impl / "kernels" / "emb.cu").write_text(KERNEL.format(n=0))
    (impl / "kernel_manifest.yaml").write_text(
        "manifest_version: 1\nruleset: training/v0.7\nkernels:\n  - id: emb\n    category: dlrm-embedding\n"
        "    language: cuda\n    sources: [kernels/emb.cu]\n    entry_symbols: [k0]\n"
        "    semantics: {op: embedding_bag, modes: [sum], layouts: [fixed]}\n"
        "vendored:\n  - path: third_party/framework\n    repository: https://github.com/example/framework\n"
        "    commit: 0123456789abcdef0123456789abcdef01234567\n")
    vendored = impl / "third_party" / "framework"
    made = 9
    for n in range(400):  # a few hundred .cu in the vendored copy
        path = vendored / f"mod{n % 20}" / f"k{n}.cu"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(KERNEL.format(n=n) * rng.randint(1, 40))
        made += 1
    while made < files:
        path = vendored / f"py{made % 200}" / f"m{made}.{rng.choice(['py', 'h', 'txt', 'json'])}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(PY.format(n=made) * rng.randint(1, 30))
        made += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--limit", type=float, default=3.0)
    parser.add_argument("--keep", type=Path, help="generate the tree here and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "tree"
        generate(root, args.files)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            result = subprocess.run([sys.executable, "-m", "compliance", "check", str(root)],
                                    capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            if result.returncode not in (0, 1):  # 1: findings (the declared copy's repository is no
                print(result.stdout[-2000:], result.stderr[-2000:])  # catalogued upstream: its kernels
                return 2  # are reported); 2 and more: the check did not complete
        median = statistics.median(times)
        print(f"files={args.files} runs={' '.join(f'{t:.2f}s' for t in times)} median={median:.2f}s "
              f"(limit {args.limit:.1f}s, whole process incl. interpreter start)")
        return 0 if median <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
