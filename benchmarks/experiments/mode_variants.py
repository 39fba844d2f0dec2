"""The table-batched lookups in every mode, one line per case, to time two versions of the
package one after the other in one device call (device diagnostics for docs/perf/change-37.md).

Times the one-launch TBE call on the benchmark's DCNv2 layout (26 tables, the 40M-row tables
shrunk to 4M, dim 128, B 6912, uniform indices) in every mode and dtype, suite 3's two
10M x 192 tables (B 65536, L 32, Zipf 1.0) in sum and mean, float32 and float16, and suite 1's
mean in float32 and bfloat16; median of 100 cold calls (the benchmark's L2 flush), each output
checked against torch first. It imports reference_kernels from wherever PYTHONPATH points."""
import torch
import torch.nn.functional as F

import reference_kernels as rk
from benchmarks.harness import DCN_POOLING, DCN_ROW_CAP, DCN_ROWS, Suite, bag_bytes, table, zipf_indices
from reference_kernels.tbe import TableBatchedEmbeddingBag

DEV = "cuda"
# Not bench.table_batch: this script also runs against copies of older trees, whose bench lacks it.


def tolerance(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 2e-2


def table_batched(suite: Suite, label: str, rows: list[int], dim: int, batch: int, pooling: list[int],
                  alpha: float, dtype: torch.dtype, variants: list[tuple[str, bool]]) -> None:
    """One TBE call per (mode, per-sample weights) variant, checked against one torch call per table."""
    per_idx = [zipf_indices(batch * p, r, alpha, suite.gen) for r, p in zip(rows, pooling, strict=False)]
    per_off = [torch.arange(0, i.numel() + 1, p, device=DEV) for i, p in zip(per_idx, pooling, strict=False)]
    lengths = torch.tensor([p for p in pooling for _ in range(batch)], device=DEV)
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    idx = torch.cat(per_idx)
    psw = torch.rand(idx.shape, generator=suite.gen, device=DEV).to(dtype)
    per_w = list(torch.split(psw, [i.numel() for i in per_idx]))
    for mode, with_psw in variants:
        tbe = TableBatchedEmbeddingBag(rows, dim, mode, dtype, DEV)
        tbe.check_indices = False
        w = psw if with_psw else None
        tables = [tbe.table(t).detach() for t in range(len(rows))]
        expected = torch.cat([F.embedding_bag(i, t, o, mode=mode, include_last_offset=True,
                                              per_sample_weights=per_w[k] if with_psw else None)
                              for k, (i, t, o) in enumerate(zip(per_idx, tables, per_off, strict=False))], dim=1)
        tol = tolerance(dtype)
        torch.testing.assert_close(tbe(idx, offsets, w), expected, rtol=tol, atol=tol)
        us = suite.timer.median_us(lambda: tbe(idx, offsets, w))  # noqa: F821  (timed before the del below)
        comp = sum(bag_bytes(t, i, o, with_psw, batch * dim)[0]
                   for t, i, o in zip(tables, per_idx, per_off, strict=False))
        pct = 100 * comp / (us * 1e-6) / 1e9 / suite.copy_gbps
        name = f"{label} {mode}{'+psw' if with_psw else ''} {dtype}".replace("torch.", "")
        print(f"{name:36s} {us:7.1f} us {pct:5.1f}%", flush=True)
        del tbe, tables
        torch.cuda.empty_cache()


def suite1_mean(suite: Suite, dtype: torch.dtype) -> None:
    weight = table(5_000_000, 128, dtype, suite.gen)
    idx = zipf_indices(2048 * 150, 5_000_000, 0.0, suite.gen).view(2048, 150)
    tol = tolerance(dtype)
    torch.testing.assert_close(rk.embedding_bag(idx, weight, mode="mean", check_indices=False),
                               F.embedding_bag(idx, weight, mode="mean"), rtol=tol, atol=tol)
    us = suite.timer.median_us(lambda: rk.embedding_bag(idx, weight, mode="mean", check_indices=False))
    comp, _ = bag_bytes(weight, idx, None, False, 2048 * 128)
    label = f"suite 1 mean {dtype}".replace("torch.", "")
    print(f"{label:36s} {us:7.1f} us {100 * comp / (us * 1e-6) / 1e9 / suite.copy_gbps:5.1f}%", flush=True)


def main() -> None:
    suite = Suite(reps=100, quick=False, seed=37)
    print(f"reference_kernels from {rk.__file__}", flush=True)
    with torch.no_grad():
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            table_batched(suite, "DCNv2 TBE", [min(r, DCN_ROW_CAP) for r in DCN_ROWS], 128, 6912, DCN_POOLING, 0.0,
                          dtype, [("sum", False), ("sum", True), ("mean", False), ("max", False)])
        for dtype in (torch.float32, torch.float16):
            table_batched(suite, "suite 3 TBE a1.0", [10_000_000] * 2, 192, 65536, [32, 32], 1.0, dtype,
                          [("sum", False), ("mean", False)])
        for dtype in (torch.float32, torch.bfloat16):
            suite1_mean(suite, dtype)


if __name__ == "__main__":
    main()
