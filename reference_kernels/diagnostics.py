"""What the kernels cost to build and how they were built, for benchmarks and reports.

A small public surface over the NVRTC layer, so that tools outside the package (``benchmarks/``)
need no private module: the seconds spent compiling and loading each variant, each loaded
variant's registers and local memory, and the NVRTC version.
"""

from __future__ import annotations

from . import _nvrtc
from ._nvrtc import CompileStats

__all__ = ["CompileStats", "compile_stats", "nvrtc_version"]


def compile_stats() -> CompileStats:
    """The process's compile, load and resource figures so far (live: later builds add to it)."""
    return _nvrtc.STATS


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library the kernels are compiled with."""
    return _nvrtc.nvrtc_version()
