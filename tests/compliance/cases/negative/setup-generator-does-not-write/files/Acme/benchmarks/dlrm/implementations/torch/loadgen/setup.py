from setuptools import Extension, setup

from version_stamp import write_version_source

stamped = "generated/version_stamp.cc"
write_version_source(stamped, ".")

sources = ["loadgen.cc", "logging.cc", stamped]

setup(name="acme_loadgen", version="1.0",
      ext_modules=[Extension("acme_loadgen", sources=sources, include_dirs=["."])])
