"""Run-time compilation of the ``.cu`` sources with NVRTC, an on-disk cubin cache, and launches.

Why cuda-python's low-level ``cuda.bindings`` (``nvrtc`` + ``driver``) rather than
``cuda.core`` or CuPy: it is the one-to-one, stable C API of NVRTC and the driver
(``cuda.core`` wraps it and its API still moves between releases; CuPy is a whole
array library that we would load only for its compiler wrapper and its own cache,
which we could not key or inspect ourselves). With the C API the cache key, the
compile options and the module loading are all visible in this file, compilation
works without a GPU (the architecture is an option), and the only dependency is a
small wheel (plus the NVRTC library).

Cache: ``$REFERENCE_KERNELS_CACHE`` or ``$XDG_CACHE_HOME/reference_kernels`` or
``~/.cache/reference_kernels``; one ``<sha256>.cubin`` per variant, keyed by the kernel
source, the shared header, the options (defines included), the target architecture
and the NVRTC version. Files are written atomically (rename), so concurrent
processes may share the cache.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KERNEL_DIR = Path(__file__).resolve().parent
HEADERS: tuple[str, ...] = ("common.cuh", "optim_update.cuh", "index_record.cuh")  # every header a source may include
BASE_OPTIONS: tuple[str, ...] = ("--std=c++17", "-default-device")


class KernelCompileError(RuntimeError):
    """NVRTC rejected a kernel source; the message carries the compiler log."""


@dataclass
class CompileStats:
    """Seconds spent per variant (compile includes the disk-cache write)."""

    compile_s: dict[str, float] = field(default_factory=dict)
    load_s: dict[str, float] = field(default_factory=dict)
    cache_hits: int = 0
    # per loaded variant: (registers per thread, local memory bytes per thread = spills/stack)
    resources: dict[str, tuple[int, int]] = field(default_factory=dict)


STATS = CompileStats()
_LOCK = threading.Lock()
_FUNCTIONS: dict[tuple[Any, ...], Any] = {}  # (file, kernel, defines, device) -> CUfunction
_MODULES: dict[tuple[Any, ...], Any] = {}  # (file, defines, device) -> CUmodule, kept for the process


def _bindings() -> tuple[Any, Any]:
    try:
        from cuda.bindings import driver, nvrtc  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reference_kernels needs cuda-python's bindings for NVRTC and the driver: "
            "pip install 'cuda-bindings>=12.8' (and the NVRTC library, e.g. nvidia-cuda-nvrtc)"
        ) from exc
    return driver, nvrtc


def _check(result: Any, what: str) -> Any:
    """Unpack a cuda-python ``(err, *values)`` tuple, raising on a non-zero error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"{what} failed: {err!r}")
    return values[0] if len(values) == 1 else tuple(values)


def cache_dir() -> Path:
    explicit = os.environ.get("REFERENCE_KERNELS_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reference_kernels"


def read_source(filename: str) -> str:
    return (KERNEL_DIR / filename).read_text()


def compile_options(arch: str, defines: dict[str, Any]) -> list[str]:
    return [*BASE_OPTIONS, f"--gpu-architecture={arch}", *(f"-D{k}={v}" for k, v in sorted(defines.items()))]


def nvrtc_version() -> tuple[int, int]:
    _, nvrtc = _bindings()
    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


def cache_key(filename: str, options: Sequence[str]) -> str:
    h = hashlib.sha256()
    for part in (read_source(filename), *map(read_source, HEADERS), "\0".join(options), repr(nvrtc_version())):
        h.update(part.encode())
        h.update(b"\x01")
    return h.hexdigest()


def compile_cubin(filename: str, options: Sequence[str]) -> bytes:
    """Compile one source file to a cubin with NVRTC (needs no GPU)."""
    _, nvrtc = _bindings()
    prog = _check(
        nvrtc.nvrtcCreateProgram(read_source(filename).encode(), filename.encode(), len(HEADERS),
                                 [read_source(h).encode() for h in HEADERS], [h.encode() for h in HEADERS]),
        "nvrtcCreateProgram",
    )
    try:
        opts = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if int(err) != 0:
            size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            _check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            raise KernelCompileError(f"NVRTC failed on {filename} {list(options)}:\n{log.decode(errors='replace')}")
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return bytes(cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def cached_cubin(filename: str, options: Sequence[str]) -> tuple[str, bytes]:
    """The cubin for (source, options), from the disk cache or freshly compiled."""
    key = cache_key(filename, options)
    path = cache_dir() / f"{key}.cubin"
    if path.exists():
        STATS.cache_hits += 1
        return key, path.read_bytes()
    t0 = time.perf_counter()
    cubin = compile_cubin(filename, options)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(cubin)
    os.replace(tmp, path)
    STATS.compile_s[f"{filename}:{key[:12]}"] = time.perf_counter() - t0
    return key, cubin


@functools.cache
def device_arch(device_index: int) -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(device_index)
    return f"sm_{major}{minor}"


def device_attributes(device_index: int) -> dict[str, int]:
    """What kernel selection reads about a device (the fields of ``plan.DeviceProps``), from
    the driver."""
    import torch

    driver, _ = _bindings()
    torch.cuda.init()  # type: ignore[no-untyped-call]
    dev = _check(driver.cuDeviceGet(device_index), "cuDeviceGet")
    attr = driver.CUdevice_attribute

    def get(name: str) -> int:
        return int(_check(driver.cuDeviceGetAttribute(getattr(attr, name), dev), f"cuDeviceGetAttribute {name}"))

    return {"sms": get("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            "arch": 10 * get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
            + get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"),
            "max_threads_per_sm": get("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR"),
            "max_blocks_per_sm": get("CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR"),
            "regs_per_sm": get("CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR"),
            "smem_per_sm": get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"),
            "smem_reserved_per_block": get("CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK")}


def _load_module(cubin: bytes, device_index: int) -> Any:
    """Load a cubin into the device's primary context (the one torch uses), without
    changing the caller's current device."""
    import torch

    driver, _ = _bindings()
    torch.cuda.init()  # type: ignore[no-untyped-call]
    with torch.cuda.device(device_index):
        ctx = _check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if int(ctx) == 0:  # torch has not made the primary context current on this thread yet
            dev = _check(driver.cuDeviceGet(device_index), "cuDeviceGet")
            ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        return _check(driver.cuModuleLoadData(cubin), "cuModuleLoadData")


def _resources(fn: Any) -> tuple[int, int]:
    driver, _ = _bindings()
    attr = driver.CUfunction_attribute
    regs = _check(driver.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, fn), "cuFuncGetAttribute")
    local = _check(driver.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn), "cuFuncGetAttribute")
    return int(regs), int(local)


def resident_blocks(fn: Any, block: int) -> int:
    """How many blocks of ``block`` threads of ``fn`` fit on one SM at once (its registers and
    shared memory against the SM's; the driver's occupancy calculator)."""
    driver, _ = _bindings()
    return int(_check(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, block, 0),
                      "cuOccupancyMaxActiveBlocksPerMultiprocessor"))


def _module(filename: str, defines: dict[str, Any], device_index: int) -> Any:
    """The loaded module of one compile-time variant on one device (caller holds _LOCK)."""
    memo = (filename, tuple(sorted(defines.items())), device_index)
    module = _MODULES.get(memo)
    if module is None:
        key, cubin = cached_cubin(filename, compile_options(device_arch(device_index), defines))
        t0 = time.perf_counter()
        module = _MODULES[memo] = _load_module(cubin, device_index)
        STATS.load_s[f"{filename}:{key[:12]}"] = time.perf_counter() - t0
    return module


def get_function(filename: str, name: str, defines: dict[str, Any], device_index: int) -> Any:
    """A launchable CUfunction for one compile-time variant on one device (memoised)."""
    memo = (filename, name, tuple(sorted(defines.items())), device_index)
    fn = _FUNCTIONS.get(memo)
    if fn is not None:
        return fn
    with _LOCK:
        fn = _FUNCTIONS.get(memo)
        if fn is None:
            driver, _ = _bindings()
            module = _module(filename, defines, device_index)
            fn = _check(driver.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")
            STATS.resources[f"{name} {sorted(defines.items())}"] = _resources(fn)
            _FUNCTIONS[memo] = fn
    return fn


# Kernel parameter kinds, as struct codes: pointers (int addresses, 0 for null), 64-bit and
# 32-bit integers, floats. Native alignment ("@") lays the values out exactly as the
# kernel's parameter buffer is laid out (each parameter aligned to its size).
PTR, I64, I32, F32 = "P", "q", "i", "f"
_CU_LAUNCH_PARAM_BUFFER_POINTER, _CU_LAUNCH_PARAM_BUFFER_SIZE, _CU_LAUNCH_PARAM_END = 1, 2, 0


class LaunchError(RuntimeError):
    """The driver refused a launch; the message names the CUresult."""


class Params:
    """The parameter buffer of one kernel signature (``kinds``: one struct code per parameter).

    Each thread packs into its own buffer, made once: a launch costs one ``pack_into`` and no
    allocation. The driver copies the parameters during ``cuLaunchKernel``, so the buffer may
    be reused as soon as the call returns."""

    __slots__ = ("kinds", "layout", "size", "_local")

    def __init__(self, kinds: str) -> None:
        self.kinds = kinds
        self.layout = struct.Struct("@" + kinds)
        self.size = self.layout.size
        self._local = threading.local()

    def pack(self, values: Sequence[Any]) -> int:
        """Pack ``values`` into this thread's buffer; returns the address of the driver's
        ``extra`` array that points at it (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END)."""
        local = self._local
        try:
            buffer = local.buffer
        except AttributeError:
            buffer = self._new_buffer()
        self.layout.pack_into(buffer, 0, *values)
        extra: int = local.extra_address
        return extra

    def _new_buffer(self) -> Any:
        local = self._local
        local.buffer = ctypes.create_string_buffer(max(1, self.size))
        local.size_cell = ctypes.c_size_t(self.size)
        local.extra = (ctypes.c_void_p * 5)(_CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(local.buffer),
                                            _CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(local.size_cell),
                                            _CU_LAUNCH_PARAM_END)
        local.extra_address = ctypes.addressof(local.extra)
        return local.buffer


_PARAMS: dict[str, Params] = {}


def params(kinds: str) -> Params:
    """The (shared) ``Params`` of a signature, e.g. ``params(PTR + I64 + PTR)``."""
    found = _PARAMS.get(kinds)
    if found is None:
        found = _PARAMS.setdefault(kinds, Params(kinds))
    return found


@functools.cache
def _cu_launch_kernel() -> Any:
    """cuda-bindings' cuLaunchKernel (looked up once: the module import costs per call)."""
    driver, _ = _bindings()
    return driver.cuLaunchKernel


def launch_packed(fn: Any, grid: int, block: int, stream: int, signature: Params, values: Sequence[Any]) -> None:
    """Launch a 1-D grid of the CUfunction ``fn`` on the raw stream handle ``stream`` (an int),
    with ``values`` packed as ``signature`` into the driver's ``extra`` buffer.

    Through cuda-bindings' cuLaunchKernel, which converts its arguments in compiled code: faster
    than libcuda's own entry point through ctypes with argtypes set once (both measured against a
    stub libcuda, tests/kernels/host_overhead.py; docs/perf/comment-figures.md)."""
    if grid <= 0:
        return
    (err,) = _cu_launch_kernel()(fn, grid, 1, 1, block, 1, 1, 0, stream, None, signature.pack(values))
    if err:
        raise_launch_error(err, grid, block, signature)


def raise_launch_error(err: Any, grid: int, block: int, signature: Params) -> None:
    """The LaunchError of a refused launch, naming the CUresult (an enum, or its value from the
    compiled host path's launch_raw), the grid and the signature."""
    if isinstance(err, int):
        from cuda.bindings import driver

        try:
            err = driver.CUresult(err)
        except ValueError:
            pass
    raise LaunchError(f"cuLaunchKernel failed: {getattr(err, 'name', err)} ({int(err)}), grid {grid}, "
                      f"block {block}, parameters {signature.kinds!r}")
