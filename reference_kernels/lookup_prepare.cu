// The backward's preparation of a table-batched lookup (TableBatchedEmbeddingBag), in one pass:
// where each lookup position's gradient comes from and goes to. It replaces about 25 small torch
// operations per training step (bag_of_positions' searchsorted and masks, the table of each bag,
// the global rows, the sort keys' masks, the mean's bag counts), each a launch and 10-30 us of
// host time (docs/training.md, "Host work per training step").
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
// Each output element is written by exactly one thread and depends on the inputs alone: the
// same inputs always give the same bits.
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

extern "C" __global__ void __launch_bounds__(BLOCK) tbe_prepare(
    const INDEX_T* __restrict__ indices, i64 num_indices, const INDEX_T* __restrict__ offsets, i64 num_bags,
    i64 tables, i64 bags_per_table, const i64* __restrict__ table_rows, i64 sentinel, KEY_T* __restrict__ keys,
    i64* __restrict__ grad_row, float* __restrict__ bag_scale) {
  const i64 stride = (i64)gridDim.x * BLOCK;
  const i64 work = num_indices > num_bags ? num_indices : num_bags;
  for (i64 i = (i64)blockIdx.x * BLOCK + threadIdx.x; i < work; i += stride) {
    if (i < num_indices) {
      const i64 bag = last_start_at_or_before(offsets, num_bags, i);
      const bool inside = bag >= 0 && i < (i64)__ldg(offsets + bag + 1);
      const i64 index = (i64)__ldg(indices + i);
      if (inside) {
        const i64 t = table_of(bag, bags_per_table);
        keys[i] = (KEY_T)(index + __ldg(table_rows + t));
        grad_row[i] = (bag - t * bags_per_table) * tables + t;
      } else {
        keys[i] = (KEY_T)(sentinel >= 0 ? sentinel : index + __ldg(table_rows));
        grad_row[i] = -1;
      }
    }
#if MEAN
    if (i < num_bags) {
      const i64 t = table_of(i, bags_per_table);
      const i64 pooled = (i64)__ldg(offsets + i + 1) - (i64)__ldg(offsets + i);
      bag_scale[(i - t * bags_per_table) * tables + t] = pooled > 0 ? 1.0f / (float)pooled : 0.0f;
    }
#endif
  }
}
