"""The compiled host path (``csrc/host_path.cpp``): the usual eager embedding_bag forward call,
validated, allocated and launched in C++ instead of Python.

Why: the Python path's host time per call is a chain of microsecond steps (argument checks, the
plan-cache key, ``new_empty`` through Python, the launch call); docs/kernels.md, "Host overhead per
call", has the measurements. The extension serves only calls the Python path has planned, with the
Python path's own plan (function, grid, block, argument layout), and returns None for every other
call, which then runs the Python path: validation, errors, planning and every unusual call stay in
one place.

Built at run time with the host's C++ compiler against the installed torch's headers, like the
kernels (NVRTC): one shared library per (source, torch, Python, compiler, flags), cached beside
the cubins (``nvrtc.cache_dir()``/host), written atomically. ``REFERENCE_KERNELS_HOST_PATH``:
``auto`` (default) builds it in a background thread at the first CUDA call and uses it once loaded;
``wait`` builds it at the first CUDA call, before that call returns; ``off`` never builds it. A
failed build leaves the Python path in use and its reason in ``status()``.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from . import nvrtc

ENV = "REFERENCE_KERNELS_HOST_PATH"
SETTINGS = ("auto", "wait", "off")
SOURCE = Path(__file__).resolve().parent / "csrc" / "host_path.cpp"
MODULE_NAME = "_reference_kernels_host"
BUILD_TIMEOUT_S = 600
CXX_FLAGS: tuple[str, ...] = ("-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", "-w")

# Where a kernel argument comes from (enum Source in host_path.cpp): a constant of the call, or
# one of the call's values.
SOURCES: tuple[str, ...] = ("constant", "weight", "indices", "offsets", "offsets_numel", "per_sample_weights",
                            "padding", "out", "argmax", "table_rows", "lock", "record", "flag", "token", "op",
                            "num_rows")


class HostPathError(RuntimeError):
    """The compiled host path could not be built or loaded (the message carries the compiler log)."""


@dataclass(frozen=True)
class HostPathStatus:
    """Where the compiled host path stands in this process."""

    setting: str
    """The value of REFERENCE_KERNELS_HOST_PATH in force (auto, wait or off)."""
    state: str
    """``not started``, ``building``, ``loaded``, ``failed`` or ``off``."""
    library: str
    """The shared library's path once built, else empty."""
    reason: str
    """Why it failed (the compiler's log, shortened), else empty."""


def setting() -> str:
    """REFERENCE_KERNELS_HOST_PATH, checked (auto when unset)."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in SETTINGS:
        raise ValueError(f"environment variable {ENV}={value!r} is not one of {', '.join(SETTINGS)}")
    return value


# ---------------------------------------------------------------------------------------------
# Building

def _torch_paths() -> tuple[list[Path], Path]:
    import torch

    root = Path(torch.__file__).resolve().parent
    return [root / "include", root / "include" / "torch" / "csrc" / "api" / "include"], root / "lib"


def compiler() -> str:
    return os.environ.get("CXX", "c++")


def build_command(output: Path) -> list[str]:
    """The compiler command that builds the extension into ``output``."""
    import torch

    includes, lib = _torch_paths()
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    return [compiler(), *CXX_FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{sysconfig.get_paths()['include']}",
            *(f"-I{path}" for path in includes), str(SOURCE), "-o", str(output), f"-L{lib}", f"-Wl,-rpath,{lib}",
            "-ltorch_python", "-ltorch_cpu", "-lc10"]


def _compiler_version() -> str:
    try:
        return subprocess.run([compiler(), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise HostPathError(f"no C++ compiler ({compiler()!r}; set CXX): {exc}") from exc


def library_path() -> Path:
    """Where the library of this source, torch, Python and compiler lives in the cache."""
    import torch

    h = hashlib.sha256()
    for part in (SOURCE.read_text(), torch.__version__, sys.version, _compiler_version(), " ".join(CXX_FLAGS)):
        h.update(part.encode())
        h.update(b"\x01")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return nvrtc.cache_dir() / "host" / f"{MODULE_NAME}-{h.hexdigest()[:24]}{suffix}"


def build(path: Path) -> Path:
    """Compile the extension into ``path`` unless it is there (atomic: built beside, renamed)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    command = build_command(tmp)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise HostPathError(f"building {SOURCE.name} failed: {exc}") from exc
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise HostPathError(f"building {SOURCE.name} failed (exit {done.returncode}): {' '.join(command)}\n"
                            f"{(done.stderr or done.stdout)[-4000:]}")
    os.replace(tmp, path)
    return path


def load_library(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise HostPathError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------
# Binding the loaded library to this process

def launch_address() -> int:
    """libcuda's cuLaunchKernel (the default-stream-per-process entry, as cuda-bindings binds it)."""
    library = ctypes.CDLL("libcuda.so.1")
    address = ctypes.cast(library.cuLaunchKernel, ctypes.c_void_p).value
    if not address:
        raise HostPathError("libcuda.so.1 has no cuLaunchKernel")
    return address


PROGRAMMATIC_ENV = "REFERENCE_KERNELS_PROGRAMMATIC_LAUNCH"
PROGRAMMATIC_SETTINGS = ("auto", "off")
PROGRAMMATIC_MIN_CAPABILITY = (9, 0)  # griddepcontrol (common.cuh's wait_for_previous_kernel): sm_90 on


def programmatic_setting() -> str:
    """REFERENCE_KERNELS_PROGRAMMATIC_LAUNCH, checked (auto when unset)."""
    value = os.environ.get(PROGRAMMATIC_ENV, "auto").strip().lower() or "auto"
    if value not in PROGRAMMATIC_SETTINGS:
        raise ValueError(f"environment variable {PROGRAMMATIC_ENV}={value!r} is not one of "
                         f"{', '.join(PROGRAMMATIC_SETTINGS)}")
    return value


def launch_ex_address() -> int:
    """libcuda's cuLaunchKernelEx where the library's launches may be programmatic, else 0: the
    setting is ``auto``, every visible GPU is sm_90 or newer (where the kernels' wait is compiled
    in), and the driver has the entry point (CUDA 12.0 on)."""
    import torch

    if programmatic_setting() == "off":
        return 0
    devices = range(torch.cuda.device_count())
    if not devices or any(torch.cuda.get_device_capability(d) < PROGRAMMATIC_MIN_CAPABILITY for d in devices):
        return 0
    library = ctypes.CDLL("libcuda.so.1")
    found = getattr(library, "cuLaunchKernelEx", None)
    address = ctypes.cast(found, ctypes.c_void_p).value if found is not None else None
    return address or 0


def set_programmatic(on: bool) -> bool:
    """Experiments: the loaded library's launches programmatic (``on``, where ``launch_ex_address``
    allows) or plain; returns whether they were programmatic before. Without a loaded library
    every launch is plain (the Python path's cuLaunchKernel) and this returns False."""
    if not LOADED:
        return False
    return bool(LOADED[0].library.set_launch_ex(launch_ex_address() if on else 0))


def transforms_active() -> Callable[[], bool]:
    """Whether functorch transforms are active (never, where this torch lacks the query)."""
    import torch

    found: Callable[[], bool] | None = getattr(torch._C, "_are_functorch_transforms_active", None)
    return found if found is not None else (lambda: False)


def raise_launch_error(err: int, grid: int, block: int) -> None:
    raise nvrtc.LaunchError(f"cuLaunchKernel failed: CUresult {err}, grid {grid}, block {block} "
                             "(compiled host path)")


@dataclass(frozen=True)
class Binding:
    """How the layers above this module bind a loaded library (host_binding.py, registered by the
    package's ``__init__``): this module is imported by the launcher and the index check, so it
    imports neither them nor the ops; the binding brings their callbacks down."""

    init: Callable[[Any], None]
    """Give a freshly loaded library its entry points and callbacks (``library.init``)."""
    published: Callable[[Any], None]
    """After the library is published (LOADED): offer it what was made before (the ledgers)."""


_BINDING: list[Binding] = []


def use_binding(binding: Binding) -> None:
    """Register how a loaded library is bound (once, by the package's ``__init__``)."""
    _BINDING[:] = [binding]


def _binding() -> Binding:
    if not _BINDING:
        raise HostPathError("no binding registered (reference_kernels/__init__.py registers host_binding's)")
    return _BINDING[0]


def bind(library: Any) -> Any:
    """Give a freshly loaded library its entry points and callbacks (the ledgers follow once it is
    published: _build_and_load)."""
    _binding().init(library)
    return library


# ---------------------------------------------------------------------------------------------
# The process's library: built once, in the background (auto) or at once (wait)

class HostPath(NamedTuple):
    """The published library's entry points, by name (read per call by reference_kernels.embedding_bag,
    EmbeddingBag and TableBatchedEmbeddingBag)."""

    bag: Callable[..., Any]
    """library.bag: the usual embedding_bag call served, or None (the Python path takes it)."""
    is_compiling: Callable[[], bool]
    """torch.compiler.is_compiling: under torch.compile every call takes the Python path."""
    library: Any
    """The extension module itself (offers, ledgers, launches, pending)."""
    tbe: Callable[..., Any]
    """library.tbe: the usual TableBatchedEmbeddingBag call served, or None."""


# Empty until the library is published, then [its HostPath] (a list: one truth test per call)
LOADED: list[HostPath] = []
_STATE: dict[str, str] = {"state": "not started", "library": "", "reason": ""}
_START = threading.Lock()


def start() -> None:
    """At a CUDA call: build and load the library as the setting says (once per process)."""
    if _STATE["state"] != "not started":
        return
    with _START:
        if _STATE["state"] != "not started":
            return
        chosen = setting()
        if chosen == "off":
            _STATE["state"] = "off"
            return
        _STATE["state"] = "building"
        if chosen == "wait":
            _build_and_load()
        else:
            threading.Thread(target=_build_and_load, name="reference_kernels host path", daemon=True).start()


def _build_and_load() -> None:
    try:
        path = build(library_path())
        library = bind(load_library(path))
    except (HostPathError, ImportError, OSError) as exc:
        _STATE.update(state="failed", reason=str(exc)[-2000:])
        warnings.warn(f"reference_kernels: the compiled host path could not be built or loaded, so every call takes "
                      f"the Python path (more host time per call; {ENV}=off silences this): {str(exc)[:500]}",
                      RuntimeWarning, stacklevel=2)
        return
    import torch

    _STATE.update(state="loaded", library=str(path))
    LOADED[:] = [HostPath(library.bag, torch.compiler.is_compiling, library, library.tbe)]
    # the ledgers made so far; index_check.ledger offers those made from now on (it reads LOADED)
    _binding().published(library)


def status() -> HostPathStatus:
    return HostPathStatus(setting=setting(), state=_STATE["state"], library=_STATE["library"],
                          reason=_STATE["reason"])


# ---------------------------------------------------------------------------------------------
# The Python path's side: what it offers the library after planning a call

class _Probe:
    """A stand-in tensor whose pointer and size are markers: packing a call with probes shows
    which argument comes from which of the call's values."""

    __slots__ = ("pointer", "size")

    def __init__(self, pointer: int, size: int) -> None:
        self.pointer, self.size = pointer, size

    def data_ptr(self) -> int:
        return self.pointer

    def numel(self) -> int:
        return self.size


_MARK = 0x5A5A_0000_0000_0000  # far above any size or address a call has


def _marker(source: str) -> int:
    return _MARK + SOURCES.index(source)


def argument_sources(pack: Callable[..., Sequence[object]]) -> tuple[tuple[int, object], ...]:
    """Per kernel argument of a forward packer (``launch._forward_packer``): (source, constant),
    found by packing markers; a value that is no marker is a constant of the call."""
    probes = {name: _Probe(_marker(name), _marker(f"{name}_numel") if f"{name}_numel" in SOURCES else -1)
              for name in ("indices", "offsets", "per_sample_weights", "table_rows", "argmax")}
    ledger = tuple(_marker(name) for name in ("lock", "record", "flag", "token", "op", "num_rows"))
    values = pack(_marker("weight"), probes["indices"], probes["offsets"], probes["per_sample_weights"],
                  _marker("padding"), probes["table_rows"], _marker("out"), probes["argmax"], ledger)
    markers = {_marker(name): index for index, name in enumerate(SOURCES) if name != "constant"}
    return tuple((markers[v], 0) if isinstance(v, int) and v in markers else (0, v) for v in values)


def offer_check(device_index: int, index_dtype: Any, clean_dtype: Any, fn: Any, sms: int, cap: int,
                blocks_per_sm: int) -> None:
    """After the Python path ran a check pass the library missed: register its kernel
    (index_check.run_check's launch: BLOCK threads, at most ``blocks_per_sm`` blocks per SM, the
    knob ``check_blocks_per_sm``; ``cap``: the table-batched variant's TABLE_CAP, 0 for one table)."""
    from .plan import BLOCK

    LOADED[0].library.offer_check(device_index, index_dtype, clean_dtype, int(fn), BLOCK, sms * blocks_per_sm, cap)


def offer(key: tuple[Any, ...], device_index: int, prepared: Any) -> None:
    """After the Python path planned a call the library missed: register that plan (``prepared``:
    ``launch.Prepared``), or that the Python path serves the call (None: its kernel cannot check
    its indices, the check pass runs first)."""
    library = LOADED[0].library
    if prepared is None:
        library.offer(key, device_index, 0, 0, 0, "", ())
        return
    plan, fn, grid, signature, pack = prepared
    library.offer(key, device_index, int(fn), grid, plan.block, signature.kinds, argument_sources(pack))
