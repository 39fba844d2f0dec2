#!/usr/bin/env python
# A 2020 maskrcnn setup.py: extensions from glob() patterns under maskrcnn_benchmark/csrc/.
import glob
import os

from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension


def get_extensions():
    this_dir = os.path.dirname(os.path.abspath(__file__))
    extensions_dir = os.path.join(this_dir, "maskrcnn_benchmark", "csrc")
    main_file = glob.glob(os.path.join(extensions_dir, "*.cpp"))
    source_cpu = glob.glob(os.path.join(extensions_dir, "cpu", "*.cpp"))
    source_cuda = glob.glob(os.path.join(extensions_dir, "cuda", "*.cu"))
    extension = CppExtension
    if CUDA_HOME is not None:
        extension = CUDAExtension
    sources = main_file + source_cpu + source_cuda
    return [extension("maskrcnn_benchmark._C", sources, include_dirs=[extensions_dir])]


setup(name="maskrcnn_benchmark", version="0.1", packages=find_packages(), ext_modules=get_extensions())
