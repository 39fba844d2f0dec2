// Unpooled lookup (torch.nn.functional.embedding): out[i, :] = weight[indices[i], :].
//
// A pure copy, so it is independent of the element type: rows are moved as
// CHUNK_BYTES-wide words (16 where the row size and alignment allow).
// ROW_LANES lanes share one row, each moving CHUNKS words; a team first reads
// UNROLL indices (one per lane, coalesced), then issues all UNROLL rows' loads
// before the first store, so several rows are in flight per lane. The launcher gives
// every team one step (a grid over all the work); the loop strides past a capped grid.
// Indices were validated by index_check.cu; address arithmetic is 64-bit.
#include "common.cuh"

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
        if (row[u] >= 0 && col < row_words) x[u][c] = __ldg(weight + row[u] * row_words + col);
      }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (first + u >= num_indices) break;
#pragma unroll
      for (int c = 0; c < CHUNKS; ++c) {
        const i64 col = col0 + c * ROW_LANES + row_lane;
        if (row[u] >= 0 && col < row_words) out[(first + u) * row_words + col] = x[u][c];
      }
    }
  }
}
