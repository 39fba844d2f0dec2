#!/usr/bin/env python
# Modelled on maskrcnn-benchmark's setup.py as NVIDIA's submissions extend it.
import copy
import glob
import os

import torch
from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension

requirements = ["torch", "torchvision"]


def get_extensions():
    this_dir = os.path.dirname(os.path.abspath(__file__))
    extensions_dir = os.path.join(this_dir, "maskrcnn_benchmark", "csrc")

    main_file_nhwc = glob.glob(os.path.join(extensions_dir, "cuda/nhwc.cpp"))
    main_file_syncfree = glob.glob(os.path.join(extensions_dir, "cuda/syncfree.cpp"))
    source_cuda_nhwc = glob.glob(os.path.join(extensions_dir, "cuda/nhwc", "*.cu"))
    source_cpp_nhwc = glob.glob(os.path.join(extensions_dir, "cuda/nhwc", "*.cpp"))
    source_cuda_syncfree = glob.glob(os.path.join(extensions_dir, "cuda/syncfree", "*.cu"))
    source_cpp_syncfree = glob.glob(os.path.join(extensions_dir, "cuda/syncfree", "*.cpp"))

    sources_nhwc = source_cpp_nhwc + source_cuda_nhwc + main_file_nhwc
    sources_syncfree = source_cpp_syncfree + source_cuda_syncfree + main_file_syncfree
    sources_bottleneck = glob.glob(os.path.join(extensions_dir, "cuda/bottleneck", "*.cpp"))
    extension = CppExtension
    extra_compile_args = {"cxx": []}
    if CUDA_HOME is not None:
        extension = CUDAExtension
        extra_compile_args["nvcc"] = ["-O3"]

    include_dirs = [extensions_dir]
    return [
        extension("maskrcnn_benchmark.NHWC", sources_nhwc, include_dirs=include_dirs,
                  extra_compile_args=copy.deepcopy(extra_compile_args)),
        extension("maskrcnn_benchmark.Syncfree", sources_syncfree, include_dirs=include_dirs,
                  extra_compile_args=copy.deepcopy(extra_compile_args)),
        extension("maskrcnn_benchmark.Bottleneck", sources_bottleneck, include_dirs=include_dirs,
                  extra_compile_args=copy.deepcopy(extra_compile_args)),
    ]


setup(
    name="maskrcnn_benchmark",
    version="0.1",
    packages=find_packages(exclude=("configs", "tests")),
    ext_modules=get_extensions(),
    cmdclass={"build_ext": torch.utils.cpp_extension.BuildExtension},
)
