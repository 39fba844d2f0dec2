// The backward's preparation of a table-batched lookup (TableBatchedEmbeddingBag), in one pass:
// where each lookup position's gradient comes from and goes to. It replaces about 25 small torch
// operations per training step (bag_of_positions' searchsorted and masks, the table of each bag,
// the global rows, the sort keys' masks, the mean's bag counts), each a launch and host time
// (docs/training.md, "Host work per training step").
//
// Layout (tbe.py): T tables, B bags each, table-major; offsets has T * B + 1 entries
// (include_last_offset), bag b = t * B + j is table t's j-th bag, and its pooled row lands in
// row j of the [B, T * dim] output, columns t * dim.., i.e. row j * T + t of the output viewed as
// [B * T, dim] (the backward's "grad row").
//
// For every position p of the indices:
//   * its bag: the last b with offsets[b] <= p (a binary search over offsets[0 .. T*B)), inside
//     it when p < offsets[b + 1]; else (before the first offset, at or past the last one) in no
//     bag. With non-decreasing offsets that is exactly the bag whose [start, end) holds p; with
//     any offsets every position gets one defined answer (no position is left unwritten);
//   * keys[p]: the sort key, the global row indices[p] + table_rows[t] (KEY_T: int where every
//     row fits); for a position in no bag `sentinel` when sentinel >= 0 (the row past the
//     table, which the fused and sparse backwards skip), else indices[p] + table_rows[0] (the
//     dense backward's historical row for it: a row it writes anyway, with no contribution);
//   * grad_row[p]: j * T + t, or -1 in no bag (the backward kernels skip -1).
// MEAN = 1, for every bag b < T*B as well: bag_scale[j * T + t] = 1 / (offsets[b+1] - offsets[b])
// as float32 (IEEE division, as torch's reciprocal), 0 for an empty bag.
//
// Finding the bags. A block takes a tile of TILE = BLOCK * ITEMS consecutive positions at a time.
// It finds the bag of the tile's first position by a block-wide search (BLOCK probes of the
// offsets per round, __syncthreads_count: 3 rounds for 131,072 bags, where one thread's binary
// search is 17 dependent loads), stages the next STAGE_BAGS + 1 offsets in shared memory and
// searches there for each position. Where the staged offsets are not non-decreasing or do not
// reach past the tile (a tile across more than STAGE_BAGS bags: many empty ones), the tile's
// positions take the per-position search over all offsets instead. For non-decreasing offsets
// both give the bag defined above; for other offsets each position still gets one answer that
// depends on the inputs alone (tiles start at multiples of TILE whatever the grid).
//
// Each output element is written by exactly one thread and depends on the inputs alone: the
// same inputs always give the same bits.
//
// With `totals` (int keys only): the radix sort's digit totals of the keys written, 8 bits a pass
// for `passes` passes (radix_sort.cu's radix_histograms, which the sort then skips: change 61),
// counted per block in shared memory and added to the zeroed `totals` once per block.
#include "common.cuh"

#ifndef INDEX_T  // the indices' and offsets' type: i64 or int
#define INDEX_T i64
#endif
#ifndef KEY_T  // the sort keys' type: int (fewer than 2^31 - 1 rows) or i64
#define KEY_T int
#endif
#ifndef MEAN
#define MEAN 0
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS  // positions per thread per tile
#define ITEMS 4
#endif
#ifndef STAGE_BAGS  // bag starts a tile stages in shared memory
#define STAGE_BAGS 1024
#endif
#ifndef MIN_BLOCKS  // without it ptxas picks 32 registers for the kernel and spills
#define MIN_BLOCKS 4
#endif
static_assert(ITEMS * BLOCK < 0x7fffffff, "tile positions are int");
#define TILE (BLOCK * ITEMS)
#define DIGITS 256        // radix_sort.cu's RADIX
#define MAX_PASSES 4      // and its MAX_PASSES
static_assert(BLOCK == DIGITS, "a thread per digit adds the block's totals");

// One key's digits counted (radix_sort.cu's digit_of), pass by pass.
__device__ __forceinline__ void count_digits(int (*hist)[DIGITS], i64 key, int passes) {
  for (int p = 0; p < passes; ++p) atomicAdd(&hist[p][((u32)key >> (8 * p)) & (DIGITS - 1)], 1);
}

// The bag of position p: the last b in [0, num_bags) with offsets[b] <= p (-1: none), as
// torch.searchsorted(offsets[:num_bags], p, right=True) - 1 for sorted offsets.
__device__ __forceinline__ i64 last_start_at_or_before(const INDEX_T* __restrict__ offsets, i64 num_bags, i64 p) {
  i64 lo = 0, hi = num_bags;  // the first b with offsets[b] > p lies in [lo, hi]
  while (lo < hi) {
    const i64 mid = lo + ((hi - lo) >> 1);
    if ((i64)__ldg(offsets + mid) <= p) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo - 1;
}

// bag / bags_per_table: 32-bit division where both fit (64-bit division is a long software routine).
__device__ __forceinline__ i64 table_of(i64 bag, i64 bags_per_table) {
  return bag <= 0x7fffffff && bags_per_table <= 0x7fffffff ? (i64)((u32)bag / (u32)bags_per_table)
                                                            : bag / bags_per_table;
}

// The same bag, found by the whole block for a block-uniform p (non-decreasing offsets; for
// others some b in [-1, num_bags)). Invariant: the first b with offsets[b] > p (num_bags if none)
// lies in [lo, hi]; each round's BLOCK probes hold on a prefix, whose length narrows it BLOCK-fold.
__device__ i64 block_last_start_at_or_before(const INDEX_T* __restrict__ offsets, i64 num_bags, i64 p) {
  i64 lo = 0, hi = num_bags;
  while (lo < hi) {
    const i64 step = (hi - lo + BLOCK - 1) / BLOCK;
    const i64 k = lo + (i64)(threadIdx.x + 1) * step - 1;
    const i64 held = __syncthreads_count(k < hi && (i64)__ldg(offsets + k) <= p);
    const i64 next_hi = lo + (held + 1) * step - 1;
    lo += held * step;
    hi = next_hi < hi ? next_hi : hi;
  }
  return lo - 1;
}

// Position i's outputs (its index read), given its bag (-1: none) and whether it lies inside it;
// returns its key.
__device__ __forceinline__ KEY_T write_position(i64 i, i64 index, i64 bag, bool inside, i64 tables,
                                                i64 bags_per_table, const i64* __restrict__ table_rows,
                                                i64 sentinel, KEY_T* __restrict__ keys, i64* __restrict__ grad_row) {
  KEY_T key;
  if (inside) {
    const i64 t = table_of(bag, bags_per_table);
    key = (KEY_T)(index + __ldg(table_rows + t));
    grad_row[i] = (bag - t * bags_per_table) * tables + t;
  } else {
    key = (KEY_T)(sentinel >= 0 ? sentinel : index + __ldg(table_rows));
    grad_row[i] = -1;
  }
  keys[i] = key;
  return key;
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) tbe_prepare(
    const INDEX_T* __restrict__ indices, i64 num_indices, const INDEX_T* __restrict__ offsets, i64 num_bags,
    i64 tables, i64 bags_per_table, const i64* __restrict__ table_rows, i64 sentinel, KEY_T* __restrict__ keys,
    i64* __restrict__ grad_row, float* __restrict__ bag_scale, int* __restrict__ totals, int passes) {
  wait_for_previous_kernel();
  __shared__ int hist[MAX_PASSES][DIGITS];  // totals: this block's digit counts
  if (totals != 0) {
#pragma unroll
    for (int p = 0; p < MAX_PASSES; ++p) hist[p][threadIdx.x] = 0;
  }  // the tile loop's first __syncthreads orders these before any count
  __shared__ i64 stage[STAGE_BAGS + 1];     // offsets[lo + j]
  __shared__ int rel[STAGE_BAGS + 1];       // the same, as a tile position clamped to [-1, TILE]
  __shared__ i64 bag_row[STAGE_BAGS];       // bag lo + j's grad row (j * T + t) ...
  __shared__ i64 bag_first_row[STAGE_BAGS];  // ... and its table's first row (table_rows[t])
  __shared__ int below;                      // staged bag starts at or before the tile's last position
  for (i64 base = (i64)blockIdx.x * TILE; base < num_indices; base += (i64)gridDim.x * TILE) {  // block-uniform
    const i64 last = base + TILE < num_indices ? base + TILE - 1 : num_indices - 1;
    // the tile's indices read first: their loads overlap the bag search's rounds below
    i64 index[ITEMS];
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      const i64 i = base + u * BLOCK + threadIdx.x;
      index[u] = i <= last ? (i64)__ldg(indices + i) : 0;
    }
    const i64 first_bag = block_last_start_at_or_before(offsets, num_bags, base);
    const i64 lo = first_bag > 0 ? first_bag : 0;  // stage[j] = offsets[lo + j]
    const i64 room = num_bags + 1 - lo < STAGE_BAGS + 1 ? num_bags + 1 - lo : STAGE_BAGS + 1;
    if (threadIdx.x == 0) below = 0;
    i64 staged = 0;
    bool reaches;  // the staged offsets reach the last offset, or past the tile's last position
    do {  // BLOCK offsets a round, until they reach past the tile (one round for bags of 5+ positions)
      const i64 j = staged + threadIdx.x;
      if (j < room) {
        const i64 o = (i64)__ldg(offsets + lo + j);
        stage[j] = o;
        rel[j] = o < base ? -1 : o - base > TILE ? TILE : (int)(o - base);
        if (j < STAGE_BAGS && lo + j < num_bags) {  // per bag once, not per position: its table and grad row
          const i64 t = table_of(lo + j, bags_per_table);
          bag_row[j] = (lo + j - t * bags_per_table) * tables + t;
          bag_first_row[j] = __ldg(table_rows + t);
        }
      }
      staged = staged + BLOCK < room ? staged + BLOCK : room;
      __syncthreads();
      reaches = lo + staged - 1 == num_bags || stage[staged - 1] > last;
    } while (!reaches && staged < room);
    const i64 starts = staged < num_bags - lo ? staged : num_bags - lo;  // staged bag starts
    bool decreases = false;
    int mine = 0;
    for (i64 j = threadIdx.x; j < staged; j += BLOCK) {
      if (j + 1 < staged) decreases |= stage[j] > stage[j + 1];
      mine += j < starts && stage[j] <= last;
    }
    if (mine) atomicAdd(&below, mine);
    if (threadIdx.x == 0 && first_bag > 0) decreases |= stage[0] > base;  // the search's bag starts after base
    const bool fallback = __syncthreads_or(decreases) || !reaches;
    const int search = below;  // with the starts in order, the first `search` of them are <= last
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      const int q = u * BLOCK + threadIdx.x;  // the tile's position q: base + q
      const i64 i = base + q;
      if (i > last) break;
      if (fallback) {
        const i64 bag = last_start_at_or_before(offsets, num_bags, i);
        const bool inside = bag >= 0 && i < (i64)__ldg(offsets + bag + 1);
        const KEY_T key = write_position(i, index[u], bag, inside, tables, bags_per_table, table_rows, sentinel,
                                         keys, grad_row);
        if (totals != 0) count_digits(hist, (i64)key, passes);
        continue;
      }
      int a = 0, b = search;  // the first staged start past q; its bag + 1 is staged (the tile ends before it)
      while (a < b) {
        const int mid = (a + b) >> 1;
        if (rel[mid] <= q) {
          a = mid + 1;
        } else {
          b = mid;
        }
      }
      KEY_T key;
      if (a > 0 && q < rel[a]) {  // a = 0: before the first offset (lo = 0)
        key = (KEY_T)(index[u] + bag_first_row[a - 1]);
        grad_row[i] = bag_row[a - 1];
      } else {
        key = (KEY_T)(sentinel >= 0 ? sentinel : index[u] + __ldg(table_rows));
        grad_row[i] = -1;
      }
      keys[i] = key;
      if (totals != 0) count_digits(hist, (i64)key, passes);
    }
    __syncthreads();  // the stage is refilled for the next tile
  }
  if (totals != 0) {  // the loop's last __syncthreads has ordered every count before these reads
    for (int p = 0; p < passes; ++p) {
      const int c = hist[p][threadIdx.x];
      if (c != 0) atomicAdd(totals + p * DIGITS + threadIdx.x, c);
    }
  }
#if MEAN
  for (i64 i = (i64)blockIdx.x * BLOCK + threadIdx.x; i < num_bags; i += (i64)gridDim.x * BLOCK) {
    const i64 t = table_of(i, bags_per_table);
    const i64 pooled = (i64)__ldg(offsets + i + 1) - (i64)__ldg(offsets + i);
    bag_scale[(i - t * bags_per_table) * tables + t] = pooled > 0 ? 1.0f / (float)pooled : 0.0f;
  }
#endif
}
