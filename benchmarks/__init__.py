"""The kernel lab: the benchmark suite, experiments and their current results.

Not part of the shipped packages (the wheel holds ``compliance`` and ``reference_kernels``
only). Run from the repository root: ``python3 -m benchmarks --help``.
"""
