// Shared helpers for the reference embedding kernels.
//
// Self-contained on purpose: no CUDA headers are included, so NVRTC compiles
// each kernel in a fraction of a second and nvcc compiles the same text.
// Half and bfloat16 values travel as raw 16-bit words and are converted with
// one PTX instruction each (cvt.rn.bf16.f32 needs sm_80 or newer).
#pragma once

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

// Programmatic dependent launch (sm_90 and newer). The host launches every kernel of this package
// with programmatic stream serialization (launch.py, host_path.cpp): the driver may then start a
// kernel's grid before the previous kernel in the stream has finished, and this wait, the first
// statement of every kernel, holds each thread until that kernel has completed and its memory is
// visible. What overlaps is the launch itself (change 61 measured how much); no
// kernel triggers its dependents early, so nothing of one kernel runs beside another. A no-op where
// the launch did not ask for it, and compiled out below sm_90.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// WEIGHT_DTYPE: 0 = float32, 1 = float16, 2 = bfloat16.
#ifndef WEIGHT_DTYPE
#define WEIGHT_DTYPE 0
#endif

#if WEIGHT_DTYPE == 0
typedef float weight_t;
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float from_float(float x) { return x; }
#elif WEIGHT_DTYPE == 1
typedef u16 weight_t;
__device__ __forceinline__ float to_float(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ u16 from_float(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
#elif WEIGHT_DTYPE == 2
typedef u16 weight_t;
__device__ __forceinline__ float to_float(u16 b) { return __uint_as_float(((u32)b) << 16); }
__device__ __forceinline__ u16 from_float(float f) {
  u16 b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
}
#else
#error "WEIGHT_DTYPE must be 0 (float32), 1 (float16) or 2 (bfloat16)"
#endif

// N consecutive elements moved as one load or store of N * sizeof(T) bytes.
// The caller guarantees that the address is aligned to that size.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <int BYTES> struct RawWord;
template <> struct RawWord<16> { typedef uint4 type; };
template <> struct RawWord<8> { typedef uint2 type; };
template <> struct RawWord<4> { typedef u32 type; };
template <> struct RawWord<2> { typedef u16 type; };

// Read-only (non-coherent) vector load: the table is never written by the kernel.
template <typename T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  typedef typename RawWord<sizeof(T) * N>::type Raw;
  Raw raw = __ldg(reinterpret_cast<const Raw*>(p));
  return *reinterpret_cast<Pack<T, N>*>(&raw);
}

template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& pack) {
  *reinterpret_cast<Pack<T, N>*>(p) = pack;
}

// Streaming store (st.global.cs): the lines are evicted first, soon after they are written.
template <typename T, int N>
__device__ __forceinline__ void store_pack_streaming(T* p, const Pack<T, N>& pack) {
  typedef typename RawWord<sizeof(T) * N>::type Raw;
  __stcs(reinterpret_cast<Raw*>(p), *reinterpret_cast<const Raw*>(&pack));
}

// All N elements of a pack as floats. 16-bit types are converted two per 32-bit
// word (bfloat16: a shift and a mask; float16: split the word, two cvt), which
// keeps the packed registers packed instead of extracting every half first.
template <int N>
__device__ __forceinline__ void to_floats(const Pack<weight_t, N>& x, float (&f)[N]) {
#if WEIGHT_DTYPE == 0
#pragma unroll
  for (int e = 0; e < N; ++e) f[e] = x.v[e];
#else
  if (N % 2 != 0) {
#pragma unroll
    for (int e = 0; e < N; ++e) f[e] = to_float(x.v[e]);
    return;
  }
  const u32* words = reinterpret_cast<const u32*>(x.v);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
#if WEIGHT_DTYPE == 2
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
#else
    asm("{.reg .f16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.f32.f16 %0, lo;\n\tcvt.f32.f16 %1, hi;}"
        : "=f"(f[2 * i]), "=f"(f[2 * i + 1]) : "r"(words[i]));
#endif
  }
#endif
}

// Lanes [base, base + width) of the calling warp, as a shuffle mask.
template <int WIDTH>
__device__ __forceinline__ u32 team_mask(int lane) {
  const u32 ones = WIDTH == 32 ? 0xffffffffu : (1u << (WIDTH & 31)) - 1u;
  return ones << (lane & ~(WIDTH - 1));
}

// Mean's division by a bag's row count, correctly rounded (as torch's division) and cheaper
// than the division operator: the reciprocal is rounded once per bag, then each value takes a
// product and one correction from the exact remainder (fma). Markstein's theorem makes the
// corrected quotient the correctly rounded one while nothing underflows; an infinite or NaN
// value keeps the first product (its remainder is NaN, clamped to a finite one). Against v / count in every element:
// 78 registers instead of 85 in the segmented kernel's bag stores (change 37).
struct CountDivisor {
  float count;
  float inverse;  // count's reciprocal, correctly rounded
};

__device__ __forceinline__ CountDivisor count_divisor(int count) {  // count > 0
  const float c = (float)count;
  return CountDivisor{c, __frcp_rn(c)};
}

__device__ __forceinline__ float divide(float v, const CountDivisor& d) {
  const float q = v * d.inverse;
  const float rem = fmaf(-q, d.count, v);
  // a NaN remainder (v infinite or NaN) becomes the largest float, whose correction leaves q as it
  // is: one fminf instead of a finiteness test and a select (docs/perf/change-52.md)
  return fmaf(fminf(rem, 3.402823466e38f), d.inverse, q);
}
