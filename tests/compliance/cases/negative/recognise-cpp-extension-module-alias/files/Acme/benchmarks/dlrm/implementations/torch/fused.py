import torch.utils.cpp_extension as ce
m = ce.load(name="k", sources=["k.cu.txt"])
