"""How fast can random rows of 128 bytes be read at all? (device diagnostics for
docs/perf/change-42.md: the evidence behind the 64-128 B target's misses.)

The 64-128 B target (75 % of the copy ceiling, compulsory bytes) is met by none of the
sweep's 18 float32 d32 cases: 10 are too small for a same-size copy to reach 75 %, the other
8 re-read rows. This script asks the question without either excuse: 1 GiB float32 tables
(8M x 32, 4M x 64, 2M x 128, 1M x 256), 256 MB of rows read per case, every row distinct
(a random permutation's prefix: no re-reads), in random order and sorted ascending (the same
rows). Per row size, side by side, median of 100 cold calls (the benchmark's L2 flush):

* ``gather``: the package's unpooled lookup (rk.embedding: the register gather below 256 B,
  the bulk-copy gather from 256 B), and the other path forced (``register`` / ``bulk``);
* ``pooled``: the package's embedding_bag, sum over fixed bags of 64 distinct rows (reads
  the rows, writes 1/64 of them);
* torch's F.embedding and F.embedding_bag on the same calls;
* a copy of each case's own compulsory bytes.

Percentages are of the copy ceiling measured in the same run, over compulsory bytes (rows,
indices, output) as the benchmark counts them. ``--ncu`` instead runs each gather once, for
Nsight Compute's DRAM counters (bytes read and written, achieved DRAM throughput)."""
import sys

import torch
import torch.nn.functional as F

import reference_kernels as rk
from benchmarks.harness import Suite, table
from reference_kernels.tuning import tuned

DEV = "cuda"
TABLE_BYTES = 1 << 30
READ_BYTES = 256 << 20
POOLING = 64
DIMS = (32, 64, 128, 256)


def distinct_rows(rows: int, n: int, gen: torch.Generator, ascending: bool) -> torch.Tensor:
    idx = torch.randperm(rows, generator=gen, device=DEV)[:n]
    return idx.sort().values if ascending else idx


def forced(path: str, fn):  # type: ignore[no-untyped-def]
    """fn with the gather's path forced: "register" (no bulk copies) or "bulk" (bulk copies
    for any row size the bulk gather takes), or as the launcher picks ("package")."""
    knobs = {"register": {"bulk_min_arch": 10**6}, "bulk": {"bulk_gather_min_row_bytes": 0}}.get(path, {})

    def call() -> torch.Tensor:
        with tuned(**knobs):
            return fn()
    return call


def row_size(suite: Suite, dim: int) -> None:
    row = dim * 4
    rows, n = TABLE_BYTES // row, READ_BYTES // row
    weight = table(rows, dim, torch.float32, suite.gen)
    for ascending in (False, True):
        idx = distinct_rows(rows, n, suite.gen, ascending)
        order = "sorted" if ascending else "random"
        gather_bytes = n * (2 * row + 8)
        expected = F.embedding(idx, weight)
        cells = []
        for path in ("package", "register", "bulk"):
            fn = forced(path, lambda i=idx, w=weight: rk.embedding(i, w, check_indices=False))
            assert torch.equal(fn(), expected), (dim, path)
            us = suite.timer.median_us(fn)
            cells.append(f"{path} {us:6.1f} us {suite.pct_of_copy(gather_bytes, us):5.1f}%")
        us = suite.timer.median_us(lambda i=idx, w=weight: F.embedding(i, w))
        cells.append(f"torch {us:6.1f} us {suite.pct_of_copy(gather_bytes, us):5.1f}%")
        copy = suite.same_size_copy_us(gather_bytes)
        cells.append(f"copy {suite.pct_of_copy(gather_bytes, copy):5.1f}%")
        print(f"d{dim:<3d} {row:4d} B rows, {n:8d} {order:6s} gather | " + " | ".join(cells), flush=True)

        bags = idx.view(-1, POOLING)
        pooled_bytes = n * (row + 8) + bags.shape[0] * row
        expected = F.embedding_bag(bags, weight, mode="sum")
        torch.testing.assert_close(rk.embedding_bag(bags, weight, mode="sum", check_indices=False), expected,
                                   rtol=1e-4, atol=1e-4)
        ours = suite.timer.median_us(lambda b=bags, w=weight: rk.embedding_bag(b, w, mode="sum", check_indices=False))
        theirs = suite.timer.median_us(lambda b=bags, w=weight: F.embedding_bag(b, w, mode="sum"))
        copy = suite.same_size_copy_us(pooled_bytes)
        print(f"d{dim:<3d} {row:4d} B rows, {n:8d} {order:6s} pooled L{POOLING} | ours {ours:6.1f} us "
              f"{suite.pct_of_copy(pooled_bytes, ours):5.1f}% | torch {theirs:6.1f} us "
              f"{suite.pct_of_copy(pooled_bytes, theirs):5.1f}% "
              f"| copy {suite.pct_of_copy(pooled_bytes, copy):5.1f}%", flush=True)
    del weight
    torch.cuda.empty_cache()


def profile_once() -> None:
    """Each random-order gather once per path, for ncu (no flush, no timing loop)."""
    gen = torch.Generator(device=DEV).manual_seed(42)
    for dim in DIMS:
        rows, n = TABLE_BYTES // (dim * 4), READ_BYTES // (dim * 4)
        weight = table(rows, dim, torch.float32, gen)
        idx = distinct_rows(rows, n, gen, False)
        for path in ("register", "bulk"):
            forced(path, lambda i=idx, w=weight: rk.embedding(i, w, check_indices=False))()
        torch.cuda.synchronize()
        print(f"d{dim}: {n} rows gathered by the register and the bulk path", flush=True)
        del weight
        torch.cuda.empty_cache()


def main() -> None:
    if "--ncu" in sys.argv:
        profile_once()
        return
    suite = Suite(reps=100, quick=False, seed=42)
    print(f"copy ceiling {suite.copy_gbps:.0f} GB/s; % of copy in compulsory bytes", flush=True)
    with torch.no_grad():
        for dim in DIMS:
            row_size(suite, dim)


if __name__ == "__main__":
    main()
