// Table-batched lookup over quantized tables (reference_kernels/quantized.py has the row formats):
// one launch for every table, each table in its own format and width.
//
// A table's rows are read in 16-byte chunks: a team of `tw` lanes covers one row (lane i holds chunk
// i, so a row of 9 chunks takes 9 lanes and a warp holds 3 teams); a row wider than 32 chunks is
// walked in tiles of 32. A lane keeps the elements of its chunk in float32 accumulators, in the
// order the chunk holds them, so no lane ever moves bytes into place: the qparams at the row's start
// (int8/int4: fp16 scale and bias; fp8_rowwise: a float32 scale) are broadcast from the team's
// first lane by one shuffle. `tpb` teams share one bag (rows j, j + tpb, ...; summed at the end in
// a fixed order, so the result is deterministic), and a warp holds `bpw` bags.
//
// Each element is dequantized to float32 exactly as the format defines it with one rounding
// (fma(s, q, b); s * e4m3(q) as one product; s * q as one product), then accumulated in float32;
// the per-sample weight multiplies inside the accumulating fma. Bytes become floats through the
// float32 bit pattern 2^23 + byte (a byte permute and a subtraction; integer-to-float conversions
// run at a quarter of the rate).
//
// Compile-time: TABLE_FORMAT the tables' format (quantized.py's FORMAT_CODE; a module of several formats
// launches once per format, each launch writing its tables' columns); POOLING 0 sum, 1 mean, 2 none (each position's row on its own output row);
// OUT_DTYPE 0 float32, 1 float16, 2 int8 (rint(x * inverse scale), saturated); PSW per-sample
// weights (float32); INDEX64 indices and offsets int64, else int32; ROWS_IN_FLIGHT rows a team
// loads before it uses them; PIPELINE 1: a team loads its next batch of rows before it sums the
// current one; LANE_BYTES 16: a lane holds a 16-byte chunk of the row, 4: a 4-byte word of the
// row's codes (the byte-coded formats only; lookup_words).
#include "common.cuh"

#ifndef POOLING
#define POOLING 0
#endif
#ifndef OUT_DTYPE
#define OUT_DTYPE 0
#endif
#ifndef PSW
#define PSW 0
#endif
#ifndef INDEX64
#define INDEX64 1
#endif
#ifndef TABLE_FORMAT
#define TABLE_FORMAT 2
#endif
#ifndef PIPELINE
#define PIPELINE 0
#endif
#ifndef ROWS_IN_FLIGHT
#define ROWS_IN_FLIGHT 4
#endif
#ifndef LANE_BYTES
#define LANE_BYTES 16
#endif
#if LANE_BYTES == 4 && (TABLE_FORMAT == 0 || TABLE_FORMAT == 1)
#error "LANE_BYTES 4 is for the byte-coded formats (int8, int4, fp8, int8 table-wise)"
#endif
#define BLOCK 256
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1
#endif
#define META 8  // int64 words of metadata per table (quantized_tbe.py's table_metadata)

#if INDEX64
typedef long long index_t;
#else
typedef int index_t;
#endif

#if OUT_DTYPE == 0
typedef float out_t;
#elif OUT_DTYPE == 1
typedef u16 out_t;
#else
typedef signed char out_t;
#endif

enum { FMT_FP32 = 0, FMT_FP16, FMT_INT8, FMT_INT4, FMT_FP8_ROW, FMT_FP8_TABLE, FMT_INT8_TABLE };

template <int FMT> struct Format;
// SLOTS: elements a 16-byte chunk holds; FIRST(c): element index of chunk c's first slot (negative
// for the header's slots); HEADER: the row starts with qparams.
template <> struct Format<FMT_FP32> { enum { SLOTS = 4, HEADER = 0 }; static __device__ int first(int c) { return 4 * c; } };
template <> struct Format<FMT_FP16> { enum { SLOTS = 8, HEADER = 0 }; static __device__ int first(int c) { return 8 * c; } };
template <> struct Format<FMT_INT8> { enum { SLOTS = 16, HEADER = 1 }; static __device__ int first(int c) { return 16 * c - 4; } };
template <> struct Format<FMT_INT4> { enum { SLOTS = 32, HEADER = 1 }; static __device__ int first(int c) { return 32 * c - 8; } };
template <> struct Format<FMT_FP8_ROW> { enum { SLOTS = 16, HEADER = 1 }; static __device__ int first(int c) { return 16 * c - 4; } };
template <> struct Format<FMT_FP8_TABLE> { enum { SLOTS = 16, HEADER = 0 }; static __device__ int first(int c) { return 16 * c; } };
template <> struct Format<FMT_INT8_TABLE> { enum { SLOTS = 16, HEADER = 0 }; static __device__ int first(int c) { return 16 * c; } };

__device__ __forceinline__ float half_to_float(u32 h) {
  float f;
  asm("{.reg .f16 t;\n\tmov.b16 t, %1;\n\tcvt.f32.f16 %0, t;}" : "=f"(f) : "h"((u16)h));
  return f;
}

__device__ __forceinline__ u16 float_to_half(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

// byte k of w as the float32 2^23 + byte
__device__ __forceinline__ float magic_byte(u32 w, int k) {
  return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | k));
}
#define MAGIC 8388608.0f

// e4m3 code k of w as a float32 of value e4m3 * 2^-120 (its sign, exponent and mantissa bits moved
// into place; subnormals included)
__device__ __forceinline__ float fp8_bits(u32 w, int k) {
  const u32 t = __byte_perm(w, 0u, 0x0444u | (k << 12));
  return __uint_as_float((t & 0x80000000u) | ((t >> 4) & 0x07F00000u));
}
#define TWO_POW_120 1.329227995784916e36f

// The qparams of a row (from its first 4 bytes): (a, b) such that element q decodes as fma(a, q', b),
// q' the slot's magic-decoded value.
struct Qparams {
  float a, b;
};

template <int FMT>
__device__ __forceinline__ Qparams qparams(u32 header, float table_scale) {
  if (FMT == FMT_INT8 || FMT == FMT_INT4) return Qparams{half_to_float(header & 0xffffu), half_to_float(header >> 16)};
  if (FMT == FMT_FP8_ROW) return Qparams{__uint_as_float(header) * TWO_POW_120, 0.f};
  if (FMT == FMT_FP8_TABLE) return Qparams{table_scale * TWO_POW_120, 0.f};
  return Qparams{table_scale, 0.f};
}

// acc[N * i + slot] += weight * value(slot) for the 4-byte word w holding a row's elements (N of
// them: 1 fp32, 2 fp16, 4 int8/fp8, 8 int4); I is the word's place among the lane's words.
template <int FMT, int I, int S>
__device__ __forceinline__ void accumulate_word(float (&acc)[S], u32 w, Qparams qp, float weight) {
  if (FMT == FMT_FP32) {
    acc[I] = PSW ? fmaf(weight, __uint_as_float(w), acc[I]) : acc[I] + __uint_as_float(w);
  } else if (FMT == FMT_FP16) {
    const float lo = half_to_float(w & 0xffffu), hi = half_to_float(w >> 16);
    acc[2 * I] = PSW ? fmaf(weight, lo, acc[2 * I]) : acc[2 * I] + lo;
    acc[2 * I + 1] = PSW ? fmaf(weight, hi, acc[2 * I + 1]) : acc[2 * I + 1] + hi;
  } else if (FMT == FMT_INT8) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float x = fmaf(qp.a, magic_byte(w, k) - MAGIC, qp.b);
      acc[4 * I + k] = PSW ? fmaf(weight, x, acc[4 * I + k]) : acc[4 * I + k] + x;
    }
  } else if (FMT == FMT_INT4) {
    const float a16 = qp.a * 0.0625f;  // the high nibble decodes as 16 * q
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const u32 t = __byte_perm(w, 0x4B000000u, 0x7540u | k);
      const float lo = fmaf(qp.a, __uint_as_float(t & 0xFFFFFF0Fu) - MAGIC, qp.b);
      const float hi = fmaf(a16, __uint_as_float(t & 0xFFFFFFF0u) - MAGIC, qp.b);
      acc[8 * I + 2 * k] = PSW ? fmaf(weight, lo, acc[8 * I + 2 * k]) : acc[8 * I + 2 * k] + lo;
      acc[8 * I + 2 * k + 1] = PSW ? fmaf(weight, hi, acc[8 * I + 2 * k + 1]) : acc[8 * I + 2 * k + 1] + hi;
    }
  } else if (FMT == FMT_INT8_TABLE) {
    const u32 u = w ^ 0x80808080u;  // two's complement -> offset binary: the magic decodes q + 128
    const float a = PSW ? weight * qp.a : qp.a;
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[4 * I + k] = fmaf(a, magic_byte(u, k) - (MAGIC + 128.f), acc[4 * I + k]);
  } else {  // fp8: one product of the scale (times 2^120) and the code's bits
    const float a = PSW ? weight * qp.a : qp.a;
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[4 * I + k] = fmaf(a, fp8_bits(w, k), acc[4 * I + k]);
  }
}

// acc[slot] += weight * value(slot) for the 16 bytes v of one row's chunk.
template <int FMT>
__device__ __forceinline__ void accumulate(float (&acc)[Format<FMT>::SLOTS], const uint4& v, Qparams qp, float weight) {
  accumulate_word<FMT, 0>(acc, v.x, qp, weight);
  accumulate_word<FMT, 1>(acc, v.y, qp, weight);
  accumulate_word<FMT, 2>(acc, v.z, qp, weight);
  accumulate_word<FMT, 3>(acc, v.w, qp, weight);
}

__device__ __forceinline__ out_t convert_out(float v, float inverse_scale) {
#if OUT_DTYPE == 0
  return v;
#elif OUT_DTYPE == 1
  return float_to_half(v);
#else
  const int q = __float2int_rn(v * inverse_scale);
  return (out_t)(q < -128 ? -128 : (q > 127 ? 127 : q));
#endif
}

// Four consecutive output elements in one store (every width is a multiple of 4 and every chunk's
// first element too, so a group of four is wholly inside a row or outside it).
__device__ __forceinline__ void store4(out_t* p, float a, float b, float c, float d, float inverse_scale) {
#if OUT_DTYPE == 0
  *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
#elif OUT_DTYPE == 1
  const u32 lo = (u32)float_to_half(a) | ((u32)float_to_half(b) << 16);
  const u32 hi = (u32)float_to_half(c) | ((u32)float_to_half(d) << 16);
  *reinterpret_cast<uint2*>(p) = make_uint2(lo, hi);
#else
  const u32 w = (u32)(unsigned char)convert_out(a, inverse_scale) | ((u32)(unsigned char)convert_out(b, inverse_scale) << 8) |
                ((u32)(unsigned char)convert_out(c, inverse_scale) << 16) |
                ((u32)(unsigned char)convert_out(d, inverse_scale) << 24);
  *reinterpret_cast<u32*>(p) = w;
#endif
}

template <int FMT>
__device__ __forceinline__ void store_slots(out_t* row, const float (&acc)[Format<FMT>::SLOTS], int chunk, int dim,
                                            float inverse_scale) {
  const int first = Format<FMT>::first(chunk);
#pragma unroll
  for (int g = 0; g < Format<FMT>::SLOTS / 4; ++g) {
    const int e = first + 4 * g;
    if (e >= 0 && e < dim) store4(row + e, acc[4 * g], acc[4 * g + 1], acc[4 * g + 2], acc[4 * g + 3], inverse_scale);
  }
}

struct Table {
  long long byte_base, row_bytes, out_col;
  int dim, tw, tpb, bpw, chunks;  // chunks: a row's units (16-byte chunks, or 4-byte words of its codes)
  float scale, inverse_scale;
};

__device__ __forceinline__ u32 lanes_mask(int first, int count) {
  const u32 ones = count >= 32 ? 0xffffffffu : (1u << count) - 1u;
  return ones << first;
}

// A team's batch of rows: what each of its lanes loaded from ROWS_IN_FLIGHT rows.
template <typename T>
struct Batch {
  T v[ROWS_IN_FLIGHT];
  u32 header[ROWS_IN_FLIGHT];
  float weight[ROWS_IN_FLIGHT];
};

// A team's walk over its rows of a bag (positions first, first + tpb, ...), a batch at a time.
template <typename T, typename Load, typename Use>
__device__ __forceinline__ void walk(int first, int end, int step, Load load, Use use) {
#if PIPELINE
  // the next batch's rows are loaded before this batch is summed: a team always has rows in flight
  Batch<T> next;
  load(first, next);
  for (int p = first; p < end; p += step) {
    const Batch<T> cur = next;
    load(p + step, next);
    use(p, cur);
  }
#else
  // (measured: loading the next rows' indices while the current rows are in flight made the
  // 4x4M d128 int8 case slower, 94.7 -> 116.5 us; docs/perf/issue54-quantized.md)
  for (int p = first; p < end; p += step) {
    Batch<T> batch;
    load(p, batch);
    use(p, batch);
  }
#endif
}

// The bag's teams combined in team order (fixed: deterministic); team 0 holds the sum, divides it
// for the mean, and stores it.
template <int S, typename Store>
__device__ __forceinline__ void finish_bag(float (&acc)[S], const Table& tb, int j, int count, u32 bag_mask,
                                           bool has_unit, Store store) {
  for (int t = 1; t < tb.tpb; ++t) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const float other = __shfl_down_sync(bag_mask, acc[s], t * tb.tw);
      if (j == 0) acc[s] += other;
    }
  }
  if (j == 0 && has_unit) {
    if (POOLING == 1 && count > 0) {
      const CountDivisor d = count_divisor(count);
#pragma unroll
      for (int s = 0; s < S; ++s) acc[s] = divide(acc[s], d);
    }
    store(acc);
  }
}

__device__ __forceinline__ const unsigned char* row_of(const unsigned char* table, const Table& tb, index_t index) {
  return table + (unsigned long long)(u32)index * (unsigned long long)tb.row_bytes;
}

// One bag (or, for POOLING 2, the rows of one bag) of one table, by the calling team: lane i of the
// team holds the row's 16-byte chunk i.
template <int FMT>
__device__ __forceinline__ void lookup(const unsigned char* __restrict__ data, const Table& tb, int start,
                                       int end, int j, int lane_in_team, u32 team_mask, int team_first_lane,
                                       const index_t* __restrict__ indices, const float* __restrict__ psw,
                                       out_t* __restrict__ out, long long out_row, long long out_stride,
                                       u32 bag_mask) {
  constexpr int S = Format<FMT>::SLOTS;
  const int tiles = (tb.chunks + tb.tw - 1) / tb.tw;
  const unsigned char* table = data + tb.byte_base;
  for (int tile = 0; tile < tiles; ++tile) {
    const int chunk = tile * tb.tw + lane_in_team;
    const bool has_chunk = chunk < tb.chunks;
    float acc[S];
#pragma unroll
    for (int s = 0; s < S; ++s) acc[s] = 0.f;
    auto load = [&](int p, Batch<uint4>& b) {
#pragma unroll
      for (int k = 0; k < ROWS_IN_FLIGHT; ++k) {
        const int pos = p + k * tb.tpb;
        b.v[k] = make_uint4(0u, 0u, 0u, 0u);
        b.header[k] = 0u;
        b.weight[k] = 1.f;
        if (pos < end) {
          const unsigned char* r = row_of(table, tb, indices[pos]);
          if (has_chunk) b.v[k] = __ldg(reinterpret_cast<const uint4*>(r) + chunk);
          if (Format<FMT>::HEADER && tiles > 1) b.header[k] = __ldg(reinterpret_cast<const u32*>(r));
          if (PSW) b.weight[k] = psw[pos];
        }
      }
    };
    auto use = [&](int p, const Batch<uint4>& b) {
#pragma unroll
      for (int k = 0; k < ROWS_IN_FLIGHT; ++k) {
        const int pos = p + k * tb.tpb;
        if (pos >= end) break;  // the same for every lane of the team
        u32 h = b.header[k];
        if (Format<FMT>::HEADER && tiles == 1) h = __shfl_sync(team_mask, b.v[k].x, team_first_lane);
        const Qparams qp = qparams<FMT>(h, tb.scale);
        if (POOLING == 2) {
          float row_acc[S];
#pragma unroll
          for (int s = 0; s < S; ++s) row_acc[s] = 0.f;
          accumulate<FMT>(row_acc, b.v[k], qp, b.weight[k]);
          if (has_chunk) store_slots<FMT>(out + (long long)pos * out_stride, row_acc, chunk, tb.dim, tb.inverse_scale);
        } else {
          accumulate<FMT>(acc, b.v[k], qp, b.weight[k]);
        }
      }
    };
    walk<uint4>(start + j, end, tb.tpb * ROWS_IN_FLIGHT, load, use);
    if (POOLING != 2)
      finish_bag(acc, tb, j, end - start, bag_mask, has_chunk, [&](const float (&sum)[S]) {
        store_slots<FMT>(out + out_row * out_stride + tb.out_col, sum, chunk, tb.dim, tb.inverse_scale);
      });
  }
}

// The 4-byte-lane layout (LANE_BYTES 4, byte-coded formats): lane i of a team holds word i of the
// row's codes (4 int8/fp8 elements, 8 int4), so a team of 32 lanes covers 128 bytes of codes, and
// every lane reads the row's 4-byte qparams itself (one broadcast load in the codes' first sector).
// A lane holds 4 (int4: 8) accumulators instead of a chunk's 16 (32): fewer registers, more warps,
// more rows in flight per SM.
template <int FMT>
struct Words {
  enum { ELEMS = FMT == FMT_INT4 ? 8 : 4, CODES = Format<FMT>::HEADER ? 4 : 0 };
};

template <int FMT>
__device__ __forceinline__ void store_word(out_t* row, const float (&acc)[Words<FMT>::ELEMS], int word, int dim,
                                           float inverse_scale) {
  const int first = word * Words<FMT>::ELEMS;
#pragma unroll
  for (int g = 0; g < Words<FMT>::ELEMS / 4; ++g) {
    const int e = first + 4 * g;
    if (e < dim) store4(row + e, acc[4 * g], acc[4 * g + 1], acc[4 * g + 2], acc[4 * g + 3], inverse_scale);
  }
}

// Registers are what this layout is for, so the table's fields are read from its metadata row `m`
// where they are used (L1-resident) instead of being held through the walk, and the output row's
// address is formed once.
template <int FMT>
__device__ __forceinline__ void lookup_words(const unsigned char* __restrict__ data, const long long* __restrict__ m,
                                             int tw, int tpb, int start, int end, int j, int lane_in_team,
                                             const index_t* __restrict__ indices, const float* __restrict__ psw,
                                             out_t* __restrict__ out, long long out_row, long long out_stride) {
  constexpr int S = Words<FMT>::ELEMS;
  const int words = (int)__ldg(m + 7);
  const unsigned char* table = data + __ldg(m + 1) + Words<FMT>::CODES;  // the first row's codes
  const u32 row_bytes = (u32)__ldg(m + 2);
  out_t* const out_bag = POOLING == 2 ? out : out + out_row * out_stride + __ldg(m + 5);
  for (int word = lane_in_team; word - lane_in_team < words; word += tw) {
    const bool has_word = word < words;
    float acc[S];
#pragma unroll
    for (int s = 0; s < S; ++s) acc[s] = 0.f;
    auto load = [&](int p, Batch<u32>& b) {
#pragma unroll
      for (int k = 0; k < ROWS_IN_FLIGHT; ++k) {
        const int pos = p + k * tpb;
        b.v[k] = 0u;
        b.header[k] = 0u;
        b.weight[k] = 1.f;
        if (pos < end) {
          const u32* r = reinterpret_cast<const u32*>(table + (unsigned long long)(u32)indices[pos] * row_bytes);
          if (has_word) b.v[k] = __ldg(r + word);
          if (Format<FMT>::HEADER) b.header[k] = __ldg(r - 1);  // the qparams before the codes
          if (PSW) b.weight[k] = psw[pos];
        }
      }
    };
    auto use = [&](int p, const Batch<u32>& b) {
      const float scale = __uint_as_float((u32)__ldg(m + 6));  // table-wise formats
#pragma unroll
      for (int k = 0; k < ROWS_IN_FLIGHT; ++k) {
        const int pos = p + k * tpb;
        if (pos >= end) break;  // the same for every lane of the team
        const Qparams qp = qparams<FMT>(b.header[k], scale);
        if (POOLING == 2) {
          float row_acc[S];
#pragma unroll
          for (int s = 0; s < S; ++s) row_acc[s] = 0.f;
          accumulate_word<FMT, 0>(row_acc, b.v[k], qp, b.weight[k]);
          if (has_word)
            store_word<FMT>(out + (long long)pos * out_stride, row_acc, word, (int)__ldg(m + 3),
                            __uint_as_float((u32)((unsigned long long)__ldg(m + 6) >> 32)));
        } else {
          accumulate_word<FMT, 0>(acc, b.v[k], qp, b.weight[k]);
        }
      }
    };
    walk<u32>(start + j, end, tpb * ROWS_IN_FLIGHT, load, use);
    if (POOLING != 2) {
      // the team's place in its bag, recomputed here rather than held through the walk
      Table tb;
      const long long packed = __ldg(m + 4);
      tb.tw = (int)((packed >> 8) & 0xff);
      tb.tpb = (int)((packed >> 16) & 0xff);
      const int team = (int)(threadIdx.x & 31) / tb.tw, j_now = team % tb.tpb;
      const u32 mask = lanes_mask((team - j_now) * tb.tw, tb.tpb * tb.tw);
      finish_bag(acc, tb, j_now, end - start, mask, has_word, [&](const float (&sum)[S]) {
        store_word<FMT>(out_bag, sum, word, (int)__ldg(m + 3),
                        __uint_as_float((u32)((unsigned long long)__ldg(m + 6) >> 32)));
      });
    }
  }
}

// meta: (tables + 1) x META int64 words; row t: first warp, byte base, row bytes, dim,
// tw << 8 | tpb << 16 | bpw << 24 | the table's number << 32, output column, scale bits | inverse-scale bits << 32, chunks;
// row `tables` holds the total warp count in word 0.
extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) quantized_tbe_forward(
    const unsigned char* __restrict__ data, const long long* __restrict__ meta, int tables, long long batch,
    const index_t* __restrict__ indices, const index_t* __restrict__ offsets, const float* __restrict__ psw,
    out_t* __restrict__ out, long long out_stride) {
  const long long warp = ((long long)blockIdx.x * BLOCK + threadIdx.x) / 32;
  if (warp >= __ldg(meta + (long long)tables * META)) return;
  int lo = 0, hi = tables - 1;  // the last table whose first warp is <= warp
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (__ldg(meta + (long long)mid * META) <= warp) lo = mid; else hi = mid - 1;
  }
  const long long* m = meta + (long long)lo * META;
  const long long packed = __ldg(m + 4), scales = __ldg(m + 6);
  Table tb;
  tb.byte_base = __ldg(m + 1);
  tb.row_bytes = __ldg(m + 2);
  tb.dim = (int)__ldg(m + 3);
  tb.out_col = __ldg(m + 5);
  tb.chunks = (int)__ldg(m + 7);
  const long long table = packed >> 32;  // the table's number in the module (its bags' place)
  tb.tw = (int)((packed >> 8) & 0xff);
  tb.tpb = (int)((packed >> 16) & 0xff);
  tb.bpw = (int)((packed >> 24) & 0xff);
  tb.scale = __uint_as_float((u32)(scales & 0xffffffffll));
  tb.inverse_scale = __uint_as_float((u32)((unsigned long long)scales >> 32));

  const int lane = threadIdx.x & 31;
  const int team = lane / tb.tw, lane_in_team = lane - team * tb.tw;
  const int slot = team / tb.tpb, j = team - slot * tb.tpb;
  if (slot >= tb.bpw) return;  // lanes past the warp's last whole bag of teams
  const long long bag_in_table = (warp - __ldg(m)) * tb.bpw + slot;
  if (bag_in_table >= batch) return;
  const long long bag = table * batch + bag_in_table;
  const int start = (int)offsets[bag], end = (int)offsets[bag + 1];  // positions < 2^31 (host-checked)
#if LANE_BYTES != 4
  const int team_first_lane = team * tb.tw, bag_first_lane = slot * tb.tpb * tb.tw;
  const u32 team_mask = lanes_mask(team_first_lane, tb.tw);
  const u32 bag_mask = lanes_mask(bag_first_lane, tb.tpb * tb.tw);
#endif
  const long long out_row = POOLING == 2 ? 0 : bag_in_table;
#if LANE_BYTES == 4
  lookup_words<TABLE_FORMAT>(data, m, tb.tw, tb.tpb, start, end, j, lane_in_team, indices, psw, out, out_row, out_stride);
#else
  lookup<TABLE_FORMAT>(data, tb, start, end, j, lane_in_team, team_mask, team_first_lane, indices, psw, out, out_row,
                       out_stride, bag_mask);
#endif
}
