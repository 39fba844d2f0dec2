"""What the kernels cost to build and how they were built, for benchmarks and reports.

A small public surface over the NVRTC layer, so that tools outside the package (``benchmarks/``)
need no private module: the seconds spent compiling and loading each variant, each loaded
variant's registers and local memory, the NVRTC version, and the compiled host path's state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import host, nvrtc
from .host import HostPathStatus
from .nvrtc import CompileStats

__all__ = ["CompileStats", "HostPathStatus", "compile_stats", "host_path_status", "nvrtc_version",
           "python_host_path"]


def compile_stats() -> CompileStats:
    """The process's compile, load and resource figures so far (live: later builds add to it)."""
    return nvrtc.STATS


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library the kernels are compiled with."""
    return nvrtc.nvrtc_version()


def host_path_status() -> HostPathStatus:
    """Whether the compiled host path (REFERENCE_KERNELS_HOST_PATH) is built and in use, and why not."""
    return host.status()


@contextlib.contextmanager
def python_host_path() -> Iterator[None]:
    """For measurements: calls inside take the Python host path, as without the compiled one."""
    saved = list(host.LOADED)
    host.LOADED.clear()
    try:
        yield
    finally:
        host.LOADED[:] = saved
