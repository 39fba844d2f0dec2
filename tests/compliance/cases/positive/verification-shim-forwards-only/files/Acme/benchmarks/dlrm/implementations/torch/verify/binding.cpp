#include <torch/extension.h>

void emb_sum_launch(const float* w, const int64_t* idx, int64_t pooling, int64_t dim, int64_t n, float* out);

namespace {
at::Tensor emb_sum(const at::Tensor& w, const at::Tensor& idx, int64_t pooling) {
  TORCH_CHECK(w.is_cuda() && idx.is_cuda(), "emb_sum: CUDA tensors expected");
  auto out = at::empty({idx.size(0) / pooling, w.size(1)}, w.options());
  emb_sum_launch(w.data_ptr<float>(), idx.data_ptr<int64_t>(), pooling, w.size(1), out.numel(), out.data_ptr<float>());
  return out;
}
}  // namespace

TORCH_LIBRARY(acme, m) { m.def("emb_sum(Tensor w, Tensor idx, int pooling) -> Tensor"); }
TORCH_LIBRARY_IMPL(acme, CUDA, m) { m.impl("emb_sum", &emb_sum); }
