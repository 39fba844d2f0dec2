// DLRM embedding-bag forward kernels (sum and mean), float32 weights, int64 indices.
//
// One warp per bag; each lane accumulates a strided slice of the embedding
// dimension in float32, so a row is read with coalesced loads. Indices must be
// in range: the Python wrapper checks them once before the launch, so the hot
// loop carries no bounds check. Empty bags (CSR) produce zeros, as
// torch.nn.functional.embedding_bag does for sum and mean.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

namespace {

constexpr int kWarp = 32;
constexpr int kBagsPerBlock = 8;

__device__ __forceinline__ void pool_bag(const float* __restrict__ weight, const int64_t* __restrict__ indices,
                                         int64_t begin, int64_t end, int64_t dim, bool mean,
                                         float* __restrict__ out_row) {
  const int lane = threadIdx.x % kWarp;
  const float scale = (mean && end > begin) ? 1.0f / static_cast<float>(end - begin) : 1.0f;
  for (int64_t d = lane; d < dim; d += kWarp) {
    float acc = 0.0f;
    for (int64_t i = begin; i < end; ++i) {
      acc += __ldg(weight + indices[i] * dim + d);  // 64-bit row offset
    }
    out_row[d] = acc * scale;
  }
}

// Fixed pooling: indices is a dense [num_bags, pooling] matrix.
__global__ void embedding_bag_fixed_kernel(const float* __restrict__ weight, const int64_t* __restrict__ indices,
                                           int64_t num_bags, int64_t pooling, int64_t dim, bool mean,
                                           float* __restrict__ out) {
  const int64_t bag = static_cast<int64_t>(blockIdx.x) * kBagsPerBlock + threadIdx.x / kWarp;
  if (bag >= num_bags) return;
  pool_bag(weight, indices, bag * pooling, (bag + 1) * pooling, dim, mean, out + bag * dim);
}

// CSR pooling: bag b holds indices[offsets[b] : offsets[b + 1]] (the last bag ends at
// num_indices unless include_last_offset supplied it).
__global__ void embedding_bag_csr_kernel(const float* __restrict__ weight, const int64_t* __restrict__ indices,
                                         const int64_t* __restrict__ offsets, int64_t num_bags,
                                         int64_t num_indices, int64_t dim, bool mean, float* __restrict__ out) {
  const int64_t bag = static_cast<int64_t>(blockIdx.x) * kBagsPerBlock + threadIdx.x / kWarp;
  if (bag >= num_bags) return;
  const int64_t begin = offsets[bag];
  const int64_t end = (bag + 1 < num_bags) ? offsets[bag + 1] : num_indices;
  pool_bag(weight, indices, begin, end, dim, mean, out + bag * dim);
}

void check_inputs(const torch::Tensor& weight, const torch::Tensor& indices) {
  TORCH_CHECK(weight.is_cuda() && indices.is_cuda(), "embedding_bag: CUDA tensors required");
  TORCH_CHECK(weight.scalar_type() == torch::kFloat32, "embedding_bag: weight must be float32");
  TORCH_CHECK(indices.scalar_type() == torch::kInt64, "embedding_bag: indices must be int64");
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous(), "embedding_bag: weight must be a contiguous 2-D table");
}

unsigned int blocks_for(int64_t num_bags) {
  return static_cast<unsigned int>((num_bags + kBagsPerBlock - 1) / kBagsPerBlock);
}

}  // namespace

// mode: 0 = sum, 1 = mean.
torch::Tensor embedding_bag_fixed_forward(torch::Tensor weight, torch::Tensor indices, int64_t mode) {
  check_inputs(weight, indices);
  TORCH_CHECK(indices.dim() == 2, "embedding_bag_fixed_forward: indices must be [num_bags, pooling]");
  TORCH_CHECK(mode == 0 || mode == 1, "embedding_bag_fixed_forward: mode must be 0 (sum) or 1 (mean)");
  auto idx = indices.contiguous();
  const int64_t num_bags = idx.size(0), pooling = idx.size(1), dim = weight.size(1);
  auto out = torch::empty({num_bags, dim}, weight.options());
  if (num_bags == 0) return out;
  embedding_bag_fixed_kernel<<<blocks_for(num_bags), kWarp * kBagsPerBlock, 0,
                               at::cuda::getCurrentCUDAStream()>>>(
      weight.data_ptr<float>(), idx.data_ptr<int64_t>(), num_bags, pooling, dim, mode == 1,
      out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

torch::Tensor embedding_bag_csr_forward(torch::Tensor weight, torch::Tensor indices, torch::Tensor offsets,
                                        int64_t mode, bool include_last_offset) {
  check_inputs(weight, indices);
  TORCH_CHECK(offsets.is_cuda() && offsets.scalar_type() == torch::kInt64, "embedding_bag_csr_forward: offsets must be CUDA int64");
  TORCH_CHECK(mode == 0 || mode == 1, "embedding_bag_csr_forward: mode must be 0 (sum) or 1 (mean)");
  auto idx = indices.contiguous();
  auto offs = offsets.contiguous();
  const int64_t num_bags = include_last_offset ? offs.size(0) - 1 : offs.size(0);
  TORCH_CHECK(num_bags >= 0, "embedding_bag_csr_forward: include_last_offset needs at least one offset");
  const int64_t dim = weight.size(1);
  auto out = torch::empty({num_bags, dim}, weight.options());
  if (num_bags == 0) return out;
  embedding_bag_csr_kernel<<<blocks_for(num_bags), kWarp * kBagsPerBlock, 0,
                             at::cuda::getCurrentCUDAStream()>>>(
      weight.data_ptr<float>(), idx.data_ptr<int64_t>(), offs.data_ptr<int64_t>(), num_bags,
      idx.size(0), dim, mode == 1, out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
