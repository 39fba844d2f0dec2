"""Which code ran during each call: the verifier's probe and what its records prove (verifier side, no torch).

``probe.c`` is compiled here, by the verifier, into a small library the kernel's process gets through
``LD_PRELOAD`` (loaded before the interpreter starts, so no Python code of the kernel can decline it).
It writes its records to a pipe of its own (``PROBE_FD``). For each call of the kernel they say:

* on the CPU, which functions of the extension's own sources were entered (the sources are compiled
  with ``-finstrument-functions``): the verifier maps each address to a symbol of the module it built
  and hashed (``nm``) and to the object file that defines it, and requires one of the kernel's
  ``entry_symbols``, defined in one of its ``sources`` (not in a shim or build dependency);
* on a GPU, which kernels were launched (CUDA's profiling interface, CUPTI callbacks): one of them must
  be a declared kernel function (``entry_symbols`` or ``helpers``: a plugin's entry is a host enqueue
  that launches a helper), and for a torch extension one whose host stub the objects compiled from
  the kernel's ``sources`` define (nvcc gives every ``__global__`` function one under its own name).

An output produced while no declared entry ran (torch's own ``embedding_bag`` called by a patched
runner, an honest function bound by a shim) is ``verify-entry-not-run``. docs/security.md states what
this cannot see: native code of the kernel can write forged records into the probe's pipe.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROBE_FD = 1019
"""The probe's pipe in the kernel's process (probe.c's PROBE_FD)."""
PROBE_SOURCE = Path(__file__).with_name("probe.c")


@dataclass(frozen=True)
class Probe:
    """A compiled probe library."""

    path: Path
    gpu: bool


def _cupti_dirs() -> tuple[Path, Path] | None:
    """(include dir, library file) of CUPTI: the pip package torch uses first, then the toolkit's."""
    candidates: list[Path] = []
    for entry in sys.path:
        candidates += [Path(p) for p in glob.glob(os.path.join(entry, "nvidia", "**", "cupti.h"), recursive=True)]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates += [Path(p) for p in glob.glob(os.path.join(home, "extras", "CUPTI", "include", "cupti.h"))]
            candidates += [Path(p) for p in glob.glob(os.path.join(home, "include", "cupti.h"))]
    for header in candidates:
        top = header.parent.parent
        libs = sorted(glob.glob(str(top / "lib*" / "libcupti.so*")), key=len)
        if libs:
            return header.parent, Path(libs[0])
    return None


def _cuda_h_dirs() -> list[Path]:
    """Directories holding cuda.h (cupti.h includes it; the pip package of CUPTI does not ship it)."""
    found: list[Path] = []
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and Path(home, "include", "cuda.h").is_file():
            found.append(Path(home, "include"))
    for entry in sys.path:
        found += [Path(p).parent for p in glob.glob(os.path.join(entry, "nvidia", "**", "cuda.h"), recursive=True)]
    return found


def build_probe(directory: Path, gpu: bool) -> Probe | str:
    """Compile the probe into ``directory`` (a directory of this run); a string says why it cannot be."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        return "no C compiler to build the verifier's probe"
    out = directory / ("probe-gpu.so" if gpu else "probe-cpu.so")
    if out.is_file():
        return Probe(out, gpu)
    command = [compiler, "-shared", "-fPIC", "-O2", "-o", str(out), str(PROBE_SOURCE)]
    if gpu:
        found = _cupti_dirs()
        if found is None:
            return "CUDA's profiling library (CUPTI) was not found, so kernel launches cannot be recorded"
        include, library = found
        command[1:1] = ["-DCOMPLIANCE_WITH_CUPTI", f"-I{include}", *(f"-I{d}" for d in _cuda_h_dirs())]
        command += [str(library), f"-Wl,-rpath,{library.parent}"]
    command += ["-ldl", "-lpthread"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        return f"building the verifier's probe failed: {(result.stderr or result.stdout)[-800:]}"
    return Probe(out, gpu)


@dataclass
class CallRecord:
    """What the probe saw during one call."""

    functions: set[tuple[str, int]] = field(default_factory=set)
    """(object file, offset) of each instrumented function entered."""
    launches: set[str] = field(default_factory=set)
    """Names of the GPU kernels launched."""
    complete: bool = False
    """The end mark arrived."""


@dataclass
class ProbeRecords:
    """Records read from the probe's pipe, by (case index, run)."""

    calls: dict[tuple[int, int], CallRecord] = field(default_factory=dict)
    unavailable: str | None = None
    buffer: bytes = b""
    current: tuple[int, int] | None = None

    def feed(self, chunk: bytes) -> None:
        """Parse complete lines."""
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            self._line(line.decode("utf-8", "replace"))
        if len(self.buffer) > 1 << 20:
            self.buffer = b""

    def _line(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        if kind in ("B", "E"):
            parts = rest.split()
            if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
                return
            key = (int(parts[0]), int(parts[1]))
            if kind == "B":
                self.current = key
                self.calls[key] = CallRecord()
            elif self.current == key:
                self.calls[key].complete = True
                self.current = None
        elif kind == "X":
            self.unavailable = rest
        elif self.current is not None and kind == "F" and "\t" in rest:
            path, _, offset = rest.rpartition("\t")
            try:
                self.calls[self.current].functions.add((path, int(offset, 16)))
            except ValueError:
                return
        elif self.current is not None and kind == "K":
            self.calls[self.current].launches.add(rest)


def base_name(symbol: str) -> str:
    """The bare function name of a (demangled or plain) symbol: ``void ns::f<int>(at::Tensor)`` -> ``f``."""
    depth, cut = 0, len(symbol)
    for i, ch in enumerate(symbol):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    head = re.sub(r"<[^<>]*>", "", symbol[:cut])
    while "<" in head:
        reduced = re.sub(r"<[^<>]*>", "", head)
        if reduced == head:
            break
        head = reduced
    return head.split()[-1].split("::")[-1] if head.split() else head


def _nm(path: Path) -> list[tuple[int, str]]:
    """(offset, demangled name) of every defined function symbol of an object or module (in an object
    file many sit at offset 0 of sections of their own)."""
    result = subprocess.run(["nm", "-C", "--defined-only", str(path)], capture_output=True, text=True, timeout=120,
                            check=False)
    out: list[tuple[int, str]] = []
    for line in result.stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and len(parts[1]) == 1 and parts[1] in "TtWw":
            try:
                out.append((int(parts[0], 16), parts[2]))
            except ValueError:
                continue
    return out


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Mangled -> demangled (``c++filt``; names it cannot demangle stay as they are)."""
    names = list(names)
    if not names or shutil.which("c++filt") is None:
        return {n: n for n in names}
    result = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60,
                            check=False)
    lines = result.stdout.splitlines()
    return {n: (lines[i] if i < len(lines) else n) for i, n in enumerate(names)}


@dataclass
class SymbolMap:
    """The symbols of a built module and which of them its kernel's own sources define."""

    module: Path
    """The module copy the kernel's process loaded."""
    by_offset: Mapping[int, str]
    from_sources: frozenset[str]
    """Demangled names defined in the objects compiled from the kernel's ``sources``."""

    @classmethod
    def of(cls, module: Path, source_objects: Iterable[Path]) -> SymbolMap:
        """nm of the module and of the sources' object files."""
        defined: set[str] = set()
        for obj in source_objects:
            defined |= {name for _, name in _nm(obj)}
        by_offset: dict[int, str] = {}
        for offset, name in _nm(module):
            by_offset.setdefault(offset, name)
        return cls(module, by_offset, frozenset(defined))


def source_objects(build_dir: Path, sources: Iterable[Path]) -> list[Path]:
    """The object files torch.utils.cpp_extension's ninja build made from ``sources``."""
    out = []
    for src in sources:
        name = f"{src.stem}.cuda.o" if src.suffix in (".cu", ".cuh") else f"{src.stem}.o"
        out.append(build_dir / name)
    return out


def entry_problem(call: CallRecord | None, entries: Iterable[str], symbols: SymbolMap | None, gpu: bool) -> str | None:
    """Why this call is not evidence that a declared entry ran (None: it is)."""
    wanted = set(entries)
    if call is None or not call.complete:
        return "the verifier's probe recorded nothing for this call (the call did not go through the kernel's " \
               "process as declared)"
    if gpu:
        launched = demangle(call.launches)
        hits = [n for n in launched.values() if base_name(n) in wanted]
        if hits and (symbols is None or any(n in symbols.from_sources for n in hits)):
            return None
        if hits:
            return (f"the kernel launched as {', '.join(sorted({base_name(n) for n in hits}))} is defined outside "
                    "the kernel's declared sources (in a verification shim or build dependency), not by the "
                    "shipped kernel")
        names = sorted(base_name(n) for n in launched.values())
        return (f"none of the declared kernel functions ({', '.join(sorted(wanted))}) was launched; the GPU ran "
                f"{', '.join(names[:8]) or 'no kernel'}{' ...' if len(names) > 8 else ''}: the output came from "
                "other code")
    if symbols is None:
        return "the built module's symbols could not be read"
    module = os.path.realpath(symbols.module)
    entered = [symbols.by_offset.get(off, "") for path, off in call.functions if os.path.realpath(path) == module]
    named = [s for s in entered if base_name(s) in wanted]
    if any(s in symbols.from_sources for s in named):
        return None
    if named:
        return (f"the function that ran as {', '.join(sorted({base_name(s) for s in named}))} is defined outside "
                "the kernel's declared sources (in a verification shim or build dependency), not by the shipped "
                "kernel")
    ran = sorted({base_name(s) for s in entered if s})
    return (f"no declared entry function ({', '.join(sorted(wanted))}) of the kernel's sources ran during the "
            f"call{'; it entered ' + ', '.join(ran[:8]) if ran else ''}: the output came from other code")
