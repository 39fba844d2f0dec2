// Stable LSD radix sort of the backward's int32 sort keys with their positions, over only the
// bits the keys use (launch.sort_rows): a table of R rows (plus the sentinel row R) needs
// bit_length(R) bits, 3 passes of 8 bits up to 16M rows, where torch.sort sorts all 32 bits in
// 4 (docs/training.md, issue 37's counters: torch's 4 onesweep passes 136 us on 2.6M keys,
// FBGEMM's 3 over the row bits 110 us).
//
// Each pass sorts by one 8-bit digit (key >> shift) & 255, stably, in three kernels:
//   radix_histogram: per tile of TILE consecutive items, the count of each digit:
//     counts[d * tiles + tile] (digit-major, so that step 2 scans each digit's tiles in order);
//   radix_scan: one block per digit d: counts[d * tiles + tile] becomes the number of items of
//     digit d in tiles before `tile`, totals[d] the digit's total;
//   radix_scatter: each tile ranks its items by digit, stably: each warp takes 32 * ITEMS
//     consecutive items, 32 a round, finds a round's lanes of one digit by __match_any_sync and
//     counts them on its own counters; one scan per digit over the warps then orders the
//     warps. The items are staged in shared memory in sorted order and each digit's run is
//     written to its place: (items of smaller digits) + (items of this digit in earlier
//     tiles) + (rank in tile).
// The first pass takes the positions 0..n-1 as the values; the last writes them as int64 (the
// backward kernels' positions). Every output element is written once; no atomics on global
// memory; the result is the stable sort, the same bits as torch.sort(keys, stable=True).
#include "common.cuh"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS  // items per thread per tile (the staging arrays: 8 * TILE bytes of shared memory)
#define ITEMS 12
#endif
#ifndef SCATTER_MIN_BLOCKS  // the scatter's occupancy floor (without it ptxas caps it at 64 registers and spills)
#define SCATTER_MIN_BLOCKS 3
#endif
#define TILE (BLOCK * ITEMS)
#define RADIX 256
#define WARPS (BLOCK / 32)
static_assert(BLOCK == RADIX, "a thread per digit in the scans");

__device__ __forceinline__ int digit_of(int key, int shift) { return (int)(((u32)key >> shift) & (RADIX - 1)); }

// Exclusive prefix sum of one value per thread over the block; *total gets the sum.
__device__ __forceinline__ int block_exclusive_sum(int value, int* total) {
  __shared__ int warp_sums[WARPS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int inclusive = value;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, inclusive, off);
    if (lane >= off) inclusive += up;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  int before = 0, sum = 0;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const int s = warp_sums[w];
    before += w < warp ? s : 0;
    sum += s;
  }
  __syncthreads();  // warp_sums is reused by the next call
  *total = sum;
  return before + inclusive - value;
}

// A counter per (warp, digit): an atomic per key, which collide only on a warp's equal digits
// (a hot row's keys). Adding a warp's equal digits at once through __match_any_sync cost more on
// every key than the collisions do (change 58: 2.1M keys, uniform 201 -> 155 us a sort, Zipf
// 1.2 128 -> 116 us, H100).
extern "C" __global__ void __launch_bounds__(BLOCK) radix_histogram(const int* __restrict__ keys, i64 n, int shift,
                                                                   int* __restrict__ counts, i64 tiles) {
  __shared__ int hist[WARPS][RADIX];
  const i64 base = (i64)blockIdx.x * TILE;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) hist[w][threadIdx.x] = 0;
  __syncthreads();
  int key[ITEMS];
#pragma unroll
  for (int u = 0; u < ITEMS; ++u) {  // every load issued before the first atomic
    const i64 i = base + u * BLOCK + threadIdx.x;
    key[u] = i < n ? __ldg(keys + i) : 0;
  }
#pragma unroll
  for (int u = 0; u < ITEMS; ++u)
    if (base + u * BLOCK + threadIdx.x < n) atomicAdd(&hist[warp][digit_of(key[u], shift)], 1);
  __syncthreads();
  int sum = 0;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) sum += hist[w][threadIdx.x];
  counts[(i64)threadIdx.x * tiles + blockIdx.x] = sum;
}

extern "C" __global__ void __launch_bounds__(BLOCK) radix_scan(int* __restrict__ counts, i64 tiles,
                                                              int* __restrict__ totals) {
  int* row = counts + (i64)blockIdx.x * tiles;
  int carry = 0;
  for (i64 t0 = 0; t0 < tiles; t0 += BLOCK) {  // block-uniform
    const i64 t = t0 + threadIdx.x;
    const int value = t < tiles ? row[t] : 0;
    int sum;
    const int before = block_exclusive_sum(value, &sum);
    if (t < tiles) row[t] = carry + before;
    carry += sum;
  }
  if (threadIdx.x == 0) totals[blockIdx.x] = carry;
}

extern "C" __global__ void __launch_bounds__(BLOCK, SCATTER_MIN_BLOCKS) radix_scatter(
    const int* __restrict__ keys_in, const int* __restrict__ values_in, i64 n, int shift,
    const int* __restrict__ counts, const int* __restrict__ totals, i64 tiles, int* __restrict__ keys_out,
    int* __restrict__ values_out, i64* __restrict__ positions_out) {
  __shared__ int stage_keys[TILE];
  __shared__ int stage_values[TILE];
  __shared__ int warp_count[WARPS][RADIX];  // items of digit d in warp w's part of the tile
  __shared__ int tile_start[RADIX];          // this tile's items of smaller digits
  __shared__ i64 out_start[RADIX];           // where this tile's run of digit d goes
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const i64 base = (i64)blockIdx.x * TILE;
  const int valid = n - base < TILE ? (int)(n - base) : TILE;

  {  // thread d: where digit d's items go
    const int d = threadIdx.x;
    const i64 here = counts[(i64)d * tiles + blockIdx.x];
    const i64 next = blockIdx.x + 1 < tiles ? counts[(i64)d * tiles + blockIdx.x + 1] : totals[d];
    int all;
    const int smaller = block_exclusive_sum(totals[d], &all);
    tile_start[d] = block_exclusive_sum((int)(next - here), &all);
    out_start[d] = (i64)smaller + here;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) warp_count[w][d] = 0;
  }
  __syncthreads();
  // Warp w owns the tile's items [w * 32 * ITEMS, (w + 1) * 32 * ITEMS), 32 consecutive ones a
  // round (coalesced loads); it ranks them by digit in item order with its own counters, no
  // block-wide barrier between rounds.
  const int first = warp * 32 * ITEMS;
  int key[ITEMS], value[ITEMS], rank[ITEMS];
#pragma unroll
  for (int u = 0; u < ITEMS; ++u) {
    const int j = first + u * 32 + lane;
    key[u] = j < valid ? __ldg(keys_in + base + j) : 0;
    value[u] = j < valid ? (values_in != 0 ? __ldg(values_in + base + j) : (int)(base + j)) : 0;
  }
  const u32 lanes_before = (1u << lane) - 1u;
#pragma unroll
  for (int u = 0; u < ITEMS; ++u) {
    const int j = first + u * 32 + lane;
    const int d = j < valid ? digit_of(key[u], shift) : RADIX;
    const u32 peers = __match_any_sync(0xffffffffu, d);
    const int leader = __ffs(peers) - 1;
    int before = 0;
    if (d < RADIX && lane == leader) {
      before = warp_count[warp][d];
      warp_count[warp][d] = before + __popc(peers);
    }
    rank[u] = __shfl_sync(0xffffffffu, before, leader) + __popc(peers & lanes_before);
    __syncwarp();
  }
  __syncthreads();
  {  // thread d: the items of digit d before each warp's, in this tile (warp_count becomes that)
    const int d = threadIdx.x;
    int run = tile_start[d];
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const int c = warp_count[w][d];
      warp_count[w][d] = run;
      run += c;
    }
  }
  __syncthreads();
#pragma unroll
  for (int u = 0; u < ITEMS; ++u) {
    const int j = first + u * 32 + lane;
    if (j < valid) {
      const int at = warp_count[warp][digit_of(key[u], shift)] + rank[u];
      stage_keys[at] = key[u];
      stage_values[at] = value[u];
    }
  }
  __syncthreads();
#pragma unroll
  for (int u = 0; u < ITEMS; ++u) {  // stage position j: digit d's (j - tile_start[d])-th item
    const int j = u * BLOCK + threadIdx.x;
    if (j >= valid) break;
    const int k = stage_keys[j];
    const int d = digit_of(k, shift);
    const i64 out = out_start[d] + (j - tile_start[d]);
    keys_out[out] = k;
    if (positions_out != 0) {
      positions_out[out] = (i64)stage_values[j];
    } else {
      values_out[out] = stage_values[j];
    }
  }
}
