"""One forward call of ours and of FBGEMM on the untuned widths below FBGEMM, for Nsight Compute.

    ncu --profile-from-start off --csv --metrics METRICS \\
        python3 -m benchmarks width_counters --fbgemm DIR [--widths 4,200,520,128]

Issue 37's width sweep (the suite's `widths` group: 4 tables of one width, B8192 L30, float32)
left 9 of 32 cases below FBGEMM (widths 4, 44, 100, 200, 520). For each width and for uniform
and Zipf 1.05 indices, the two outputs are compared first (a wrong argument must not be
profiled), then each library's call runs once between cudaProfilerStart/Stop, after a
``== case / library`` line.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks import fbgemm_peer
from benchmarks.harness import DEV, TABLE_BYTES, table_batch
from reference_kernels.tbe import TableBatchedEmbeddingBag

BATCH, POOLING, TABLES = 8192, 30, 4


def run(width: int, alpha: float) -> None:
    rows = min(1_000_000, TABLE_BYTES // (width * 4))
    gen = torch.Generator(device=DEV).manual_seed(0)
    tbe = TableBatchedEmbeddingBag([rows] * TABLES, width, "sum", torch.float32, DEV)
    tbe.check_indices = False
    tb = table_batch([rows] * TABLES, BATCH, [POOLING] * TABLES, alpha, gen)
    starts = [t * rows for t in range(TABLES)]
    peer = fbgemm_peer.FbgemmForward(tbe.weight.detach(), starts, tb.indices, tb.offsets, "sum")
    with torch.no_grad():
        ours, theirs = tbe(tb.indices, tb.offsets), peer()
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
        for _ in range(3):
            tbe(tb.indices, tb.offsets), peer()
        torch.cuda.synchronize()
        name = f"4x{rows // 1000}Kx{width} B{BATCH} L{POOLING} a{alpha} f32"
        for library, call in (("ours", lambda: tbe(tb.indices, tb.offsets)), ("fbgemm", peer)):
            print(f"== {name} / {library}", flush=True)
            torch.cuda.profiler.start()
            call()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fbgemm", required=True, help="FBGEMM's forward library directory")
    parser.add_argument("--widths", default="4,200,520,128")
    args = parser.parse_args(argv)
    fbgemm_peer.locate(args.fbgemm)
    for width in (int(w) for w in args.widths.split(",")):
        for alpha in (0.0, 1.05):
            run(width, alpha)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
