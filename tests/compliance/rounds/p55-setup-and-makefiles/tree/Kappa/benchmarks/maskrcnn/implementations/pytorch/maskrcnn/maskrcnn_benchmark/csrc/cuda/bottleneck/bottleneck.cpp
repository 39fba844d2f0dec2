#include <torch/extension.h>
at::Tensor bottleneck_forward(const at::Tensor& x, const at::Tensor& w) { return at::conv2d(x, w).relu_(); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &bottleneck_forward, "fused bottleneck"); }
