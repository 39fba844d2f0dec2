"""Suite 1's time split into a fixed cost and a streaming rate (device diagnostics for
docs/perf-log.md, change 29).

B2048 bags of L = 75, 150, 300, 600 and 1200 uniform rows of a 5M x 128 table (f32 and bf16),
each next to a copy of the same bytes (cudaMemcpy, rounded to 32 KB as the benchmark's
same-size copy). A least-squares line time = fixed + bytes / rate through each set gives the
fixed cost (launch, ramp, tail) and the streaming rate: if our rate matches the copy's and
our fixed cost is larger, suite 1's distance to the copy is the fixed cost, not the kernel's
steady state. Median of 100 cold calls."""
import statistics

import torch

import reference_kernels as rk
from reference_kernels.bench import Suite, bag_bytes, copy_bytes, table, zipf_indices

suite = Suite(reps=100, quick=False, seed=59)
POOLINGS = (75, 150, 300, 600, 1200)


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares time_us = fixed + nbytes / rate: (fixed us, rate GB/s)."""
    xs, ys = [b for b, _ in points], [t for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, 1e-3 / slope


for dtype in (torch.float32, torch.bfloat16):
    weight = table(5_000_000, 128, dtype, suite.gen)
    ours, copies = [], []
    for pooling in POOLINGS:
        idx = zipf_indices(2048 * pooling, 5_000_000, 0.0, suite.gen).view(2048, pooling)
        comp, logical = bag_bytes(weight, idx, None, False, 2048 * 128)
        with torch.no_grad():
            us = suite.timer.median_us(lambda: rk.embedding_bag(idx, weight, check_indices=False))
        copy_us = suite.same_size_copy_us(logical)
        ours.append((logical, us))
        copies.append((copy_bytes(logical), copy_us))
        pct = 100 * logical / us / 1e3 / suite.copy_gbps
        print(f"{str(dtype)[6:]:8s} B2048 L{pooling:<5d} logical {logical / 1e6:7.1f} MB: ours {us:7.1f} us "
              f"({pct:5.1f}% logical) | copy of those bytes {copy_us:7.1f} us", flush=True)
    (f_ours, r_ours), (f_copy, r_copy) = fit(ours), fit(copies)
    print(f"{str(dtype)[6:]:8s} fit: ours fixed {f_ours:5.2f} us, rate {r_ours:5.0f} GB/s | copy fixed {f_copy:5.2f} us, "
          f"rate {r_copy:5.0f} GB/s (ceiling {suite.copy_gbps:.0f})", flush=True)
    del weight
    torch.cuda.empty_cache()
