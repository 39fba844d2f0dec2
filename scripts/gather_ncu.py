"""Four one-hot gathers for Nsight Compute (run 39, h200-run39-gather-span.txt): 262144 rows of a
5M x 128 float32 table, uniform; the same indices ascending; a permutation of rows 0..262143;
262144 distinct rows of the first 4M. Run as
ncu --kernel-name embedding_gather --cache-control all --metrics ... python3 scripts/gather_ncu.py"""
import torch

import reference_kernels as rk

gen = torch.Generator(device="cuda").manual_seed(3)
weight = torch.randn(5_000_000, 128, device="cuda", generator=gen)
uniform = torch.randint(0, 5_000_000, (262144,), device="cuda", generator=gen)
for idx in (uniform, uniform.sort().values, torch.randperm(262144, device="cuda", generator=gen),
            torch.randperm(1 << 22, device="cuda", generator=gen)[:262144]):
    rk.embedding(idx, weight, check_indices=False)
torch.cuda.synchronize()
