#include "kq.h"
// Fixed-pooling embedding bag, sum: one thread per output element (test fixture).
extern "C" __global__ void emb_sum(const float* w, const long long* idx, long long pooling,
                                   long long dim, long long n, float* out) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= n * dim) return;
  long long bag = i / dim, d = i % dim;
  float acc = 0.f;
  for (long long k = 0; k < pooling; ++k) acc += w[idx[bag * pooling + k] * dim + d];
  out[i] = acc;
}
KQ void leak(float* x) { x[0] = 0.f; }
