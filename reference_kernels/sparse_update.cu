// Fused optimizer step on the rows a batch looked up (the second half of the fused
// backward; the first half is embedding_bag_backward.cu with GRAD_F32 = 1, which sums
// each looked-up row's gradient, deterministically, into a compact float32 buffer).
//
// One warp per compact row k < *num_unique: its table row is unique_rows[k] (rows at or
// past `num_rows` are the sentinel of padding and out-of-bag positions: skipped), its
// summed gradient grad[k, :]. Each row is read and written once, with its optimizer
// state; no atomics, no row is touched by two warps, so the result is bit-reproducible.
//
//   OPTIMIZER 0, SGD:      g += wd * w;  w -= lr * g
//   OPTIMIZER 1, row-wise Adagrad (FBGEMM's): g += wd * w;  s[r] += mean(g * g over the row);
//                          w -= lr * g / (sqrt(s[r]) + eps)
//   OPTIMIZER 2, Adam with torch.optim.SparseAdam's lazy semantics (no weight decay):
//                          dm = (g - m) * (1 - b1);  m += dm;  dv = (g * g - v) * (1 - b2);
//                          v += dv;  w -= step_size * m / (sqrt(v) + eps)
//                          (step_size = lr * sqrt(1 - b2^t) / (1 - b1^t), from the host)
//
// 16-bit weights are updated in float32 and rounded once: to nearest, or stochastically
// (STOCHASTIC = 1: round up with probability equal to the distance from the value below,
// from a counter-based hash of (seed, row, column), so a given seed gives the same bits).
#include "optim_update.cuh"

#ifndef VEC  // elements per lane access (weight and state), a divisor of dim
#define VEC 4
#endif
#ifndef ITERS  // warp-wide column steps per row: ceil(dim / (32 * VEC))
#define ITERS 1
#endif
#ifndef ROW_T
#define ROW_T i64
#endif
#ifndef BLOCK
#define BLOCK 256
#endif

typedef Pack<weight_t, VEC> WVec;
#define FVEC (VEC < 4 ? VEC : 4)
typedef Pack<float, FVEC> FVecT;

__device__ __forceinline__ void load_floats(const float* p, float (&f)[VEC]) {
#pragma unroll
  for (int e0 = 0; e0 < VEC; e0 += FVEC) {
    const FVecT x = *reinterpret_cast<const FVecT*>(p + e0);
#pragma unroll
    for (int e = 0; e < FVEC; ++e) f[e0 + e] = x.v[e];
  }
}

__device__ __forceinline__ void store_floats(float* p, const float (&f)[VEC]) {
#pragma unroll
  for (int e0 = 0; e0 < VEC; e0 += FVEC) {
    FVecT x;
#pragma unroll
    for (int e = 0; e < FVEC; ++e) x.v[e] = f[e0 + e];
    *reinterpret_cast<FVecT*>(p + e0) = x;
  }
}

extern "C" __global__ void __launch_bounds__(BLOCK) sparse_update(
    const ROW_T* __restrict__ unique_rows, const int* __restrict__ num_unique, i64 num_rows,
    const float* __restrict__ grad, weight_t* __restrict__ weight, i64 dim,
    float* __restrict__ state1, float* __restrict__ state2,
    float lr, float eps, float beta1, float beta2, float weight_decay, float step_size, u64 seed) {
  wait_for_previous_kernel();
  const OptParams p = {lr, eps, beta1, beta2, weight_decay, step_size, seed};
  const int lane = threadIdx.x & 31;
  const i64 k = ((i64)blockIdx.x * BLOCK + threadIdx.x) >> 5;
  if (k >= (i64)num_unique[0]) return;
  const i64 row = (i64)unique_rows[k];
  if (row < 0 || row >= num_rows) return;  // padding / out-of-bag sentinel
  const float* g_row = grad + k * dim;
  weight_t* w_row = weight + row * dim;

  float g[ITERS][VEC];
  float w[ITERS][VEC];
  float sq = 0.0f;  // row-wise Adagrad: this lane's columns in order, then a fixed butterfly
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const i64 col = ((i64)it * 32 + lane) * VEC;
    if (col >= dim) continue;
    load_floats(g_row + col, g[it]);
    const WVec wv = *reinterpret_cast<const WVec*>(w_row + col);
    to_floats(wv, w[it]);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      g[it][e] = decayed_grad(g[it][e], w[it][e], p);
      sq = fmaf(g[it][e], g[it][e], sq);
    }
  }
  float multiplier = 0.0f;
#if OPTIMIZER == 1
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, off);
  multiplier = adagrad_multiplier(sq, dim, state1, row, lane == 0, p);
#endif

#pragma unroll
  for (int it = 0; it < ITERS; ++it) {
    const i64 col = ((i64)it * 32 + lane) * VEC;
    if (col >= dim) continue;
    float m[VEC], v[VEC];
#if OPTIMIZER == 2
    load_floats(state1 + row * dim + col, m);
    load_floats(state2 + row * dim + col, v);
#endif
    WVec out;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      out.v[e] = round_weight(updated_weight(g[it][e], w[it][e], multiplier, m[e], v[e], p), seed, row, col + e);
    *reinterpret_cast<WVec*>(w_row + col) = out;
#if OPTIMIZER == 2
    store_floats(state1 + row * dim + col, m);
    store_floats(state2 + row * dim + col, v);
#endif
  }
}
