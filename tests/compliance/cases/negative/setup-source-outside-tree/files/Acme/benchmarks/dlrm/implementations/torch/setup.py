from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="attn",
    ext_modules=[CUDAExtension("attn", ["../../../../../../private/attn.cu", "/opt/acme/attn2.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
