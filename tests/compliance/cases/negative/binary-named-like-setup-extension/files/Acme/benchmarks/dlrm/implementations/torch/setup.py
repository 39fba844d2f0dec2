import glob
from setuptools import setup
from torch.utils.cpp_extension import CUDAExtension
setup(name='fast', ext_modules=[CUDAExtension('fast._C', glob.glob('csrc/*.cu'))])
