"""What do re-read rows cost the uniform cases that miss their target? (device diagnostics for
docs/perf/change-38.md.)

The benchmark counts compulsory bytes: each distinct row once. With uniform indices over a table
far larger than the L2, two lookups of the same row are far apart in time, so the row comes from
DRAM twice; the summary files such cases (reuse >= 1.10) under "rows re-read". This script
isolates that cause: each case is timed side by side (median of 100 cold calls, the benchmark's
L2 flush) on its own indices and on the same indices sorted, laid out in the same bags. Sorted,
every repeat of a row follows its first read at once (an L1 or L2 hit) and the distinct rows are
read in ascending order, so the sorted figure bounds what any reordering of the lookups could
reach. Next to it: the cost of that sort (torch.sort of the flat indices, values and permutation,
as an op that reorders would need; cold, as the lookup), and a copy of the case's compulsory
bytes. The multi-table cases sort each table's indices within its own segment.

``--ncu``: d128 B131072 L1 and d128 B32768 L16 (1M-row table, float32), each on its own then on
sorted indices, one call each, for Nsight Compute (DRAM bytes against compulsory bytes)::

    ncu --kernel-name regex:embedding --cache-control all --clock-control none
    --metrics dram__bytes_read.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,
    l1tex__t_sector_hit_rate.pct python3 -m benchmarks reread_bound --ncu"""
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

import reference_kernels as rk
from benchmarks.harness import (
    DCN_POOLING,
    DCN_ROW_CAP,
    DCN_ROWS,
    Suite,
    bag_bytes,
    table,
    table_batch,
    table_batch_bytes,
    zipf_indices,
)
from reference_kernels.tbe import TableBatchedEmbeddingBag

DEV = "cuda"
# (label, table rows, dim, batch, pooling): every uniform single-table case of the target sets
# whose reuse is 1.05 or more in run 72, and suite 1 (reuse 1.03) for reference.
SINGLE = [
    ("1 5Mx128 B2048 L150", 5_000_000, 128, 2048, 150),
    ("0 1Mx128 B16384 L20", 1_000_000, 128, 16384, 20),
    ("4 d128 B131072 L1", 1_000_000, 128, 131072, 1),
    ("4 d128 B32768 L16", 1_000_000, 128, 32768, 16),
    ("4 d128 B32768 L64", 1_000_000, 128, 32768, 64),
    ("4 d128 B131072 L16", 1_000_000, 128, 131072, 16),
    ("4 d128 B131072 L64", 1_000_000, 128, 131072, 64),
    ("4 d32 B32768 L16", 1_000_000, 32, 32768, 16),
    ("4 d32 B32768 L64", 1_000_000, 32, 32768, 64),
    ("4 d32 B131072 L16", 1_000_000, 32, 131072, 16),
    ("4 d32 B131072 L64", 1_000_000, 32, 131072, 64),
]


def sorted_like(idx: torch.Tensor) -> torch.Tensor:
    """The same indices in ascending order, in idx's shape (so the same bags, as many rows each)."""
    return idx.reshape(-1).sort().values.view(idx.shape)


def sort_cost(suite: Suite, flat: torch.Tensor) -> float:
    return suite.timer.median_us(lambda: torch.sort(flat))


def report(suite: Suite, label: str, comp: int, logical: int, times: dict[str, float], target: float) -> None:
    def pct(us: float) -> float:
        return 100 * comp / (us * 1e-6) / 1e9 / suite.copy_gbps

    same = pct(suite.same_size_copy_us(comp))
    sorted_total = times["sort"] + times["sorted"]
    print(f"{label:34s} reuse {logical / comp:5.2f} target {target:.0f}% | ours {times['own']:7.1f} us "
          f"{pct(times['own']):5.1f}% (logical {pct(times['own']) * logical / comp:5.1f}%) | sorted idx "
          f"{times['sorted']:7.1f} us {pct(times['sorted']):5.1f}% | sort {times['sort']:6.1f} us, sort + sorted "
          f"{sorted_total:7.1f} us {pct(sorted_total):5.1f}% | same-size copy {same:5.1f}%", flush=True)


def single(suite: Suite, label: str, rows: int, dim: int, batch: int, pooling: int) -> None:
    weight = table(rows, dim, torch.float32, suite.gen)
    idx = zipf_indices(batch * pooling, rows, 0.0, suite.gen).view(batch, pooling)
    ordered = sorted_like(idx)
    with torch.no_grad():
        torch.testing.assert_close(rk.embedding_bag(ordered, weight, check_indices=False),
                                   F.embedding_bag(ordered, weight), rtol=1e-5, atol=1e-4)
        times = {"own": suite.timer.median_us(lambda: rk.embedding_bag(idx, weight, check_indices=False)),
                 "sorted": suite.timer.median_us(lambda: rk.embedding_bag(ordered, weight, check_indices=False))}
    times["sort"] = sort_cost(suite, idx.reshape(-1))
    comp, logical = bag_bytes(weight, idx, None, False, batch * dim)
    report(suite, f"{label} f32 sum", comp, logical, times, 90.0 if dim * 4 >= 256 else 75.0)


def multi(suite: Suite, label: str, rows: list[int], batch: int, pooling: list[int]) -> None:
    tbe = TableBatchedEmbeddingBag(rows, 128, "sum", torch.float32, DEV)
    tbe.check_indices = False
    tb = table_batch(rows, batch, pooling, 0.0, suite.gen)
    ordered = torch.cat([i.sort().values for i in tb.per_table])
    calls: dict[str, Callable[[], torch.Tensor]] = {"own": lambda: tbe(tb.indices, tb.offsets),
                                                    "sorted": lambda: tbe(ordered, tb.offsets)}
    with torch.no_grad():
        times = {name: suite.timer.median_us(call) for name, call in calls.items()}
    # One sort over all tables' keys (table-major keys keep each table's segment apart).
    times["sort"] = sort_cost(suite, tb.indices)
    comp, logical = table_batch_bytes([tbe.table(t).detach() for t in range(len(rows))], tb, False, batch)
    report(suite, f"{label} f32 sum TBE", comp, logical, times, 90.0)


def ncu_calls() -> None:
    gen = torch.Generator(device=DEV).manual_seed(37)
    weight = table(1_000_000, 128, torch.float32, gen)
    for batch, pooling in ((131072, 1), (32768, 16)):
        idx = zipf_indices(batch * pooling, 1_000_000, 0.0, gen).view(batch, pooling)
        for i in (idx, sorted_like(idx)):
            rk.embedding_bag(i, weight, check_indices=False)
    torch.cuda.synchronize()


def timings() -> None:
    suite = Suite(reps=100, quick=False, seed=37)
    for case in SINGLE:
        single(suite, *case)
        torch.cuda.empty_cache()
    multi(suite, "2 12x500Kx128 a0.0", [500_000] * 12, 2048, [150] * 12)
    torch.cuda.empty_cache()
    multi(suite, "5 DCNv2 26 tables B6912 a0.0", [min(r, DCN_ROW_CAP) for r in DCN_ROWS], 6912, DCN_POOLING)


def main() -> None:
    with torch.no_grad():
        ncu_calls() if sys.argv[1:] == ["--ncu"] else timings()


if __name__ == "__main__":
    main()
