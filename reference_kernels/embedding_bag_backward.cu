// Gradient of the table for sum and mean pooling (and the unpooled lookup),
// deterministic: no atomics.
//
// The host sorts the lookup positions by table row with a stable sort, so the
// positions that hit one row form a contiguous run, in increasing position
// order. One team of ROW_LANES lanes per sorted position starts work only at
// the head of a run; it walks the run in that fixed order, adds
//     grad_out[bag(p)] * per_sample_weight[p] * bag_scale[bag(p)]
// in float32 and writes the row of grad_weight once. Rows nobody looked up stay
// as the host initialised them (zero); the padding row is left at zero.
// The same inputs therefore always give bit-identical gradients.
#include "common.cuh"

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
#define UNROLL 8
#endif
#ifndef HAS_PSW
#define HAS_PSW 0
#endif
#ifndef HAS_SCALE  // mean: bag_scale[b] = 1 / (rows pooled in bag b)
#define HAS_SCALE 0
#endif
#ifndef BLOCK
#define BLOCK 256
#endif

#define TILE_COLS (ROW_LANES * CHUNKS * VEC)
#define UNROLL_EFF (UNROLL < ROW_LANES ? UNROLL : ROW_LANES)
static_assert(ROW_LANES % UNROLL_EFF == 0, "UNROLL must divide ROW_LANES");

typedef Pack<weight_t, VEC> Vec;

// Bag that position pos belongs to: fixed layout (bag_of == 0) or a table
// (-1 for a position outside every bag, e.g. after the last offset).
__device__ __forceinline__ i64 bag_of_position(i64 pos, const i64* bag_of, i64 bag_size) {
  return bag_of != 0 ? bag_of[pos] : pos / bag_size;
}

extern "C" __global__ void __launch_bounds__(BLOCK) embedding_bag_backward(
    const weight_t* __restrict__ grad_out, i64 dim,
    const i64* __restrict__ sorted_rows, const i64* __restrict__ positions, i64 num_indices,
    const i64* __restrict__ bag_of, i64 bag_size,
    const weight_t* __restrict__ per_sample_weights, const float* __restrict__ bag_scale,
    i64 padding_idx, int col_tiles, weight_t* __restrict__ grad_weight) {
  const int lane = threadIdx.x & 31;
  const int row_lane = lane & (ROW_LANES - 1);
  const u32 mask = team_mask<ROW_LANES>(lane);
  const i64 work = ((i64)blockIdx.x * BLOCK + threadIdx.x) / ROW_LANES;
  if (work >= num_indices * col_tiles) return;
  const i64 head = work / col_tiles;
  const i64 col0 = (work % col_tiles) * (i64)TILE_COLS;
  const i64 row = sorted_rows[head];
  if ((head > 0 && sorted_rows[head - 1] == row) || row == padding_idx) return;

  float acc[CHUNKS][VEC];
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[c][e] = 0.0f;

  for (i64 base = head; base < num_indices; base += ROW_LANES) {
    const i64 q = base + row_lane;
    const bool mine = q < num_indices && sorted_rows[q] == row;
    const int n = __popc(__ballot_sync(mask, mine));  // the run is a prefix of the batch
    i64 my_bag = 0;
    float my_scale = 1.0f;
    if (mine) {
      const i64 pos = positions[q];
      my_bag = bag_of_position(pos, bag_of, bag_size);
#if HAS_PSW
      my_scale *= to_float(per_sample_weights[pos]);
#endif
#if HAS_SCALE
      my_scale *= bag_scale[my_bag];
#endif
    }
#pragma unroll
    for (int m = 0; m < ROW_LANES; m += UNROLL_EFF) {
      if (m >= n) break;
      Vec g[UNROLL_EFF][CHUNKS];
      float s[UNROLL_EFF];
      u32 ok = 0;  // bit u: position m + u is in the run and in a bag
#pragma unroll
      for (int u = 0; u < UNROLL_EFF; ++u) {
        const i64 b = __shfl_sync(mask, my_bag, m + u, ROW_LANES);
        s[u] = __shfl_sync(mask, my_scale, m + u, ROW_LANES);
        if (m + u < n && b >= 0) ok |= 1u << u;
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c) {
          const i64 col = col0 + (i64)(c * ROW_LANES + row_lane) * VEC;
          if ((ok & (1u << u)) && col < dim) g[u][c] = load_pack<weight_t, VEC>(grad_out + b * dim + col);
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL_EFF; ++u) {
        if (!(ok & (1u << u))) continue;
#pragma unroll
        for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[c][e] = fmaf(s[u], to_float(g[u][c].v[e]), acc[c][e]);
      }
    }
    if (n < ROW_LANES) break;
  }

#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const i64 col = col0 + (i64)(c * ROW_LANES + row_lane) * VEC;
    if (col >= dim) continue;
    Vec y;
#pragma unroll
    for (int e = 0; e < VEC; ++e) y.v[e] = from_float(acc[c][e]);
    store_pack<weight_t, VEC>(grad_weight + row * dim + col, y);
  }
}
