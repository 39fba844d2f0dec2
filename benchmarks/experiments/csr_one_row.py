"""CSR bags of one row through the bulk-copy path against the segmented kernel (device
diagnostics for docs/perf/change-34.md).

embedding_bag_forward_bulk (embedding_gather.cu) takes CSR calls with as many indices as bags:
a bag of one valid row is bulk-copied like a gathered row, any other bag is pooled by the
warp. Side by side with the launcher's previous choice (BULK_ONE_ROW_CSR off: the segmented
kernel, or the general one for small batches) and torch, median of 100 cold calls, on the
benchmark's sweep table (1M rows) with offsets arange(0, B + 1) as the sweep builds them;
then mixed lengths (a third of the rows moved between bags: empty bags and bags of 2-4 rows,
the warp-pooled path) and the fixed [B, 1] layout (the bulk gather, change 32) for reference.
Every output is checked against torch first."""
import torch
import torch.nn.functional as F

import reference_kernels as rk
from benchmarks.harness import Suite, bag_bytes, copy_ceiling_gbps, table, zipf_indices
from reference_kernels.tuning import tuned


def mixed_offsets(batch: int) -> torch.Tensor:
    lengths = torch.ones(batch, dtype=torch.int64)
    moves = torch.randint(0, batch, (batch // 3, 2), generator=torch.Generator().manual_seed(5))
    for i, j in moves.tolist():
        if lengths[i] > 0 and lengths[j] < 4:
            lengths[i] -= 1
            lengths[j] += 1
    return torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]).cuda()


def case(suite: Suite, ceiling: float, label: str, weight: torch.Tensor, idx: torch.Tensor,
         offsets: torch.Tensor | None, mode: str) -> None:
    last = offsets is not None
    batch = idx.shape[0] if offsets is None else offsets.numel() - 1
    call = lambda: rk.embedding_bag(idx, weight, offsets, mode=mode, include_last_offset=last,  # noqa: E731
                                    check_indices=False)
    with torch.no_grad():
        expected = F.embedding_bag(idx, weight, offsets, mode=mode, include_last_offset=last)
        got = call()
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        times = {}
        for name, flag in (("bulk", True), ("before", False)):
            with tuned(bulk_one_row_csr=flag):
                times[name] = suite.timer.median_us(call)
        times["torch"] = suite.timer.median_us(
            lambda: F.embedding_bag(idx, weight, offsets, mode=mode, include_last_offset=last))
    compulsory, _ = bag_bytes(weight, idx, offsets, False, batch * weight.shape[1])
    pct = {k: compulsory / (v * 1e3) / ceiling for k, v in times.items()}
    print(f"{label:44s} bulk {times['bulk']:7.1f} us ({pct['bulk']:5.1%})  before {times['before']:7.1f} us "
          f"({pct['before']:5.1%})  torch {times['torch']:7.1f} us  same-size copy "
          f"{compulsory / (suite.same_size_copy_us(compulsory) * 1e3) / ceiling:5.1%}", flush=True)


def main() -> None:
    suite = Suite(reps=100, quick=False, seed=73)
    ceiling = copy_ceiling_gbps(suite.timer)
    print(f"copy ceiling: {ceiling:.0f} GB/s (read + write)", flush=True)
    weights = {(dim, dtype): table(1_000_000, dim, dtype, suite.gen)
               for dim, dtype in ((128, torch.float32), (32, torch.float32), (128, torch.bfloat16))}
    for (dim, dtype), weight in weights.items():
        for batch in (131072, 32768, 1024):
            idx = zipf_indices(batch, 1_000_000, 0.0, suite.gen)
            offsets = torch.arange(0, batch + 1, device="cuda")
            modes = ("sum", "mean", "max") if (dim, dtype, batch) == (128, torch.float32, 131072) else ("sum",)
            for mode in modes:
                case(suite, ceiling, f"d{dim} {str(dtype)[6:]} B{batch} L1 csr {mode}", weight, idx, offsets, mode)
    weight = weights[128, torch.float32]
    idx = zipf_indices(131072, 1_000_000, 0.0, suite.gen)
    case(suite, ceiling, "d128 float32 B131072 mixed lengths csr sum", weight, idx, mixed_offsets(131072), "sum")
    fixed = idx.view(-1, 1)
    with torch.no_grad():
        us = suite.timer.median_us(lambda: rk.embedding_bag(fixed, weight, mode="sum", check_indices=False))
    compulsory, _ = bag_bytes(weight, fixed, None, False, fixed.numel() * 128)
    label = "d128 float32 B131072 L1 fixed sum (bulk gather)"
    print(f"{label:44s} {us:7.1f} us ({compulsory / (us * 1e3) / ceiling:5.1%})",
          flush=True)


if __name__ == "__main__":
    main()
