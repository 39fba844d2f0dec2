"""NVRTC through cuda-python (``cuda.bindings``): compile, cache, load and launch (kernel subprocess only).

The same runtime ``reference_kernels`` uses, so the ``kernels`` extra
(torch, cuda-bindings, nvidia-cuda-nvrtc) is everything verification needs; no
CuPy. A translation unit is compiled for the GPU's own architecture into a cubin;
cubins are cached in a directory the caller keys by the source and its headers,
under a file name keyed by the options (defines included), the architecture and
the NVRTC version, and written atomically. Modules are loaded into the primary
context torch uses, and launched on torch's current stream with one pointer per
parameter (the driver's ``kernelParams`` form), so the parameters are laid out
by the driver from the kernel's own signature.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class NvrtcError(RuntimeError):
    """Compiling or loading failed; the message carries the NVRTC log."""


def bindings() -> tuple[Any, Any]:
    """``(driver, nvrtc)`` of cuda-python; ImportError with the install hint when missing."""
    try:
        from cuda.bindings import driver, nvrtc  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ImportError("NVRTC kernels need cuda-python's bindings: pip install "
                          "'mlperf-kernel-compliance[kernels]' (cuda-bindings, nvidia-cuda-nvrtc)") from exc
    return driver, nvrtc


def _ok(result: Any, what: str) -> Any:
    """The values of a cuda-python ``(status, *values)`` result; NvrtcError unless status is 0."""
    status, *values = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        raise NvrtcError(f"{what}: {status!r}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def architecture() -> str:
    """``sm_XY`` of the current device."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def compile_cubin(source: Path, options: Sequence[str]) -> bytes:
    """The cubin of ``source`` (headers found through ``--include-path`` options)."""
    _, nvrtc = bindings()
    program = _ok(nvrtc.nvrtcCreateProgram(source.read_bytes(), source.name.encode(), 0, [], []),
                  "nvrtcCreateProgram")
    try:
        encoded = [o.encode() for o in options]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        if int(status) != 0:
            size = _ok(nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize")
            log = bytearray(size)
            _ok(nvrtc.nvrtcGetProgramLog(program, log), "nvrtcGetProgramLog")
            raise NvrtcError(f"{source.name}: {bytes(log).decode(errors='replace').strip()}")
        size = _ok(nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize")
        cubin = bytearray(size)
        _ok(nvrtc.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
        return bytes(cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def cached_cubin(source: Path, options: Sequence[str], cache: Path) -> bytes:
    """From ``cache`` when compiled before with the same options, architecture and NVRTC."""
    _, nvrtc = bindings()
    version = _ok(nvrtc.nvrtcVersion(), "nvrtcVersion")
    full = [*options, f"--gpu-architecture={architecture()}"]
    name = hashlib.sha256("\0".join([*full, repr(version)]).encode()).hexdigest()[:32]
    path = cache / f"{name}.cubin"
    if path.is_file():
        return path.read_bytes()
    cubin = compile_cubin(source, full)
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.part")
    partial.write_bytes(cubin)
    os.replace(partial, path)
    return cubin


def _primary_context() -> None:
    """Make torch's primary context current on this thread (torch may not have done so yet)."""
    import torch

    driver, _ = bindings()
    torch.cuda.init()  # type: ignore[no-untyped-call]
    if int(_ok(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")) == 0:
        device = _ok(driver.cuDeviceGet(torch.cuda.current_device()), "cuDeviceGet")
        _ok(driver.cuCtxSetCurrent(_ok(driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")),
            "cuCtxSetCurrent")


def load_function(source: Path, entry: str, options: Sequence[str], cache: Path) -> Any:
    """The launchable ``entry`` of ``source`` compiled with ``options``."""
    driver, _ = bindings()
    cubin = cached_cubin(source, options, cache)
    _primary_context()
    module = _ok(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
    try:
        return _ok(driver.cuModuleGetFunction(module, entry.encode()), f"cuModuleGetFunction({entry})")
    except NvrtcError as exc:
        raise NvrtcError(f"{source.name} has no extern \"C\" __global__ {entry}: {exc}") from exc


def launch(function: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared: int, stream: int,
           values: Sequence[Any]) -> None:
    """Launch with ``values`` (ctypes scalars, one per kernel parameter) on the raw ``stream``."""
    driver, _ = bindings()
    pointers = (ctypes.c_void_p * max(1, len(values)))(*(ctypes.addressof(v) for v in values))
    (status,) = driver.cuLaunchKernel(function, *grid, *block, shared, driver.CUstream(stream),
                                      ctypes.addressof(pointers), 0)
    if int(status) != 0:
        raise RuntimeError(f"cuLaunchKernel failed: {status!r}")
