// Validation pass run before the lookup kernels, so that their hot loops need
// no bounds checks (see docs/kernels.md for how to skip it).
//
// status[0]: smallest position p with indices[p] outside [0, num_embeddings).
// status[1]: smallest bag b whose offsets are out of order or outside
//            [0, num_indices] (offsets[b] > offsets[b + 1], or out of range).
// Both start at INT64_MAX (set by the host); a value below that is an error,
// reported by the host as a Python exception. Grid-stride over both arrays.
#include "common.cuh"

#ifndef INDEX_T
#define INDEX_T i64
#endif

__device__ __forceinline__ void record_min(i64* slot, i64 value) {
  atomicMin(reinterpret_cast<u64*>(slot), (u64)value);
}

extern "C" __global__ void index_check(const INDEX_T* __restrict__ indices, i64 num_indices,
                                       i64 num_embeddings,
                                       const INDEX_T* __restrict__ offsets, i64 num_offsets,
                                       i64* __restrict__ status) {
  const i64 stride = (i64)gridDim.x * blockDim.x;
  const i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  i64 bad_index = status[0];  // INT64_MAX, or a position already found
  for (i64 p = tid; p < num_indices && p < bad_index; p += stride) {
    const i64 v = (i64)indices[p];
    if (v < 0 || v >= num_embeddings) bad_index = p;
  }
  if (bad_index < num_indices) record_min(status, bad_index);

  for (i64 b = tid; b < num_offsets; b += stride) {
    const i64 lo = (i64)offsets[b];
    const i64 hi = b + 1 < num_offsets ? (i64)offsets[b + 1] : num_indices;
    if (lo < 0 || lo > hi || hi > num_indices) record_min(status + 1, b);
  }
}
