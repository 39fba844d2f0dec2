// Pooled embedding lookup (embedding bag): sum, mean or max of table rows per bag.
//
// Work decomposition (every name below is a compile-time constant set with -D):
//   * A TEAM of lanes (a warp or a power-of-two fraction of one) owns one bag
//     and one column tile of the output row.
//   * ROW_LANES lanes of the team share one table row; each lane moves CHUNKS
//     vectors of VEC elements (16 bytes where the row width and alignment allow).
//   * The team therefore reads R = TEAM / ROW_LANES rows at once, and each lane
//     issues UNROLL rows' loads before it adds any of them (rows in flight).
//   * Indices (and per-sample weights) are read once per team, one per lane,
//     coalesced, and handed to the other lanes with shuffles.
//   * The R partial results are combined with shuffles at the end; lanes of the
//     first row group write the output.
// Table-batched lookups (several tables in one weight buffer, one launch): bags
// are numbered table-major (bag = t * bags_per_table + b), table t's indices are
// relative to its first row table_rows[t], and the output row of bag (t, b) is
// out[b, t * dim : (t + 1) * dim] of a [bags_per_table, T * dim] result
// (out_row_stride = T * dim). A single table is T = 1 with table_rows == 0.
// TABLE_COLS (tables of mixed widths, one launch per width: the general and segmented
// kernels): the launch's T tables are some of the offsets' tables, each with its own output
// columns. table_rows then holds three entries per table t (at 3t, 3t + 1, 3t + 2): its first
// row in the weight, its first output column, and its number g among the offsets' tables; bag
// (t, b) of the launch reads the offsets' bag g * bags_per_table + b and writes
// out[b, column : column + dim] of a result whose rows are out_row_stride wide.
// With BAGS_PER_STEP defined, the file compiles embedding_bag_forward_short instead: short
// bags of one fixed size, several bags per team (see that kernel). With SEGMENT_BAGS defined,
// embedding_bag_forward_segmented: short bags of varying size (CSR offsets, table-batched).
// The hot loop does no bounds check on indices: index_check.cu validates them
// in a separate pass before this kernel runs. Negative indices and padding_idx
// are skipped. All address arithmetic is 64-bit. With CHECK (the general kernel of a
// one-table call) the kernel checks the indices and offsets it reads itself, with the
// check pass's semantics, and no pass runs (see CHECK below).
#include "index_record.cuh"

#ifndef INDEX_T
#define INDEX_T i64
#endif
#ifndef MODE  // 0 = sum, 1 = mean, 2 = max
#define MODE 0
#endif
#ifndef HAS_PSW  // per_sample_weights present (sum only)
#define HAS_PSW 0
#endif
#ifndef WRITE_ARGMAX  // max mode: also write the winning row per element (for backward)
#define WRITE_ARGMAX 0
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef ROW_LANES
#define ROW_LANES 32
#endif
#ifndef TEAM
#define TEAM 32
#endif
#ifndef CHUNKS
#define CHUNKS 1
#endif
#ifndef UNROLL
#define UNROLL 8
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef MIN_BLOCKS  // occupancy hint for the register allocator
#define MIN_BLOCKS 1
#endif
#ifndef PERSISTENT  // general kernel: a team may pool several bags (see embedding_bag_forward)
#define PERSISTENT 0
#endif
#ifndef CHECK  // general kernel, one table, one column tile: check the indices and offsets read
#define CHECK 0
#endif
#ifndef TABLE_COLS  // per-table output columns and offsets' tables (see above)
#define TABLE_COLS 0
#endif
// General kernel, mean and max: each lane counts its own indices and the team adds the counts once
// per bag, instead of a ballot per batch of TEAM indices. Teams narrower than a warp only: their
// bags take several batches (a 4-lane team, 5 per bag of 20), a warp's DCNv2 bags mostly one, for
// which the 5 shuffles of the sum cost more than the ballot (docs/perf/change-52.md).
#ifndef LANE_COUNT
#define LANE_COUNT (TEAM < 32)
#endif

#define ROWS_AT_ONCE (TEAM / ROW_LANES)
#define TILE_COLS (ROW_LANES * CHUNKS * VEC)
#define UNROLL_EFF (UNROLL < ROW_LANES ? UNROLL : ROW_LANES)

static_assert(TEAM <= 32 && (TEAM & (TEAM - 1)) == 0, "TEAM must be a power of two <= 32");
static_assert(ROW_LANES <= TEAM && (ROW_LANES & (ROW_LANES - 1)) == 0, "ROW_LANES must divide TEAM");
static_assert(ROW_LANES % UNROLL_EFF == 0, "UNROLL must divide ROW_LANES");
static_assert(MODE == 0 || HAS_PSW == 0, "per_sample_weights only with sum");


typedef Pack<weight_t, VEC> Vec;

// Table t's first row in the weight, its first output column, and its number among the
// offsets' tables: table_rows[t], t * dim and t, or (TABLE_COLS) its three entries. Variants
// without TABLE_COLS compile exactly as before; with it, nothing more stays live in registers
// (a table's entries are found from t alone: the tightest picks, 32 registers, keep them).
__device__ __forceinline__ i64 table_first_row(i64 t, const i64* __restrict__ table_rows) {
  return table_rows[TABLE_COLS ? 3 * t : t];
}
__device__ __forceinline__ i64 table_column(i64 t, i64 dim, const i64* __restrict__ table_rows) {
  return TABLE_COLS ? table_rows[3 * t + 1] : t * dim;
}
__device__ __forceinline__ i64 offsets_table(i64 t, const i64* __restrict__ table_rows) {
  return TABLE_COLS ? table_rows[3 * t + 2] : t;
}

struct Acc {
  float v[CHUNKS][VEC];
#if WRITE_ARGMAX
  i64 arg[CHUNKS][VEC];
#endif
  int count;  // rows pooled by the whole team (mean; "any row" for max), counted per batch
};

__device__ __forceinline__ void acc_init(Acc& a) {
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      a.v[c][e] = MODE == 2 ? -__int_as_float(0x7f800000) : 0.0f;
#if WRITE_ARGMAX
      a.arg[c][e] = -1;
#endif
    }
  a.count = 0;
}

// Lean rows (LEAN_ROWS in the general kernel, LEAN_SEGMENT_ROWS in the segmented one): sum and
// mean issue a row as an index shuffle, a multiply-add for its address (one wide one with
// 32-bit rows) and the load, and add it untested: a position past the bag's end, a negative index or
// padding_idx reads zero_tile instead of a table row, so nothing is branched around. Rows
// served by the caches (skewed indices) leave these kernels issue-bound, so instructions per
// row set their time (docs/perf/change-45.md).
#if MODE != 2
__device__ __align__(16) weight_t zero_tile[TILE_COLS];  // zero-initialised module memory

// base + row * row_bytes in one wide multiply-add; zero (a zero_tile row) unless ``real``.
__device__ __forceinline__ const char* row_address(const char* base, int row, int row_bytes, bool real,
                                                   const char* zero) {
  const char* p;
  asm("mad.wide.s32 %0, %1, %2, %3;" : "=l"(p) : "r"(row), "r"(row_bytes), "l"(base));
  return real ? p : zero;
}

// The same for rows that may pass 2^31 (the segmented kernel serves any table size).
__device__ __forceinline__ const char* row_address(const char* base, i64 row, i64 row_bytes, bool real,
                                                   const char* zero) {
  return real ? base + row * row_bytes : zero;
}
#endif

// Adds (or max-combines) one loaded row chunk into the accumulator.
__device__ __forceinline__ void acc_add(Acc& a, int c, const Vec& x, float w, i64 row) {
  float values[VEC];
  to_floats(x, values);
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    const float f = values[e];
#if MODE == 2
    if (f > a.v[c][e]) {
      a.v[c][e] = f;
#if WRITE_ARGMAX
      a.arg[c][e] = row;
#endif
    }
#elif HAS_PSW
    a.v[c][e] = fmaf(w, f, a.v[c][e]);
#else
    a.v[c][e] += f;
#endif
  }
}

// Combines the partial results of the team's row groups (lanes ROW_LANES apart).
__device__ __forceinline__ void acc_team_reduce(Acc& a, u32 mask) {
#pragma unroll
  for (int off = ROW_LANES; off < TEAM; off <<= 1) {
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c)
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        const float other = __shfl_xor_sync(mask, a.v[c][e], off, TEAM);
#if MODE == 2
#if WRITE_ARGMAX
        const i64 other_arg = __shfl_xor_sync(mask, a.arg[c][e], off, TEAM);
        if (other > a.v[c][e]) a.arg[c][e] = other_arg;
#endif
        a.v[c][e] = fmaxf(a.v[c][e], other);
#else
        a.v[c][e] += other;
#endif
      }
  }
}

// Final value of one output element: mean divides by the pooled row count;
// an empty bag (or one with only padding) gives 0 in every mode, as torch does.
// ``mean`` is count_divisor(max(a.count, 1)), made once per output row.
__device__ __forceinline__ float acc_finish(const Acc& a, float v, const CountDivisor& mean) {
  if (MODE == 1) return a.count > 0 ? divide(v, mean) : 0.0f;
  if (MODE == 2) return a.count > 0 ? v : 0.0f;
  return v;
}

// The lane's vectors of one table row (columns past ``dim`` in the last tile are not read).
__device__ __forceinline__ void load_row(Vec (&x)[CHUNKS], const weight_t* __restrict__ weight, i64 row, i64 dim,
                                         i64 col0, int row_lane) {
  const weight_t* src = weight + row * dim + col0 + row_lane * VEC;
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    if (col0 + (c * ROW_LANES + row_lane) * VEC < dim) x[c] = load_pack<weight_t, VEC>(src + c * ROW_LANES * VEC);
  }
}

// Pools a row loaded by load_row into the accumulator (weight w; the row for argmax).
__device__ __forceinline__ void add_row(Acc& acc, const Vec (&x)[CHUNKS], float w, i64 row, i64 dim, i64 col0,
                                        int row_lane) {
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    if (col0 + (c * ROW_LANES + row_lane) * VEC < dim) acc_add(acc, c, x[c], w, row);
  }
}

// The output row of a team (lanes of the first row group only): finished values, and the
// winning rows when argmax is written. Columns past ``dim`` (the last tile) are skipped.
// ONE_ROW: mean of a bag of one pooled row, that row (the division would return it exactly).
template <bool ONE_ROW>
__device__ __forceinline__ void store_values(const Acc& acc, i64 col0, int row_lane, weight_t* __restrict__ out,
                                             i64* __restrict__ argmax, i64 out_row, i64 dim) {
  const CountDivisor mean = count_divisor(acc.count > 0 ? acc.count : 1);  // dead code but in mean mode
#pragma unroll
  for (int c = 0; c < CHUNKS; ++c) {
    const i64 col = col0 + (i64)(c * ROW_LANES + row_lane) * VEC;
    if (col >= dim) continue;
    Vec y;
#pragma unroll
    for (int e = 0; e < VEC; ++e) y.v[e] = from_float(ONE_ROW ? acc.v[c][e] : acc_finish(acc, acc.v[c][e], mean));
    store_pack<weight_t, VEC>(out + out_row + col, y);
#if WRITE_ARGMAX
#pragma unroll
    for (int e = 0; e < VEC; ++e) argmax[out_row + col + e] = acc.arg[c][e];
#endif
  }
}

__device__ __forceinline__ void store_result(const Acc& acc, i64 col0, int row_lane, weight_t* __restrict__ out,
                                             i64* __restrict__ argmax, i64 out_row, i64 dim) {
  // A mean of one pooled row is that row: no division, where a team is a whole warp (teams of a
  // half warp diverge on the branch and lost more than it saves: docs/perf/change-51.md)
  if (TEAM == 32 && MODE == 1 && acc.count == 1) {
    store_values<true>(acc, col0, row_lane, out, argmax, out_row, dim);
  } else {
    store_values<false>(acc, col0, row_lane, out, argmax, out_row, dim);
  }
}

#if !defined(BAGS_PER_STEP) && !defined(SEGMENT_BAGS)
#ifndef POS32  // 1: positions, bag numbers and table rows fit 31 bits (the launcher checks)
#define POS32 0
#endif
// POS32 keeps the loop's positions, bags and rows in 32-bit registers (addresses stay 64-bit):
// 6-11 registers fewer per variant (nvcc -Xptxas -v) let the d128 and d192 float32 picks run 4
// blocks per SM without a spill (change 43).
#if POS32
typedef int pos_t;
#else
typedef i64 pos_t;
#endif
// (not where it spills the occupancy the launcher picked: several vectors per lane, or
// teams striding over bags, whose extra registers the padding test then overflows)
#define LEAN_ROWS (POS32 && MODE != 2 && CHUNKS == 1 && !PERSISTENT)

// CHECK: the kernel checks what it reads as index_check.cu's pass does, and reads what the
// pass's copy would hold: an index outside [0, rows) is read as row 0 and a bag's offsets are
// clamped into [0, num_indices] (a bag with end < start pools nothing). Each team checks its
// bag's offsets (the last bag also the entry past it, with include_last_offset), and each
// index batch it loads; bag 0's team also checks the indices before offsets[0], the last
// bag's those after the last offset, so that every position is checked once, as by the pass.
// A bag's bad offsets are recorded at once (record_finding, by the team's first lane); bad
// indices are counted in the record as they are found (an atomic add per batch with one), and
// the team's smallest bad position is kept in shared memory (no register in the row loop) and
// recorded once, when the team's work is done. The host runs no pass: no allocation and no
// launch.
struct Checker {
#if CHECK
  i64 rows, num_bags;
  i64 *lock, *record;
  int* flag;
  i64 token, op;
  u32 mask;
#endif
};

#if CHECK
static_assert(POS32, "the lookup checks its indices with 32-bit positions only");
#define NONE_FOUND 0x7fffffff
// Each team's smallest bad position (shared memory, no register in the row loop)
__shared__ int team_first[BLOCK / TEAM];
__shared__ int team_first_bag[BLOCK / TEAM];  // and bag (bags < 2^31 with POS32)

// A team's batch (every lane of the team calls it): the bad lanes' count to the record, and the
// first bad lane's position (the batch's smallest) to the team's slot.
__device__ __forceinline__ void note_batch(Checker& ck, pos_t at, bool bad) {
  const u32 bad_lanes = __ballot_sync(ck.mask, bad);
  if (bad_lanes == 0) return;
  if (__ffs(bad_lanes) - 1 == (int)(threadIdx.x & 31)) {  // the team's first bad lane: its smallest position
    add_count(ck.record, R_COUNT, __popc(bad_lanes));
    atomicMin(&team_first[threadIdx.x / TEAM], at);
  }
}

// Positions [from, to) that no bag reads (before the first offset, after the last): checked only.
__device__ __forceinline__ void check_unread(Checker& ck, const INDEX_T* __restrict__ indices, i64 from, i64 to,
                                             int team_lane) {
  for (i64 base = from; base < to; base += TEAM) {
    const i64 at = base + team_lane;
    const i64 v = at < to ? (i64)indices[at] : 0;
    note_batch(ck, (pos_t)at, at < to && (u64)v >= (u64)ck.rows);
  }
}

// The team's smallest bad position, recorded by its first lane.
__device__ __forceinline__ void record_team(const Checker& ck, int team_lane, const INDEX_T* __restrict__ indices,
                                            i64 num_indices) {
  __syncwarp(ck.mask);
  const int first = team_first[threadIdx.x / TEAM], bag = team_first_bag[threadIdx.x / TEAM];
  if (team_lane == 0 && (first != NONE_FOUND || bag != NONE_FOUND))
    record_finding(ck.lock, ck.record, ck.flag, ck.token, ck.op, num_indices, 0, first != NONE_FOUND ? first : -1,
                   first != NONE_FOUND ? (i64)indices[first] : 0, -1, ck.rows, 0, bag != NONE_FOUND ? bag : -1);
}
#endif

// Where bag ``bag``'s indices lie: [start, end).
__device__ __forceinline__ void bag_bounds(i64 bag, const INDEX_T* __restrict__ offsets, i64 num_offsets,
                                           i64 num_indices, i64 bag_size, pos_t& start, pos_t& end,
                                           Checker& ck, const INDEX_T* __restrict__ indices, int team_lane) {
  if (offsets != 0) {
#if CHECK
    const i64 lo = (i64)offsets[bag];
    const i64 hi = bag + 1 < num_offsets ? (i64)offsets[bag + 1] : num_indices;
    start = (pos_t)(lo < 0 ? 0 : lo > num_indices ? num_indices : lo);
    end = (pos_t)(hi < 0 ? 0 : hi > num_indices ? num_indices : hi);
    const bool past_entry = bag + 1 == ck.num_bags && num_offsets > ck.num_bags;  // include_last_offset
    const bool bad_bag = lo < 0 || lo > hi || hi > num_indices || (bag == 0 && lo != 0);  // as the pass
    const bool bad_past = past_entry && (hi < 0 || hi > num_indices);  // the pass checks that entry as a bag
    if ((bad_bag || bad_past) && team_lane == 0) {
      add_count(ck.record, R_BAG_COUNT, bad_bag + bad_past);
      atomicMin(&team_first_bag[threadIdx.x / TEAM], (int)bag + (bad_bag ? 0 : 1));
    }
    if (bag == 0 && start > 0) check_unread(ck, indices, 0, start, team_lane);
    if (past_entry && end < num_indices) check_unread(ck, indices, end, num_indices, team_lane);
#else
    start = offsets[bag];
    end = bag + 1 < num_offsets ? (i64)offsets[bag + 1] : num_indices;
#endif
  } else {
    start = bag * bag_size;
    end = start + bag_size;
  }
}

#if LEAN_ROWS
// LEAN_TAIL (the launcher's, forward_defines): a batch whose last rows fill half a step or less
// issues half a step (8x1Mx32 float32 bags of 20 in 8-row steps: 20 row slots instead of 24).
#ifndef LEAN_TAIL
#define LEAN_TAIL 0
#endif
// K rows of the team's batch from step m (lean rows, one vector per lane): every load issued
// first, then every add (zero_tile rows add zeros).
template <int K>
__device__ __forceinline__ void lean_step(Acc& acc, int m, u32 mask, pos_t my_index, float my_weight, int group,
                                          const char* lane_row0, int lane_row_bytes, const char* lane_zero,
                                          pos_t pad) {
  Vec x[K];
  float w[K];
#pragma unroll
  for (int u = 0; u < K; ++u) {
    const int j = (m + u) * ROWS_AT_ONCE + group;
    const pos_t r = __shfl_sync(mask, my_index, j, TEAM);
    const bool real = r >= 0 && r != pad;
    if (HAS_PSW) {  // every lane shuffles (a shuffle some lanes skip is undefined), then selects
      const float wj = __shfl_sync(mask, my_weight, j, TEAM);
      w[u] = real ? wj : 0.0f;
    } else {
      w[u] = 1.0f;
    }
    const char* src = row_address(lane_row0, (int)r, lane_row_bytes, real, lane_zero);
    x[u] = load_pack<weight_t, VEC>(reinterpret_cast<const weight_t*>(src));
  }
#pragma unroll
  for (int u = 0; u < K; ++u) acc_add(acc, 0, x[u], w[u], 0);
}
#endif

#ifndef ONE_TILE  // 1: the launcher's call has one column tile (col_tiles == 1)
#define ONE_TILE 0
#endif

// The bag of a unit of work (a bag and a column tile): with one column tile, the unit (an
// integer division is a dozen instructions or more, per bag; known at compile time, it costs no
// register either).
__device__ __forceinline__ pos_t unit_bag(pos_t work, int col_tiles) { return ONE_TILE ? work : work / col_tiles; }

// The offsets' bag of the launch's bag (TABLE_COLS: its table's number among the offsets' tables).
__device__ __forceinline__ i64 offsets_bag(pos_t bag, const i64* __restrict__ table_rows, i64 bags_per_table) {
#if TABLE_COLS
  const pos_t t = bag / (pos_t)bags_per_table;
  return offsets_table(t, table_rows) * bags_per_table + (i64)(bag - t * (pos_t)bags_per_table);
#else
  return bag;
#endif
}

// The team's batch of indices (and per-sample weights) from ``base``: one per lane, -1 past ``end``.
__device__ __forceinline__ void load_batch(pos_t base, pos_t end, int team_lane, const INDEX_T* __restrict__ indices,
                                           const weight_t* __restrict__ per_sample_weights, pos_t& index,
                                           float& weight, Checker& ck) {
  const pos_t at = base + team_lane;
#if CHECK
  const i64 v = at < end ? (i64)indices[at] : 0;
  const bool bad = at < end && (u64)v >= (u64)ck.rows;  // a negative index too
  note_batch(ck, at, bad);
  index = at < end ? (bad ? 0 : (pos_t)v) : -1;
#else
  index = at < end ? (pos_t)indices[at] : -1;
#endif
#if HAS_PSW
  weight = at < end ? to_float(per_sample_weights[at]) : 0.0f;  // 0: a zero_tile row adds nothing
#endif
}

// A team pools a unit of work (a bag and a column tile). With PERSISTENT, teams stride over the
// units (the launcher sizes the grid to the resident teams) and a team loads the next bag's
// bounds and first batch of indices while this bag's rows are in flight, so that the offsets ->
// indices chain no longer stands between two bags. The loop's extra registers spill the 3-4
// blocks-per-SM variants of short bags, which therefore keep one unit per team.
extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) embedding_bag_forward(
    const weight_t* __restrict__ weight, i64 dim,
    const INDEX_T* __restrict__ indices, i64 num_indices,
    const INDEX_T* __restrict__ offsets, i64 num_offsets,  // offsets == 0: fixed layout
    i64 bag_size,                                           // fixed layout: L
    i64 num_bags, int col_tiles,
    const weight_t* __restrict__ per_sample_weights, i64 padding_idx,  // -1: none
    const i64* __restrict__ table_rows, i64 bags_per_table, i64 out_row_stride,
    weight_t* __restrict__ out, i64* __restrict__ argmax,
    i64* check_lock, i64* check_record, int* check_flag, i64 check_token, i64 check_op, i64 check_rows) {
  wait_for_previous_kernel();
  const int lane = threadIdx.x & 31;
  const int team_lane = lane & (TEAM - 1);
  const int group = team_lane / ROW_LANES;      // which of the R rows this lane reads
  const int row_lane = team_lane % ROW_LANES;   // position inside the row
  const u32 mask = team_mask<TEAM>(lane);
#if CHECK
  Checker ck{check_rows, num_bags, check_lock, check_record, check_flag, check_token, check_op, mask};
  if (team_lane == 0) team_first[threadIdx.x / TEAM] = team_first_bag[threadIdx.x / TEAM] = NONE_FOUND;
  __syncwarp(mask);
#else
  Checker ck{};
#endif
  const i64 units = num_bags * col_tiles;
  const i64 teams = (i64)gridDim.x * (BLOCK / TEAM);

  pos_t work = ((pos_t)blockIdx.x * BLOCK + threadIdx.x) / TEAM;
  if (work >= units) return;     // whole teams leave together
#if LEAN_ROWS
  const int row_bytes = (int)dim * (int)sizeof(weight_t);  // POS32: dim * 32 * bags < 2^31
  const pos_t pad = (pos_t)padding_idx;                     // -1, or a row below 2^31
#endif
  pos_t start, end;
  bag_bounds(offsets_bag(unit_bag(work, col_tiles), table_rows, bags_per_table), offsets, num_offsets, num_indices,
             bag_size, start, end, ck, indices, team_lane);
  pos_t next_index;
  float next_weight = 1.0f;
  load_batch(start, end, team_lane, indices, per_sample_weights, next_index, next_weight, ck);
  for (;;) {
    const pos_t bag = unit_bag(work, col_tiles);
    const pos_t col0 = ONE_TILE ? 0 : (work % col_tiles) * (pos_t)TILE_COLS;
    // table-batched: the bag's table by a 32-bit division where positions are 32-bit (a 64-bit
    // division is a long subroutine per bag); one table: none
    const pos_t row_base = table_rows != 0 ? (pos_t)table_first_row(bag / (pos_t)bags_per_table, table_rows) : 0;
    const pos_t next_work = work + (pos_t)teams;
    pos_t next_start = 0, next_end = 0;  // past the last unit: an empty bag, nothing loaded
    if (PERSISTENT && next_work < units)
      bag_bounds(offsets_bag(unit_bag(next_work, col_tiles), table_rows, bags_per_table), offsets, num_offsets,
                 num_indices, bag_size, next_start, next_end, ck, indices, team_lane);

#if LEAN_ROWS
    // this lane's first element of the table's row 0 in the column tile, and of zero_tile (bytes)
    const char* lane_row0 = reinterpret_cast<const char*>(weight + (i64)row_base * dim + col0 + row_lane * VEC);
    const char* lane_zero = reinterpret_cast<const char*>(zero_tile + row_lane * VEC);
    bool col_ok[CHUNKS];
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) col_ok[c] = col0 + (c * ROW_LANES + row_lane) * VEC < dim;
    // one vector per lane: a lane past the row's end reads zero_tile for every row, untested
    const int lane_row_bytes = CHUNKS == 1 && !col_ok[0] ? 0 : row_bytes;
    if (CHUNKS == 1 && !col_ok[0]) lane_row0 = lane_zero;
#endif
    Acc acc;
    acc_init(acc);
    for (pos_t base = start; base < end; base += TEAM) {
      const pos_t left = end - base;
      const int n = left < TEAM ? (int)left : TEAM;
      const pos_t my_index = next_index;
      const float my_weight = next_weight;
      if (MODE != 0) {  // rows that count: per batch (a lane's own index, or one ballot), not per row
#if LANE_COUNT
        acc.count += my_index >= 0 && my_index != padding_idx;  // -1 past the bag's end
#else
        const bool pooled = team_lane < n && my_index >= 0 && my_index != padding_idx;
        acc.count += __popc(__ballot_sync(mask, pooled));
#endif
      }
      // prefetch the team's next batch: this bag's, or after its last the next bag's first
      if (base + TEAM < end)
        load_batch(base + TEAM, end, team_lane, indices, per_sample_weights, next_index, next_weight, ck);
      else if (PERSISTENT)
        load_batch(next_start, next_end, team_lane, indices, per_sample_weights, next_index, next_weight, ck);
#if LEAN_ROWS
      constexpr int HALF = UNROLL_EFF > 1 ? UNROLL_EFF / 2 : 1;
#pragma unroll
      for (int m = 0; m < ROW_LANES; m += UNROLL_EFF) {
        if (m * ROWS_AT_ONCE >= n) break;  // same decision for the whole team
        if (LEAN_TAIL && UNROLL_EFF > 1 && n - m * ROWS_AT_ONCE <= HALF * ROWS_AT_ONCE) {  // the batch's last rows
          lean_step<HALF>(acc, m, mask, my_index, my_weight, group, lane_row0, lane_row_bytes, lane_zero, pad);
          break;
        }
        lean_step<UNROLL_EFF>(acc, m, mask, my_index, my_weight, group, lane_row0, lane_row_bytes, lane_zero, pad);
      }
#else
#pragma unroll
      for (int m = 0; m < ROW_LANES; m += UNROLL_EFF) {
        if (m * ROWS_AT_ONCE >= n) break;  // same decision for the whole team
        Vec x[UNROLL_EFF][CHUNKS];
        pos_t row[UNROLL_EFF];  // only read for argmax; dead code otherwise
        float w[UNROLL_EFF];
        u32 valid = 0;        // bit u: row u is a real (non-padding) row
#pragma unroll
        for (int u = 0; u < UNROLL_EFF; ++u) {  // issue every load first ...
          const int j = (m + u) * ROWS_AT_ONCE + group;
          const pos_t r = __shfl_sync(mask, my_index, j, TEAM);
          w[u] = HAS_PSW ? __shfl_sync(mask, my_weight, j, TEAM) : 1.0f;
          row[u] = r + row_base;
          if (r < 0 || r == padding_idx) continue;
          valid |= 1u << u;
          load_row(x[u], weight, row[u], dim, col0, row_lane);
        }
#pragma unroll
        for (int u = 0; u < UNROLL_EFF; ++u) {  // ... then consume them
          if (!(valid & (1u << u))) continue;
          add_row(acc, x[u], w[u], row[u], dim, col0, row_lane);
        }
      }
#endif
    }
    if (PERSISTENT && start >= end)  // an empty bag ran no batch: the next bag's first is still to load
      load_batch(next_start, next_end, team_lane, indices, per_sample_weights, next_index, next_weight, ck);

    acc_team_reduce(acc, mask);
#if LANE_COUNT
    if (MODE != 0) {
#pragma unroll
      for (int off = 1; off < TEAM; off <<= 1) acc.count += __shfl_xor_sync(mask, acc.count, off, TEAM);
    }
#endif
    if (group == 0) {  // the output row's 64-bit offset made here: nothing 64-bit stays live across the rows
      // one table: the bag is the output row (bags_per_table = num_bags); several: one division
      const pos_t table = table_rows != 0 ? bag / (pos_t)bags_per_table : 0;
      const i64 out_row = (i64)(bag - table * (pos_t)bags_per_table) * out_row_stride +
                          table_column(table, dim, table_rows);
      store_result(acc, col0, row_lane, out, argmax, out_row, dim);
    }
    work = next_work;
    if (!PERSISTENT || work >= units) {
#if CHECK
      record_team(ck, team_lane, indices, num_indices);
#endif
      return;
    }
    start = next_start;
    end = next_end;
  }
}

#elif defined(BAGS_PER_STEP)  // the short-bag kernel below instead

// Short bags of one fixed size (the [B, L] layout, L = BAG_LEN, one table). The kernel above
// gives a lane at most L rows in flight, and a 1-row bag one: too few bytes in flight to
// cover DRAM latency (the sweep's L 1 cases ran far below its gathers' share of copy).
// Here a team of ROW_LANES lanes (one row wide, TEAM = ROW_LANES) pools BAGS_PER_STEP
// consecutive bags per step: their BAGS_PER_STEP * L indices are contiguous, so the team
// reads them coalesced, issues every row's loads, then reduces bag by bag. Teams stride
// over the steps (a grid of a few blocks per SM instead of one team per bag).
#define STEP_ROWS (BAGS_PER_STEP * BAG_LEN)
#define STEP_INDEX_LOADS ((STEP_ROWS + ROW_LANES - 1) / ROW_LANES)
static_assert(TEAM == ROW_LANES, "short bags: one row group per team");
static_assert(STEP_ROWS <= 32, "valid-row bits live in one 32-bit word");

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) embedding_bag_forward_short(
    const weight_t* __restrict__ weight, i64 dim,
    const INDEX_T* __restrict__ indices, i64 num_bags, int col_tiles,
    const weight_t* __restrict__ per_sample_weights, i64 padding_idx,
    weight_t* __restrict__ out, i64* __restrict__ argmax) {
  wait_for_previous_kernel();
  const int lane = threadIdx.x & 31;
  const int row_lane = lane & (ROW_LANES - 1);
  const u32 mask = team_mask<ROW_LANES>(lane);
  const i64 team = ((i64)blockIdx.x * BLOCK + threadIdx.x) / ROW_LANES;
  const i64 teams = (i64)gridDim.x * BLOCK / ROW_LANES;
  const i64 num_indices = num_bags * BAG_LEN;
  const i64 steps = (num_bags + BAGS_PER_STEP - 1) / BAGS_PER_STEP * col_tiles;

  for (i64 step = team; step < steps; step += teams) {  // same trip count for the whole team
    const i64 bag0 = (step / col_tiles) * BAGS_PER_STEP;
    const i64 col0 = (step % col_tiles) * (i64)TILE_COLS;
    const i64 pos0 = bag0 * BAG_LEN;
    i64 my_index[STEP_INDEX_LOADS];
    float my_weight[STEP_INDEX_LOADS];
#pragma unroll
    for (int q = 0; q < STEP_INDEX_LOADS; ++q) {  // the step's indices, one per lane per load
      const i64 p = pos0 + q * ROW_LANES + row_lane;
      const bool in = q * ROW_LANES + row_lane < STEP_ROWS && p < num_indices;
      my_index[q] = in ? (i64)indices[p] : -1;
      my_weight[q] = HAS_PSW && in ? to_float(per_sample_weights[p]) : 1.0f;
    }
    Vec x[STEP_ROWS][CHUNKS];
    i64 row[STEP_ROWS];  // only read for argmax; dead code otherwise
    float w[STEP_ROWS];
    u32 valid = 0;       // bit k: position k of the step is a real (non-padding) row
#pragma unroll
    for (int k = 0; k < STEP_ROWS; ++k) {  // issue every load first ...
      row[k] = __shfl_sync(mask, my_index[k / ROW_LANES], k % ROW_LANES, ROW_LANES);
      w[k] = HAS_PSW ? __shfl_sync(mask, my_weight[k / ROW_LANES], k % ROW_LANES, ROW_LANES) : 1.0f;
      if (row[k] < 0 || row[k] == padding_idx) continue;
      valid |= 1u << k;
      load_row(x[k], weight, row[k], dim, col0, row_lane);
    }
#pragma unroll
    for (int b = 0; b < BAGS_PER_STEP; ++b) {  // ... then pool them bag by bag
      if (bag0 + b >= num_bags) break;
      Acc acc;
      acc_init(acc);
#pragma unroll
      for (int l = 0; l < BAG_LEN; ++l) {
        const int k = b * BAG_LEN + l;
        if (!(valid & (1u << k))) continue;
        acc.count += 1;
        add_row(acc, x[k], w[k], row[k], dim, col0, row_lane);
      }
      store_result(acc, col0, row_lane, out, argmax, (bag0 + b) * dim, dim);
    }
  }
}

#else  // SEGMENT_BAGS: the segmented kernel below instead

// Short bags of varying size (CSR offsets; table-batched lookups). The general kernel gives a
// lane at most L rows in flight and pays the offsets -> indices -> rows chain once per bag:
// a table-batched DLRM launch, where 12 of 26 tables hold 1-row bags, spends most of its time
// on those chains. Here a team of ROW_LANES lanes (one row wide) walks a SEGMENT of
// consecutive bags of one table as one stream of positions: it reads the segment's offsets
// (one per lane), then its indices ROW_LANES at a time, coalesced, issues UNROLL rows' loads
// whatever bags they belong to, then adds them in order, storing a bag's result when the walk
// passes its end. Teams stride over the units of work (a segment and a column tile).
// Segment size per table: SEGMENT_ROWS / (the table's average bag length), 2 to SEGMENT_BAGS
// bags, and a single bag when that average exceeds SEGMENT_MAX_AVG: long bags walked together
// leave a few teams with long tails (one segment size for every table made bfloat16 DCNv2 slower
// than the general kernel, run 29). The host passes the size when it knows it (one table:
// fixed_bags); otherwise (fixed_bags == 0) each team works it out from the tables' offsets, at
// most max_bags (the host's cap, so that the launch still has enough teams).
// Positions are 32-bit (the launcher keeps this kernel to fewer than 2^31 indices).
static_assert(TEAM == ROW_LANES, "segments: one row group per team");
// (sum only, and not with 16-bit per-sample weights: there the lane pointers spill the
// 3-blocks-per-SM variants, as mean's count does)
#define LEAN_SEGMENT_ROWS (MODE == 0 && !(HAS_PSW && WEIGHT_DTYPE != 0))
static_assert(SEGMENT_BAGS >= 2 && SEGMENT_BAGS < ROW_LANES, "a segment's offsets: one per lane");
// SEGMENT_BAGS: the most bags a segment may hold (fixed_bags and max_bags never exceed it)

__device__ __forceinline__ i64 offset_at(const INDEX_T* __restrict__ offsets, i64 num_offsets, i64 num_indices,
                                         i64 bag) {
  return bag < num_offsets ? (i64)offsets[bag] : num_indices;
}

// Bags per segment for a table whose bags hold ``rows`` rows in all.
__device__ __forceinline__ int table_segment_bags(i64 rows, i64 bags_per_table, int max_bags) {
  const i64 avg = rows / bags_per_table;
  if (avg > SEGMENT_MAX_AVG) return 1;
  const i64 bags = SEGMENT_ROWS / (avg > 0 ? avg : 1);
  return bags < 2 ? 2 : bags > max_bags ? max_bags : (int)bags;
}

// Where the units of work of tables chunk .. chunk + ROW_LANES - 1 lie: lane l describes table
// chunk + l (its bags per segment, its first unit and the unit after its last); lanes past
// the last table describe empty tables.
struct TableChunk {
  i64 first;  // first table of the chunk
  i64 unit_begin, unit_end;
  int bags;
};

__device__ __forceinline__ void describe_tables(TableChunk& c, i64 units_before, i64 tables, i64 bags_per_table,
                                                int col_tiles, int fixed_bags, int max_bags,
                                                const INDEX_T* __restrict__ offsets,
                                                i64 num_offsets, i64 num_indices, const i64* __restrict__ table_rows,
                                                int row_lane, u32 mask) {
  const i64 t = c.first + row_lane;
  i64 units = 0;
  c.bags = 1;
  if (t < tables) {
    c.bags = fixed_bags;
    if (c.bags == 0) {
      const i64 g = offsets_table(t, table_rows);
      const i64 rows = offset_at(offsets, num_offsets, num_indices, (g + 1) * bags_per_table) -
                       offset_at(offsets, num_offsets, num_indices, g * bags_per_table);
      c.bags = table_segment_bags(rows, bags_per_table, max_bags);
    }
    units = (bags_per_table + c.bags - 1) / c.bags * col_tiles;
  }
  i64 inclusive = units;  // scan over the team's lanes
#pragma unroll
  for (int d = 1; d < ROW_LANES; d <<= 1) {
    const i64 other = __shfl_up_sync(mask, inclusive, d, ROW_LANES);
    if (row_lane >= d) inclusive += other;
  }
  c.unit_begin = units_before + inclusive - units;
  c.unit_end = units_before + inclusive;
}

// The walk reaching position ``pos`` leaves every bag that ends at or before it (empty ones
// too): each is stored and the accumulator starts afresh; ``bag_end`` becomes the next bag's end
// (lane k of the team holds where bag k of the segment starts, ``my_offset``).
__device__ __forceinline__ void leave_bags(int pos, int& bag, int& bag_end, Acc& acc, i64 col0, int row_lane,
                                           weight_t* __restrict__ out, i64* __restrict__ argmax, i64 out_row0,
                                           i64 out_row_stride, i64 dim, u32 mask, int my_offset) {
  while (pos >= bag_end) {
    store_result(acc, col0, row_lane, out, argmax, out_row0 + bag * out_row_stride, dim);
    acc_init(acc);
    ++bag;
    bag_end = __shfl_sync(mask, my_offset, bag + 1, ROW_LANES);
  }
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) embedding_bag_forward_segmented(
    const weight_t* __restrict__ weight, i64 dim,
    const INDEX_T* __restrict__ indices, i64 num_indices,
    const INDEX_T* __restrict__ offsets, i64 num_offsets, i64 num_bags, int col_tiles, int fixed_bags, int max_bags,
    const weight_t* __restrict__ per_sample_weights, i64 padding_idx,
    const i64* __restrict__ table_rows, i64 bags_per_table, i64 out_row_stride,
    weight_t* __restrict__ out, i64* __restrict__ argmax) {
  wait_for_previous_kernel();
  const int lane = threadIdx.x & 31;
  const int row_lane = lane & (ROW_LANES - 1);
  const u32 mask = team_mask<ROW_LANES>(lane);
  const int team_shift = lane & ~(ROW_LANES - 1);
  const i64 teams = (i64)gridDim.x * BLOCK / ROW_LANES;
  const i64 tables = num_bags / bags_per_table;
  TableChunk chunk;
  chunk.first = 0;
  describe_tables(chunk, 0, tables, bags_per_table, col_tiles, fixed_bags, max_bags, offsets, num_offsets,
                  num_indices, table_rows, row_lane, mask);

  // units of work only grow along a team's walk, so the chunk of tables only moves forward
  for (i64 work = ((i64)blockIdx.x * BLOCK + threadIdx.x) / ROW_LANES;; work += teams) {
    u32 hit = ((__ballot_sync(mask, work < chunk.unit_end) & mask) >> team_shift);
    while (hit == 0) {  // past this chunk of tables: describe the next, or stop after the last
      const i64 units_before = __shfl_sync(mask, chunk.unit_end, ROW_LANES - 1, ROW_LANES);
      chunk.first += ROW_LANES;
      if (chunk.first >= tables) return;  // whole teams leave together
      describe_tables(chunk, units_before, tables, bags_per_table, col_tiles, fixed_bags, max_bags, offsets,
                      num_offsets, num_indices, table_rows, row_lane, mask);
      hit = ((__ballot_sync(mask, work < chunk.unit_end) & mask) >> team_shift);
    }
    const int k = __ffs(hit) - 1;  // the lane describing this unit's table
    const i64 table = chunk.first + k;
    const int table_bags = __shfl_sync(mask, chunk.bags, k, ROW_LANES);
    const i64 unit = work - __shfl_sync(mask, chunk.unit_begin, k, ROW_LANES);
    const i64 col0 = (unit % col_tiles) * (i64)TILE_COLS;
    const i64 first = (unit / col_tiles) * table_bags;  // bag within the table
    const int bags = (int)min((i64)table_bags, bags_per_table - first);
    const i64 bag0 = offsets_table(table, table_rows) * bags_per_table + first;  // in the offsets
    const i64 row_base = table_rows != 0 ? table_first_row(table, table_rows) : 0;
    const i64 out_row0 = first * out_row_stride + table_column(table, dim, table_rows);
#if LEAN_SEGMENT_ROWS
    const char* lane_zero = reinterpret_cast<const char*>(zero_tile + row_lane * VEC);
    const char* lane_row0 = reinterpret_cast<const char*>(weight + row_base * dim + col0 + row_lane * VEC);
    bool col_ok[CHUNKS];
#pragma unroll
    for (int c = 0; c < CHUNKS; ++c) col_ok[c] = col0 + (c * ROW_LANES + row_lane) * VEC < dim;
    const INDEX_T lane_row_bytes = CHUNKS == 1 && !col_ok[0] ? 0 : (INDEX_T)(dim * (i64)sizeof(weight_t));
    if (CHUNKS == 1 && !col_ok[0]) lane_row0 = lane_zero;
#endif
    // lane k <= bags: where bag bag0 + k starts (k == bags: where the segment ends)
    const int my_offset = row_lane <= bags ? (int)offset_at(offsets, num_offsets, num_indices, bag0 + row_lane) : 0;
    const int begin = __shfl_sync(mask, my_offset, 0, ROW_LANES);
    const int end = __shfl_sync(mask, my_offset, bags, ROW_LANES);
    int bag = 0;  // the bag being pooled, within the segment
    int bag_end = __shfl_sync(mask, my_offset, 1, ROW_LANES);
    Acc acc;
    acc_init(acc);
    INDEX_T next_index = begin + row_lane < end ? indices[begin + row_lane] : (INDEX_T)-1;
    float next_weight = 1.0f;
#if HAS_PSW
    if (begin + row_lane < end) next_weight = to_float(per_sample_weights[begin + row_lane]);
#endif
    for (int base = begin; base < end; base += ROW_LANES) {
      const INDEX_T my_index = next_index;
      const float my_weight = next_weight;
      const int ahead = base + ROW_LANES + row_lane;  // prefetch the team's next batch
      next_index = ahead < end ? indices[ahead] : (INDEX_T)-1;
#if HAS_PSW
      if (ahead < end) next_weight = to_float(per_sample_weights[ahead]);
#endif
#pragma unroll 1  // one copy of the walk: unrolled, mean and 16-bit variants ran slower
      for (int m = 0; m < ROW_LANES; m += UNROLL_EFF) {
        if (base + m >= end) break;  // same decision for the whole team
        Vec x[UNROLL_EFF][CHUNKS];
        u32 valid = 0;  // bit u: row u is a real row (lean: also the weight of a zero_tile row)
#if LEAN_SEGMENT_ROWS
#pragma unroll
        for (int u = 0; u < UNROLL_EFF; ++u) {  // issue every load first (past the segment: zero_tile)
          const INDEX_T r = __shfl_sync(mask, my_index, m + u, ROW_LANES);  // -1 past the segment
          const bool real = r >= 0 && r != padding_idx;
          valid |= (u32)real << u;
          const char* src = row_address(lane_row0, r, lane_row_bytes, real, lane_zero);
#pragma unroll
          for (int c = 0; c < CHUNKS; ++c)
            if (CHUNKS == 1 || col_ok[c])
              x[u][c] = load_pack<weight_t, VEC>(reinterpret_cast<const weight_t*>(src) + c * ROW_LANES * VEC);
        }
#else
        i64 row[UNROLL_EFF];  // only read for argmax; dead code otherwise
#pragma unroll
        for (int u = 0; u < UNROLL_EFF; ++u) {  // issue every load first ...
          const INDEX_T r = __shfl_sync(mask, my_index, m + u, ROW_LANES);  // -1 past the segment
          row[u] = r + row_base;
          if (r < 0 || r == padding_idx) continue;
          valid |= 1u << u;
          load_row(x[u], weight, row[u], dim, col0, row_lane);
        }
#endif
#pragma unroll
        for (int u = 0; u < UNROLL_EFF; ++u) {  // ... then pool them in order, bag by bag
          const int pos = base + m + u;
          if (pos >= end) break;
          leave_bags(pos, bag, bag_end, acc, col0, row_lane, out, argmax, out_row0, out_row_stride, dim, mask,
                     my_offset);
          // the row's weight is fetched here, not with its load: no register per row in flight
          // (16-bit per-sample-weight variants then fit 3 blocks per SM without spilling)
          const float w = HAS_PSW ? __shfl_sync(mask, my_weight, m + u, ROW_LANES) : 1.0f;
#if LEAN_SEGMENT_ROWS
          const bool real = (valid >> u) & 1u;
          if (MODE == 1) acc.count += (int)real;
#pragma unroll
          for (int c = 0; c < CHUNKS; ++c)
            if (CHUNKS == 1 || col_ok[c]) acc_add(acc, c, x[u][c], real ? w : 0.0f, 0);
#else
          if (!(valid & (1u << u))) continue;
          acc.count += 1;
          add_row(acc, x[u], w, row[u], dim, col0, row_lane);
#endif
        }
      }
    }
    for (; bag < bags; ++bag) {  // the last bag pooled, then any empty ones after it
      store_result(acc, col0, row_lane, out, argmax, out_row0 + bag * out_row_stride, dim);
      acc_init(acc);
    }
  }
}
#endif  // BAGS_PER_STEP / SEGMENT_BAGS
