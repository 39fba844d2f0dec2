"""Short CSR and table-batched bags side by side (device diagnostics for docs/perf/change-27.md).

The general forward kernel (one team per bag) against the segmented kernel (a team walks
several consecutive bags as one stream of rows) with different rows per segment and blocks
per SM (or a grid with one segment per team, run 42, change 28), on the DLRM-DCNv2
table-batched layout (26 tables, bags of 1-100 rows, one launch) and single-table CSR bags of
fixed and of random length, each next to
a plain copy of the case's compulsory bytes. Median of 100 cold calls (the benchmark's Timer:
L2 flushed, head start). Every variant's output is compared with the general kernel's."""
from collections.abc import Callable

import torch

import reference_kernels as rk
from benchmarks.harness import DCN_POOLING, DCN_ROW_CAP, DCN_ROWS, Suite, bag_bytes, table, zipf_indices
from reference_kernels.tbe import TableBatchedEmbeddingBag
from reference_kernels.tuning import current, tuned

DEFAULTS = (current().segment_rows, current().segment_vectors, current().segment_max_avg,
            current().segment_grid_per_sm)
assert DEFAULTS == (32, 4, 8, 8), "the variants below vary the defaults one at a time"
# (label, rows per segment, vectors in flight, longest average bag in a segment, blocks per SM)
FULL_GRID = 1 << 30  # blocks per SM beyond any case's segments: a grid with one segment per team
VARIANTS = [("general", 32, 4, 0, 8), ("segmented", *DEFAULTS), ("seg G16", 32, 4, 8, 16),
            ("seg one segment/team", 32, 4, 8, FULL_GRID), ("seg R64 one segment/team", 64, 4, 8, FULL_GRID)]


def dcnv2(suite: Suite, dtype: torch.dtype, mode: str) -> tuple[str, Callable[[], torch.Tensor], int]:
    rows = [min(r, DCN_ROW_CAP) for r in DCN_ROWS]
    batch = 6912
    tbe = TableBatchedEmbeddingBag(rows, 128, mode, dtype, "cuda")
    tbe.check_indices = False
    per_idx = [zipf_indices(batch * p, r, 0.0, suite.gen) for r, p in zip(rows, DCN_POOLING, strict=False)]
    lengths = torch.tensor([p for p in DCN_POOLING for _ in range(batch)], device="cuda")
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    idx = torch.cat(per_idx)
    comp = sum(bag_bytes(tbe.table(t), i, torch.arange(0, i.numel() + 1, p, device="cuda"), False, batch * 128)[0]
               for t, (i, p) in enumerate(zip(per_idx, DCN_POOLING, strict=False)))
    return f"DCNv2 TBE {str(dtype)[6:]} {mode}", lambda: tbe(idx, offsets), comp


def csr(suite: Suite, dim: int, dtype: torch.dtype, batch: int, pooling: int, random_lengths: bool
        ) -> tuple[str, Callable[[], torch.Tensor], int]:
    weight = table(1_000_000, dim, dtype, suite.gen)
    if random_lengths:  # 0 .. 2 * pooling rows per bag
        lengths = torch.randint(0, 2 * pooling + 1, (batch,), generator=suite.gen, device="cuda")
    else:
        lengths = torch.full((batch,), pooling, device="cuda")
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    idx = zipf_indices(int(offsets[-1]), 1_000_000, 0.0, suite.gen)
    comp, _ = bag_bytes(weight, idx, offsets, False, batch * dim)
    label = f"d{dim} {str(dtype)[6:]} B{batch} L{'0-' + str(2 * pooling) if random_lengths else pooling} csr"
    return label, lambda: rk.embedding_bag(idx, weight, offsets, mode="sum", include_last_offset=True,
                                           check_indices=False), comp


def run(suite: Suite, label: str, fn: Callable[[], torch.Tensor], comp: int) -> None:
    copy_us = suite.same_size_copy_us(comp)

    def pct(us: float) -> float:
        return 100 * comp / (us * 1e-6) / 1e9 / suite.copy_gbps

    line = [f"{label}: copy {copy_us:6.1f}us {pct(copy_us):3.0f}%"]
    reference: torch.Tensor | None = None
    for name, seg_rows, vectors, max_avg, per_sm in VARIANTS:
        knobs = tuned(segment_rows=seg_rows, segment_vectors=vectors, segment_max_avg=max_avg,
                      segment_grid_per_sm=per_sm)
        with knobs, torch.no_grad():
            out = fn().float()
            if reference is None:
                reference = out
            torch.testing.assert_close(out, reference, rtol=2e-2, atol=2e-2)
            us = suite.timer.median_us(fn)
        line.append(f"{name} {us:6.1f}us {pct(us):3.0f}%")
    print(" | ".join(line), flush=True)


def main() -> None:
    suite = Suite(reps=100, quick=False, seed=13)
    print(f"copy ceiling {suite.copy_gbps:.0f} GB/s; variants: {VARIANTS}", flush=True)
    for dtype, mode in ((torch.float32, "sum"), (torch.float32, "mean"), (torch.bfloat16, "sum")):
        run(suite, *dcnv2(suite, dtype, mode))
    for dim, dtype, batch, pooling, random_lengths in (
            (128, torch.float32, 131072, 1, False), (128, torch.float32, 131072, 1, True),
            (128, torch.float32, 131072, 4, True), (128, torch.float32, 131072, 8, False),
            (128, torch.float32, 32768, 1, False), (32, torch.float32, 131072, 1, False),
            (128, torch.bfloat16, 131072, 1, False), (128, torch.float32, 16384, 20, False),
            (128, torch.float32, 131072, 16, False)):
        run(suite, *csr(suite, dim, dtype, batch, pooling, random_lengths))


if __name__ == "__main__":
    main()
