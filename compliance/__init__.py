"""Compliance checks for custom kernels in MLPerf-style submission trees.

The static path (``compliance check``) never imports torch or CUDA bindings;
only verification does, lazily.
"""

__version__ = "0.1.0"
