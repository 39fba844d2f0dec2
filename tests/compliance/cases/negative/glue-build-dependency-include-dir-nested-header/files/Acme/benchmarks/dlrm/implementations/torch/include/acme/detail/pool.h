#pragma once
#include <immintrin.h>
#include <cstdint>

namespace acme {
inline void pool(const float* w, const int64_t* idx, int64_t pooling, int64_t dim, int64_t bags, float* out) {
  for (int64_t b = 0; b < bags; ++b)
    for (int64_t d = 0; d < dim; d += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t k = 0; k < pooling; ++k) acc = _mm256_add_ps(acc, _mm256_loadu_ps(w + idx[b * pooling + k] * dim + d));
      _mm256_storeu_ps(out + b * dim + d, acc);
    }
}
}  // namespace acme
