"""How fast could any kernel read suite 1's rows? (device diagnostics for docs/perf-log.md, change 33.)

Suite 1 float32 sum (5M x 128 table, B 2048, L 150, uniform) runs at 84 % of the copy ceiling in
compulsory bytes; a copy of the same bytes reaches 94-95 %. scripts/bag_trace.py put the gap in a
4.3 us tail (teams owning one bag of 150 rows each end 30.7-39.3 us after the start). This
script times, side by side on the same rows after the benchmark's L2 flush, kernels that read
exactly suite 1's rows but drop the bag structure, so that whatever the bags cost shows up as
the difference:

* ``flat static``: the 307200 lookups cut into units of ROWS consecutive positions, warps of a
  resident grid (8 warps x 2 blocks per SM) taking every W-th unit; per unit one coalesced index
  load (prefetched a unit ahead), then 16 rows in flight per lane, added into a per-lane sum
  (so the same loads, shuffles and adds per row as the bag kernel). Written: one 512-byte row
  per warp (1.1 MB, suite 1's output is 1 MB).
* ``flat dynamic``: the same, units taken from a global counter (atomicAdd, fetched a unit
  ahead): work moves to whichever warp is free, so no warp waits on a slow one. The counter is
  zeroed before the timed window (a lower bound: a real op would pay a fill or a reset).
* ``flat hash``: static, rows computed from the position (a hash) instead of loaded indices:
  no index -> row chain at all. Different rows, same count and spread.
* ``flat static, 8 rows in flight``: more warps per SM, fewer rows each.
* ``rows ascending``: the same rows sorted, and ``rows 0..N-1``: rows 0-307199, one sequential
  read of 157 MB, to tell random order from a read-only stream; next to them torch's own
  read-only stream (torch.sum over as many bytes). Rows 0..N-1 are all distinct, so their
  compulsory bytes equal the logical column, not the compulsory one.
* ``flat bulk``: the rows through the bulk-copy engine (cp.async.bulk into shared memory, as
  embedding_gather_bulk does) with 16-32 KB in flight per warp and about 200 KB per SM in
  requests (the register kernels: 128 KB), then summed from shared memory.

Percentages are of the copy ceiling measured in the same run, over suite 1's compulsory bytes
(unique rows, indices, output), exactly as the benchmark counts them.

``python3 scripts/suite1_bound.py ROWS,BATCH,POOLING ...`` runs the same readers on other uniform
float32 cases of a ROWS x 128 table (change 39's note: the sweep's and the 20-row case's bags);
where the lookups outnumber the rows, "rows 0..N-1" is left out."""
import contextlib
import functools
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from reference_kernels import _launch, _nvrtc
from reference_kernels.bench import Suite, bag_bytes, copy_ceiling_gbps, table, zipf_indices

SOURCE = r"""
typedef long long i64;
typedef unsigned long long u64;
#ifndef ROWS
#define ROWS 32
#endif
#ifndef DYN
#define DYN 0
#endif
#ifndef HASH
#define HASH 0
#endif
#ifndef WRITE_UNITS  // flat_read: one output row per unit (a unit of L rows = a fixed-size bag)
#define WRITE_UNITS 0
#endif

__device__ __forceinline__ i64 hashed_row(i64 p, i64 rows) {
  u64 z = (u64)p * 0x9E3779B97F4A7C15ull;
  z ^= z >> 29; z *= 0xBF58476D1CE4E5B9ull; z ^= z >> 32;
  return (i64)(z % (u64)rows);
}

__device__ __forceinline__ i64 next_unit(i64 unit, i64 warps, unsigned int* counter, int lane) {
#if DYN
  unsigned int t = 0;
  if (lane == 0) t = atomicAdd(counter, 1u);
  return (i64)__shfl_sync(~0u, t, 0);
#else
  return unit + warps;
#endif
}

__device__ __forceinline__ i64 unit_index(const i64* __restrict__ idx, i64 unit, i64 units, i64 n, i64 rows,
                                          int lane) {
  const i64 p = unit * ROWS + lane;
  if (unit >= units || lane >= ROWS || p >= n) return -1;
  return HASH ? hashed_row(p, rows) : idx[p];
}

// Dimension 128 float32: a row is 32 float4, one per lane.
#ifndef UNR
#define UNR 16
#endif
#ifndef MINB
#define MINB 2
#endif
#ifndef STAGE_ROWS
extern "C" __global__ void __launch_bounds__(256, MINB) flat_read(
    const float4* __restrict__ w, const i64* __restrict__ idx, i64 n, i64 rows, float4* __restrict__ out,
    unsigned int* counter) {
  const int lane = threadIdx.x & 31;
  const i64 warp = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
  const i64 units = (n + ROWS - 1) / ROWS;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  i64 unit = DYN ? next_unit(0, 0, counter, lane) : warp;
  i64 mine = unit_index(idx, unit, units, n, rows, lane);
  while (unit < units) {
    const i64 next = next_unit(unit, warps, counter, lane);
    const i64 ahead = unit_index(idx, next, units, n, rows, lane);
#pragma unroll 1
    for (int h = 0; h < ROWS; h += UNR) {  // one batch of UNR rows in flight at a time
      float4 x[UNR];
#pragma unroll
      for (int u = 0; u < UNR; ++u) {
        const i64 r = __shfl_sync(~0u, mine, h + u);
        x[u] = r >= 0 ? __ldg(w + r * 32 + lane) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < UNR; ++u) {
        acc.x += x[u].x; acc.y += x[u].y; acc.z += x[u].z; acc.w += x[u].w;
      }
    }
    if (WRITE_UNITS) {  // the unit's sum is its bag's result: written as a bag kernel writes it
      out[unit * 32 + lane] = acc;
      acc = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    unit = next;
    mine = ahead;
  }
  if (!WRITE_UNITS) out[warp * 32 + lane] = acc;
}
#else
// The same units through the bulk-copy engine: each warp keeps NST stages of STAGE_ROWS rows in
// flight (cp.async.bulk global -> shared, completing on an mbarrier), then sums them from shared.
// The barrier and copy helpers are embedding_gather.cu's (its bulk entries compile alongside).
#define ROW_BYTES 512
#define BULK_ROWS STAGE_ROWS
#include "embedding_gather.cu"  // BLOCK threads per block: WARPS warps
static_assert(WARPS * NST * STAGE_BYTES <= 48 * 1024, "static shared memory");

__device__ __forceinline__ void load_unit(const char* __restrict__ w, const i64* __restrict__ idx, i64 unit,
                                          i64 n, char* stage, unsigned bar, int lane) {
  const i64 p = unit * STAGE_ROWS + lane;
  const bool mine = lane < STAGE_ROWS && p < n;
  start_copies(w, mine ? idx[p] : 0, mine, stage, bar, lane);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32) flat_bulk(
    const char* __restrict__ w, const i64* __restrict__ idx, i64 n, i64 rows, float4* __restrict__ out,
    unsigned int* counter) {
  __shared__ __align__(128) char stages[WARPS][NST][STAGE_BYTES];
  __shared__ __align__(8) unsigned long long bars[WARPS][NST];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const i64 warp = (i64)blockIdx.x * WARPS + wid, warps = (i64)gridDim.x * WARPS;
  if (lane == 0) {
    for (int s = 0; s < NST; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bars[wid][s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  const i64 units = (n + STAGE_ROWS - 1) / STAGE_ROWS;
  for (int s = 0; s < NST; ++s)
    if (warp + s * warps < units)
      load_unit(w, idx, warp + s * warps, n, stages[wid][s], smem_addr(&bars[wid][s]), lane);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  unsigned parities = 0;
  int s = 0;
  for (i64 unit = warp; unit < units; unit += warps) {
    wait_parity(smem_addr(&bars[wid][s]), (parities >> s) & 1u);
    parities ^= 1u << s;
    const int count = (int)min((i64)STAGE_ROWS, n - unit * STAGE_ROWS);
    const float4* rows4 = reinterpret_cast<const float4*>(stages[wid][s]);
    for (int r = 0; r < count; ++r) {
      const float4 x = rows4[r * 32 + lane];
      acc.x += x.x; acc.y += x.y; acc.z += x.z; acc.w += x.w;
    }
    __syncwarp();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // our reads before the next bulk write
    const i64 refill = unit + NST * warps;
    if (refill < units) load_unit(w, idx, refill, n, stages[wid][s], smem_addr(&bars[wid][s]), lane);
    s = s + 1 == NST ? 0 : s + 1;
  }
  out[warp * 32 + lane] = acc;
}
#endif
"""

SORTED = {"flat static, 32-row units", "flat bulk, 2 x 16 rows/warp, 12 warps/SM"}  # also timed on sorted rows
FLAT = {"DYN": 0, "HASH": 0, "UNR": 16, "MINB": 2}
VARIANTS = {  # name -> (entry, defines, threads per block, blocks per SM)
    "flat static, 32-row units": ("flat_read", {**FLAT, "ROWS": 32}, 256, 2),
    "flat static, 16-row units": ("flat_read", {**FLAT, "ROWS": 16}, 256, 2),
    "flat dynamic, 32-row units": ("flat_read", {**FLAT, "ROWS": 32, "DYN": 1}, 256, 2),
    "flat dynamic, 16-row units": ("flat_read", {**FLAT, "ROWS": 16, "DYN": 1}, 256, 2),
    "flat hash (no index loads), 32-row units": ("flat_read", {**FLAT, "ROWS": 32, "HASH": 1}, 256, 2),
    "flat static, 8 rows in flight, 3 blocks/SM": ("flat_read", {**FLAT, "ROWS": 32, "UNR": 8, "MINB": 3}, 256, 3),
    "flat static, 8 rows in flight, 4 blocks/SM": ("flat_read", {**FLAT, "ROWS": 32, "UNR": 8, "MINB": 4}, 256, 4),
    "flat bulk, 2 x 16 rows/warp, 12 warps/SM": ("flat_bulk", {"STAGE_ROWS": 16, "NST": 2, "BLOCK": 64}, 64, 6),
    "flat bulk, 3 x 16 rows/warp, 8 warps/SM": ("flat_bulk", {"STAGE_ROWS": 16, "NST": 3, "BLOCK": 32}, 32, 8),
    "flat bulk, 2 x 32 rows/warp, 6 warps/SM": ("flat_bulk", {"STAGE_ROWS": 32, "NST": 2, "BLOCK": 32}, 32, 6),
    "flat bulk, 1 x 32 rows/warp, 12 warps/SM": ("flat_bulk", {"STAGE_ROWS": 32, "NST": 1, "BLOCK": 32}, 32, 12),
}


@contextlib.contextmanager
def experiment_kernels(filename: str, source: str) -> Iterator[None]:
    """While open, _nvrtc compiles ``filename`` from ``source``, with embedding_gather.cu pasted
    in where the source includes it (NVRTC sees only common.cuh as a header), beside copies of
    the package's kernel sources (so that its own kernels still compile meanwhile)."""
    with tempfile.TemporaryDirectory() as tmp_dir:
        for kernel_source in _nvrtc.KERNEL_DIR.glob("*.cu*"):
            shutil.copy(kernel_source, Path(tmp_dir) / kernel_source.name)
        gather = (_nvrtc.KERNEL_DIR / "embedding_gather.cu").read_text()
        (Path(tmp_dir) / filename).write_text(source.replace('#include "embedding_gather.cu"', gather))
        kernel_dir, _nvrtc.KERNEL_DIR = _nvrtc.KERNEL_DIR, Path(tmp_dir)
        try:
            yield
        finally:
            _nvrtc.KERNEL_DIR = kernel_dir


def fixed_bags(suite: Suite, weight: torch.Tensor, idx: torch.Tensor, report: Callable[[str, float], None]) -> None:
    """flat_read with units of exactly one bag (L rows, L <= 32, known at compile time) and one
    output row written per unit: the least general bag kernel of this shape, which writes every
    byte the benchmark counts (the other readers skip the output)."""
    batch, pooling = idx.shape
    sms = _launch.sm_count(weight.device)
    out = torch.empty(batch, weight.shape[1], device="cuda")
    for unroll, per_sm in ((16, 2), (8, 4)):
        fn = _nvrtc.get_function("flat_read.cu", "flat_read", {**FLAT, "ROWS": pooling, "UNR": min(unroll, pooling),
                                                              "MINB": per_sm, "WRITE_UNITS": 1}, weight.device.index)
        args = [(weight.data_ptr(), _nvrtc.PTR), (idx.data_ptr(), _nvrtc.PTR), (idx.numel(), _nvrtc.I64),
                (weight.shape[0], _nvrtc.I64), (out.data_ptr(), _nvrtc.PTR), (0, _nvrtc.PTR)]
        call = functools.partial(_launch._launch_on, weight, fn, sms * per_sm, args)
        call()
        torch.testing.assert_close(out, torch.nn.functional.embedding_bag(idx, weight, mode="sum"), rtol=1e-4,
                                   atol=1e-4)
        report(f"fixed bags of {pooling} rows, {unroll} in flight, {per_sm} blocks/SM, output written",
               suite.timer.median_us(call))


def bound(suite: Suite, ceiling: float, rows: int, batch: int, pooling: int) -> None:
    """Every reader on one uniform float32 case of a rows x 128 table, side by side with ours."""
    dim = 128  # the readers move a 512-byte row per warp step (a float4 per lane)
    print(f"-- {rows}x{dim} float32, B {batch}, L {pooling}, uniform", flush=True)
    weight = table(rows, dim, torch.float32, suite.gen)
    idx = zipf_indices(batch * pooling, rows, 0.0, suite.gen).view(batch, pooling)
    compulsory, logical = bag_bytes(weight, idx, None, False, batch * dim)
    sms = _launch.sm_count(weight.device)
    out = torch.empty(sms * 16 * 32 * dim, device="cuda")  # one row per warp, at most 16 x 32 warps per SM
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")

    def report(name: str, us: float) -> None:
        print(f"{name:44s} {us:7.2f} us  {compulsory / (us * 1e3) / ceiling:6.1%} compulsory  "
              f"{logical / (us * 1e3) / ceiling:6.1%} logical", flush=True)

    ours = lambda: _launch.bag_forward(weight, idx, None, batch, None, "sum", -1, False)  # noqa: E731
    report("ours (bag kernel, as the benchmark calls it)", suite.timer.median_us(ours))
    ordered = idx.reshape(-1).sort().values.view(batch, pooling)  # the same rows, ascending
    orders_of_sorted = [(", rows ascending", ordered)]
    if batch * pooling <= rows:  # a sequential read of as many distinct rows
        contiguous = torch.arange(batch * pooling, device="cuda").view(batch, pooling)
        orders_of_sorted.append((", rows 0..N-1", contiguous))
    with experiment_kernels("flat_read.cu", SOURCE):
        if pooling <= 32:
            fixed_bags(suite, weight, idx, report)
        for name, (entry, defines, block, per_sm) in VARIANTS.items():
            fn = _nvrtc.get_function("flat_read.cu", entry, defines, weight.device.index)
            orders = [(name, idx)]
            if name in SORTED:
                orders += [(name + suffix, indices) for suffix, indices in orders_of_sorted]
            for label, indices in orders:
                out.zero_()
                args = [(weight.data_ptr(), _nvrtc.PTR), (indices.data_ptr(), _nvrtc.PTR),
                        (indices.numel(), _nvrtc.I64), (rows, _nvrtc.I64), (out.data_ptr(), _nvrtc.PTR),
                        (counter.data_ptr(), _nvrtc.PTR)]
                call = functools.partial(_launch._launch_on, weight, fn, sms * per_sm, args, block=block)
                reset = counter.zero_ if defines.get("DYN") else None
                if reset:
                    reset()
                call()
                if not defines.get("HASH"):  # every row read once: the warps' sums add up to the rows'
                    want = weight[indices.reshape(-1)].sum(0)
                    torch.testing.assert_close(out.view(-1, dim).sum(0), want, rtol=1e-3, atol=1e-1)
                report(label, suite.timer.median_us(call, reset))
                if reset:
                    report(label + ", counter zeroed inside", suite.timer.median_us(lambda: (counter.zero_(), call())))
    for suffix, indices in orders_of_sorted:
        report("ours" + suffix, suite.timer.median_us(
            functools.partial(_launch.bag_forward, weight, indices, None, batch, None, "sum", -1, False)))
    stream = torch.ones(logical // 4, device="cuda")
    sink = torch.empty((), device="cuda")
    us = suite.timer.median_us(lambda: torch.sum(stream, dim=0, out=sink))
    print(f"{'read-only sequential: torch.sum of the logical bytes':44s} {us:7.2f} us  "
          f"{logical / (us * 1e3) / ceiling:6.1%} of the ceiling (bytes read)", flush=True)
    report("ours again", suite.timer.median_us(ours))
    report("copy of the compulsory bytes (32 KB multiple)", suite.same_size_copy_us(compulsory))
    report("copy of the logical bytes (32 KB multiple)", suite.same_size_copy_us(logical))


def main(argv: list[str]) -> None:
    """Suite 1 by default; ``ROWS,BATCH,POOLING ...`` for other uniform float32 cases of dim 128."""
    suite = Suite(reps=100, quick=False, seed=67)
    ceiling = copy_ceiling_gbps(suite.timer)
    print(f"copy ceiling: {ceiling:.0f} GB/s (read + write)", flush=True)
    cases = [tuple(int(v) for v in arg.split(",")) for arg in argv] or [(5_000_000, 2048, 150)]
    for rows, batch, pooling in cases:
        bound(suite, ceiling, rows, batch, pooling)
        torch.cuda.empty_cache()
    print(f"resources (registers, local bytes): {_nvrtc.STATS.resources}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
