// Unpooled lookup (torch.nn.functional.embedding): out[i, :] = weight[indices[i], :].
//
// Two entries from this file, both pure copies (independent of the element type):
//
// embedding_gather (default): rows are moved as CHUNK_BYTES-wide words (16 where the row
// size and alignment allow). ROW_LANES lanes share one row, each moving CHUNKS words; a team
// first reads UNROLL indices (one per lane, coalesced), then issues all UNROLL rows' loads
// before the first store, so several rows are in flight per lane. The launcher gives every
// team one step (a grid over all the work); the loop strides past a capped grid.
//
// embedding_gather_bulk (BULK_ROWS defined; sm_90 and newer): rows are moved by the Hopper
// bulk-copy engine and never pass through registers. Each warp moves BULK_ROWS rows of
// ROW_BYTES per step: lanes 0..BULK_ROWS-1 read one index each and start one cp.async.bulk
// global -> shared copy of their row, completing on the stage's mbarrier; when the stage is
// full, lane 0 writes it to the output with one bulk shared -> global copy. Two stages per
// warp: the next step's rows load while this step's wait or store. ROW_BYTES is a multiple of
// 16 and both pointers are 16-byte aligned (the launcher checks).
//
// embedding_bag_forward_bulk (BULK_ROWS and BULK_BAGS defined): the bulk gather's machinery
// for pooled lookups in the CSR layout whose bags mostly hold one row (the launcher takes it
// when there are as many indices as bags). Lane l of a step takes bag first + l: a bag of
// exactly one valid row is that row in every mode, so the row is bulk-copied into the lane's
// slot; any other bag (empty, longer, a padding or negative row) is pooled into its slot by
// the whole warp, with embedding_bag_forward.cu's semantics. The stage is stored as above.
//
// A negative index (possible only with the index check off) gives a row of zeros in both
// gather entries, as a skipped row gives nothing to a bag.
//
// Indices were validated by index_check.cu; address arithmetic is 64-bit.
#include "common.cuh"

#ifndef BULK_ROWS

#ifndef INDEX_T
#define INDEX_T i64
#endif
#ifndef CHUNK_BYTES
#define CHUNK_BYTES 16
#endif
#ifndef ROW_LANES
#define ROW_LANES 32
#endif
#ifndef CHUNKS
#define CHUNKS 1
#endif
#ifndef UNROLL
#define UNROLL 4
#endif
#ifndef BLOCK
#define BLOCK 256
#endif

static_assert(ROW_LANES <= 32 && (ROW_LANES & (ROW_LANES - 1)) == 0, "ROW_LANES: power of two <= 32");
static_assert(UNROLL <= ROW_LANES, "a team reads its UNROLL indices one per lane");

typedef RawWord<CHUNK_BYTES>::type Word;

extern "C" __global__ void __launch_bounds__(BLOCK) embedding_gather(
    const Word* __restrict__ weight, i64 row_words,  // row size in words
    const INDEX_T* __restrict__ indices, i64 num_indices,
    Word* __restrict__ out) {
  wait_for_previous_kernel();
  const int lane = threadIdx.x & 31;
  const int row_lane = lane & (ROW_LANES - 1);
  const u32 mask = team_mask<ROW_LANES>(lane);
  const i64 team = ((i64)blockIdx.x * BLOCK + threadIdx.x) / ROW_LANES;
  const i64 teams = (i64)gridDim.x * BLOCK / ROW_LANES;
  const i64 tile_words = (i64)ROW_LANES * CHUNKS;
  const i64 col_tiles = (row_words + tile_words - 1) / tile_words;
  const i64 items = (num_indices + UNROLL - 1) / UNROLL * col_tiles;

  for (i64 item = team; item < items; item += teams) {  // same trip count for the team
    const i64 first = (item / col_tiles) * UNROLL;
    const i64 col0 = (item % col_tiles) * tile_words;
    const i64 my_index = row_lane < UNROLL && first + row_lane < num_indices
                             ? (i64)indices[first + row_lane] : -1;
    Word x[UNROLL][CHUNKS];
    i64 row[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      row[u] = __shfl_sync(mask, my_index, u, ROW_LANES);
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const i64 col = col0 + c * ROW_LANES + row_lane;
        x[u][c] = Word();  // a negative index (index check off) gives a row of zeros
        if (row[u] >= 0 && col < row_words) x[u][c] = __ldg(weight + row[u] * row_words + col);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (first + u >= num_indices) break;
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const i64 col = col0 + c * ROW_LANES + row_lane;
        if (col < row_words) out[(first + u) * row_words + col] = x[u][c];
      }
    }
  }
}

#else  // BULK_ROWS: the bulk-copy entries

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "embedding_gather_bulk needs sm_90 or newer (cp.async.bulk)"
#endif
#ifndef INDEX_T
#define INDEX_T i64
#endif
#ifndef ROW_BYTES
#define ROW_BYTES 512
#endif
#ifndef BLOCK
#define BLOCK 128
#endif
#define WARPS (BLOCK / 32)
#if defined(BULK_BAGS) && !defined(MODE)
#define MODE 0  // 0 = sum, 1 = mean, 2 = max (only bags that are not one row are pooled)
#endif
#define STAGE_BYTES (BULK_ROWS * ROW_BYTES)
static_assert(ROW_BYTES % 16 == 0, "bulk copies move multiples of 16 bytes");
static_assert(BULK_ROWS >= 1 && BULK_ROWS <= 32, "one row per lane");
static_assert(2 * WARPS * STAGE_BYTES <= 48 * 1024, "two stages per warp in static shared memory");

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void wait_parity(u32 bar, u32 parity) {
  u32 done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}

// The stage's barrier expects the bytes of the rows copied by the lanes where ``copy`` holds;
// each such lane starts the bulk copy of row ``idx`` into its slot of the stage.
__device__ __forceinline__ void start_copies(const char* __restrict__ weight, i64 idx, bool copy, char* stage, u32 bar,
                                             int lane) {
  const u32 copied = __ballot_sync(0xffffffffu, copy);
  if (lane == 0)
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(bar), "r"((u32)__popc(copied) * (u32)ROW_BYTES) : "memory");
  __syncwarp();
  if (copy)
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(stage + lane * ROW_BYTES)), "l"(weight + idx * ROW_BYTES), "r"((u32)ROW_BYTES),
                    "r"(bar) : "memory");
}

// Lanes < rows read an index and start the copy of its row into the stage; the stage's
// barrier expects the bytes of the rows that are copied. A negative index's slot is zeroed
// by its lane instead (generic stores, made visible to the bulk store by a proxy fence).
__device__ __forceinline__ void load_stage(const char* __restrict__ weight, const INDEX_T* __restrict__ indices,
                                           i64 first, int rows, char* stage, u32 bar, int lane) {
  const i64 idx = lane < rows ? (i64)indices[first + lane] : 0;
  if (idx < 0) {
    uint4* slot = reinterpret_cast<uint4*>(stage + lane * ROW_BYTES);
    for (int w = 0; w < ROW_BYTES / 16; ++w) slot[w] = make_uint4(0, 0, 0, 0);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  start_copies(weight, idx, lane < rows && idx >= 0, stage, bar, lane);
}

#ifdef BULK_BAGS
// The one-row-bag entry: bag b's rows are indices[offsets[b] .. offsets[b + 1]) (the last
// bag's end is num_indices when offsets has one entry per bag), and its result is out row b.
#define VEC_ELEMS (16 / (int)sizeof(weight_t))
typedef Pack<weight_t, VEC_ELEMS> Vec16;

// The pooled value of the bag whose rows are indices[start, end), into ``slot``, by the whole
// warp. The rare case here (a bag that is not exactly one valid row), with the semantics of
// embedding_bag_forward.cu for one bag without per-sample weights: negative and padding rows
// are skipped, the mean divides by the rows pooled, an empty bag gives 0 in every mode.
__device__ __noinline__ void pool_into_slot(const weight_t* __restrict__ weight,
                                            const INDEX_T* __restrict__ indices, i64 start, i64 end,
                                            i64 padding_idx, char* slot, int lane) {
  constexpr i64 ROW_ELEMS = ROW_BYTES / sizeof(weight_t);
  for (int v = lane; v < ROW_BYTES / 16; v += 32) {
    float acc[VEC_ELEMS];
#pragma unroll
    for (int e = 0; e < VEC_ELEMS; ++e) acc[e] = MODE == 2 ? -__int_as_float(0x7f800000) : 0.0f;
    int count = 0;
    for (i64 p = start; p < end; p += 4) {  // four rows in flight
      Vec16 x[4];
      bool pooled[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const i64 r = p + u < end ? (i64)indices[p + u] : -1;
        pooled[u] = r >= 0 && r != padding_idx;
        if (pooled[u]) x[u] = load_pack<weight_t, VEC_ELEMS>(weight + r * ROW_ELEMS + v * VEC_ELEMS);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (!pooled[u]) continue;
        ++count;
        float f[VEC_ELEMS];
        to_floats(x[u], f);
#pragma unroll
        for (int e = 0; e < VEC_ELEMS; ++e) {
          if (MODE == 2) {
            if (f[e] > acc[e]) acc[e] = f[e];
          } else {
            acc[e] += f[e];
          }
        }
      }
    }
    Vec16 y;
    const CountDivisor mean = count_divisor(count > 0 ? count : 1);  // dead code but in mean mode
#pragma unroll
    for (int e = 0; e < VEC_ELEMS; ++e) {
      const float value = MODE == 1 ? (count > 0 ? divide(acc[e], mean) : 0.0f) : (count > 0 ? acc[e] : 0.0f);
      y.v[e] = from_float(value);
    }
    *reinterpret_cast<Vec16*>(slot + v * 16) = y;
  }
}

// The rows [start, end) of bag ``bag`` (an empty span past the last bag).
struct BagSpan {
  i64 start, end;
};

__device__ __forceinline__ BagSpan bag_span(const INDEX_T* __restrict__ offsets, i64 num_offsets, i64 num_indices,
                                            i64 num_bags, i64 bag) {
  if (bag >= num_bags) return {0, 0};
  return {(i64)offsets[bag], bag + 1 < num_offsets ? (i64)offsets[bag + 1] : num_indices};
}

// Lanes < rows take one bag each (``span``: the lane's bag's rows): a bag of exactly one valid
// row is that row in every mode (docs/perf/change-32.md), so its row is bulk-copied
// into the lane's slot; any other bag (empty, longer, or a padding or negative row) is pooled
// into its slot by the warp.
__device__ __forceinline__ void load_bag_stage(const char* __restrict__ weight, const INDEX_T* __restrict__ indices,
                                               BagSpan span, i64 padding_idx, int rows, char* stage, u32 bar,
                                               int lane) {
  const i64 idx = lane < rows && span.end - span.start == 1 ? (i64)indices[span.start] : -1;
  const bool copied = idx >= 0 && idx != padding_idx;
  u32 pooled = __ballot_sync(0xffffffffu, lane < rows && !copied);
  start_copies(weight, idx, copied, stage, bar, lane);
  if (pooled == 0) return;
  while (pooled) {
    const int owner = __ffs(pooled) - 1;
    pooled &= pooled - 1;
    pool_into_slot(reinterpret_cast<const weight_t*>(weight), indices, __shfl_sync(0xffffffffu, span.start, owner),
                   __shfl_sync(0xffffffffu, span.end, owner), padding_idx, stage + owner * ROW_BYTES, lane);
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
#endif

// Rows (gather) or bags (one-row bags) in step ``step``: BULK_ROWS, fewer in the last.
__device__ __forceinline__ int stage_rows(i64 step, i64 items) {
  return (int)min((i64)BULK_ROWS, items - step * BULK_ROWS);
}

// The warp's steps: step s's BULK_ROWS output rows are loaded into a stage by ``load`` (a
// callable (step, stage, barrier)), then written to out with one bulk store.
template <class Load>
__device__ __forceinline__ void bulk_steps(const Load& load, i64 items, char* __restrict__ out) {
  __shared__ __align__(128) char stages[WARPS][2][STAGE_BYTES];
  __shared__ __align__(8) u64 bars[WARPS][2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bars[warp][0])) : "memory");
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bars[warp][1])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  const i64 steps = (items + BULK_ROWS - 1) / BULK_ROWS;
  const i64 stride = (i64)gridDim.x * WARPS;
  i64 step = (i64)blockIdx.x * WARPS + warp;
  if (step >= steps) return;
  u32 parities = 0;  // bit s: the phase that stage s waits for next
  int s = 0;
  load(step, stages[warp][0], smem_addr(&bars[warp][0]));
  for (; step < steps; step += stride, s ^= 1) {
    const i64 next = step + stride;
    if (next < steps) {  // into the other stage, once its last store has finished reading it
      if (lane == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      __syncwarp();
      load(next, stages[warp][s ^ 1], smem_addr(&bars[warp][s ^ 1]));
    }
    wait_parity(smem_addr(&bars[warp][s]), (parities >> s) & 1u);
    parities ^= 1u << s;
    __syncwarp();  // slots written by lanes (zeros, pooled bags) are written before the store reads them
    if (lane == 0) {
      const u32 bytes = (u32)stage_rows(step, items) * (u32)ROW_BYTES;
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   :: "l"(out + step * STAGE_BYTES), "r"(smem_addr(stages[warp][s])), "r"(bytes)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
  if (lane == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");  // the stores, before exit
}

#ifndef BULK_BAGS
extern "C" __global__ void __launch_bounds__(BLOCK) embedding_gather_bulk(
    const char* __restrict__ weight, const INDEX_T* __restrict__ indices, i64 num_indices, char* __restrict__ out) {
  wait_for_previous_kernel();
  const int lane = threadIdx.x & 31;
  bulk_steps([&](i64 step, char* stage, u32 bar) {
    load_stage(weight, indices, step * BULK_ROWS, stage_rows(step, num_indices), stage, bar, lane);
  }, num_indices, out);
}
#else
extern "C" __global__ void __launch_bounds__(BLOCK) embedding_bag_forward_bulk(
    const char* __restrict__ weight, const INDEX_T* __restrict__ indices, i64 num_indices,
    const INDEX_T* __restrict__ offsets, i64 num_offsets, i64 num_bags, i64 padding_idx, char* __restrict__ out) {
  wait_for_previous_kernel();
  const int lane = threadIdx.x & 31;
  const i64 stride = (i64)gridDim.x * WARPS;  // bulk_steps' stride over steps
  // The offsets of the lane's bag one step ahead: a step's copies then wait on one load (the
  // index), as the gather's do, not on two (measured faster in change 34).
  BagSpan span = bag_span(offsets, num_offsets, num_indices, num_bags,
                          ((i64)blockIdx.x * WARPS + (threadIdx.x >> 5)) * BULK_ROWS + lane);
  bulk_steps([&](i64 step, char* stage, u32 bar) {
    const BagSpan now = span;
    span = bag_span(offsets, num_offsets, num_indices, num_bags, (step + stride) * BULK_ROWS + lane);
    load_bag_stage(weight, indices, now, padding_idx, stage_rows(step, num_bags), stage, bar, lane);
  }, num_bags, out);
}
#endif
#endif
