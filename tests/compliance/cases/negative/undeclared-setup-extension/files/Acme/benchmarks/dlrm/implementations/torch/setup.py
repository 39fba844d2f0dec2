from setuptools import setup
from torch.utils.cpp_extension import CppExtension

setup(ext_modules=[CppExtension('ops', sources=['ops/gather.cpp'])])
