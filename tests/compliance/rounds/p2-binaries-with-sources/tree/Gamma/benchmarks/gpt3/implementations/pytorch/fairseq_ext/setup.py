from setuptools import Extension, setup
setup(name='b', ext_modules=[Extension('fairseq.libbleu', sources=['clib/libbleu.cpp'])])
