"""Fixed costs of a kernel against a copy (device diagnostics for docs/perf-log.md, change 29).

Between two events (the benchmark's Timer: L2 flushed, head start, median of 100): nothing; a
device-to-device copy of 16 bytes and of 64 KB (cudaMemcpy, as torch's copy_ of contiguous
tensors does); torch's elementwise kernel on 4 floats (add_); our gather launched with no work
(one block that exits: the launch alone). Then copies of two cases' sizes done three ways:
cudaMemcpy, torch's elementwise kernel (mul by 1 into another buffer: same bytes read and
written, by a kernel), and our gather of rows 0..N-1 in order. If the kernels carry a fixed
cost that cudaMemcpy does not, a copy by cudaMemcpy is a stricter yardstick than any kernel
can meet at small sizes."""
import torch

import reference_kernels as rk
from reference_kernels import _launch, _nvrtc
from reference_kernels.bench import Suite

suite = Suite(reps=100, quick=False, seed=53)
timer = suite.timer


def show(label: str, fn, nbytes: int = 0) -> None:
    us = timer.median_us(fn)
    extra = f"  {100 * nbytes / us / 1e3 / suite.copy_gbps:5.1f}% of the ceiling" if nbytes else ""
    print(f"{label:62s} {us:7.2f} us{extra}", flush=True)


small = torch.ones(4, device="cuda")
small_dst = torch.empty_like(small)
kb = torch.ones(16384, device="cuda")
kb_dst = torch.empty_like(kb)
weight = torch.randn(1000, 128, device="cuda")
fn = _nvrtc.get_function("embedding_gather.cu", "embedding_gather",
                         {"INDEX_T": "i64", "CHUNK_BYTES": 16, "ROW_LANES": 32, "CHUNKS": 1, "UNROLL": 4,
                          "BLOCK": _launch.BLOCK}, 0)
no_rows = torch.zeros(1, dtype=torch.int64, device="cuda")
out = torch.empty(1, 128, device="cuda")


def empty_gather() -> None:
    _nvrtc.launch(fn, 1, _launch.BLOCK, torch.cuda.current_stream().cuda_stream, [
        (weight.data_ptr(), _nvrtc.PTR), (32, _nvrtc.I64), (no_rows.data_ptr(), _nvrtc.PTR), (0, _nvrtc.I64),
        (out.data_ptr(), _nvrtc.PTR)])


show("two events, nothing between", lambda: None)
show("cudaMemcpy D2D 16 B", lambda: small_dst.copy_(small))
show("cudaMemcpy D2D 64 KB", lambda: kb_dst.copy_(kb))
show("torch elementwise kernel on 4 floats (add_)", lambda: small.add_(1))
show("our gather kernel, no work (1 block)", empty_gather)
show("our gather of 1 row", lambda: rk.embedding(no_rows, weight, check_indices=False))
for label, nbytes, rows, row_bytes in (("suite 1 f32 (160.8 MB)", 160825344, 0, 0),
                                       ("one-hot 16-bit (135.3 MB)", 135266304, 262144, 256),
                                       ("one-hot f32 (270.5 MB)", 270532608, 262144, 512)):
    half = nbytes // 2
    src = torch.randn(half // 4, device="cuda")
    dst = torch.empty_like(src)
    show(f"{label}: cudaMemcpy", lambda: dst.copy_(src), nbytes)
    show(f"{label}: elementwise kernel (mul by 1)", lambda: torch.mul(src, 1.0, out=dst), nbytes)
    if rows:
        table = torch.randn(rows, row_bytes // 4, device="cuda")
        order = torch.arange(rows, device="cuda")
        moved = 2 * rows * row_bytes + rows * 8
        show(f"{label}: our gather of rows 0..{rows - 1} in order", lambda: rk.embedding(order, table,
             check_indices=False), moved)
        del table
    del src, dst
    torch.cuda.empty_cache()
