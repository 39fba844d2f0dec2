"""Why the one-hot f32 gather is slower after the benchmark's big-table groups (device
diagnostics for docs/perf-log.md, change 28).

In one process: the gather on a fresh 5M x 128 table; then after the process has held (and
freed) 15 GB of tables, as the two-big-tables group does; then with a multi-GB buffer held, as
the benchmark's same-size copy buffers are; each time also with the same rows in ascending
order (if only the random order slows down, the cost is address translation, not DRAM).
Median of 100 cold calls; every output is compared with torch's."""
import torch
import torch.nn.functional as F

import reference_kernels as rk
from reference_kernels.bench import Suite, table, zipf_indices

suite = Suite(reps=100, quick=False, seed=41)
ROWS, N = 5_000_000, 262144
NBYTES = 2 * N * 512 + N * 8


def measure(state: str) -> None:
    weight = table(ROWS, 128, torch.float32, suite.gen)
    idx = zipf_indices(N, ROWS, 0.0, suite.gen)
    line = [f"{state:52s} table at {weight.data_ptr():#x}"]
    for order, i in (("random", idx), ("ascending", idx.sort().values)):
        with torch.no_grad():
            assert torch.equal(rk.embedding(i, weight, check_indices=False), F.embedding(i, weight))
            us = suite.timer.median_us(lambda: rk.embedding(i, weight, check_indices=False))
        line.append(f"{order} {us:5.1f} us {100 * NBYTES / us / 1e3 / suite.copy_gbps:4.1f}%")
    print(" | ".join(line), flush=True)
    del weight
    torch.cuda.empty_cache()


measure("fresh process")
big = [torch.empty(10_000_000, 192, device="cuda") for _ in range(2)]
measure("15.4 GB of tables held")
del big
torch.cuda.empty_cache()
measure("after 15.4 GB of tables were freed")
held = torch.empty(6 << 30, dtype=torch.uint8, device="cuda")
measure("6 GB buffer held")
del held
torch.cuda.empty_cache()
measure("after the 6 GB buffer was freed")
for gb in (1, 2, 3, 4, 8, 12):
    held = torch.empty(gb << 30, dtype=torch.uint8, device="cuda")
    measure(f"{gb} GB buffer held")
    del held
    torch.cuda.empty_cache()
