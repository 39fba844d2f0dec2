// Python bindings of the DLRM embedding-bag kernels (built by setup.py).
#include <torch/extension.h>

torch::Tensor embedding_bag_fixed_forward(torch::Tensor weight, torch::Tensor indices, int64_t mode);
torch::Tensor embedding_bag_csr_forward(torch::Tensor weight, torch::Tensor indices, torch::Tensor offsets,
                                        int64_t mode, bool include_last_offset);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("embedding_bag_fixed_forward", &embedding_bag_fixed_forward,
        "Fixed-pooling embedding bag (mode 0 = sum, 1 = mean)");
  m.def("embedding_bag_csr_forward", &embedding_bag_csr_forward,
        "CSR embedding bag (mode 0 = sum, 1 = mean)");
}
