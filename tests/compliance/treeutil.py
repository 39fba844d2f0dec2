"""Helpers for tests that build submission trees in tmp_path."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import os
import random
import shutil
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import yaml

CASES = Path(__file__).parent / "cases"
BASE = CASES / "base"

ELF_HEADERS = {
    # e_ident (64-bit, little endian) + e_type + e_machine
    "elf-so": b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + (3).to_bytes(2, "little") + (62).to_bytes(2, "little"),
    "elf-o": b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + (1).to_bytes(2, "little") + (62).to_bytes(2, "little"),
    "cubin": b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + (2).to_bytes(2, "little") + (190).to_bytes(2, "little"),
    "ar": b"!<arch>\n",
    "fatbin": b"\x50\xed\x55\xba\x01\x00\x10\x00",
    "macho": b"\xcf\xfa\xed\xfe\x07\x00\x00\x01",
    "pe": b"MZ" + b"\x00" * 58 + (128).to_bytes(4, "little"),
    "zip": b"PK\x03\x04\x14\x00\x00\x00\x08\x00",
    "java-class": b"\xca\xfe\xba\xbe\x00\x00\x00\x34",  # class file version 52 (Java 8): no Mach-O
    "gzip": b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",
    "elf-behind-prefix": b"#" + b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + (3).to_bytes(2, "little")
                         + (62).to_bytes(2, "little"),
}


def fake_binary(kind: str) -> bytes:
    """A file that starts like a real binary of ``kind`` (magic bytes only matter)."""
    return ELF_HEADERS[kind] + bytes(range(256)) * 4


def build_case(case_dir: Path, dest: Path) -> dict:
    """Copy the base tree to ``dest`` and apply the case's overlay; return case.yaml."""
    case = yaml.safe_load((case_dir / "case.yaml").read_text())
    shutil.copytree(BASE, dest, symlinks=True)
    for old, new in (case.get("rename") or {}).items():
        (dest / new).parent.mkdir(parents=True, exist_ok=True)
        os.rename(dest / old, dest / new)
    files = case_dir / "files"
    if files.is_dir():
        shutil.copytree(files, dest, dirs_exist_ok=True)
    for rel in case.get("remove") or []:
        target = dest / rel
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    for rel, kind in (case.get("binary") or {}).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(fake_binary(kind))
    for rel in case.get("fifos") or []:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(dest / rel)
    for rel, target in (case.get("symlinks") or {}).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, dest / rel)
    for rel, levels in (case.get("deep") or {}).items():
        deep_kernel(dest / rel, levels)
    write_built(dest, case)
    for rel, spec in (case.get("generate") or {}).items():
        # Files too pathological to commit as such (linters crash on them): prefix +
        # repeat * times + suffix.
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(spec.get("prefix", "") + spec["repeat"] * spec["times"] + spec.get("suffix", ""))
    return case


def member_bytes(spec: Any) -> bytes:
    """A file's bytes from a fixture spec: text; ``{binary: KIND, text: ...}`` (a fake binary with
    the text inside); ``{noise: N}`` (N deterministic pseudo-random bytes: tensor or image data);
    ``{repeat: TEXT, times: N}``; ``{archive: SPEC}`` (see ``archive_bytes``)."""
    if isinstance(spec, str):
        return spec.encode()
    if "archive" in spec:
        return archive_bytes(spec["archive"])
    if "noise" in spec:
        return random.Random(spec["noise"]).randbytes(spec["noise"])
    if "repeat" in spec:
        return (spec["repeat"] * spec["times"]).encode()
    return fake_binary(spec["binary"]) + spec.get("text", "").encode()


def archive_bytes(spec: dict[str, Any]) -> bytes:
    """A container built from ``{format: zip|tar|tar.gz|gz|bz2|xz|ar, members: {name: spec}}``
    (single-stream formats take ``content: spec``). Fixed timestamps: the bytes are reproducible."""
    kind = spec["format"]
    if kind in ("gz", "bz2", "xz"):
        data = member_bytes(spec["content"])
        return {"gz": lambda: gzip.compress(data, mtime=0), "bz2": lambda: bz2.compress(data),
                "xz": lambda: lzma.compress(data)}[kind]()
    members = {name: member_bytes(value) for name, value in spec["members"].items()}
    out = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in members.items():
                archive.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
    elif kind in ("tar", "tar.gz"):
        with tarfile.open(fileobj=out, mode="w:gz" if kind == "tar.gz" else "w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), 0
                tar.addfile(info, io.BytesIO(data))
    else:  # ar: a .deb or a static library
        out.write(b"!<arch>\n")
        for name, data in members.items():
            out.write(f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{644:<8}{len(data):<10}`\n".encode())
            out.write(data + (b"\n" if len(data) % 2 else b""))
    return out.getvalue()


def write_built(dest: Path, spec: dict[str, Any]) -> None:
    """Write a fixture's ``archives:`` (path -> archive spec) and ``blobs:`` (path -> member spec)."""
    for rel, archive in (spec.get("archives") or {}).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(archive_bytes(archive))
    for rel, blob in (spec.get("blobs") or {}).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(member_bytes(blob))


def materialise_round(pattern: Path, dest: Path) -> dict[str, Any]:
    """Copy a fixture round's ``tree/`` to ``dest``, write what its round.yaml builds; return round.yaml."""
    spec: dict[str, Any] = yaml.safe_load((pattern / "round.yaml").read_text())
    if (pattern / "tree").is_dir():
        shutil.copytree(pattern / "tree", dest, symlinks=True)
    dest.mkdir(parents=True, exist_ok=True)
    write_built(dest, spec)
    return spec


DEEP_KERNEL = b"__global__ void hidden(float* x) { x[0] = 1.0f; }\n"


def deep_kernel(top: Path, levels: int, name: str = "d" * 200) -> str:
    """``levels`` directories named ``name`` below ``top``, a CUDA kernel at the bottom.

    Built with ``openat``-style calls (``dir_fd``), so the chain may be longer than
    PATH_MAX, which no path-based call can reach. Returns the kernel's path relative to
    ``top``.
    """
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        out = os.open("hidden.cu", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, DEEP_KERNEL)
        os.close(out)
    finally:
        os.close(fd)
    return "/".join([name] * levels + ["hidden.cu"])


def tree_digest(root: Path) -> str:
    """Hash of every path, link target and file content under ``root``."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            path = os.path.join(dirpath, name)
            digest.update(os.fsencode(os.path.relpath(path, root)))
            if os.path.islink(path):
                digest.update(os.fsencode(os.readlink(path)))
            elif not os.path.isfile(path):  # a FIFO would block a reader
                digest.update(b"special")
            else:
                with open(path, "rb") as handle:
                    digest.update(handle.read())
        digest.update(b"|".join(os.fsencode(d) for d in dirnames))
    return digest.hexdigest()
