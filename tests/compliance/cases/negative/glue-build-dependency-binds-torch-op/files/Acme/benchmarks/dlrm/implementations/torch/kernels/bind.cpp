#include <torch/extension.h>

at::Tensor emb_sum(at::Tensor w, at::Tensor idx, at::Tensor offsets) {
  return std::get<0>(at::embedding_bag(w, idx, offsets, false, 0));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("emb_sum", &emb_sum); }
