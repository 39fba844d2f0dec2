import cupy as cp
add = cp.ElementwiseKernel("float32 x", "float32 y", "y = x + 1", "add")
