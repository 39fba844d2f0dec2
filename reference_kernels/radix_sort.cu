// Stable LSD radix sort of the backward's int32 sort keys with their positions, over only the
// bits the keys use (launch.sort_rows): a table of R rows (plus the sentinel row R) needs
// bit_length(R) bits, 3 passes of 8 bits up to 16M rows, where torch.sort sorts all 32 bits in
// 4 (docs/training.md has issue 37's counters: torch's 4 onesweep passes against FBGEMM's 3).
//
// One launch for the digit totals of every pass, then one launch a pass (the onesweep scheme of
// Adinets and Merrill, "Onesweep: A Faster Least Significant Digit Radix Sort for GPUs", 2022:
// no per-pass histogram and scan launches; change 60):
//   radix_histograms: the count of each digit of each pass over all keys: totals[pass][digit];
//   radix_onesweep: one tile of TILE consecutive items per block, in the order blocks take tile
//     numbers from a counter (a tile waits only on tiles whose blocks already run). The tile
//     ranks its items by digit, stably: each warp takes 32 * ITEMS consecutive items, 32 a
//     round, finds a round's lanes of one digit by __match_any_sync and counts them on its own
//     counters; one scan per digit over the warps then orders the warps. Thread d then
//     publishes the tile's count of digit d (AGGREGATE), looks back over earlier tiles' words
//     until one holds its inclusive prefix (INCLUSIVE), and publishes its own inclusive prefix:
//     the items of digit d in earlier tiles. The items are staged in shared memory in sorted
//     order and each digit's run is written to its place: (items of smaller digits, from the
//     totals) + (items of this digit in earlier tiles) + (rank in tile).
// The first pass takes the positions 0..n-1 as the values; the last writes them as int64 (the
// backward kernels' positions). Every output element is written once; the look-back words and
// the totals hold integer counts, so the result does not depend on the blocks' timing: the
// stable sort, the same bits as torch.sort(keys, stable=True). A look-back word packs its flag
// in the top two bits over a 30-bit count (launch.sort_rows sorts fewer than 2^30 keys here).
#include "common.cuh"

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef ITEMS  // items per thread per tile (the staging arrays: 8 * TILE bytes of shared memory)
#define ITEMS 12
#endif
#ifndef SCATTER_MIN_BLOCKS  // the onesweep pass's occupancy floor (without it ptxas caps it at 64 registers and spills)
#define SCATTER_MIN_BLOCKS 3
#endif
#ifndef LOOK_BACK  // look-back words read at once
#define LOOK_BACK 8
#endif
#define TILE (BLOCK * ITEMS)
#define RADIX 256
#define MAX_PASSES 4
#define WARPS (BLOCK / 32)
#define FLAG_AGGREGATE (1u << 30)
#define FLAG_INCLUSIVE (2u << 30)
#define COUNT_MASK ((1u << 30) - 1u)
static_assert(BLOCK == RADIX, "a thread per digit in the scans");

__device__ __forceinline__ int digit_of(int key, int shift) { return (int)(((u32)key >> shift) & (RADIX - 1)); }

__device__ __forceinline__ void publish(u32* word, u32 value) { *(volatile u32*)word = value; }
__device__ __forceinline__ u32 peek(const u32* word) { return *(volatile const u32*)word; }

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

// The sort's control words zeroed (every pass's digit totals, tile counters and look-back words, as
// 8-byte words): a grid-stride loop launched like the passes, where a torch fill between two of our
// launches waited a whole launch (the passes overlap theirs, common.cuh: change 61).
extern "C" __global__ void __launch_bounds__(BLOCK) radix_zero(u64* __restrict__ words, i64 n) {
  wait_for_previous_kernel();
  for (i64 i = (i64)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (i64)gridDim.x * BLOCK) words[i] = 0;
}

// Every pass's digit counts in one read of the keys: a grid-stride loop, counters per block in
// shared memory, then one global atomic per (pass, digit, block) into the zeroed totals.
extern "C" __global__ void __launch_bounds__(BLOCK) radix_histograms(const int* __restrict__ keys, i64 n,
                                                                    int passes, int* __restrict__ totals) {
  wait_for_previous_kernel();
  __shared__ int hist[MAX_PASSES][RADIX];
#pragma unroll
  for (int p = 0; p < MAX_PASSES; ++p) hist[p][threadIdx.x] = 0;
  __syncthreads();
  for (i64 i = (i64)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (i64)gridDim.x * BLOCK) {
    const int key = __ldg(keys + i);
    for (int p = 0; p < passes; ++p) atomicAdd(&hist[p][digit_of(key, 8 * p)], 1);
  }
  __syncthreads();
  for (int p = 0; p < passes; ++p) {
    const int c = hist[p][threadIdx.x];
    if (c != 0) atomicAdd(totals + p * RADIX + threadIdx.x, c);
  }
}

// The items of digit d in tiles before ``tile``: its earlier tiles' words read back, LOOK_BACK at a
// time (independent loads, one round trip each: the tiles' blocks run at once, and a word read
// one at a time cost a round trip per tile), summing counts up to the nearest inclusive one and
// waiting where a word is not yet published.
__device__ __forceinline__ u32 look_back(const u32* status, i64 tile, int d) {
  u32 earlier = 0;
  i64 t = tile - 1;
  while (t >= 0) {
    u32 word[LOOK_BACK];
#pragma unroll
    for (int k = 0; k < LOOK_BACK; ++k) word[k] = t - k >= 0 ? peek(status + (t - k) * RADIX + d) : FLAG_INCLUSIVE;
    int k = 0;
    for (; k < LOOK_BACK && word[k] != 0; ++k) {
      earlier += word[k] & COUNT_MASK;
      if (word[k] & FLAG_INCLUSIVE) return earlier;
    }
    t -= k;  // on from the first word not yet published (k = 0: read it again)
  }
  return earlier;
}

// One pass over the digit (key >> shift) & 255. totals: this pass's digit counts; status: its
// look-back words, tiles x RADIX, zeroed; tile_counter: its tile numbers, zeroed.
extern "C" __global__ void __launch_bounds__(BLOCK, SCATTER_MIN_BLOCKS) radix_onesweep(
    const int* __restrict__ keys_in, const int* __restrict__ values_in, i64 n, int shift,
    const int* __restrict__ totals, u32* status, int* tile_counter, int* __restrict__ keys_out,
    int* __restrict__ values_out, i64* __restrict__ positions_out) {
  wait_for_previous_kernel();
  __shared__ int stage_keys[TILE];
  __shared__ int stage_values[TILE];
  __shared__ int warp_count[WARPS][RADIX];  // items of digit d in warp w's part of the tile
  __shared__ int tile_start[RADIX];          // this tile's items of smaller digits
  __shared__ i64 out_start[RADIX];           // where this tile's run of digit d goes
  __shared__ int tile_number;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) tile_number = atomicAdd(tile_counter, 1);
#pragma unroll
  for (int w = 0; w < WARPS; ++w) warp_count[w][threadIdx.x] = 0;
  __syncthreads();
  const i64 tile = tile_number;
  const i64 base = tile * TILE;
  const int valid = n - base < TILE ? (int)(n - base) : TILE;
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
  {  // thread d: the tile's items of digit d; where each warp's start (warp_count becomes that)
    const int d = threadIdx.x;
    int count = 0;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) count += warp_count[w][d];
    u32* mine = status + tile * RADIX + d;
    publish(mine, (tile == 0 ? FLAG_INCLUSIVE : FLAG_AGGREGATE) | (u32)count);  // before any barrier
    int all;
    const int smaller = block_exclusive_sum(totals[d], &all);
    const int start = block_exclusive_sum(count, &all);
    tile_start[d] = start;
    int run = start;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const int c = warp_count[w][d];
      warp_count[w][d] = run;
      run += c;
    }
    const u32 earlier = look_back(status, tile, d);
    if (tile != 0) publish(mine, FLAG_INCLUSIVE | (earlier + (u32)count));
    out_start[d] = (i64)smaller + earlier;
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
