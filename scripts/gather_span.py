"""Why the one-hot f32 gather stops at 83-88 % of copy (device diagnostics for docs/perf-log.md, change 28).

The same rows read in a different order, and random rows spread over a smaller or larger part
of the table, side by side in one process: if a gather of rows in random order over a small
span runs as fast as a copy while the same gather over the whole 2.56 GB table does not, the
distance is the table's span (address translation and DRAM pages that a random order cannot
reuse), not the kernel's code. Also the same case with the table allocated at different
places, since the bench's figure moves between processes (70-75 us). Suite 1's bag kernel gets
the same span sweep. Median of 100 cold calls (the benchmark's Timer: L2 flushed, head start);
every output is compared with torch's."""
from typing import Callable

import torch
import torch.nn.functional as F

import reference_kernels as rk
from reference_kernels.bench import Suite, table, zipf_indices

suite = Suite(reps=100, quick=False, seed=29)
ROWS, N = 5_000_000, 262144


def pct(nbytes: int, us: float) -> float:
    return 100 * nbytes / (us * 1e-6) / 1e9 / suite.copy_gbps


def gather_bytes(weight: torch.Tensor, idx: torch.Tensor) -> int:
    row = weight.shape[1] * weight.element_size()
    return int(torch.unique(idx).numel()) * row + idx.numel() * (idx.element_size() + row)


def timed(label: str, fn: Callable[[], torch.Tensor], ref: Callable[[], torch.Tensor], nbytes: int,
          tol: float = 0.0) -> None:
    with torch.no_grad():
        torch.testing.assert_close(fn(), ref(), rtol=tol, atol=tol)
        ours, theirs = suite.timer.median_us(fn), suite.timer.median_us(ref)
    copy = suite.same_size_copy_us(nbytes)
    print(f"{label:58s} ours {ours:7.1f} us {pct(nbytes, ours):5.1f}% | torch {theirs:7.1f} us "
          f"{pct(nbytes, theirs):5.1f}% | same-size copy {copy:6.1f} us {pct(nbytes, copy):5.1f}%", flush=True)


def gather_case(label: str, weight: torch.Tensor, idx: torch.Tensor) -> None:
    timed(f"gather {label}", lambda: rk.embedding(idx, weight, check_indices=False),
          lambda: F.embedding(idx, weight), gather_bytes(weight, idx))


def distinct(span: int, n: int) -> torch.Tensor:
    """n distinct rows of the first span rows, in random order (reuse 1 at every span)."""
    return torch.randperm(span, generator=suite.gen, device="cuda")[:n]


print(f"copy ceiling {suite.copy_gbps:.0f} GB/s", flush=True)
for dtype in (torch.float32, torch.bfloat16):
    name = str(dtype)[6:]
    weight = table(ROWS, 128, dtype, suite.gen)
    uniform = zipf_indices(N, ROWS, 0.0, suite.gen)
    gather_case(f"{name} uniform over 5M rows (the bench's case)", weight, uniform)
    gather_case(f"{name} the same indices, ascending", weight, uniform.sort().values)
    for span in (N, 1 << 20, 1 << 21, 1 << 22, ROWS):
        gather_case(f"{name} {N} distinct rows of the first {span}, random order", weight, distinct(span, N))
    gather_case(f"{name} rows 0..{N - 1} in order", weight, torch.arange(N, device="cuda"))
    del weight
    torch.cuda.empty_cache()

# the table at other places: behind a spacer held meanwhile, then after the allocator's cache is freed
spacers: list[torch.Tensor] = []
for spacer_gb in (0, 3, 7, 1):
    if spacer_gb:
        spacers.append(torch.empty(spacer_gb << 30, dtype=torch.uint8, device="cuda"))
    weight = table(ROWS, 128, torch.float32, suite.gen)
    uniform = zipf_indices(N, ROWS, 0.0, suite.gen)
    gather_case(f"float32 uniform, table at {weight.data_ptr():#x}", weight, uniform)
    del weight
    torch.cuda.empty_cache()
spacers.clear()
torch.cuda.empty_cache()

# suite 1 (B2048 L150 sum f32): 307200 distinct rows spread over a growing part of the table
weight = table(ROWS, 128, torch.float32, suite.gen)
for span in (2048 * 150, 1 << 20, 1 << 21, 1 << 22, ROWS):
    idx = distinct(span, 2048 * 150).view(2048, 150)
    comp = 2048 * 150 * (512 + 8) + 2048 * 512
    timed(f"suite1 sum f32, distinct rows of the first {span}", lambda: rk.embedding_bag(idx, weight,
          check_indices=False), lambda: F.embedding_bag(idx, weight), comp, 2e-2)
