"""Building and calling a kernel, per build kind (kernel subprocess only: imports torch).

* ``torch_extension``: the module the verifier built (``compliance.verify.staging``)
  from its private copy of the declared files and hashed is loaded from the copy
  handed to this process; the declared function is called with tensors and
  Python ints.
* ``nvrtc``: cuda-python's NVRTC bindings (``compliance.verify.nvrtc``, the
  runtime reference_kernels uses too) compile the translation unit once per
  distinct set of defines into a cubin cached under the build root in a
  directory keyed by the bytes of the source and of every file in the include
  directories (so an edited header is never served from a stale cubin); the
  entry is launched with device pointers and typed scalars.
* ``triton``: the declared module file is imported under a private name in this
  subprocess and the ``@triton.jit`` function launched with ``fn[grid](*args)``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from compliance.verify.build import (
    Argument,
    BuildSpec,
    ExtensionBuild,
    NvrtcBuild,
    TritonBuild,
    constant_env,
    launch_env,
)
from compliance.verify.cases import Case
from compliance.verify.expr import evaluate
from compliance.verify.staging import HEADER_SUFFIXES, digest
from compliance.verify.vocabulary import SCALAR_TYPES


class BuildFailed(RuntimeError):
    """The sources did not compile, the module does not load or the entry is missing."""


class LaunchInvalid(ValueError):
    """The declared launch configuration is unusable for a case."""


def _tree_bytes(directories: Sequence[Path]) -> list[bytes]:
    out = []
    for d in directories:
        if d.is_dir():
            for p in sorted(d.rglob("*")):
                if p.suffix in HEADER_SUFFIXES and p.is_file() and not p.is_symlink():
                    out += [str(p).encode(), p.read_bytes()]
    return out


@dataclass
class ExtensionBackend:
    """A built PyTorch extension and its declared function."""

    spec: ExtensionBuild
    """The build block."""
    build_root: Path
    """This kernel's private cache directory (unused: the module arrives built)."""
    module: tuple[str, str] | None = None
    """(path, module name) of the built module's copy."""
    function: Any = None
    """The callable, once loaded."""

    @property
    def device(self) -> torch.device:
        """Where tensors for this kernel live."""
        return torch.device(self.spec.device)

    def build(self) -> None:
        """Load the module the verifier built and hashed (``compliance.verify.staging``) from the copy it
        handed to this process; nothing is compiled here."""
        import importlib.util

        if self.module is None:
            raise BuildFailed("the verifier handed over no built module")
        path, name = Path(self.module[0]), self.module[1]
        loader = importlib.util.spec_from_file_location(name, path)
        if loader is None or loader.loader is None:
            raise BuildFailed(f"cannot load the built module {path.name}")
        module = importlib.util.module_from_spec(loader)
        try:
            loader.loader.exec_module(module)
        except Exception as exc:  # an unresolved symbol, a failing module initialisation
            raise BuildFailed(f"loading the built extension failed: {type(exc).__name__}: {exc}") from exc
        self.function = getattr(module, self.spec.function, None)
        if self.function is None:
            raise BuildFailed(f"the built module has no function {self.spec.function!r}; it has "
                              f"{', '.join(n for n in dir(module) if not n.startswith('_'))}")

    def call(self, case: Case, tensors: Mapping[str, torch.Tensor | None]) -> Any:
        """Call the function with the declared arguments."""
        return self.function(*python_arguments(self.spec.arguments, case, tensors, case.scalars()))


def python_arguments(arguments: Sequence[Argument], case: Case, tensors: Mapping[str, torch.Tensor | None],
                     env: Mapping[str, int]) -> list[Any]:
    """Arguments for a Python callee: tensors (None for null), ints, floats."""
    floats = case.floats()
    out: list[Any] = []
    for a in arguments:
        if a.tensor:
            out.append(tensors.get(a.tensor))
        elif a.float_name:
            out.append(floats[a.float_name])
        elif a.ctype == "bool":
            out.append(evaluate(a.value, env) != 0)  # type: ignore[arg-type]
        else:
            out.append(evaluate(a.value, env))  # type: ignore[arg-type]
    return out


CTYPES = {"int32": "c_int32", "int64": "c_int64", "uint32": "c_uint32", "uint64": "c_uint64", "float32": "c_float",
          "bool": "c_bool"}
"""ctypes type of each scalar C type an NVRTC argument may have."""


@dataclass
class NvrtcBackend:
    """NVRTC variants of one kernel source (cuda-python's ``cuda.bindings``) and their launches."""

    spec: NvrtcBuild
    """The build block."""
    build_root: Path
    """Directory for the cubin cache (outside the checked tree)."""
    variants: dict[tuple[tuple[str, str], ...], Any] = field(default_factory=dict)
    """Launchable functions by defines."""
    compile_seconds: float = 0.0
    """Total NVRTC time so far."""
    cache: Path | None = None
    """Content-keyed cubin directory, once built."""

    @property
    def device(self) -> torch.device:
        """Always the current CUDA device."""
        return torch.device("cuda")

    def build(self) -> None:
        """Check that the bindings load; compilation happens per variant, cached by content."""
        from compliance.verify import nvrtc

        nvrtc.bindings()
        key = digest([self.spec.source.read_bytes(), *_tree_bytes(self.spec.include_dirs)])[:20]
        self.cache = self.build_root / f"nvrtc-{key}"

    def function(self, defines: Mapping[str, str]) -> Any:
        """The entry compiled with ``defines`` (compiled on first use)."""
        import time

        from compliance.verify import nvrtc

        key = tuple(sorted(defines.items()))
        if key not in self.variants:
            options = (*self.spec.options, *(f"--include-path={d}" for d in self.spec.include_dirs),
                       *(f"-D{k}={v}" for k, v in key))
            started = time.perf_counter()
            try:
                assert self.cache is not None, "build() first"
                self.variants[key] = nvrtc.load_function(self.spec.source, self.spec.entry, options, self.cache)
            except nvrtc.NvrtcError as exc:
                raise BuildFailed(f"NVRTC failed for defines {dict(key)}: {exc}") from exc
            finally:
                self.compile_seconds += time.perf_counter() - started
        return self.variants[key]

    def call(self, case: Case, tensors: Mapping[str, torch.Tensor | None]) -> None:
        """Launch the entry for ``case`` on the given tensors."""
        import ctypes

        from compliance.verify import nvrtc

        scalars, selectors, floats = case.scalars(), case.selectors(), case.floats()
        try:
            defines = self.spec.integer_defines(scalars, selectors)
            env = launch_env(self.spec, scalars, defines)
            grid = _dim3([evaluate(e, env) for e in self.spec.grid], "grid")
            block = _dim3([evaluate(e, env) for e in self.spec.block], "block")
            shared = evaluate(self.spec.shared_memory, env)
            values: list[Any] = []
            for a in self.spec.arguments:
                if a.tensor:
                    t = tensors.get(a.tensor)
                    values.append(ctypes.c_void_p(0 if t is None else t.data_ptr()))
                elif a.float_name:
                    values.append(ctypes.c_float(floats[a.float_name]))
                else:
                    value = evaluate(a.value, env)  # type: ignore[arg-type]
                    struct.pack(SCALAR_TYPES[a.ctype], value)  # range check for the C type
                    values.append(getattr(ctypes, CTYPES[a.ctype])(value))
        except (ValueError, struct.error) as exc:
            raise LaunchInvalid(str(exc)) from exc
        if block[0] * block[1] * block[2] > 1024 or shared < 0:
            raise LaunchInvalid(f"block {block} has more than 1024 threads or shared memory {shared} < 0")
        nvrtc.launch(self.function(defines), grid, block, shared, torch.cuda.current_stream().cuda_stream, values)


@dataclass
class TritonBackend:
    """A ``@triton.jit`` function imported from the declared module file only."""

    spec: TritonBuild
    """The build block."""
    build_root: Path
    """Directory for Triton's cache (outside the checked tree)."""
    function: Any = None
    """The jitted function, once imported."""

    @property
    def device(self) -> torch.device:
        """Always the current CUDA device."""
        return torch.device("cuda")

    def build(self) -> None:
        """Import the module file under a private name (its own directory is not put on sys.path)."""
        import importlib.util

        key = digest([self.spec.module.read_bytes()])[:20]
        os.environ["TRITON_CACHE_DIR"] = str(self.build_root / f"triton-{key}")
        try:
            import triton  # type: ignore[import-not-found]  # noqa: F401  (missing Triton: a build problem)
        except ImportError as exc:
            raise BuildFailed(f"Triton is not installed: {exc}") from exc
        name = f"compliance_verify_triton_{key}"
        loader = importlib.util.spec_from_file_location(name, self.spec.module)
        if loader is None or loader.loader is None:
            raise BuildFailed(f"cannot load {self.spec.module}")
        module = importlib.util.module_from_spec(loader)
        try:
            loader.loader.exec_module(module)
        except Exception as exc:  # the module's own import failed: the submission's problem
            raise BuildFailed(f"importing {self.spec.module.name} failed: {type(exc).__name__}: {exc}") from exc
        self.function = getattr(module, self.spec.function, None)
        if self.function is None or not hasattr(self.function, "run"):
            raise BuildFailed(f"{self.spec.module.name} has no @triton.jit function {self.spec.function!r}")

    def call(self, case: Case, tensors: Mapping[str, torch.Tensor | None]) -> None:
        """Launch ``function[grid](*arguments, **constants)``."""
        try:
            env = constant_env(self.spec, case.scalars())
            grid = _dim3([evaluate(e, env) for e in self.spec.grid], "grid")
            args = python_arguments(self.spec.arguments, case, tensors, env)
        except ValueError as exc:
            raise LaunchInvalid(str(exc)) from exc
        options = {name: env[name] for name, _ in self.spec.constants}
        if self.spec.num_warps is not None:
            options["num_warps"] = self.spec.num_warps
        self.function[grid](*args, **options)


def _dim3(values: list[int], what: str) -> tuple[int, int, int]:
    padded = (values + [1, 1])[:3]
    limits = (2**31 - 1, 65535, 65535)
    for v, limit in zip(padded, limits, strict=True):
        if not 1 <= v <= limit:
            raise LaunchInvalid(f"{what} {tuple(padded)} is outside 1..{limit}")
    return padded[0], padded[1], padded[2]


Backend = ExtensionBackend | NvrtcBackend | TritonBackend


def make_backend(spec: BuildSpec, cache_dir: Path, module: Any = None) -> Backend:
    """The backend for a build spec; ``cache_dir`` is private to this kernel's process (NVRTC's cubins,
    Triton's cache), ``module`` the built extension's (path, name)."""
    if isinstance(spec, NvrtcBuild):
        return NvrtcBackend(spec, cache_dir)
    if isinstance(spec, TritonBuild):
        return TritonBackend(spec, cache_dir)
    return ExtensionBackend(spec, cache_dir, tuple(module) if module else None)
