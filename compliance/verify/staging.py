"""Private copies of each kernel's declared files, and builds from them that the verifier owns.

The verifier (this module runs in its process, never loading submission code) copies, before any
kernel's process starts, exactly the files each kernel declares (its sources, build dependencies,
verification shims, and the headers of its include directories and source directories) into a
read-only directory named by their content hash, inside a directory of its own made fresh for
this run. Every kernel is built and run from that copy, so a kernel that rewrites another's source
in the tree (and restores it later) changes nothing that is verified. A torch extension is built
in a build-only process (the compiler runs; no submission code does) into a directory keyed by the
hash of every input: the copied files, the flags, the compiler, the torch version, the device. The
verifier hashes the built module once, and checks that hash again each time it hands a copy of the
module to a kernel's process, so a build product changed afterwards is never loaded. Nothing on
disk is trusted across runs: same-user code can rewrite any cache, so each run builds afresh.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from compliance.verify.build import BuildSpec, ExtensionBuild, NvrtcBuild, TritonBuild
from compliance.verify.hygiene import kernel_environment

HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".cuh", ".inc", ".cu", ".cpp", ".cc")
"""Files a source may reach by ``#include`` from its own or a declared include directory."""
def instrument_flags() -> tuple[str, ...]:
    """Added to a CPU extension's host flags: every function of the copied sources calls the verifier's
    probe on entry (the headers of torch, pybind11, Python and the system are left out), which is how the
    verifier learns that the declared entry function ran (``compliance.verify.evidence``)."""
    import sysconfig

    from torch.utils import cpp_extension

    excluded = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"], "/usr/include", "/usr/lib/gcc"]
    return ("-finstrument-functions",
            "-finstrument-functions-exclude-file-list=" + ",".join(p for p in excluded if "," not in p))


def digest(parts: list[bytes]) -> str:
    """SHA-256 over length-prefixed parts."""
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """Hash of one file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _headers(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return [p for p in sorted(directory.rglob("*"))
            if p.suffix in HEADER_SUFFIXES and p.is_file() and not p.is_symlink()]


def declared_files(spec: BuildSpec, root: Path) -> list[str]:
    """Root-relative paths of everything a kernel's build may read: what it declares, and the headers
    of its include directories and of its sources' directories (``#include "x.h"`` beside the source)."""
    if isinstance(spec, TritonBuild):
        paths = [spec.module]
    elif isinstance(spec, NvrtcBuild):
        paths = [spec.source, *(h for d in spec.include_dirs for h in _headers(d))]
    else:
        compiled = list(spec.compiled)
        directories = [*spec.include_dirs, *{p.parent for p in compiled}]
        paths = [*compiled, *(h for d in directories for h in _headers(d))]
    out: list[str] = []
    for p in paths:
        rel = p.resolve().relative_to(root.resolve()).as_posix() if p.is_absolute() else p.as_posix()
        if rel not in out:
            out.append(rel)
    return out


def _make_read_only(top: Path) -> None:
    for dirpath, _, filenames in os.walk(top):
        for name in filenames:
            os.chmod(Path(dirpath, name), stat.S_IRUSR | stat.S_IRGRP)
    for dirpath, _, _ in sorted(os.walk(top), key=lambda t: -len(t[0])):
        os.chmod(dirpath, stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)


def remove_tree(top: Path) -> None:
    """Delete a directory this module made read-only (or one a kernel changed the modes of)."""
    if not top.exists():
        return
    for dirpath, dirnames, _ in os.walk(top):
        for d in dirnames:
            try:
                os.chmod(Path(dirpath, d), stat.S_IRWXU)
            except OSError:
                pass
    os.chmod(top, stat.S_IRWXU)
    shutil.rmtree(top, ignore_errors=True)


@dataclass(frozen=True)
class Staged:
    """One kernel's private copy of its declared files."""

    root: Path
    """Stands in for the checked tree: the same relative paths, only the declared files."""
    files: tuple[tuple[str, str], ...]
    """(relative path, sha256) of every copied file."""
    key: str
    """Hash over ``files``."""


@dataclass(frozen=True)
class Artefact:
    """A built extension module as the verifier hashed it right after the build."""

    path: Path
    """The module file in the build directory."""
    module: str
    """Its Python module name (``PyInit_<module>``)."""
    sha256: str
    """Hash of its bytes after the build."""
    build_dir: Path
    """Where ninja put the objects."""
    seconds: float
    """Time of the build."""


class ArtefactChanged(RuntimeError):
    """A build product no longer has the hash the verifier recorded."""


@dataclass
class RunDirectory:
    """This run's directory under the build root: staged copies and builds, all made by the verifier."""

    base: Path
    staged: dict[str, Staged] = field(default_factory=dict)
    artefacts: dict[str, Artefact] = field(default_factory=dict)

    @classmethod
    def create(cls, build_root: Path) -> RunDirectory:
        """A fresh directory (never one an earlier run, or a kernel, could have prepared), removed at exit."""
        build_root.mkdir(parents=True, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix="run-", dir=build_root))
        atexit.register(remove_tree, base)
        return cls(base)

    def stage(self, tree: Path, relpaths: list[str]) -> Staged:
        """The read-only copy of ``relpaths`` (made once per distinct content in this run)."""
        files = tuple((rel, file_sha256(tree / rel)) for rel in relpaths if (tree / rel).is_file())
        key = digest([f"{rel}\0{sha}".encode() for rel, sha in files])[:24]
        if key in self.staged and self._intact(self.staged[key]):
            return self.staged[key]
        target = self.base / f"src-{key}"
        remove_tree(target)
        for rel, _ in files:
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(tree / rel, dest)
        target.mkdir(parents=True, exist_ok=True)
        copied = tuple((rel, file_sha256(target / rel)) for rel, _ in files)
        _make_read_only(target)
        self.staged[key] = Staged(target, copied, key)
        return self.staged[key]

    @staticmethod
    def _intact(staged: Staged) -> bool:
        try:
            return all(file_sha256(staged.root / rel) == sha for rel, sha in staged.files)
        except OSError:
            return False

    def check_staged(self, staged: Staged) -> None:
        """Raise ``ArtefactChanged`` when a copied file changed since it was copied."""
        if not self._intact(staged):
            raise ArtefactChanged(f"the private copy of the kernel's declared files in {staged.root} was "
                                  "changed after the verifier made it")

    def extension(self, spec: ExtensionBuild, staged: Staged, *, timeout_s: float, instrument: bool,
                  log: Path) -> Artefact:
        """Build the extension (or reuse this run's identical build, hash checked)."""
        import torch

        cflags = (*spec.extra_cflags, *(instrument_flags() if instrument else ()))
        key = digest([staged.key.encode(), spec.device.encode(), torch.__version__.encode(),
                      json.dumps([cflags, spec.extra_cuda_cflags, [str(d) for d in spec.include_dirs]]).encode(),
                      compiler_identity().encode()])[:20]
        known = self.artefacts.get(key)
        if known is not None:
            verify_artefact(known)
            return known
        directory = self.base / f"ext-{key}"
        remove_tree(directory)  # nothing this run did not build itself is used
        directory.mkdir(parents=True)
        module = f"compliance_verify_{key}"
        job = {"name": module, "sources": [str(s) for s in spec.compiled], "extra_cflags": list(cflags),
               "extra_cuda_cflags": list(spec.extra_cuda_cflags),
               "include_dirs": [str(d) for d in spec.include_dirs], "build_directory": str(directory),
               "with_cuda": any(s.suffix in (".cu", ".cuh") for s in spec.compiled)}
        job_path = directory / "job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        started = time.monotonic()
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "compliance.verify.build_process", str(job_path)],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=directory,
                                    env=kernel_environment(), start_new_session=True)
            try:
                status = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                raise
        if status != 0:
            raise BuildFailedError(f"building the extension failed (exit status {status})")
        path = directory / f"{module}.so"
        if not path.is_file():
            raise BuildFailedError(f"the build produced no module {path.name}")
        artefact = Artefact(path, module, file_sha256(path), directory, time.monotonic() - started)
        _make_read_only(directory)
        self.artefacts[key] = artefact
        return artefact


class BuildFailedError(RuntimeError):
    """The build-only process failed (its log says why)."""


def verify_artefact(artefact: Artefact) -> None:
    """Raise ``ArtefactChanged`` unless the module still has the hash recorded after its build."""
    try:
        now = file_sha256(artefact.path)
    except OSError as exc:
        raise ArtefactChanged(f"the built module {artefact.path.name} is gone ({exc})") from exc
    if now != artefact.sha256:
        raise ArtefactChanged(f"the built module {artefact.path.name} changed after the build "
                              f"(sha256 {artefact.sha256[:16]}... recorded, {now[:16]}... now)")


def hand_over(artefact: Artefact, directory: Path) -> Path:
    """A copy of the module for one kernel's process, checked against the recorded hash after copying."""
    verify_artefact(artefact)
    dest = directory / artefact.path.name
    shutil.copyfile(artefact.path, dest)
    if file_sha256(dest) != artefact.sha256:
        raise ArtefactChanged(f"the copy of {artefact.path.name} differs from the module that was built")
    return dest


_COMPILER: list[str] = []


def compiler_identity() -> str:
    """The host compiler's first ``--version`` line (part of every build key)."""
    if not _COMPILER:
        cxx = os.environ.get("CXX", "c++")
        try:
            out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30, check=False)
            _COMPILER.append(f"{cxx}: {out.stdout.splitlines()[0] if out.stdout else out.returncode}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            _COMPILER.append(f"{cxx}: {type(exc).__name__}")
    return _COMPILER[0]

