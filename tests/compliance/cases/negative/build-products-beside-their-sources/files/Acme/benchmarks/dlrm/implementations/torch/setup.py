from setuptools import Extension, setup
setup(name='b', ext_modules=[Extension('bleu.libbleu', sources=['bleu/libbleu.cpp'])])
