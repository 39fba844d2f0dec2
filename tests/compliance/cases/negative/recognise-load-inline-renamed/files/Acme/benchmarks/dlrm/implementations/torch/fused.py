from torch.utils.cpp_extension import load_inline as li
m = li("k", cpp_sources="", cuda_sources=SRC)
