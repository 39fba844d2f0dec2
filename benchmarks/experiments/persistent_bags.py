"""The general forward kernel with one team per bag against teams striding over the bags
(PERSISTENT, the next bag's bounds and first indices loaded while this bag's rows are in flight),
side by side (device diagnostics for docs/perf/change-39.md).

Each case is timed with the knob ``forward_resident_waves`` = 0 (one team per bag, the block
scheduler refilling the SMs), 1 and 2 (teams striding over the bags: one wave of resident
blocks, and two), alternately, twice; median of 100 cold calls (the benchmark's L2 flush), each
output checked against torch first. The launcher's limit on striding is lifted here
(PERSISTENT_MAX_GROUP_ROWS), so that the figures show the policy itself on every case; they are
what set that limit. The cases are those that take the general
kernel: bags of more than 8 rows, or the fixed layout with more rows than the short-bag kernel
takes; uniform and Zipf-skewed indices, every mode, float32 and 16-bit, one table and
table-batched; then a batch sweep from 2 to 8 bags per resident team."""
import torch
import torch.nn.functional as F

import reference_kernels as rk
from benchmarks.harness import Suite, bag_bytes, bag_indices, table, table_batch, table_batch_bytes
from reference_kernels.tbe import TableBatchedEmbeddingBag
from reference_kernels.tuning import tuned

DEV = "cuda"
GRIDS = (0, 1, 2)
# (rows, dim, batch, pooling, alpha, csr, mode, dtype)
SINGLE = [
    (5_000_000, 128, 2048, 150, 0.0, False, "sum", torch.float32),
    (5_000_000, 128, 2048, 150, 0.0, False, "sum", torch.bfloat16),
    (1_000_000, 128, 16384, 20, 0.0, False, "sum", torch.float32),
    (1_000_000, 128, 16384, 20, 0.0, False, "sum", torch.bfloat16),
    (1_000_000, 128, 16384, 20, 1.15, False, "sum", torch.float32),
    (1_000_000, 128, 32768, 16, 0.0, False, "sum", torch.float32),
    (1_000_000, 128, 32768, 16, 0.0, True, "sum", torch.float32),
    (1_000_000, 128, 32768, 16, 0.0, False, "mean", torch.float32),
    (1_000_000, 128, 32768, 16, 0.0, False, "max", torch.float32),
    (1_000_000, 128, 32768, 16, 1.05, False, "sum", torch.float32),
    (1_000_000, 128, 32768, 16, 1.15, True, "sum", torch.float32),
    (1_000_000, 128, 32768, 32, 0.0, False, "sum", torch.float32),
    (1_000_000, 128, 32768, 32, 1.05, True, "sum", torch.bfloat16),
    (1_000_000, 128, 32768, 64, 0.0, False, "sum", torch.float32),
    (1_000_000, 128, 32768, 64, 1.15, False, "sum", torch.float32),
    (1_000_000, 128, 131072, 16, 0.0, False, "sum", torch.float32),
    (1_000_000, 128, 131072, 16, 0.0, True, "sum", torch.bfloat16),
    (1_000_000, 128, 131072, 64, 0.0, False, "sum", torch.float32),
    (1_000_000, 32, 32768, 64, 0.0, False, "sum", torch.float32),
    (1_000_000, 32, 131072, 64, 0.0, True, "sum", torch.float32),
    (1_000_000, 32, 131072, 64, 1.15, False, "sum", torch.float32),
    (1_000_000, 128, 1024, 64, 0.0, False, "sum", torch.float32),
]
# Bags per resident team (2 blocks of 8 teams per SM: 2112 teams on 132 SMs) from 2 to 8: does a
# static stride's last round, which leaves some teams idle, cost more than the prefetch saves
# when each team has only a few bags? (batch, pooling, dtype, psw)
BATCH_SWEEP = [(b, pooling, dtype, psw) for pooling, dtype, psw in ((20, torch.float32, False),
                                                                     (12, torch.bfloat16, True),
                                                                     (27, torch.float16, True))
               for b in (4224, 6912, 8448, 10560, 12672, 16896)]


def name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def tolerance(dtype: torch.dtype) -> float:
    return 1e-4 if dtype == torch.float32 else 2e-2


def side_by_side(suite: Suite, label: str, comp: int, call: object) -> None:
    """Median of each grid policy, alternately, twice; % of copy in compulsory bytes."""
    times: dict[int, list[float]] = {g: [] for g in GRIDS}
    for _ in range(2):
        for g in GRIDS:
            with tuned(forward_resident_waves=g):
                times[g].append(suite.timer.median_us(call))  # type: ignore[arg-type]
    cells = []
    for g in GRIDS:
        us = min(times[g])
        pct = 100 * comp / (us * 1e-6) / 1e9 / suite.copy_gbps
        cells.append(f"grid {g}: {us:7.1f} us {pct:5.1f}% ({'/'.join(f'{t:.1f}' for t in times[g])})")
    print(f"{label:44s} " + " | ".join(cells), flush=True)


def single(suite: Suite, rows: int, dim: int, batch: int, pooling: int, alpha: float, csr: bool, mode: str,
           dtype: torch.dtype, psw: bool = False) -> None:
    weight = table(rows, dim, dtype, suite.gen)
    idx, offsets = bag_indices(batch, pooling, rows, alpha, csr, suite.gen)
    w = torch.rand(idx.shape, generator=suite.gen, device=DEV).to(dtype) if psw else None
    expected = F.embedding_bag(idx, weight, offsets, mode=mode, per_sample_weights=w, include_last_offset=csr)

    def call() -> torch.Tensor:
        return rk.embedding_bag(idx, weight, offsets, mode=mode, per_sample_weights=w, include_last_offset=csr,
                                check_indices=False)

    for g in GRIDS:
        with tuned(forward_resident_waves=g):
            torch.testing.assert_close(call(), expected, rtol=tolerance(dtype), atol=tolerance(dtype))
    comp, _ = bag_bytes(weight, idx, offsets, psw, batch * dim)
    label = (f"{rows // 1000}Kx{dim} B{batch} L{pooling} a{alpha} {'csr' if csr else 'fixed'} {mode}"
             f"{'+psw' if psw else ''} {name(dtype)}")
    side_by_side(suite, label, comp, call)


def multi(suite: Suite, label: str, rows: list[int], dim: int, batch: int, pooling: list[int], alpha: float,
          dtype: torch.dtype) -> None:
    tbe = TableBatchedEmbeddingBag(rows, dim, "sum", dtype, DEV)
    tbe.check_indices = False
    tb = table_batch(rows, batch, pooling, alpha, suite.gen)
    tables = [tbe.table(t).detach() for t in range(len(rows))]
    per_off = [torch.arange(0, i.numel() + 1, p, device=DEV) for i, p in zip(tb.per_table, pooling, strict=False)]
    expected = torch.cat([F.embedding_bag(i, t, o, mode="sum", include_last_offset=True)
                          for i, t, o in zip(tb.per_table, tables, per_off, strict=False)], dim=1)
    for g in GRIDS:
        with tuned(forward_resident_waves=g):
            tol = tolerance(dtype)
            torch.testing.assert_close(tbe(tb.indices, tb.offsets), expected, rtol=tol, atol=tol)
    comp, _ = table_batch_bytes(tables, tb, False, batch)
    side_by_side(suite, f"{label} {name(dtype)} TBE", comp, lambda: tbe(tb.indices, tb.offsets))


def main() -> None:
    suite = Suite(reps=100, quick=False, seed=39)
    print(f"copy ceiling {suite.copy_gbps:.0f} GB/s; grids: 0 = one team per bag, N = N waves of resident "
          "blocks striding",
          flush=True)
    # the policy itself, on bags of any length
    with tuned(persistent_max_group_rows=10**9), torch.no_grad():
        for case in SINGLE:
            single(suite, *case)
            torch.cuda.empty_cache()
        for batch, pooling, dtype, psw in BATCH_SWEEP:
            single(suite, 1_000_000, 128, batch, pooling, 0.0, True, "sum", dtype, psw)
        multi(suite, "2 12x500Kx128 B2048 L150 a0.0", [500_000] * 12, 128, 2048, [150] * 12, 0.0, torch.float32)
        multi(suite, "2 12x500Kx128 B2048 L150 a1.2", [500_000] * 12, 128, 2048, [150] * 12, 1.2, torch.float32)
        torch.cuda.empty_cache()
        for alpha in (1.0, 1.15):
            for dtype in (torch.float32, torch.float16):
                multi(suite, f"3 2x10Mx192 B65536 L32 a{alpha}", [10_000_000] * 2, 192, 65536, [32, 32], alpha,
                      dtype)
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
