// The launcher of kernels/emb.cu, as the binding sees it.
#pragma once
#include <cstdint>
#include "emb_types.h"

void emb_sum_launch(const float* w, const int64_t* idx, int64_t pooling, int64_t dim, int64_t n, float* out);

inline void emb_sum_forward(const float* w, const int64_t* idx, int64_t pooling, int64_t dim, int64_t n,
                            float* out) {
  emb_sum_launch(w, idx, pooling, dim, n, out);
}
