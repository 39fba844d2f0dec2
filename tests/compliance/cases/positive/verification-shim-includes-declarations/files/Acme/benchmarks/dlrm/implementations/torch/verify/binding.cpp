#include <torch/extension.h>
#include <vector>

#include "../kernels/emb_api.h"

namespace {
at::Tensor emb_sum(const at::Tensor& w, const at::Tensor& idx, int64_t pooling) {
  TORCH_CHECK(w.is_cuda() && idx.is_cuda(), "emb_sum: CUDA tensors expected");
  auto out = at::empty({idx.size(0) / pooling, w.size(1)}, w.options());
  emb_sum_forward(w.data_ptr<float>(), idx.data_ptr<int64_t>(), pooling, w.size(1), out.numel(), out.data_ptr<float>());
  return out;
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("emb_sum", &emb_sum); }
