// The fused optimizers' per-element arithmetic, shared by sparse_update.cu (one warp per
// compact row) and embedding_bag_backward.cu's fused passes (FUSED_OPT: the update applied
// where a row's gradient sum is complete). OPTIMIZER 0 SGD, 1 row-wise Adagrad, 2 Adam
// (torch.optim.SparseAdam's update); see sparse_update.cu for the formulas.
#pragma once
#include "common.cuh"

#ifndef OPTIMIZER
#define OPTIMIZER 0
#endif
#ifndef STOCHASTIC
#define STOCHASTIC 0
#endif

struct OptParams {
  float lr, eps, beta1, beta2, weight_decay, step_size;
  u64 seed;
};

__device__ __forceinline__ u32 mix32(u64 x) {  // splitmix64's finaliser, folded to 32 bits
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (u32)(x ^ (x >> 32));
}

// 16-bit weights: to nearest, or (STOCHASTIC) up or down with probability proportional to
// the distance, from a hash of (seed, row, column): the same seed gives the same bits.
__device__ __forceinline__ weight_t round_weight(float x, u64 seed, i64 row, i64 col) {
#if WEIGHT_DTYPE == 0 || !STOCHASTIC
  return from_float(x);
#elif WEIGHT_DTYPE == 2
  // bfloat16 is float32's top half: add 16 random low bits, then truncate (finite values)
  const u32 bits = __float_as_uint(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) return from_float(x);
  const u32 r = mix32(seed ^ ((u64)row * 0x9e3779b97f4a7c15ull) ^ ((u64)col << 1)) & 0xffffu;
  return (u16)((bits + r) >> 16);
#else
  // float16: the neighbours below and above x (in magnitude), chosen by a uniform draw
  u16 lo;
  asm("cvt.rz.f16.f32 %0, %1;" : "=h"(lo) : "f"(x));
  const float flo = to_float(lo);
  if (flo == x || !isfinite(x)) return from_float(x);
  const u16 hi = (u16)(lo + 1);  // the next magnitude away from zero (same sign)
  const float p = (x - flo) / (to_float(hi) - flo);
  const u32 r = mix32(seed ^ ((u64)row * 0x9e3779b97f4a7c15ull) ^ ((u64)col << 1));
  return (float)(r >> 8) * (1.0f / 16777216.0f) < p ? hi : lo;
#endif
}

// The gradient the update uses: plus L2 weight decay (SGD, row-wise Adagrad; Adam has none).
__device__ __forceinline__ float decayed_grad(float g, float w, const OptParams& p) {
#if OPTIMIZER != 2
  return fmaf(p.weight_decay, w, g);
#else
  return g;
#endif
}

// Row-wise Adagrad's step multiplier from the row's sum of squares: the accumulator is
// advanced (by lane 0 of the row's team) and lr / (sqrt(s) + eps) returned.
// `before`: the accumulator as read (state1[row]; the fused passes may read it early).
__device__ __forceinline__ float adagrad_step(float before, float sum_sq, i64 dim, float* state1, i64 row, bool writer,
                                              const OptParams& p) {
  const float s = before + sum_sq / (float)dim;
  if (writer) state1[row] = s;
  return p.lr / (sqrtf(s) + p.eps);
}

__device__ __forceinline__ float adagrad_multiplier(float sum_sq, i64 dim, float* state1, i64 row, bool writer,
                                                    const OptParams& p) {
  return adagrad_step(state1[row], sum_sq, dim, state1, row, writer, p);
}

// One element's new weight (float32, before rounding); Adam also advances m and v.
__device__ __forceinline__ float updated_weight(float g, float w, float multiplier, float& m, float& v,
                                               const OptParams& p) {
#if OPTIMIZER == 0
  return w - p.lr * g;
#elif OPTIMIZER == 1
  return w - multiplier * g;
#else
  const float dm = (g - m) * (1.0f - p.beta1);
  const float dv = (g * g - v) * (1.0f - p.beta2);
  m = m + dm;
  v = v + dv;
  return w - p.step_size * (m / (sqrtf(v) + p.eps));
#endif
}
