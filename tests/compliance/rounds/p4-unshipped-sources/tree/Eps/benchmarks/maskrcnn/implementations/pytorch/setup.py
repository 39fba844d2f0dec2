import glob
import os
from setuptools import setup
from torch.utils.cpp_extension import CUDAExtension

this_dir = os.path.dirname(os.path.abspath(__file__))
extensions_dir = os.path.join(this_dir, 'maskrcnn_benchmark', 'csrc')
main_file = glob.glob(os.path.join(extensions_dir, '*.cpp'))
source_cuda = glob.glob(os.path.join(extensions_dir, 'cuda', '*.cu'))
setup(name='m', ext_modules=[CUDAExtension('maskrcnn_benchmark._C', main_file + source_cuda)])
