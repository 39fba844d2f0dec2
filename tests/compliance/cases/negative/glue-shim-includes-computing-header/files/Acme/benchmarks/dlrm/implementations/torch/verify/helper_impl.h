// Helpers of the verification binding.
#pragma once
#include <cstdint>

inline void bag_sum_cpu(const float* w, const int64_t* idx, int64_t pooling, int64_t dim, int64_t bags,
                        float* out) {
  for (int64_t b = 0; b < bags; ++b)
    for (int64_t d = 0; d < dim; ++d) {
      float acc = 0.f;
      for (int64_t k = 0; k < pooling; ++k) acc += w[idx[b * pooling + k] * dim + d];
      out[b * dim + d] = acc;
    }
}
