from setuptools import setup
from torch.utils.cpp_extension import CUDAExtension

setup(ext_modules=[CUDAExtension('ops', ['kernels/emb.cu', 'kernels/secret.cu'])])
