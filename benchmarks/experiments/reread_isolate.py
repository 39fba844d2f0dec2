"""The re-reading cases on their own indices and on the same bag shape with every row
distinct (device diagnostics for docs/perf/change-42.md).

The benchmark files a missed case under "re-reads rows" when its logical bytes exceed its
compulsory bytes by 10 % or more. That is a fact about the case, not proof that the re-reads
are the miss (change 38). Here each such uniform case (float32 sum, fixed layout) runs side
by side, median of 100 cold calls, on

* ``own``: the benchmark's draw (B x L uniform rows of a 1M-row table);
* ``distinct``: B x L distinct rows in random order (a random permutation's prefix) of a
  table of max(1M, B x L) rows: the same bags, the same count of random row reads, no re-reads;

and next to each, a copy of that call's own compulsory bytes. If ``distinct`` reaches its
copy's rate (less a bag shape's own cost), the kernel reads such bags at the rate the bytes
allow, and what separates ``own`` from the target is the re-reads; if it does not, the kernel
is part of the miss.

Percentages are of the copy ceiling measured in the same run, in compulsory bytes (unique
rows, indices, output) as the benchmark counts them."""
import torch
import torch.nn.functional as F

import reference_kernels as rk
from benchmarks.harness import Suite, bag_bytes, bag_indices, table

DEV = "cuda"
ROWS = 1_000_000
# (dim, batch, pooling)
CASES = [(32, 32768, 16), (32, 32768, 64), (32, 131072, 16), (32, 131072, 64),
         (128, 32768, 16), (128, 32768, 64), (128, 131072, 16), (128, 16384, 20)]


def timed(suite: Suite, weight: torch.Tensor, idx: torch.Tensor) -> str:
    expected = F.embedding_bag(idx, weight, mode="sum")
    torch.testing.assert_close(rk.embedding_bag(idx, weight, mode="sum", check_indices=False), expected,
                               rtol=1e-4, atol=1e-4)
    us = suite.timer.median_us(lambda: rk.embedding_bag(idx, weight, mode="sum", check_indices=False))
    comp, logical = bag_bytes(weight, idx, None, False, idx.shape[0] * weight.shape[1])
    copy = suite.same_size_copy_us(comp)
    return (f"{us:7.1f} us {suite.pct_of_copy(comp, us):5.1f}% (reuse {logical / comp:4.2f}, {comp / 1e6:6.1f} MB; "
            f"same-size copy {suite.pct_of_copy(comp, copy):5.1f}%)")


def main() -> None:
    suite = Suite(reps=100, quick=False, seed=42)
    print(f"copy ceiling {suite.copy_gbps:.0f} GB/s; % of copy in compulsory bytes", flush=True)
    with torch.no_grad():
        for dim, batch, pooling in CASES:
            weight = table(ROWS, dim, torch.float32, suite.gen)
            own, _ = bag_indices(batch, pooling, ROWS, 0.0, False, suite.gen)
            line = f"d{dim} B{batch} L{pooling}: own {timed(suite, weight, own)}"
            rows = max(ROWS, batch * pooling)
            if rows > ROWS:
                del weight
                torch.cuda.empty_cache()
                weight = table(rows, dim, torch.float32, suite.gen)
            distinct = torch.randperm(rows, generator=suite.gen, device=DEV)[:batch * pooling].view(batch, pooling)
            print(f"{line} | distinct ({rows // 1000}K rows) {timed(suite, weight, distinct)}", flush=True)
            del weight
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
