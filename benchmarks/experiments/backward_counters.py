"""Nsight Compute counters of one fused backward + SGD step (the kernels issue 24's targets miss on).

    ncu --profile-from-start off --metrics METRICS python3 -m benchmarks backward_counters

(METRICS: the list in bench-results:benchmarks/results/INDEX.md's row for ncu-backward-sgd.txt.)

Case: suite 3's table (10M x 192 float32, B65536, L32, uniform indices) and the 4M x 128
B6912 L100 table, SGD fused into the backward (the default path). Three warm-up steps, then
one step between cudaProfilerStart/Stop, so ncu profiles exactly that step's kernels.
"""

from __future__ import annotations

import torch

from reference_kernels import optim
from reference_kernels.tbe import TableBatchedEmbeddingBag

CASES = [("10Mx192 B65536 L32", 10_000_000, 192, 65536, 32), ("4Mx128 B6912 L100", 4_000_000, 128, 6912, 100)]


def one_step(rows: int, dim: int, batch: int, pooling: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    module = TableBatchedEmbeddingBag([rows], dim, device="cuda", optimizer=optim.SGD(lr=0.01))
    module.check_indices = False
    indices = torch.randint(0, rows, (batch * pooling,), generator=gen, device="cuda")
    offsets = torch.arange(0, indices.numel() + 1, pooling, device="cuda")
    out = module(indices, offsets)
    grad = torch.randn(out.shape, generator=gen, device="cuda")
    for _ in range(3):
        out.backward(grad, retain_graph=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    out.backward(grad, retain_graph=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def main() -> int:
    for name, rows, dim, batch, pooling in CASES:
        print(f"== {name}", flush=True)
        one_step(rows, dim, batch, pooling)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
