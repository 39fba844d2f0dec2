"""Where the fused backward's time goes: per-kernel GPU time of one step (torch.profiler).

    python3 -m benchmarks backward_breakdown [--out breakdown.txt]

Cases: the large uniform ones of benchmarks/experiments/sparse_backward.py with SGD (4M x 128 B6912
L100, 10M x 192 B65536 L32), the update inside the passes and in two steps. Each step's
kernels are listed with their GPU time (mean of 5 steps after a warm-up), so the gap to the
byte floor can be assigned to the lookups' bookkeeping, the sort, the passes and the update.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.harness import zipf_indices
from reference_kernels import optim
from reference_kernels.tbe import TableBatchedEmbeddingBag
from reference_kernels.tuning import tuned

CASES = [("4Mx128 B6912 L100", 4_000_000, 128, 6912, 100), ("10Mx192 B65536 L32", 10_000_000, 192, 65536, 32)]
STEPS = 5


def breakdown(rows: int, dim: int, batch: int, pooling: int, in_passes: bool) -> str:
    gen = torch.Generator(device="cuda").manual_seed(0)
    module = TableBatchedEmbeddingBag([rows], dim, device="cuda", optimizer=optim.SGD(lr=0.01))
    module.check_indices = False
    indices = zipf_indices(batch * pooling, rows, 0.0, gen)
    offsets = torch.arange(0, indices.numel() + 1, pooling, device="cuda")
    out = module(indices, offsets)
    grad = torch.randn(out.shape, generator=gen, device="cuda")
    with tuned(fuse_into_passes=in_passes):
        for _ in range(3):
            out.backward(grad, retain_graph=True)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(STEPS):
                out.backward(grad, retain_graph=True)
            torch.cuda.synchronize()
    lines = []
    total = 0.0
    for event in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
        per_step = event.device_time_total / STEPS
        if per_step <= 0:
            continue
        total += per_step
        lines.append(f"  {per_step:9.1f} us  x{event.count // STEPS:<3d} {event.key[:110]}")
    return "\n".join([f"  {total:9.1f} us  kernels in total per step"] + lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    parts = []
    for name, rows, dim, batch, pooling in CASES:
        for in_passes in (True, False):
            title = f"{name} SGD, update {'inside the passes' if in_passes else 'in two steps'}"
            parts.append(f"{title}\n{breakdown(rows, dim, batch, pooling, in_passes)}\n")
            print(parts[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
