"""Long bags through a pooled bulk-copy kernel against the package's kernels (device diagnostics
for docs/perf-log.md, change 35: measured, not kept).

The kernel below (embedding_bag_forward_bulk_pool) pools whole bags per warp, the bags' rows
streamed through a ring of shared-memory stages by the Hopper bulk-copy engine, with
embedding_gather.cu's barrier and copy helpers. Side by side with the package's launcher
(``ours``: the general register kernel for these bags) and torch, median of 100 cold calls, on
the benchmark's tables and index draws: suite 1 (5M x 128, B2048 L150) in every mode and
dtype, the pooling-20 group (1M x 128), one of suite 2's tables (500K x 128, B2048 L150),
suite 3's shapes one table at a time (10M x 192, B65536 L32), the sweep's long uniform bags,
bag lengths 8-48 and row widths 256 B-2 KB, and Zipf draws. Then the kernel's shape (stages,
stage bytes, warps per block) on suite 1. Every output is checked against torch first, written
over a NaN-filled buffer. Arguments: substrings of the case labels to run (default: all).
``--ncu``: two of the cases once each, for Nsight Compute (see ncu_calls)."""
import itertools
import sys

import torch
import torch.nn.functional as F

import reference_kernels as rk
from reference_kernels import _launch, _nvrtc
from reference_kernels.bench import Suite, bag_bytes, table, zipf_indices
from suite1_bound import experiment_kernels

SOURCE = r"""
#ifndef INDEX_T
#define INDEX_T i64
#endif
#include "embedding_gather.cu"  // BULK_ROWS, ROW_BYTES, BLOCK given: the bulk helpers
#define VEC_ELEMS (16 / (int)sizeof(weight_t))
typedef Pack<weight_t, VEC_ELEMS> Vec16;

// The rows [start, end) of bag ``bag`` (an empty span past the last bag): CSR offsets (the last
// bag's end is num_indices when offsets has one entry per bag), or bags of bag_len rows.
struct BagSpan {
  i64 start, end;
};

__device__ __forceinline__ BagSpan bag_span(const INDEX_T* __restrict__ offsets, i64 num_offsets, i64 num_indices,
                                            i64 num_bags, i64 bag, i64 bag_len) {
  if (bag >= num_bags) return {0, 0};
  if (offsets == nullptr) return {bag * bag_len, bag * bag_len + bag_len};
  return {(i64)offsets[bag], bag + 1 < num_offsets ? (i64)offsets[bag + 1] : num_indices};
}
// The long-bag entry: each warp pools whole bags (bags warp, warp + W, ...), its rows streamed
// through a ring of POOL_STAGES stages of BULK_ROWS rows by the bulk-copy engine, so that the
// rows in flight cost shared memory, not registers. A stage holds rows of one bag; lane j of
// the producer copies row j of the stage (its index loaded one stage ahead), and the stage's
// pooled-row mask and per-sample weights go to shared memory beside it. The consumer adds the
// stage's rows from shared memory (row r by lane group r % GROUPS), refills the stage, and
// stores a bag's result from registers when its last stage is pooled. Semantics as
// embedding_bag_forward.cu's: negative and padding rows are skipped, mean divides by the rows
// pooled, an empty bag gives 0 in every mode.
#ifndef POOL_STAGES
#define POOL_STAGES 3
#endif
#ifndef HAS_PSW
#define HAS_PSW 0
#endif
static_assert(MODE == 0 || HAS_PSW == 0, "per_sample_weights only with sum");
static_assert(WARPS * POOL_STAGES * (STAGE_BYTES + BULK_ROWS * 4 + 12) <= 48 * 1024, "static shared memory");
#define ROW_VECS (ROW_BYTES / 16)
// Rows narrower than a warp's 32 vectors are pooled GROUPS at a time, one per lane group.
#define GROUPS (ROW_VECS < 32 && 32 % ROW_VECS == 0 ? 32 / ROW_VECS : 1)
#define GROUP_LANES (32 / GROUPS)
#define LANE_VECS ((ROW_VECS + GROUP_LANES - 1) / GROUP_LANES)

struct PoolAcc {
  float v[LANE_VECS][VEC_ELEMS];
  int count;  // rows pooled (the same in every lane)
};

__device__ __forceinline__ void pool_init(PoolAcc& a) {
#pragma unroll
  for (int c = 0; c < LANE_VECS; ++c)
#pragma unroll
    for (int e = 0; e < VEC_ELEMS; ++e) a.v[c][e] = MODE == 2 ? -__int_as_float(0x7f800000) : 0.0f;
  a.count = 0;
}

// Adds the stage's pooled rows (bit r of ``pooled``: row r) into the lane's accumulator.
__device__ __forceinline__ void pool_stage(PoolAcc& a, const char* stage, const float* weights, u32 pooled,
                                           int rows, int lane) {
  const int group = lane / GROUP_LANES, group_lane = lane % GROUP_LANES;
  a.count += __popc(pooled);
#pragma unroll 4
  for (int r = group; r < rows; r += GROUPS) {
    if (!(pooled >> r & 1u)) continue;
    const float w = HAS_PSW ? weights[r] : 1.0f;
#pragma unroll
    for (int c = 0; c < LANE_VECS; ++c) {
      const int v = c * GROUP_LANES + group_lane;
      if (v >= ROW_VECS) break;
      float f[VEC_ELEMS];
      to_floats(*reinterpret_cast<const Vec16*>(stage + r * ROW_BYTES + v * 16), f);
#pragma unroll
      for (int e = 0; e < VEC_ELEMS; ++e) {
        if (MODE == 2) a.v[c][e] = fmaxf(a.v[c][e], f[e]);
        else if (HAS_PSW) a.v[c][e] = fmaf(w, f[e], a.v[c][e]);
        else a.v[c][e] += f[e];
      }
    }
  }
}

// Combines the lane groups' partial results; group 0 writes the bag's output row.
__device__ __forceinline__ void pool_store(PoolAcc& a, char* __restrict__ out_row, int lane) {
#pragma unroll
  for (int off = GROUP_LANES; off < 32; off <<= 1)
#pragma unroll
    for (int c = 0; c < LANE_VECS; ++c)
#pragma unroll
      for (int e = 0; e < VEC_ELEMS; ++e) {
        const float other = __shfl_xor_sync(0xffffffffu, a.v[c][e], off);
        a.v[c][e] = MODE == 2 ? fmaxf(a.v[c][e], other) : a.v[c][e] + other;
      }
  if (lane >= GROUP_LANES) return;
#pragma unroll
  for (int c = 0; c < LANE_VECS; ++c) {
    const int v = c * GROUP_LANES + lane;
    if (v >= ROW_VECS) break;
    Vec16 y;
#pragma unroll
    for (int e = 0; e < VEC_ELEMS; ++e) {
      const float x = a.v[c][e];
      y.v[e] = from_float(a.count == 0 ? 0.0f : MODE == 1 ? x / (float)a.count : x);
    }
    *reinterpret_cast<Vec16*>(out_row + v * 16) = y;
  }
}

// The producer's cursor: the next stage's rows are positions [pos, min(pos + BULK_ROWS, span.end))
// of bag ``bag``; ``index`` (and ``weight``) are lane j's for position pos + j, loaded ahead.
struct PoolCursor {
  i64 bag, pos;
  BagSpan span, next;  // the bag's rows, and those of the warp's bag after it
  i64 index;
  float weight;
};

extern "C" __global__ void __launch_bounds__(BLOCK) embedding_bag_forward_bulk_pool(
    const char* __restrict__ weight, const INDEX_T* __restrict__ indices, i64 num_indices,
    const INDEX_T* __restrict__ offsets, i64 num_offsets, i64 bag_len, i64 num_bags,
    const weight_t* __restrict__ per_sample_weights, i64 padding_idx, char* __restrict__ out) {
  __shared__ __align__(128) char stages[WARPS][POOL_STAGES][STAGE_BYTES];
  __shared__ __align__(8) u64 bars[WARPS][POOL_STAGES];
  __shared__ u32 masks[WARPS][POOL_STAGES];
  __shared__ float weights[WARPS][POOL_STAGES][HAS_PSW ? BULK_ROWS : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 stride = (i64)gridDim.x * WARPS;
  i64 bag = (i64)blockIdx.x * WARPS + warp;
  if (bag >= num_bags) return;
  if (lane == 0) {
    for (int s = 0; s < POOL_STAGES; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bars[warp][s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();

  // Loads lane j's index (and weight) for the cursor's next stage.
  auto load_ahead = [&](PoolCursor& c) {
    const bool mine = c.bag < num_bags && c.pos + lane < c.span.end && lane < BULK_ROWS;
    c.index = mine ? (i64)indices[c.pos + lane] : -1;
    c.weight = HAS_PSW && mine ? to_float(per_sample_weights[c.pos + lane]) : 1.0f;
  };
  // Moves the cursor past the stage just issued (and past empty bags).
  auto advance = [&](PoolCursor& c) {
    c.pos += BULK_ROWS;
    while (c.bag < num_bags && c.pos >= c.span.end) {
      c.bag += stride;
      c.span = c.next;
      c.pos = c.span.start;
      c.next = bag_span(offsets, num_offsets, num_indices, num_bags, c.bag + stride, bag_len);
    }
    load_ahead(c);
  };
  PoolCursor producer;
  producer.bag = bag;
  producer.span = bag_span(offsets, num_offsets, num_indices, num_bags, bag, bag_len);
  producer.next = bag_span(offsets, num_offsets, num_indices, num_bags, bag + stride, bag_len);
  producer.pos = producer.span.start - BULK_ROWS;
  advance(producer);  // to the first row of the first bag that has any
  // Issues the producer's next stage into stage s, if any rows are left.
  auto produce = [&](int s) {
    if (producer.bag >= num_bags) return;
    const bool pooled = producer.index >= 0 && producer.index != padding_idx;
    const u32 bar = smem_addr(&bars[warp][s]);
    start_copies(weight, producer.index, pooled, stages[warp][s], bar, lane);
    const u32 mask = __ballot_sync(0xffffffffu, pooled);
    if (lane == 0) masks[warp][s] = mask;
    if (HAS_PSW && lane < BULK_ROWS) weights[warp][s][lane < BULK_ROWS ? lane : 0] = producer.weight;
    advance(producer);
  };
  for (int s = 0; s < POOL_STAGES; ++s) produce(s);

  u32 parities = 0;  // bit s: the phase that stage s waits for next
  int s = 0;
  BagSpan span = bag_span(offsets, num_offsets, num_indices, num_bags, bag, bag_len);
  for (; bag < num_bags; bag += stride) {
    const BagSpan next = bag_span(offsets, num_offsets, num_indices, num_bags, bag + stride, bag_len);
    PoolAcc acc;
    pool_init(acc);
    for (i64 pos = span.start; pos < span.end; pos += BULK_ROWS) {
      wait_parity(smem_addr(&bars[warp][s]), (parities >> s) & 1u);
      parities ^= 1u << s;
      pool_stage(acc, stages[warp][s], weights[warp][s], masks[warp][s], (int)min((i64)BULK_ROWS, span.end - pos),
                 lane);
      __syncwarp();
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // our reads before the stage's next copies
      produce(s);
      s = s + 1 == POOL_STAGES ? 0 : s + 1;
    }
    pool_store(acc, out + bag * ROW_BYTES, lane);
    span = next;
  }
}
"""

# The kernel's shape: stages per warp, bytes per stage, threads per block (3 x 4 KB x 64
# measured best on suite 1 among the shapes the last section tries).
STAGES, STAGE_BYTES, BLOCK = 3, 4096, 64
SMEM_PER_SM, SMEM_RESERVED_PER_BLOCK, THREADS_PER_SM = 228 << 10, 1 << 10, 2048
MODES = {"sum": 0, "mean": 1, "max": 2}


def bulk_pool(weight: torch.Tensor, idx: torch.Tensor, offsets: torch.Tensor | None, mode: str,
              psw: torch.Tensor | None, poison: bool = False) -> torch.Tensor:
    """The pooled bulk kernel's result for [B, L] indices, or 1-D indices with B + 1 offsets
    (``poison``: written over NaNs, for the checks; the timed calls allocate as the package does)."""
    row_bytes = weight.shape[1] * weight.element_size()
    assert row_bytes % 16 == 0 and weight.data_ptr() % 16 == 0
    num_bags = idx.shape[0] if offsets is None else offsets.numel() - 1
    rows = max(1, min(32, STAGE_BYTES // row_bytes))
    warps = BLOCK // 32
    smem = warps * STAGES * (rows * row_bytes + 12 + 4 * rows)  # stages, barrier, mask, weights
    per_sm = min(THREADS_PER_SM // BLOCK, SMEM_PER_SM // (smem + SMEM_RESERVED_PER_BLOCK))
    grid = min(-(-num_bags // warps), per_sm * _launch.sm_count(weight.device))
    defines = {"BULK_ROWS": rows, "ROW_BYTES": row_bytes, "BLOCK": BLOCK, "POOL_STAGES": STAGES,
               "MODE": MODES[mode], "WEIGHT_DTYPE": _launch._dtype_code(weight.dtype), "HAS_PSW": int(psw is not None)}
    fn = _nvrtc.get_function("bulk_pool.cu", "embedding_bag_forward_bulk_pool", defines, weight.device.index)
    out = torch.empty((num_bags, weight.shape[1]), dtype=weight.dtype, device=weight.device)
    if poison:
        out.fill_(float("nan"))
    _launch._launch_on(weight, fn, grid, [
        (weight.data_ptr(), _nvrtc.PTR), (idx.data_ptr(), _nvrtc.PTR), (idx.numel(), _nvrtc.I64),
        (_launch._ptr(offsets), _nvrtc.PTR), (0 if offsets is None else offsets.numel(), _nvrtc.I64),
        (idx.shape[1] if offsets is None else 0, _nvrtc.I64), (num_bags, _nvrtc.I64), (_launch._ptr(psw), _nvrtc.PTR),
        (-1, _nvrtc.I64), (out.data_ptr(), _nvrtc.PTR)], block=BLOCK)
    return out


def ncu_calls() -> None:
    """For Nsight Compute (``--ncu``): d256 float32 B16384 L20 on a 1M-row table, uniform and Zipf
    1.15, once through this kernel and once through the package's. Run as
    ncu --kernel-name regex:embedding_bag_forward --cache-control all --clock-control none
    --metrics ... python3 scripts/bulk_pool.py --ncu"""
    gen = torch.Generator(device="cuda").manual_seed(35)
    weight = table(1_000_000, 256, torch.float32, gen)
    for alpha in (0.0, 1.15):
        idx = zipf_indices(16384 * 20, 1_000_000, alpha, gen).view(16384, 20)
        bulk_pool(weight, idx, None, "sum", None)
        rk.embedding_bag(idx, weight, mode="sum", check_indices=False)
    torch.cuda.synchronize()


if sys.argv[1:] == ["--ncu"]:
    with experiment_kernels("bulk_pool.cu", SOURCE):
        ncu_calls()
    sys.exit(0)
suite = Suite(reps=100, quick=False, seed=75)
ceiling = suite.copy_gbps


def close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol * 4)


def case(label: str, weight: torch.Tensor, idx: torch.Tensor, offsets: "torch.Tensor | None", mode: str,
         psw: bool, shapes: bool = False) -> None:
    global STAGES, STAGE_BYTES, BLOCK
    last = offsets is not None
    batch = idx.shape[0] if offsets is None else offsets.numel() - 1
    w = torch.rand(idx.shape, generator=suite.gen, device="cuda").to(weight.dtype) if psw else None
    bulk = lambda: bulk_pool(weight, idx, offsets, mode, w)
    ours = lambda: rk.embedding_bag(idx, weight, offsets, mode=mode, per_sample_weights=w,
                                    include_last_offset=last, check_indices=False)
    with torch.no_grad():
        want = F.embedding_bag(idx, weight, offsets, mode=mode, per_sample_weights=w, include_last_offset=last)
        close(bulk_pool(weight, idx, offsets, mode, w, poison=True), want, weight.dtype)
        close(ours(), want, weight.dtype)
        times = {"bulk": suite.timer.median_us(bulk), "ours": suite.timer.median_us(ours),
                 "torch": suite.timer.median_us(lambda: F.embedding_bag(idx, weight, offsets, mode=mode,
                                                                        per_sample_weights=w, include_last_offset=last))}
    compulsory, logical = bag_bytes(weight, idx, offsets, psw, batch * weight.shape[1])
    pct = {k: compulsory / (v * 1e3) / ceiling for k, v in times.items()}
    print(f"{label:46s} bulk {times['bulk']:7.1f} us ({pct['bulk']:5.1%}, {logical / (times['bulk'] * 1e3) / ceiling:5.1%}"
          f" logical)  ours {times['ours']:7.1f} us ({pct['ours']:5.1%})  torch {times['torch']:7.1f} us  "
          f"same-size copy {compulsory / (suite.same_size_copy_us(compulsory) * 1e3) / ceiling:5.1%}", flush=True)
    if shapes:
        default = (STAGES, STAGE_BYTES, BLOCK)
        for STAGES, STAGE_BYTES, BLOCK in ((2, 4096, 64), (4, 4096, 64), (2, 8192, 64), (4, 2048, 64), (6, 2048, 64),
                                           (3, 4096, 32), (2, 6144, 64), (3, 2048, 128)):
            if weight.shape[1] * weight.element_size() > STAGE_BYTES:
                continue
            with torch.no_grad():
                close(bulk_pool(weight, idx, offsets, mode, w, poison=True), want, weight.dtype)
                us = suite.timer.median_us(bulk)
            print(f"    {STAGES} stages x {STAGE_BYTES} B, {BLOCK} threads/block: {us:7.1f} us "
                  f"({compulsory / (us * 1e3) / ceiling:5.1%})", flush=True)
        STAGES, STAGE_BYTES, BLOCK = default


only = sys.argv[1:]  # optional filter: substrings of the labels to run


def wanted(label: str) -> bool:
    return not only or any(o in label for o in only)


with experiment_kernels("bulk_pool.cu", SOURCE):
    big = {dt: table(5_000_000, 128, dt, suite.gen) for dt in (torch.float32, torch.bfloat16, torch.float16)}
    idx1 = zipf_indices(2048 * 150, 5_000_000, 0.0, suite.gen).view(2048, 150)
    for dt, mode, psw in [(torch.float32, "sum", False), (torch.float32, "sum", True), (torch.float32, "mean", False),
                          (torch.float32, "max", False), (torch.bfloat16, "sum", False), (torch.bfloat16, "sum", True),
                          (torch.bfloat16, "mean", False), (torch.bfloat16, "max", False), (torch.float16, "sum", False),
                          (torch.float16, "max", False)]:
        label = f"1 5Mx128 B2048 L150 {mode}{'+psw' if psw else ''} {str(dt)[6:]}"
        if wanted(label):
            case(label, big[dt], idx1, None, mode, psw, shapes=(dt != torch.float16 and mode == "sum" and not psw))
    del big
    torch.cuda.empty_cache()

    w1m = table(1_000_000, 128, torch.float32, suite.gen)
    for batch, layout in itertools.product((2048, 16384), ("fixed", "csr")):
        idx = zipf_indices(batch * 20, 1_000_000, 0.0, suite.gen)
        offsets = torch.arange(0, batch * 20 + 1, 20, device="cuda") if layout == "csr" else None
        label = f"0 1Mx128 B{batch} L20 {layout} sum f32"
        if wanted(label):
            case(label, w1m, idx if offsets is not None else idx.view(batch, 20), offsets, "sum", False)
    for dim, batch, pooling in ((128, 1024, 64), (128, 32768, 16), (128, 32768, 64), (128, 131072, 16), (32, 32768, 16),
                                (32, 32768, 64), (32, 131072, 64)):
        label = f"4 d{dim} B{batch} L{pooling} fixed sum f32"
        if wanted(label):
            weight = w1m if dim == 128 else table(1_000_000, dim, torch.float32, suite.gen)
            case(label, weight, zipf_indices(batch * pooling, 1_000_000, 0.0, suite.gen).view(batch, pooling), None,
                 "sum", False)
    del w1m
    torch.cuda.empty_cache()

    for dt in (torch.float32, torch.float16):
        label = f"2 500Kx128 B2048 L150 sum {str(dt)[6:]} (one table)"
        if wanted(label):
            case(label, table(500_000, 128, dt, suite.gen), zipf_indices(2048 * 150, 500_000, 0.0, suite.gen).view(2048, 150),
                 None, "sum", False)
    for dt in (torch.float32, torch.float16):
        weight = None
        for alpha, mode, psw in ((1.0, "sum", False), (1.0, "sum", True), (1.0, "mean", False), (1.0, "max", False),
                                 (1.15, "sum", False), (0.0, "sum", False)):
            label = f"3 10Mx192 B65536 L32 a{alpha} {mode}{'+psw' if psw else ''} {str(dt)[6:]} (one table)"
            if wanted(label):
                weight = table(10_000_000, 192, dt, suite.gen) if weight is None else weight
                case(label, weight, zipf_indices(65536 * 32, 10_000_000, alpha, suite.gen).view(65536, 32), None, mode,
                     psw)
        del weight
        torch.cuda.empty_cache()
    # Where the kernel's range ends: bag length, row width, batch (1M-row tables, uniform).
    tables = {}
    for dim, dt, batch, pooling in ((128, torch.float32, 16384, 8), (128, torch.float32, 16384, 12),
                                    (128, torch.float32, 16384, 16), (128, torch.float32, 16384, 24),
                                    (128, torch.float32, 16384, 32), (128, torch.float32, 16384, 48),
                                    (128, torch.float32, 65536, 32), (128, torch.float32, 4096, 32),
                                    (64, torch.float32, 16384, 20), (256, torch.bfloat16, 16384, 20),
                                    (256, torch.float32, 16384, 20), (512, torch.float32, 16384, 20),
                                    (128, torch.bfloat16, 16384, 20), (192, torch.float32, 16384, 32)):
        label = f"5 d{dim} {str(dt)[6:]} B{batch} L{pooling} fixed sum"
        if wanted(label):
            if (dim, dt) not in tables:
                tables[dim, dt] = table(1_000_000, dim, dt, suite.gen)
            idx = zipf_indices(batch * pooling, 1_000_000, 0.0, suite.gen).view(batch, pooling)
            case(label, tables[dim, dt], idx, None, "sum", False)
    # Skewed draws (Zipf alpha) and the other modes inside that range.
    for dim, dt, batch, pooling, alpha, layout, mode in (
            (128, torch.float32, 32768, 16, 1.05, "fixed", "sum"), (128, torch.float32, 32768, 16, 1.15, "fixed", "sum"),
            (128, torch.float32, 32768, 16, 1.15, "csr", "sum"), (128, torch.float32, 131072, 16, 1.05, "fixed", "sum"),
            (128, torch.float32, 131072, 16, 1.15, "fixed", "sum"), (128, torch.float32, 1024, 16, 0.0, "fixed", "sum"),
            (128, torch.float32, 1024, 16, 0.0, "csr", "sum"), (128, torch.float32, 16384, 20, 1.15, "fixed", "sum"),
            (128, torch.float32, 16384, 20, 0.0, "fixed", "mean"), (128, torch.float32, 16384, 20, 0.0, "fixed", "max"),
            (128, torch.float32, 16384, 24, 1.15, "fixed", "sum"), (256, torch.bfloat16, 16384, 20, 1.15, "fixed", "sum"),
            (128, torch.bfloat16, 16384, 20, 1.15, "fixed", "max"),
            *[(128, torch.bfloat16, 16384, pooling, alpha, "fixed", "sum") for pooling in (16, 20, 24, 32, 48)
              for alpha in (0.0, 1.05, 1.15)],
            (128, torch.float16, 16384, 20, 0.0, "csr", "mean"), (128, torch.float16, 16384, 20, 1.15, "fixed", "sum"),
            (256, torch.bfloat16, 16384, 16, 1.05, "fixed", "sum"), (512, torch.bfloat16, 16384, 20, 0.0, "fixed", "sum"),
            (512, torch.bfloat16, 16384, 20, 1.15, "fixed", "sum"), (256, torch.float32, 16384, 20, 1.15, "fixed", "sum"),
            (512, torch.float32, 16384, 20, 1.15, "fixed", "sum"), (256, torch.float32, 16384, 24, 1.05, "fixed", "sum"),
            (64, torch.float32, 16384, 20, 1.15, "fixed", "sum")):
        label = f"6 d{dim} {str(dt)[6:]} B{batch} L{pooling} a{alpha} {layout} {mode}"
        if wanted(label):
            if (dim, dt) not in tables:
                tables[dim, dt] = table(1_000_000, dim, dt, suite.gen)
            idx = zipf_indices(batch * pooling, 1_000_000, alpha, suite.gen)
            offsets = torch.arange(0, batch * pooling + 1, pooling, device="cuda") if layout == "csr" else None
            case(label, tables[dim, dt], idx if offsets is not None else idx.view(batch, pooling), offsets, mode, False)
    del tables
    torch.cuda.empty_cache()
# The gather of 128-byte rows (d32 f32, 1M rows, [B, 1] bags and embedding): the bulk gather
# (BULK_GATHER_MIN_ROW_BYTES 0) against the launcher's choice (the register kernels), by skew.
w32 = table(1_000_000, 32, torch.float32, suite.gen)
for batch, alpha in itertools.product((32768, 131072), (0.0, 1.05, 1.15)):
    label = f"7 d32 f32 B{batch} L1 a{alpha} fixed sum and embedding"
    if not wanted(label):
        continue
    idx = zipf_indices(batch, 1_000_000, alpha, suite.gen)
    times = {}
    for floor in (0, _launch.BULK_GATHER_MIN_ROW_BYTES):
        default, _launch.BULK_GATHER_MIN_ROW_BYTES = _launch.BULK_GATHER_MIN_ROW_BYTES, floor
        with torch.no_grad():
            bag = lambda idx=idx: rk.embedding_bag(idx.view(-1, 1), w32, mode="sum", check_indices=False)
            flat = lambda idx=idx: rk.embedding(idx, w32, check_indices=False)
            assert torch.equal(bag(), w32[idx]) and torch.equal(flat(), w32[idx])
            times[floor] = (suite.timer.median_us(bag), suite.timer.median_us(flat))
        _launch.BULK_GATHER_MIN_ROW_BYTES = default
    (bulk_bag, bulk_flat), (reg_bag, reg_flat) = times.values()
    print(f"{label:46s} [B, 1] bags: bulk gather {bulk_bag:5.1f} us, short-bag kernel {reg_bag:5.1f} us; "
          f"embedding: bulk {bulk_flat:5.1f} us, register gather {reg_flat:5.1f} us", flush=True)
print(f"resources (registers, local bytes): {_nvrtc.STATS.resources}", flush=True)
