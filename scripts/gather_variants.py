"""Variants of the unpooled gather (suite 6: 262144 rows of a 5M x 128 table) side by side in
one run, for docs/perf-log.md: rows per step, grid size, evict-first output stores, index
prefetch. % copy = compulsory bytes (unique rows, indices, output) / time / copy ceiling."""
import itertools

import torch

import reference_kernels as rk
from reference_kernels import _launch
from reference_kernels.bench import Timer, copy_ceiling_gbps, table, zipf_indices

gen = torch.Generator(device="cuda").manual_seed(6)
timer = Timer(100)
ceiling = copy_ceiling_gbps(timer)
print(f"copy ceiling: {ceiling:.0f} GB/s", flush=True)
for dtype in (torch.float32, torch.bfloat16):
    weight = table(5_000_000, 128, dtype, gen)
    flat = zipf_indices(262144, 5_000_000, 0.0, gen)
    row = 128 * weight.element_size()
    compulsory = int(torch.unique(flat).numel()) * row + flat.numel() * (8 + row)
    for rows, blocks, streaming, prefetch in itertools.product((4, 8), (8, 16), (0, 1), (0, 1)):
        _launch.GATHER_ROWS_IN_FLIGHT, _launch.GATHER_BLOCKS_PER_SM = rows, blocks
        _launch.GATHER_STREAMING_STORES, _launch.GATHER_PREFETCH_INDICES = streaming, prefetch
        us = timer.median_us(lambda: rk.embedding(flat, weight, check_indices=False))
        pct = 100 * compulsory / (us * 1e-6) / 1e9 / ceiling
        print(f"{str(dtype)[6:]:8s} rows/step {rows} blocks/SM {blocks:2d} streaming {streaming} prefetch "
              f"{prefetch}: {us:6.1f} us {pct:5.1f}%", flush=True)
    del weight
