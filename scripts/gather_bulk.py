"""The one-hot gather through the bulk-copy engine against the register gather (device
diagnostics for docs/perf-log.md, change 31).

embedding_gather.cu's bulk entry (embedding_gather_bulk) moves rows with cp.async.bulk
global -> shared -> global, two stages per warp, no row in registers. Runs 56-59 used the
same kernel from scripts/kernels/ before it joined the project (then without the skip of
negative indices). Side by side with the register gather (rk.embedding before change 31) on 65536,
262144 (the benchmark's one-hot case) and 1M uniform rows of 5M x 128 and 262144 rows in
order, with 2, 4 or 8 KB stages (8 KB with 64-thread blocks only: 48 KB of static shared
memory at most), and grids of a few blocks per SM (warps loop over their steps, the next
step's rows loading during this step's store) or of 1-4 steps per warp. Median of 100 cold
calls; every output is compared with torch's exactly. Then rows of 128 B, 1 KB and 2 KB
(float32, dim 32, 256, 512) with the two grids that won."""
import torch
import torch.nn.functional as F

import reference_kernels as rk
from reference_kernels import _launch, _nvrtc
from reference_kernels.bench import Suite, table, zipf_indices

suite = Suite(reps=100, quick=False, seed=71)
SMS = _launch.sm_count(torch.device("cuda"))
# (label, bytes per stage, threads per block, grid: ("sm", k) k blocks per SM or ("steps", k) k steps per warp)
VARIANTS = [("4K b128 6/SM", 4096, 128, ("sm", 6)), ("4K b128 1 step", 4096, 128, ("steps", 1)),
            ("4K b128 2 steps", 4096, 128, ("steps", 2)), ("4K b128 4 steps", 4096, 128, ("steps", 4)),
            ("4K b64 12/SM", 4096, 64, ("sm", 12)), ("4K b64 2 steps", 4096, 64, ("steps", 2)),
            ("8K b64 2 steps", 8192, 64, ("steps", 2)), ("8K b64 6/SM", 8192, 64, ("sm", 6)),
            ("8K b64 1 step", 8192, 64, ("steps", 1)), ("2K b128 2 steps", 2048, 128, ("steps", 2))]
fns = {}
for row_bytes in (512, 256, 128, 1024, 2048):
    for _, stage, block, _ in VARIANTS:
        if stage < row_bytes or stage // row_bytes > 32 or stage * block // 32 * 2 > 48 << 10:
            continue
        fns[row_bytes, stage, block] = _nvrtc.get_function("embedding_gather.cu", "embedding_gather_bulk", {
            "INDEX_T": "i64", "BULK_ROWS": stage // row_bytes, "ROW_BYTES": row_bytes, "BLOCK": block}, 0)


def register_gather(idx: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """rk.embedding with the bulk path off: the register gather (change 28)."""
    arch, _launch.BULK_MIN_ARCH = _launch.BULK_MIN_ARCH, 10**6
    try:
        return rk.embedding(idx, weight, check_indices=False)
    finally:
        _launch.BULK_MIN_ARCH = arch


def bulk(weight: torch.Tensor, idx: torch.Tensor, stage: int, block: int, grid_spec: tuple[str, int]):
    row_bytes = weight.shape[1] * weight.element_size()
    steps = -(-idx.numel() // (stage // row_bytes))
    warps = block // 32
    kind, k = grid_spec
    grid = min(-(-steps // warps), SMS * k) if kind == "sm" else -(-steps // (warps * k))
    fn = fns[row_bytes, stage, block]

    def call() -> torch.Tensor:
        out = torch.empty(idx.numel(), weight.shape[1], dtype=weight.dtype, device="cuda")
        _nvrtc.launch(fn, grid, block, torch.cuda.current_stream().cuda_stream, [
            (weight.data_ptr(), _nvrtc.PTR), (idx.data_ptr(), _nvrtc.PTR), (idx.numel(), _nvrtc.I64),
            (out.data_ptr(), _nvrtc.PTR)])
        return out
    return call


def compare(label: str, weight: torch.Tensor, idx: torch.Tensor, names: object, sep: str) -> None:
    """The register gather and the named bulk variants (all where names is None) on one case."""
    row = weight.shape[1] * weight.element_size()
    nbytes = int(torch.unique(idx).numel()) * row + idx.numel() * (8 + row)
    variants = [("register gather", lambda: register_gather(idx, weight))]
    variants += [(name, bulk(weight, idx, stage, block, spec)) for name, stage, block, spec in VARIANTS
                 if (names is None or name in names) and stage >= row and stage // row <= 32]
    line = [label]
    for name, fn in variants:
        assert torch.equal(fn(), F.embedding(idx, weight)), name
        us = suite.timer.median_us(fn)
        line.append(f"{name} {us:6.1f} us {100 * nbytes / us / 1e3 / suite.copy_gbps:5.1f}%")
    print(sep.join(line), flush=True)


for dtype in (torch.float32, torch.bfloat16):
    weight = table(5_000_000, 128, dtype, suite.gen)
    for label, idx in (("N65536 uniform", zipf_indices(65536, 5_000_000, 0.0, suite.gen)),
                       ("N262144 uniform", zipf_indices(262144, 5_000_000, 0.0, suite.gen)),
                       ("N1M uniform", zipf_indices(1 << 20, 5_000_000, 0.0, suite.gen)),
                       ("N262144 in order", torch.arange(262144, device="cuda"))):
        compare(f"{str(dtype)[6:]} {label}", weight, idx, None, "\n  ")
    del weight
    torch.cuda.empty_cache()

# other row sizes (d32 f32 = 128 B, d256 f32 = 1 KB, d512 f32 = 2 KB), the two grids that won above
for dim in (32, 256, 512):
    weight = table(1_000_000 if dim > 128 else 5_000_000, dim, torch.float32, suite.gen)
    for n in (65536, 262144):
        idx = zipf_indices(n, weight.shape[0], 0.0, suite.gen)
        compare(f"float32 d{dim} N{n} uniform", weight, idx, ("4K b128 6/SM", "4K b128 1 step"), " | ")
    del weight
    torch.cuda.empty_cache()
