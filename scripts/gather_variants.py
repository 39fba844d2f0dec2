"""One-hot gather variants side by side (device diagnostics for docs/perf-log.md, change 28).

The gather as it was before change 28 (4 rows per team step, a grid of 16 blocks per SM whose
teams stride over the steps) against a grid with one step per team (change 28's choice) and
variants of it: 128- or 512-thread blocks, 2 or 8 rows per step, two steps per team. On the
one-hot case of the benchmark (262144 rows of 5M x 128), smaller and larger N, and 262144
rows read in order (a copy that goes through the index). Median of 100 cold calls (the
benchmark's Timer); every output is compared with torch's exactly."""
import torch
import torch.nn.functional as F

from reference_kernels import _launch, _nvrtc
from reference_kernels.bench import Suite, table, zipf_indices

suite = Suite(reps=100, quick=False, seed=31)
ROWS, N = 5_000_000, 262144
SMS = _launch.sm_count(torch.device("cuda"))
# label, defines beyond the launcher's, blocks per SM in the grid (0: one step per team, -k: k steps)
VARIANTS = [
    ("16 blocks/SM (before)", {}, 16),
    ("one step/team", {}, 0),
    ("one step/team, block 128", {"BLOCK": 128}, 0),
    ("one step/team, block 512", {"BLOCK": 512}, 0),
    ("unroll 2, one step/team", {"UNROLL": 2}, 0),
    ("unroll 8, one step/team", {"UNROLL": 8}, 0),
    ("2 steps/team", {}, -2),
]


def launcher(weight: torch.Tensor, idx: torch.Tensor, extra: dict[str, object], per_sm: int):
    """The launcher's own tiling (as _launch.gather), with extra defines and grid."""
    row_bytes = weight.shape[1] * weight.element_size()
    tiling = _launch.RowTiling.for_row(row_bytes // 16, 1)
    defines = {"INDEX_T": "i64", "CHUNK_BYTES": 16, "ROW_LANES": tiling.row_lanes, "CHUNKS": tiling.chunks,
               "UNROLL": min(4, tiling.row_lanes), "BLOCK": _launch.BLOCK, **extra}
    fn = _nvrtc.get_function("embedding_gather.cu", "embedding_gather", defines, 0)
    n = idx.numel()
    block = int(defines["BLOCK"])
    threads = -(-n // int(defines["UNROLL"])) * tiling.col_tiles * tiling.row_lanes
    if per_sm <= 0:  # -k: k steps per team, 0: one
        grid = -(-threads // (block * max(1, -per_sm)))
    else:
        grid = max(1, min(-(-threads // block), SMS * per_sm))

    def call() -> torch.Tensor:
        out = torch.empty(n, weight.shape[1], dtype=weight.dtype, device="cuda")
        _nvrtc.launch(fn, grid, block, torch.cuda.current_stream().cuda_stream, [
            (weight.data_ptr(), _nvrtc.PTR), (row_bytes // 16, _nvrtc.I64), (idx.data_ptr(), _nvrtc.PTR),
            (n, _nvrtc.I64), (out.data_ptr(), _nvrtc.PTR)])
        return out
    return call, grid


print(f"copy ceiling {suite.copy_gbps:.0f} GB/s, {SMS} SMs", flush=True)
for dtype in (torch.float32, torch.bfloat16):
    weight = table(ROWS, 128, dtype, suite.gen)
    row = 128 * weight.element_size()
    cases = [(f"N{n} uniform", zipf_indices(n, ROWS, 0.0, suite.gen)) for n in (N, 4096, 32768, 1 << 20)]
    for order, idx in cases + [(f"N{N} in order", torch.arange(N, device="cuda"))]:
        nbytes = int(torch.unique(idx).numel()) * row + idx.numel() * (8 + row)
        copy = suite.same_size_copy_us(nbytes)
        line = [f"{str(dtype)[6:]} {order}: copy {copy:5.1f}us {100 * nbytes / copy / 1e3 / suite.copy_gbps:4.1f}%"]
        for label, extra, per_sm in VARIANTS:
            call, grid = launcher(weight, idx, extra, per_sm)
            torch.testing.assert_close(call(), F.embedding(idx, weight), rtol=0, atol=0)
            us = suite.timer.median_us(call)
            line.append(f"{label} (grid {grid}) {us:5.1f}us {100 * nbytes / us / 1e3 / suite.copy_gbps:4.1f}%")
        print("\n  ".join(line), flush=True)
    del weight
    torch.cuda.empty_cache()
print("registers, local bytes per variant:", {k[-60:]: v for k, v in _nvrtc.STATS.resources.items()}, flush=True)
