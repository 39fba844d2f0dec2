// The per-device index-check ledger's record, as written by the check pass (index_check.cu)
// and by lookups that check their own indices (CHECK in embedding_bag_forward.cu). Layout and
// semantics: reference_kernels/index_check.py (RECORD_*) and docs/kernels.md.
#pragma once
#include "common.cuh"

// Record layout (int64 words), as RECORD_* in index_check.py.
#define R_OWNER 0      // token of the call that owns the record; 0: clean
#define R_OP 1         // op code of that call
#define R_POS 2        // its first bad position + 1 (0: none)
#define R_VALUE 3      // the index found there
#define R_TABLE 4      // its table (-1: one table)
#define R_ROWS 5       // that table's rows
#define R_BAG 6        // its first bad bag + 1 (0: none)
#define R_INDICES 7    // its number of indices
#define R_COUNT 8      // bad indices, every call since the reset
#define R_BAG_COUNT 9  // bags with bad offsets, every call since the reset

// One finding of call ``token`` into ``record``: ``bad`` more bad indices, the smallest bad
// position ``first_pos`` (-1: none; holding ``value``, in ``table`` of ``rows`` rows), and
// ``bad_bags`` more bags with bad offsets, the smallest ``first_bag`` (-1: none). The first
// failing call since the reset owns the record (its op, its smallest bad position and bag);
// counts add up over every call (atomics, so that they may also be added without the lock:
// add_count). Sets the host flag (pinned memory) so that the host sees the error at its next call.
__device__ __forceinline__ void record_finding(i64* lock, i64* record, int* host_flag, i64 token, i64 op,
                                               i64 num_indices, i64 bad, i64 first_pos, i64 value, i64 table,
                                               i64 rows, i64 bad_bags, i64 first_bag) {
  volatile i64* r = record;
  const i64 owner = r[R_OWNER];
  const bool other_owner = owner != 0 && owner != token;
  const bool nothing_smaller = owner == token && (first_pos < 0 || (r[R_POS] != 0 && r[R_POS] <= first_pos + 1)) &&
                               (first_bag < 0 || (r[R_BAG] != 0 && r[R_BAG] <= first_bag + 1));
  if (!(other_owner || nothing_smaller)) {  // this finding may own the record or lower its first position
    while (atomicCAS(reinterpret_cast<u64*>(lock), 0ull, 1ull) != 0ull) {
    }
    __threadfence();
    if (r[R_OWNER] == 0 || r[R_OWNER] == token) {
      r[R_OWNER] = token;
      r[R_OP] = op;
      r[R_INDICES] = num_indices;
      if (first_pos >= 0 && (r[R_POS] == 0 || first_pos + 1 < r[R_POS])) {
        r[R_TABLE] = table;
        r[R_ROWS] = rows;
        r[R_VALUE] = value;
        r[R_POS] = first_pos + 1;
      }
      if (first_bag >= 0 && (r[R_BAG] == 0 || first_bag + 1 < r[R_BAG])) r[R_BAG] = first_bag + 1;
    }
    __threadfence();
    atomicExch(reinterpret_cast<u64*>(lock), 0ull);
  }
  if (bad) atomicAdd(reinterpret_cast<u64*>(record + R_COUNT), (u64)bad);
  if (bad_bags) atomicAdd(reinterpret_cast<u64*>(record + R_BAG_COUNT), (u64)bad_bags);
  __threadfence_system();
  if (host_flag != 0) *(volatile int*)host_flag = 1;
}

// ``n`` more bad indices (R_COUNT) or bags (R_BAG_COUNT) in ``record``, without the lock.
__device__ __forceinline__ void add_count(i64* record, int word, int n) {
  atomicAdd(reinterpret_cast<u64*>(record + word), (u64)n);
}
