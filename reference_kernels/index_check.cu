// Validation pass run before the lookup kernels, so that their hot loops need no bounds
// checks (modes and their semantics: docs/kernels.md, "Index range check").
//
// One grid-stride pass over the indices and the offsets:
//   * index p is bad when it lies outside [0, rows) of its table (one table: num_embeddings;
//     table-batched: table_sizes[t] of the table whose span holds p, below);
//   * bag b's offsets are bad unless 0 <= offsets[b] <= offsets[b + 1] <= num_indices (the last
//     entry is checked against num_indices), and bag 0's unless offsets[0] == 0 (torch's
//     embedding_bag requires it: positions before the first offset would belong to no bag).
// With ``clean_indices`` set (deferred, warn, sync) the pass also writes the copy the lookup
// reads: bad indices become 0 (row 0 of their table), offsets are clamped into [0, num_indices]
// (table-batched: into their table's span), so no lookup kernel reads outside its table or
// outside the indices, whatever the input (every lookup kernel pools a bag with end < start as
// empty). CLEAN_T may be narrower than INDEX_T (int32 when every value fits): fewer bytes for
// the lookup to read.
//
// Errors go to a record of the per-device ledger (``record``, 10 int64 words, all zero when
// clean; layout in reference_kernels/index_check.py, RECORD_*): the first failing call since
// the last reset (``token``) owns it and stores its op, its smallest bad position with that
// index's value, table and valid rows, and its smallest bad bag; counts add up over every call.
// Each block reduces its findings in shared memory first; one thread per block with an error
// then takes the ledger's lock (``lock``): no atomics at all on the error-free path.
// ``host_flag`` (pinned host memory, device-accessible through unified addressing) is set to 1
// after an error, so the host sees it at its next call without synchronising.
//
// TABLE_CAP: 0 = one table; > 0 = table-batched with at most TABLE_CAP - 1 tables, whose spans
// each block computes into shared memory; < 0 = table-batched with the spans precomputed by
// the host (``spans_in``). Table t's span is [span[t], span[t + 1]) with span[t] the running
// maximum of offsets[t * bags_per_table] clamped into [0, num_indices]: with valid offsets
// exactly the table's indices, and with any offsets disjoint, ordered spans that cover what
// the lookup reads for each table once its bag offsets are clamped into them.
#include "index_record.cuh"

#ifndef INDEX_T
#define INDEX_T i64
#endif
#ifndef CLEAN_T
#define CLEAN_T INDEX_T
#endif
#ifndef TABLE_CAP
#define TABLE_CAP 0
#endif
#define CHECK_BLOCK 256

__device__ __forceinline__ i64 clamp64(i64 v, i64 lo, i64 hi) { return v < lo ? lo : v > hi ? hi : v; }

// The table whose span holds position p: the last t < tables with span[t] <= p (0 if none).
__device__ __forceinline__ i64 table_of(const i64* span, i64 tables, i64 p) {
  i64 lo = 0, hi = tables - 1;
  while (lo < hi) {
    const i64 mid = (lo + hi + 1) >> 1;
    if (span[mid] <= p) lo = mid; else hi = mid - 1;
  }
  return lo;
}

#if TABLE_CAP > 0
// span[0 .. tables] into shared memory: each thread a run of consecutive entries (clamped
// offsets, running maximum), then a max-scan over the threads' runs.
__device__ __forceinline__ void scan_spans(i64* span, i64* carry, const INDEX_T* __restrict__ offsets, i64 tables,
                                           i64 bags_per_table, i64 num_indices) {
  const i64 entries = tables + 1;
  const i64 per = (entries + CHECK_BLOCK - 1) / CHECK_BLOCK;
  const i64 k0 = threadIdx.x * per, k1 = min(k0 + per, entries);
  i64 run = 0;  // clamped offsets are >= 0
  for (i64 k = k0; k < k1; ++k) {
    run = max(run, clamp64((i64)offsets[k * bags_per_table], 0, num_indices));
    span[k] = run;
  }
  carry[threadIdx.x] = run;
  __syncthreads();
  for (int d = 1; d < CHECK_BLOCK; d <<= 1) {
    const i64 other = threadIdx.x >= d ? carry[threadIdx.x - d] : 0;
    __syncthreads();
    carry[threadIdx.x] = max(carry[threadIdx.x], other);
    __syncthreads();
  }
  const i64 before = threadIdx.x > 0 ? carry[threadIdx.x - 1] : 0;
  for (i64 k = k0; k < k1; ++k) span[k] = max(span[k], before);
  __syncthreads();
}
#endif

extern "C" __global__ void __launch_bounds__(CHECK_BLOCK) index_check(
    const INDEX_T* __restrict__ indices, i64 num_indices, i64 num_embeddings,
    const INDEX_T* __restrict__ offsets, i64 num_offsets,
    const i64* __restrict__ table_sizes, i64 tables, i64 bags_per_table, const i64* __restrict__ spans_in,
    CLEAN_T* __restrict__ clean_indices, CLEAN_T* __restrict__ clean_offsets,
    i64* lock, i64* record, int* host_flag, i64 token, i64 op) {
  wait_for_previous_kernel();
  __shared__ u64 first_pos, first_bag;
  __shared__ u64 bad_count, bag_count;
#if TABLE_CAP > 0
  __shared__ i64 span_shared[TABLE_CAP];
  __shared__ i64 carry[CHECK_BLOCK];
  scan_spans(span_shared, carry, offsets, tables, bags_per_table, num_indices);
  const i64* span = span_shared;
#elif TABLE_CAP < 0
  const i64* span = spans_in;
#endif
  if (threadIdx.x == 0) {
    first_pos = first_bag = ~0ull;
    bad_count = bag_count = 0;
  }
  __syncthreads();
  const i64 stride = (i64)gridDim.x * blockDim.x;
  const i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x;

  i64 my_first = -1, my_count = 0;  // positions grow along the loop: the first one found is the smallest
  for (i64 p = tid; p < num_indices; p += stride) {
    const i64 v = (i64)indices[p];
#if TABLE_CAP != 0
    const i64 rows = table_sizes[table_of(span, tables, p)];
#else
    const i64 rows = num_embeddings;
#endif
    const bool bad = v < 0 || v >= rows;
    if (clean_indices != 0) clean_indices[p] = (CLEAN_T)(bad ? 0 : v);
    if (bad) {
      if (my_count == 0) my_first = p;
      ++my_count;
    }
  }
  i64 my_first_bag = -1, my_bag_count = 0;
  for (i64 b = tid; b < num_offsets; b += stride) {
    const i64 lo = (i64)offsets[b];
    const i64 hi = b + 1 < num_offsets ? (i64)offsets[b + 1] : num_indices;
    if (lo < 0 || lo > hi || hi > num_indices || (b == 0 && lo != 0)) {
      if (my_bag_count == 0) my_first_bag = b;
      ++my_bag_count;
    }
    if (clean_offsets != 0) {
      i64 c = clamp64(lo, 0, num_indices);
#if TABLE_CAP != 0
      const i64 t = b / bags_per_table;  // t == tables for the last entry
      c = b % bags_per_table == 0 ? span[t] : clamp64(c, span[t], span[t + 1]);
#endif
      clean_offsets[b] = (CLEAN_T)c;
    }
  }
  if (my_count) {
    atomicMin(&first_pos, (u64)my_first);
    atomicAdd(&bad_count, (u64)my_count);
  }
  if (my_bag_count) {
    atomicMin(&first_bag, (u64)my_first_bag);
    atomicAdd(&bag_count, (u64)my_bag_count);
  }
  __syncthreads();
  if (threadIdx.x != 0 || (bad_count == 0 && bag_count == 0)) return;

  const i64 p = bad_count ? (i64)first_pos : 0;
#if TABLE_CAP != 0
  const i64 t = table_of(span, tables, p);
  const i64 table = t, rows = table_sizes[t];
#else
  const i64 table = -1, rows = num_embeddings;
#endif
  record_finding(lock, record, host_flag, token, op, num_indices, (i64)bad_count, bad_count ? p : -1,
                 bad_count ? (i64)indices[p] : 0, table, rows, (i64)bag_count, bag_count ? (i64)first_bag : -1);
}
