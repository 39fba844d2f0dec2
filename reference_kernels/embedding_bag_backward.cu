// Gradient of the table for sum and mean pooling (and the unpooled lookup).
// Deterministic: no atomics, every sum is taken in a fixed order.
//
// The host sorts the lookup positions by table row with a stable sort, so the
// positions that hit one row form a contiguous run of the sorted array. Each
// sorted position contributes
//     scale * grad_out[bag(p)] * per_sample_weight[p] * bag_scale[bag(p)]
// to its row (scale: 1, or 1 / L for the mean over bags of one size L). Runs can
// be very long (a hot row under Zipf-skewed indices is hit hundreds of thousands
// of times), so the work is cut into fixed chunks of CHUNK_POS sorted positions
// instead of one team per run:
//
//   embedding_bag_backward: one team per chunk walks it in order, summing each
//     segment (the part of a run inside the chunk) in float32. A segment that is
//     a whole run is written straight to grad_weight. A run that crosses chunk
//     boundaries leaves partial sums: slot 1 of the chunk where it starts (the
//     chunk is then flagged in `carries`), slot 0 of every later chunk it covers.
//   embedding_bag_backward_combine: adds, for each flagged chunk, its slot 1 and the
//     following chunks' slot 0 in a fixed order, and writes the row: a team alone for a
//     short run, the whole block for a long one (hot rows; see the kernel's comment).
//   (The host compiles the two passes as separate modules, BACKWARD_PASS = 1, 2,
//   which keeps each compile well under a second.)
//
// When lookups are few per table row, rows nobody looked up (and the padding row)
// are zeroed by a third module, BACKWARD_PASS = 3, which the host runs on a second
// stream while it sorts and runs the two passes above, so that writing the dense
// zeros (most of the bytes: 2.56 GB for a 5M x 128 float32 table) overlaps the
// rest (otherwise the host zeroes the whole gradient first):
//   embedding_bag_backward_mark: one bit per table row, set for every looked-up
//     row (atomicOr of fixed bits: the bitmap does not depend on the order).
//   embedding_bag_backward_fill: zeroes every row whose bit is clear, and the
//     padding row; the passes above write every other row, so no row is
//     written by both and the order of the two streams does not matter.
// The same inputs always give bit-identical gradients.
//
// FUSED_OPT = 1 (with OPTIMIZER, as optim_update.cuh): no gradient is written; where a row's
// sum is complete (a segment inside one chunk, or the combine kernel's sum) the row and its
// optimizer state are updated in place instead (the fused backward + optimizer; rows one
// column tile wide, and the sorted rows are table rows with the padding sentinel skipped).
#include "common.cuh"
#include "optim_update.cuh"

#ifndef VEC
#define VEC 4
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
#ifndef HAS_PSW
#define HAS_PSW 0
#endif
#ifndef HAS_SCALE  // mean: bag_scale[b] = 1 / (rows pooled in bag b)
#define HAS_SCALE 0
#endif
#ifndef CHUNK_POS  // sorted positions per chunk (a multiple of ROW_LANES)
#define CHUNK_POS 128
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef STREAMING_ROWS  // 1: gradient rows written with evict-first stores (0: plain stores)
#define STREAMING_ROWS 1
#endif
#ifndef MIN_BLOCKS  // occupancy floor of the chunk kernel (blocks per SM)
#define MIN_BLOCKS 2
#endif
#ifndef BACKWARD_PASS  // 1: the chunk kernel, 2: the combine kernel, 3: mark + fill, 0: all
#define BACKWARD_PASS 0
#endif

#ifndef ROW_T  // sorted row numbers: int when the table has fewer than 2^31 rows (a shorter sort)
#define ROW_T i64
#endif
#ifndef FUSED_OPT
#define FUSED_OPT 0
#endif
#ifndef EXTEND_RUNS  // 1: a run from one chunk into the next that ends near its start is summed whole
#define EXTEND_RUNS 0  // by its first chunk's team (no partial sums, nothing for the combine)
#endif
#ifndef PRELOAD  // FUSED_OPT: a segment's weight row (and row-wise Adagrad's accumulator) loaded when it opens
#define PRELOAD 0
#endif
#define PRELOAD_ON (FUSED_OPT && PRELOAD)
#ifndef ASYNC_AHEAD  // > 0: the chunk pass copies gradient rows into shared memory this many positions ahead
#define ASYNC_AHEAD 0
#endif
#ifndef GRAD_F32  // 1: gradient rows written as float32 (the fused optimizers' compact gradient)
#define GRAD_F32 0
#endif
#if GRAD_F32
typedef float grad_t;
#else
typedef weight_t grad_t;
#endif
#ifndef FILL_BYTES  // word size of the zero fill: 16 when the row size is a multiple of 16 bytes
#define FILL_BYTES 16
#endif
#ifndef FILL_UNROLL  // words per thread per step of the zero fill
#define FILL_UNROLL 4
#endif

#define TILE_COLS (ROW_LANES * CHUNKS * VEC)
#define UNROLL_EFF (UNROLL < ROW_LANES ? UNROLL : ROW_LANES)
static_assert(ROW_LANES % UNROLL_EFF == 0, "UNROLL must divide ROW_LANES");
static_assert(CHUNK_POS % ROW_LANES == 0, "CHUNK_POS must be a multiple of ROW_LANES");

#define PVEC (VEC < 4 ? VEC : 4)  // floats per partial-buffer access (at most 16 bytes)
// Pieces (partial rows) a combine team keeps in flight. Up to 4 floats a lane: about 24 floats
// (20 beside a fused update, 16 with stochastic rounding) in 64 registers a thread (two blocks
// of 512 per SM); wider, about 48 floats (32 beside a fused update, which holds the row twice
// more) in 128 registers or more.
#define COMBINE_NARROW (CHUNKS * VEC <= 4)
#define COMBINE_FLOATS (COMBINE_NARROW ? (FUSED_OPT ? (STOCHASTIC ? 16 : 20) : 24) : FUSED_OPT ? 32 : 48)
#define COMBINE_UNROLL                                                         \
  (COMBINE_FLOATS / (CHUNKS * VEC) >= 8   ? 8                                  \
   : COMBINE_FLOATS / (CHUNKS * VEC) >= 1 ? COMBINE_FLOATS / (CHUNKS * VEC) \
                                          : 1)

typedef Pack<weight_t, VEC> Vec;
typedef Pack<float, PVEC> PartialVec;

struct RowAcc {
  float v[CHUNKS][VEC];
};

__device__ __forceinline__ void zero(RowAcc& a) {
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
    for (int e = 0; e < VEC; ++e) a.v[c][e] = 0.0f;
}

// work / col_tiles and its remainder's column: 32-bit division where both fit (64-bit division is
// a long software routine, most of a combine team's instructions when it has nothing to add)
__device__ __forceinline__ void split_work(i64 work, int col_tiles, i64& chunk, i64& col0) {
  if (work <= 0x7fffffff) {
    const u32 q = (u32)work / (u32)col_tiles;
    chunk = q;
    col0 = (i64)((u32)work - q * (u32)col_tiles) * TILE_COLS;
  } else {
    chunk = work / col_tiles;
    col0 = (work % col_tiles) * (i64)TILE_COLS;
  }
}

__device__ __forceinline__ i64 lane_col(i64 col0, int c, int row_lane) {
  return col0 + (i64)(c * ROW_LANES + row_lane) * VEC;
}

__device__ __forceinline__ void store_partial(float* dst, const RowAcc& a, i64 dim, i64 col0, int row_lane) {
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const i64 col = lane_col(col0, c, row_lane);
    if (col >= dim) continue;
#pragma unroll
    for (int e0 = 0; e0 < VEC; e0 += PVEC) {
      PartialVec y;
#pragma unroll
      for (int e = 0; e < PVEC; ++e) y.v[e] = a.v[c][e0 + e];
      store_pack<float, PVEC>(dst + col + e0, y);
    }
  }
}

__device__ __forceinline__ void store_row(grad_t* dst, const RowAcc& a, i64 dim, i64 col0, int row_lane) {
#if GRAD_F32
  store_partial(dst, a, dim, col0, row_lane);
#else
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const i64 col = lane_col(col0, c, row_lane);
    if (col >= dim) continue;
    Vec y;
#pragma unroll
    for (int e = 0; e < VEC; ++e) y.v[e] = from_float(a.v[c][e]);
#if STREAMING_ROWS
    store_pack_streaming<weight_t, VEC>(dst + col, y);
#else
    store_pack<weight_t, VEC>(dst + col, y);
#endif
  }
#endif
}

// Where a fused pass updates rows (unused when FUSED_OPT = 0).
struct FusedArgs {
  weight_t* weight;
  float* state1;
  float* state2;
  OptParams p;
};

// This lane's columns of one state row (float32), PVEC floats per access.
__device__ __forceinline__ void state_io(float* row, float (&x)[VEC], i64 col, bool store) {
#pragma unroll
  for (int e0 = 0; e0 < VEC; e0 += PVEC) {
    if (store) {
      PartialVec y;
#pragma unroll
      for (int e = 0; e < PVEC; ++e) y.v[e] = x[e0 + e];
      store_pack<float, PVEC>(row + col + e0, y);
    } else {
      const PartialVec y = *reinterpret_cast<const PartialVec*>(row + col + e0);
#pragma unroll
      for (int e = 0; e < PVEC; ++e) x[e0 + e] = y.v[e];
    }
  }
}

#if FUSED_OPT
// What the update reads of a row before its sum is known: this lane's weights and (row-wise
// Adagrad) the row's accumulator. Loaded when a segment opens (PRELOAD), the loads overlap the
// segment's gradient loads instead of standing alone at its end, where every flush of a
// position-long segment (uniform traffic: most of them) waited one DRAM round trip.
struct RowPre {
  Vec w[CHUNKS];
  float s;
};

__device__ __forceinline__ void load_pre(RowPre& pre, i64 row, i64 dim, int row_lane, const FusedArgs& f) {
  const weight_t* w_row = f.weight + row * dim;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const i64 col = lane_col(0, c, row_lane);
    if (col < dim) pre.w[c] = *reinterpret_cast<const Vec*>(w_row + col);
  }
  pre.s = OPTIMIZER == 1 ? f.state1[row] : 0.0f;
}

// The optimizer step on `row` with its summed gradient `a` (the team holds the whole row: one
// column tile). EARLY_STATE: with its values preloaded in `pre` (PRELOAD); else the weights and
// the accumulator are read here, where they are used (the combine's narrow 16-bit rows then stay
// within their 64 registers across the call of apply_row).
template <bool EARLY_STATE>
__device__ __forceinline__ void apply_loaded_row(i64 row, const RowAcc& a, const RowPre& pre, i64 dim, int row_lane,
                                                 const FusedArgs& f) {
  weight_t* w_row = f.weight + row * dim;
  float g[CHUNKS][VEC], w[CHUNKS][VEC];
  float sq = 0.0f;  // row-wise Adagrad: this lane's columns in order, then a fixed butterfly
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const i64 col = lane_col(0, c, row_lane);
    if (col >= dim) continue;
    if (EARLY_STATE) {
      to_floats(pre.w[c], w[c]);
    } else {  // the row read here, as the sum needs it (apply_row: fewer registers across the call)
      to_floats(*reinterpret_cast<const Vec*>(w_row + col), w[c]);
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      g[c][e] = decayed_grad(a.v[c][e], w[c][e], f.p);
      sq = fmaf(g[c][e], g[c][e], sq);
    }
  }
  float multiplier = 0.0f;
#if OPTIMIZER == 1
  const u32 mask = team_mask<ROW_LANES>(threadIdx.x & 31);
#pragma unroll
  for (int off = ROW_LANES / 2; off > 0; off >>= 1) sq += __shfl_xor_sync(mask, sq, off);
  multiplier = adagrad_step(EARLY_STATE ? pre.s : f.state1[row], sq, dim, f.state1, row, row_lane == 0, f.p);
#endif
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const i64 col = lane_col(0, c, row_lane);
    if (col >= dim) continue;
    float m[VEC], v[VEC];
#if OPTIMIZER == 2
    state_io(f.state1 + row * dim, m, col, false);
    state_io(f.state2 + row * dim, v, col, false);
#endif
    Vec out;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      out.v[e] = round_weight(updated_weight(g[c][e], w[c][e], multiplier, m[e], v[e], f.p), f.p.seed, row, col + e);
    store_pack<weight_t, VEC>(w_row + col, out);
#if OPTIMIZER == 2
    state_io(f.state1 + row * dim, m, col, true);
    state_io(f.state2 + row * dim, v, col, true);
#endif
  }
}

// The same, reading the row itself. Not inlined: without PRELOAD it is called from every flush
// site of the chunk loop. The arguments by value: taken by reference, the kernels stored them in
// local memory at their start, every thread, whether it ever updated a row or not (the combine
// pass: 56 bytes a thread, most of its time under uniform traffic; change 61).
__device__ __noinline__ void apply_row(i64 row, RowAcc a, i64 dim, int row_lane, FusedArgs f) {
  const RowPre unused = {};
  apply_loaded_row<false>(row, a, unused, dim, row_lane, f);
}
#else
struct RowPre {};
#endif

// A segment of `row` ends: write it where it belongs (see the file comment).
// Returns 1 if it was the head piece of a run that continues into later chunks.
// `head_summed` (EXTEND_RUNS): the chunk's first run began in the previous chunk, whose team sums
// it whole; this chunk's piece of it is dropped.
__device__ __forceinline__ int flush_segment(i64 row, const RowAcc& a, bool first_in_chunk, bool continues,
                                             i64 prev_row, i64 padding_idx, i64 dim, i64 col0, int row_lane,
                                             i64 chunk, grad_t* grad_weight, float* partial, const FusedArgs& fused,
                                             const RowPre& pre, bool head_summed) {
  if (row == padding_idx) return 0;
  if (first_in_chunk && row == prev_row) {
    if (head_summed) return 0;
    store_partial(partial + (chunk * 2 + 0) * dim, a, dim, col0, row_lane);
    return 0;
  }
  if (continues) {
    store_partial(partial + (chunk * 2 + 1) * dim, a, dim, col0, row_lane);
    return 1;
  }
#if PRELOAD_ON
  apply_loaded_row<true>(row, a, pre, dim, row_lane, fused);
#elif FUSED_OPT
  apply_row(row, a, dim, row_lane, fused);
#else
  store_row(grad_weight + row * dim, a, dim, col0, row_lane);
#endif
  return 0;
}

#if BACKWARD_PASS == 0 || BACKWARD_PASS == 1
// Bag of a flat position: fixed layout (bag_of == 0) or a table (-1: in no bag).
__device__ __forceinline__ int bag_of_position(i64 pos, const i64* bag_of, i64 bag_size) {
  if (bag_of != 0) return (int)bag_of[pos];
  // 32-bit division where it is exact (64-bit division is a long software routine)
  return pos <= 0x7fffffff && bag_size <= 0x7fffffff ? (int)((u32)pos / (u32)bag_size) : (int)(pos / bag_size);
}

// The positions of one window of ROW_LANES sorted positions from `base`, one a lane (`here`: the
// lane's position exists; else row -3, in no bag). Shuffled as ROW_T: one 32-bit shuffle for int rows.
struct Window {
  ROW_T row;
  int bag;
  float scale;
};

__device__ __forceinline__ Window load_window(i64 base, bool here, int row_lane, const ROW_T* sorted_rows,
                                              const i64* positions, const i64* bag_of, i64 bag_size,
                                              const weight_t* per_sample_weights, const float* bag_scale,
                                              float scale) {
  Window w = {(ROW_T)-3, -1, scale};
  if (here) {
    const i64 pos = positions[base + row_lane];
    w.row = sorted_rows[base + row_lane];
    w.bag = bag_of_position(pos, bag_of, bag_size);
#if HAS_PSW
    w.scale *= to_float(per_sample_weights[pos]);
#endif
#if HAS_SCALE
    if (w.bag >= 0) w.scale *= bag_scale[w.bag];
#endif
  }
  return w;
}

// Bit j of `starts`: the window's position j opens a segment (its row differs from the one
// before; before lane 0 comes the open segment's row `cur`); of `in_bag`: position j is in a bag.
// Only the first `count` positions count.
__device__ __forceinline__ void window_bits(const Window& w, i64 cur, int count, int row_lane, u32 mask,
                                            int team_base, u32& starts, u32& in_bag) {
  ROW_T before = __shfl_up_sync(mask, w.row, 1, ROW_LANES);
  if (row_lane == 0) before = (ROW_T)cur;
  starts = (__ballot_sync(mask, row_lane < count && w.row != before) >> team_base) &
           (ROW_LANES == 32 ? 0xffffffffu : (1u << (ROW_LANES & 31)) - 1u);
  in_bag = __ballot_sync(mask, row_lane < count && w.bag >= 0) >> team_base;
}

#if EXTEND_RUNS
#define TEAM_BITS (ROW_LANES == 32 ? 0xffffffffu : (1u << (ROW_LANES & 31)) - 1u)
// A run that crosses from one chunk into the next, `from` being the next chunk's start: its end
// (the first position at or past `from` with another row, or num_indices) when that lies within
// ROW_LANES positions of `from`, else -1. The run's first chunk's team and the next chunk's team
// both ask it with the same arguments, so they agree on who sums the run: under uniform traffic
// nearly every run that crosses a chunk boundary is two or three positions long.
__device__ __forceinline__ i64 run_end_near(const ROW_T* __restrict__ sorted_rows, i64 from, i64 num_indices,
                                            i64 row, int row_lane, u32 mask, int team_base) {
  const i64 stop = from + ROW_LANES < num_indices ? from + ROW_LANES : num_indices;
  const bool here = from + row_lane < stop;
  const u32 other = (__ballot_sync(mask, here && (i64)sorted_rows[from + row_lane] != row) >> team_base) & TEAM_BITS;
  if (other != 0) return from + __ffs(other) - 1;
  if (stop == num_indices) return stop;
  return (i64)sorted_rows[stop] != row ? stop : -1;
}

// a += positions [from, stop) of one run (at most ROW_LANES), in order, as the chunk loop adds them.
__device__ __forceinline__ void add_positions(RowAcc& a, i64 from, i64 stop, int row_lane, u32 mask,
                                              const weight_t* __restrict__ grad_out, i64 dim, i64 col0,
                                              const ROW_T* sorted_rows, const i64* positions, const i64* bag_of,
                                              i64 bag_size, const weight_t* per_sample_weights,
                                              const float* bag_scale, float scale) {
  const int count = (int)(stop - from);
  const Window w = load_window(from, row_lane < count, row_lane, sorted_rows, positions, bag_of, bag_size,
                               per_sample_weights, bag_scale, scale);
#pragma unroll 1
  for (int m = 0; m < count; ++m) {
    const int b = __shfl_sync(mask, w.bag, m, ROW_LANES);
    const float factor = HAS_PSW || HAS_SCALE ? __shfl_sync(mask, w.scale, m, ROW_LANES) : scale;
    if (b < 0) continue;
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) {
      const i64 col = lane_col(col0, c, row_lane);
      if (col >= dim) continue;
      float values[VEC];
      to_floats(load_pack<weight_t, VEC>(grad_out + (i64)b * dim + col), values);
#pragma unroll
      for (int e = 0; e < VEC; ++e) a.v[c][e] = fmaf(factor, values[e], a.v[c][e]);
    }
  }
}
#endif

#if ASYNC_AHEAD
// cp.async (sm_80 and later): a 16-byte copy from global to shared memory that holds no register
// while in flight; cached in L2 only (.cg: a gradient row is read once per position).
__device__ __forceinline__ void copy_async16(void* dst, const void* src) {
  const unsigned shared = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(src) : "memory");
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

static_assert(sizeof(Vec) == 16, "ASYNC_AHEAD copies 16-byte vectors");
static_assert(ASYNC_AHEAD <= ROW_LANES, "ASYNC_AHEAD: positions ahead within the next window");
#define ASYNC_SLOTS (ASYNC_AHEAD + 1)  // one more than in flight: a slot is refilled an iteration after its read
#endif

// The kernel is bound by instruction issue, not by DRAM (Nsight Compute, run 20). To keep the
// per-position work small the team learns where segments start once per ROW_LANES positions
// (one ballot), bags use 32-bit arithmetic, and the chunk-boundary cases are only checked when
// a segment closes: fewer warp instructions per position. (A branch-free variant that resets
// the sum by a select and writes at segment ends executed more.)
extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) embedding_bag_backward(
    const weight_t* __restrict__ grad_out, i64 dim,
    const ROW_T* __restrict__ sorted_rows, const i64* __restrict__ positions, i64 num_indices,
    const i64* __restrict__ bag_of, i64 bag_size,
    const weight_t* __restrict__ per_sample_weights, const float* __restrict__ bag_scale, float scale,
    i64 padding_idx, int col_tiles, grad_t* __restrict__ grad_weight,
    float* __restrict__ partial, int* __restrict__ carries,
    weight_t* __restrict__ fused_weight, float* __restrict__ state1, float* __restrict__ state2, float lr, float eps,
    float beta1, float beta2, float weight_decay, float step_size, u64 seed) {
  wait_for_previous_kernel();
  const FusedArgs fused = {fused_weight, state1, state2, {lr, eps, beta1, beta2, weight_decay, step_size, seed}};
  const int lane = threadIdx.x & 31;
  const int row_lane = lane & (ROW_LANES - 1);
  const u32 mask = team_mask<ROW_LANES>(lane);
  const int team_base = lane & ~(ROW_LANES - 1);
  const i64 num_chunks = (num_indices + CHUNK_POS - 1) / CHUNK_POS;
  const i64 work = ((i64)blockIdx.x * BLOCK + threadIdx.x) / ROW_LANES;
  if (work >= num_chunks * col_tiles) return;
  i64 chunk, col0;
  split_work(work, col_tiles, chunk, col0);
  const i64 begin = chunk * CHUNK_POS;
  const i64 end = begin + CHUNK_POS < num_indices ? begin + CHUNK_POS : num_indices;
  const i64 prev_row = begin > 0 ? (i64)sorted_rows[begin - 1] : -2;
  const i64 next_row = end < num_indices ? (i64)sorted_rows[end] : -2;

  RowAcc acc;
  zero(acc);
  i64 cur = sorted_rows[begin];  // row of the open segment
  bool first = true;             // the open segment is the chunk's first
#if EXTEND_RUNS
  // the chunk starts inside a run that began in the previous chunk and ends near this one's start
  const bool head_summed = cur == prev_row &&
                           (begin == CHUNK_POS || (i64)sorted_rows[begin - CHUNK_POS - 1] != prev_row) &&
                           run_end_near(sorted_rows, begin, num_indices, prev_row, row_lane, mask, team_base) >= 0;
#else
  const bool head_summed = false;
#endif
  int carry = 0;
  RowPre open_pre;  // PRELOAD: the open segment's row (unused otherwise)
#if PRELOAD_ON
  if (cur != padding_idx && cur != prev_row) load_pre(open_pre, cur, dim, row_lane, fused);
#endif
#if ASYNC_AHEAD
  // The same walk with the gradient rows copied into shared memory ASYNC_AHEAD positions ahead
  // (cp.async): bytes in flight without registers. A wide row's team could keep one position's
  // loads in flight in registers (12 floats a lane: two spill), too few to cover the latency of
  // rows read in random order (docs/perf/change-58.md). Each lane copies and reads back only
  // its own columns: it waits for its own copies, never for the team.
  __shared__ Vec stage[ASYNC_SLOTS][CHUNKS][BLOCK];
  const int n = (int)(end - begin);  // at most CHUNK_POS
  auto window_at = [&](i64 base) {
    return load_window(base, base + row_lane < end, row_lane, sorted_rows, positions, bag_of, bag_size,
                       per_sample_weights, bag_scale, scale);
  };
  Window now = window_at(begin), next = window_at(begin + ROW_LANES);
  // copies position j's columns into its slot (its window: `now`'s or, ahead of it, `next`'s)
  auto issue = [&](int j, int in_window) {
    const int from = in_window < ROW_LANES ? in_window : in_window - ROW_LANES;
    const int b = __shfl_sync(mask, in_window < ROW_LANES ? now.bag : next.bag, from, ROW_LANES);
    const int slot = j % ASYNC_SLOTS;
    if (j < n && b >= 0) {
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const i64 col = lane_col(col0, c, row_lane);
        if (col < dim) copy_async16(&stage[slot][c][threadIdx.x], grad_out + (i64)b * dim + col);
      }
    }
    commit_async();  // empty groups too: group j is position j's
  };
#pragma unroll
  for (int d = 0; d < ASYNC_AHEAD; ++d) issue(d, d);
  u32 starts = 0, in_bag = 0;
#pragma unroll 1
  for (int i = 0; i < n; ++i) {
    const int m = i & (ROW_LANES - 1);
    const int slot = i % ASYNC_SLOTS;
    if (m == 0) {
      if (i > 0) {
        now = next;
        next = window_at(begin + i + ROW_LANES);
      }
      window_bits(now, cur, n - i < ROW_LANES ? n - i : ROW_LANES, row_lane, mask, team_base, starts, in_bag);
    }
    const i64 r = (i64)__shfl_sync(mask, now.row, m, ROW_LANES);
    const float factor = HAS_PSW || HAS_SCALE ? __shfl_sync(mask, now.scale, m, ROW_LANES) : scale;
    const bool opens = (starts >> m) & 1u;
    if (opens) {  // the open segment closed inside the chunk
      carry |= flush_segment(cur, acc, first, false, prev_row, padding_idx, dim, col0, row_lane, chunk, grad_weight,
                             partial, fused, open_pre, head_summed);
      zero(acc);
      cur = r;
      first = false;
#if PRELOAD_ON
      if (r != padding_idx) load_pre(open_pre, r, dim, row_lane, fused);
#endif
    }
    wait_async<ASYNC_AHEAD - 1>();  // position i's group has landed (groups after it may not)
    if ((in_bag >> m) & 1u) {
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        if (lane_col(col0, c, row_lane) >= dim) continue;
        float values[VEC];
        to_floats(stage[slot][c][threadIdx.x], values);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc.v[c][e] = fmaf(factor, values[e], acc.v[c][e]);
      }
    }
    issue(i + ASYNC_AHEAD, m + ASYNC_AHEAD);
  }
#else
  for (i64 base = begin; base < end; base += ROW_LANES) {
    const int count = end - base < ROW_LANES ? (int)(end - base) : ROW_LANES;
    const Window w = load_window(base, row_lane < count, row_lane, sorted_rows, positions, bag_of, bag_size,
                                 per_sample_weights, bag_scale, scale);
    u32 starts, in_bag;
    window_bits(w, cur, count, row_lane, mask, team_base, starts, in_bag);
#pragma unroll 1  // the flush code is inlined once per u below: keep the compile short
    for (int m = 0; m < count; m += UNROLL_EFF) {
      Vec g[UNROLL_EFF][CHUNKS];
#if PRELOAD_ON
      RowPre pre[UNROLL_EFF];  // rows of the segments opening at m + u
#endif
#pragma unroll
      for (int u = 0; u < UNROLL_EFF; ++u) {  // issue the loads ...
        const int b = __shfl_sync(mask, w.bag, m + u, ROW_LANES);
#if PRELOAD_ON
        const i64 r = (i64)__shfl_sync(mask, w.row, m + u, ROW_LANES);
        if (((starts >> (m + u)) & 1u) && r != padding_idx) load_pre(pre[u], r, dim, row_lane, fused);
#endif
        if (!((in_bag >> (m + u)) & 1u)) continue;  // also false past `count`
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          const i64 col = lane_col(col0, c, row_lane);
          if (col < dim) g[u][c] = load_pack<weight_t, VEC>(grad_out + (i64)b * dim + col);
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL_EFF; ++u) {  // ... then add them in position order
        if (m + u >= count) break;  // same decision for the whole team
        const i64 r = (i64)__shfl_sync(mask, w.row, m + u, ROW_LANES);
        // without per-sample weights or bag scales every position's factor is `scale`
        const float factor = HAS_PSW || HAS_SCALE ? __shfl_sync(mask, w.scale, m + u, ROW_LANES) : scale;
        if ((starts >> (m + u)) & 1u) {  // the open segment closed inside the chunk
          carry |= flush_segment(cur, acc, first, false, prev_row, padding_idx, dim, col0, row_lane, chunk,
                                 grad_weight, partial, fused, open_pre, head_summed);
          zero(acc);
          cur = r;
          first = false;
#if PRELOAD_ON
          open_pre = pre[u];
#endif
        }
        if (!((in_bag >> (m + u)) & 1u)) continue;
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          float values[VEC];
          to_floats(g[u][c], values);
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc.v[c][e] = fmaf(factor, values[e], acc.v[c][e]);
        }
      }
    }
  }
#endif  // ASYNC_AHEAD
  // the last segment: continued by the next chunk when that starts with the same row
  bool continues = cur == next_row;
#if EXTEND_RUNS
  if (continues && !(first && cur == prev_row) && cur != padding_idx) {  // this chunk holds the run's start
    const i64 stop = run_end_near(sorted_rows, end, num_indices, cur, row_lane, mask, team_base);
    if (stop >= 0) {
      add_positions(acc, end, stop, row_lane, mask, grad_out, dim, col0, sorted_rows, positions, bag_of, bag_size,
                    per_sample_weights, bag_scale, scale);
      continues = false;
    }
  }
#endif
  carry |= flush_segment(cur, acc, first, continues, prev_row, padding_idx, dim, col0, row_lane, chunk,
                         grad_weight, partial, fused, open_pre, head_summed);
  if (row_lane == 0 && col0 == 0) carries[chunk] = carry;
}

#endif  // BACKWARD_PASS == 0 || BACKWARD_PASS == 1

// One row piece of the partial buffer (this lane's columns), loaded / added.
__device__ __forceinline__ void load_partial(RowAcc& x, const float* src, i64 dim, i64 col0, int row_lane) {
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const i64 col = lane_col(col0, c, row_lane);
    if (col >= dim) continue;
#pragma unroll
    for (int e0 = 0; e0 < VEC; e0 += PVEC) {
      const PartialVec p = load_pack<float, PVEC>(src + col + e0);
#pragma unroll
      for (int e = 0; e < PVEC; ++e) x.v[c][e0 + e] = p.v[e];
    }
  }
}

__device__ __forceinline__ void add(RowAcc& a, const RowAcc& x) {
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
    for (int e = 0; e < VEC; ++e) a.v[c][e] += x.v[c][e];
}

#if BACKWARD_PASS == 0 || BACKWARD_PASS == 2
// The combine kernel. A run that crosses chunks has pieces: slot 1 of its head chunk (the one
// flagged in `carries`), then slot 0 of each following chunk that still starts with its row.
// Hot rows under skewed indices have thousands of pieces (Zipf 1.05 over 4M rows: the hottest
// row has ~9 % of the positions, ~1,000 chunks of 64), so one team walking them in order is a
// serial chain of dependent loads (the previous kernel took half of a training step at low
// occupancy; docs/perf/change-54.md). Here a block holds COMBINE_ITEMS (chunk, column tile) items:
//   1. each item's team tests the next COMBINE_PROBE chunk starts at once; a run that ends
//      there (at most COMBINE_PROBE + 1 pieces) the team sums alone, in chunk order;
//   2. a longer run (it covers the next COMBINE_PROBE + 1 chunks, so a block meets at most
//      ceil(COMBINE_ITEMS / (COMBINE_PROBE + 1)) of them) is taken by the whole block: its end
//      is found by block-wide tests of BLOCK chunk starts per round, then team t sums pieces
//      t, t + TEAMS, t + 2 TEAMS, ... in that order with COMBINE_UNROLL loads in flight, the
//      teams' sums are added in a fixed tree in shared memory, and team 0 writes the row (or
//      applies the optimizer: the whole row in one team).
// Every sum's order depends only on the run's length and the compiled shape: deterministic,
// no atomics, and the grid is sized by the number of chunks (known on the host).
#ifndef COMBINE_ITEMS  // (chunk, column tile) items per block, one team each in step 1 (the host's grid)
#define COMBINE_ITEMS 8
#endif
#ifndef COMBINE_PROBE  // chunk starts a team tests at once: longer runs go to the whole block
#define COMBINE_PROBE 16
#endif
#define COMBINE_TEAMS (BLOCK / ROW_LANES)
// Blocks per SM the registers must allow: 64 registers a thread for narrow rows (128 beside
// Adam's update, which alone needs more), 128 up to 16 floats a lane, no limit beyond (the host
// gives those rows blocks of 256: up to 255 registers)
#define COMBINE_REGS \
  (COMBINE_NARROW && !(FUSED_OPT && OPTIMIZER == 2) ? 64 : CHUNKS * VEC <= 16 ? 128 : 65536 / BLOCK)
#define COMBINE_MIN_BLOCKS (65536 / COMBINE_REGS / BLOCK > 0 ? 65536 / COMBINE_REGS / BLOCK : 1)
static_assert(COMBINE_ITEMS <= COMBINE_TEAMS, "a team per item");
static_assert((COMBINE_TEAMS & (COMBINE_TEAMS - 1)) == 0, "the teams' sums are added in a binary tree");

// Chunk k starts with `row` (the run goes on into it).
__device__ __forceinline__ bool run_continues(const ROW_T* __restrict__ sorted_rows, i64 k, i64 num_chunks, i64 row) {
  return k < num_chunks && (i64)sorted_rows[k * CHUNK_POS] == row;
}

// a += pieces first, first + step, first + 2 step, ... (below count) of the run whose head
// chunk is `head` (piece 0: the head's slot 1; piece j: slot 0 of chunk head + j), in that
// order, COMBINE_UNROLL loads in flight (the run's end is known: no test between the loads).
__device__ __forceinline__ void add_pieces(RowAcc& a, const float* __restrict__ partial, i64 head, int first,
                                           int count, int step, i64 dim, i64 col0, int row_lane) {
  // a running pointer at this lane's first column of slot 0 of the chunk of the team's next
  // piece, and one bound per round: few registers beside the loads
  const float* p = partial + (head + first) * 2 * dim + col0 + row_lane * VEC;
  const i64 hop = (i64)step * 2 * dim;  // from one piece of the team to its next
  int live = 0;                          // bit c: this lane's vector c lies inside the row
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) live |= (lane_col(col0, c, row_lane) < dim) << c;
#pragma unroll 1
  for (int j0 = first; j0 < count; j0 += step * COMBINE_UNROLL) {
    const int valid = (count - j0 + step - 1) / step;  // pieces this round
    RowAcc x[COMBINE_UNROLL];
#pragma unroll
    for (int u = 0; u < COMBINE_UNROLL; ++u) {
      const float* q = p + (u == 0 && j0 == 0 ? dim : 0);  // piece 0: the head chunk's slot 1
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        if (u >= valid || !((live >> c) & 1)) continue;
#pragma unroll
        for (int e0 = 0; e0 < VEC; e0 += PVEC) {
          const PartialVec y = load_pack<float, PVEC>(q + c * ROW_LANES * VEC + e0);
#pragma unroll
          for (int e = 0; e < PVEC; ++e) x[u].v[c][e0 + e] = y.v[e];
        }
      }
      p += hop;
    }
#pragma unroll
    for (int u = 0; u < COMBINE_UNROLL; ++u)
      if (u < valid) add(a, x[u]);
  }
}

// The first chunk after `known` (which starts with `row`) that does not: the run's end, found
// by the whole block. Each round tests BLOCK chunk starts at one stride; the rows are sorted, so
// the tests that hold form a prefix and their count (__syncthreads_count) is the first failure.
// The stride grows by BLOCK while every test holds, then shrinks back to 1: a run of C chunks
// takes about 2 log_BLOCK(C) rounds (one round for C < BLOCK + COMBINE_PROBE).
__device__ i64 run_end(const ROW_T* __restrict__ sorted_rows, i64 known, i64 num_chunks, i64 row) {
  i64 base = known, stride = 1;
  bool grow = true;
  for (;;) {
    const i64 k = base + (i64)(threadIdx.x + 1) * stride;
    const int held = __syncthreads_count(run_continues(sorted_rows, k, num_chunks, row));
    base += (i64)held * stride;
    if (held < BLOCK) {
      if (stride == 1) return base + 1;
      grow = false;
      stride /= BLOCK;
    } else if (grow) {
      stride *= BLOCK;
    }
  }
}

// Team 0 ends with the sum of every team's `a`, added in a fixed binary tree (team t + h into
// team t, h = TEAMS / 2, ..., 1). `red`: TEAMS / 2 rows of the team's columns, lane-interleaved.
__device__ __forceinline__ void block_sum(RowAcc& a, float* red, int team, int row_lane) {
#pragma unroll 1
  for (int h = COMBINE_TEAMS / 2; h >= 1; h >>= 1) {
    if (team >= h && team < 2 * h) {
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
        for (int e = 0; e < VEC; ++e) red[(((team - h) * CHUNKS + c) * VEC + e) * ROW_LANES + row_lane] = a.v[c][e];
    }
    __syncthreads();
    if (team < h) {
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
        for (int e = 0; e < VEC; ++e) a.v[c][e] += red[((team * CHUNKS + c) * VEC + e) * ROW_LANES + row_lane];
    }
    __syncthreads();
  }
}

// A run's complete sum: the row's gradient, or (FUSED_OPT) the optimizer step on the row.
__device__ __forceinline__ void finish_run(i64 row, const RowAcc& a, i64 dim, i64 col0, int row_lane,
                                           grad_t* grad_weight, const FusedArgs& fused) {
#if FUSED_OPT
  apply_row(row, a, dim, row_lane, fused);
#else
  store_row(grad_weight + row * dim, a, dim, col0, row_lane);
#endif
}

extern "C" __global__ void __launch_bounds__(BLOCK, COMBINE_MIN_BLOCKS) embedding_bag_backward_combine(
    const ROW_T* __restrict__ sorted_rows, i64 num_indices, i64 dim, int col_tiles,
    const float* __restrict__ partial, const int* __restrict__ carries, grad_t* __restrict__ grad_weight,
    weight_t* __restrict__ fused_weight, float* __restrict__ state1, float* __restrict__ state2, float lr, float eps,
    float beta1, float beta2, float weight_decay, float step_size, u64 seed) {
  wait_for_previous_kernel();
  __shared__ float red[COMBINE_TEAMS / 2 * CHUNKS * VEC * ROW_LANES];
  __shared__ i64 long_head[COMBINE_ITEMS];  // step 2's runs: their head chunks (-1: none)
  const FusedArgs fused = {fused_weight, state1, state2, {lr, eps, beta1, beta2, weight_decay, step_size, seed}};
  const int lane = threadIdx.x & 31;
  const int row_lane = lane & (ROW_LANES - 1);
  const int team = threadIdx.x / ROW_LANES;
  const i64 num_chunks = (num_indices + CHUNK_POS - 1) / CHUNK_POS;

  if (team < COMBINE_ITEMS) {  // 1. short runs, a team each
    const u32 mask = team_mask<ROW_LANES>(lane);
    const i64 work = (i64)blockIdx.x * COMBINE_ITEMS + team;
    i64 head = -1;
    i64 chunk = 0, col0 = 0;
    if (work < num_chunks * col_tiles) split_work(work, col_tiles, chunk, col0);
    if (work < num_chunks * col_tiles && carries[chunk] != 0) {
      const i64 row = sorted_rows[chunk * CHUNK_POS + CHUNK_POS - 1];  // the run's: the chunk's last position
      int held = 0;  // of chunks chunk + 2, ..., chunk + 1 + COMBINE_PROBE (chunk + 1 continues it: flagged)
#pragma unroll
      for (int i = 0; i < (COMBINE_PROBE + ROW_LANES - 1) / ROW_LANES; ++i) {
        const int q = i * ROW_LANES + row_lane;
        if (q < COMBINE_PROBE) held += run_continues(sorted_rows, chunk + 2 + q, num_chunks, row);
      }
#pragma unroll
      for (int off = ROW_LANES / 2; off > 0; off >>= 1) held += __shfl_xor_sync(mask, held, off);
      if (held < COMBINE_PROBE) {
        RowAcc acc;
        zero(acc);
        add_pieces(acc, partial, chunk, 0, 2 + held, 1, dim, col0, row_lane);
        finish_run(row, acc, dim, col0, row_lane, grad_weight, fused);
      } else if (col0 == 0) {
        head = chunk;  // the block takes every column tile of it
      }
    }
    if (row_lane == 0) long_head[team] = head;
  }
  __syncthreads();
#pragma unroll 1
  for (int item = 0; item < COMBINE_ITEMS; ++item) {  // 2. long runs, the whole block each
    const i64 head = long_head[item];
    if (head < 0) continue;  // the same for the whole block
    const i64 row = sorted_rows[head * CHUNK_POS + CHUNK_POS - 1];
    const int pieces = (int)(run_end(sorted_rows, head + 1 + COMBINE_PROBE, num_chunks, row) - head);
#pragma unroll 1
    for (int tile = 0; tile < col_tiles; ++tile) {
      const i64 col0 = (i64)tile * TILE_COLS;
      RowAcc acc;
      zero(acc);
      add_pieces(acc, partial, head, team, pieces, COMBINE_TEAMS, dim, col0, row_lane);
      block_sum(acc, red, team, row_lane);
      if (team == 0) finish_run(row, acc, dim, col0, row_lane, grad_weight, fused);
    }
  }
}
#endif  // BACKWARD_PASS == 0 || BACKWARD_PASS == 2

#if BACKWARD_PASS == 0 || BACKWARD_PASS == 3
#ifndef INDEX_T  // the lookups' index type: i64 or int
#define INDEX_T i64
#endif
// Bit r of `touched` (u32 words, zeroed by the host): row r is looked up at least once.
// keys32 (may be null): the rows as int, the sort's keys (tables below 2^31 rows).
extern "C" __global__ void __launch_bounds__(BLOCK) embedding_bag_backward_mark(
    const INDEX_T* __restrict__ rows, i64 num_indices, i64 num_weights, u32* __restrict__ touched,
    int* __restrict__ keys32) {
  wait_for_previous_kernel();
  const i64 stride = (i64)gridDim.x * BLOCK;
  for (i64 i = (i64)blockIdx.x * BLOCK + threadIdx.x; i < num_indices; i += stride) {
    const i64 r = rows[i];
    if (keys32 != 0) keys32[i] = (int)r;
    if (r >= 0 && r < num_weights) atomicOr(touched + (r >> 5), 1u << (r & 31));
  }
}

// Zeroes the rows the passes above do not write: those with a clear bit, and the padding
// row. `grad` is viewed as FILL_BYTES-byte words, row_words per row, walked like a memset
// (consecutive threads, consecutive words): a narrow write front, which DRAM prefers to a
// warp per 32-row group (that variant ran well below the memset's bandwidth; run 17).
typedef RawWord<FILL_BYTES>::type FillWord;

extern "C" __global__ void __launch_bounds__(BLOCK) embedding_bag_backward_fill(
    const u32* __restrict__ touched, i64 num_weights, i64 row_words, int row_shift,  // -1: not a power of 2
    i64 padding_idx, FillWord* __restrict__ grad) {
  wait_for_previous_kernel();
  const i64 total = num_weights * row_words;
  const i64 step = (i64)gridDim.x * BLOCK * FILL_UNROLL;
  const FillWord zero_word = {};
  for (i64 base = (i64)blockIdx.x * BLOCK * FILL_UNROLL + threadIdx.x; base < total; base += step) {
#pragma unroll
    for (int u = 0; u < FILL_UNROLL; ++u) {  // the block's FILL_UNROLL * BLOCK consecutive words
      const i64 w = base + u * BLOCK;
      if (w >= total) break;
      const i64 row = row_shift >= 0 ? w >> row_shift : w / row_words;
      const bool looked_up = (__ldg(touched + (row >> 5)) >> (row & 31)) & 1u;
      // streaming store (st.global.cs, evict first): the 2.4 GB of zeros would otherwise flush
      // the L2 under the sort and the passes running beside the fill (run 17)
      if (!looked_up || row == padding_idx) __stcs(grad + w, zero_word);
    }
  }
}
#endif  // BACKWARD_PASS == 0 || BACKWARD_PASS == 3
