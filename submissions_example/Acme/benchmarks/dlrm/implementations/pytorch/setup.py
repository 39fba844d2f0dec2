"""Builds the DLRM embedding-bag extension: `pip install .` in this directory."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="acme_dlrm_embedding",
    ext_modules=[
        CUDAExtension(
            "acme_dlrm_embedding._C",
            sources=["csrc/embedding_bag.cu", "csrc/binding.cpp"],
            extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
