"""Binary and link checks: no binary-only kernels, no links out of the tree."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from compliance.build_rules import (
    CMakeTarget,
    MakeRule,
    bazel_artefact,
    cmake_probe,
    cmake_targets,
    is_make_file,
    make_rules,
)
from compliance.paths import parent_dir
from compliance.rulespecs.checks import SYMLINK, TOOL_ARTEFACTS, WITH_SOURCE, WITHOUT_SOURCE
from compliance.setup_sources import FileIndex

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding
    from compliance.inventory import BinaryFile

LISTED_IN_MESSAGE = 5
"""Build products named in a message (details list them all)."""


PLAUSIBLE_CODE_BYTES = 40
"""Bytes of code (comments and whitespace removed) a source needs to count as building a binary."""
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".cu", ".f90", ".f", ".rs", ".go", ".s", ".S")
"""What a binary can be built from (headers alone build nothing)."""
TEXT_SUFFIXES = frozenset({".c", ".cc", ".cpp", ".cxx", ".c++", ".cu", ".cuh", ".h", ".hh", ".hpp", ".py",
                           ".txt", ".md", ".json", ".yaml", ".yml", ".ptx", ".s", ".sh"})
"""A binary wearing one of these extensions pretends to be something else: never a build product."""
BUILD_FILE_NAMES = frozenset({"CMakeLists.txt", "BUILD", "BUILD.bazel", "Makefile", "makefile", "GNUmakefile"})
BUILD_FILE_SUFFIXES = (".cmake", ".mk", ".bzl")
PROBE_READ = 8 * 1024 * 1024
"""Bytes of a binary under ``CMakeFiles/`` searched for CMake's probe strings."""
_COMMENTS = re.compile(rb"/\*.*?\*/|//[^\n]*|#[^\n]*", re.S)
_SOURCE_TOKEN = re.compile(rb"[\w./+-]+\.(?:c|cc|cpp|cxx|cu)\b")


def _stem(name: str) -> str:
    base = name.rsplit("/", 1)[-1].split(".", 1)[0]
    return base[3:] if base.startswith("lib") and len(base) > 3 else base


def _organization(path: str, ctx: CheckContext) -> tuple[str | None, str | None]:
    where = ctx.inventory.locate(path)
    return where.division, where.submitter


def _scope(path: str, ctx: CheckContext) -> tuple[str | None, ...]:
    where = ctx.inventory.locate(path)
    if where.implementation:
        return where.implementation_key
    return (os.path.dirname(path),)


class _Builders:
    """What in the tree can build a binary, read lazily and once per file."""

    def __init__(self, ctx: CheckContext) -> None:
        self.ctx = ctx
        self._plausible: dict[str, bool] = {}
        # A binary wearing a source's name (an ELF called attn.cu) builds nothing: its bytes are
        # not code, however many there are.
        self._binaries = frozenset(b.path for b in ctx.inventory.binaries)
        self.stems: dict[tuple[tuple[str | None, ...], str], list[str]] = {}
        self.build_files: dict[tuple[str | None, ...], list[str]] = {}
        self.make_files: dict[str, list[str]] = {}
        self.cmake_files: dict[tuple[str | None, str | None], list[str]] = {}
        self._rules: dict[str, list[MakeRule]] = {}
        self._targets: dict[str, list[CMakeTarget]] = {}
        self._index: FileIndex | None = None
        for rel in ctx.inventory.files:
            name = rel.rsplit("/", 1)[-1]
            if is_make_file(name):
                self.make_files.setdefault(os.path.dirname(rel), []).append(rel)
            elif name == "CMakeLists.txt":
                self.cmake_files.setdefault(_organization(rel, ctx), []).append(rel)
            if name.endswith(SOURCE_SUFFIXES):
                self.stems.setdefault((_scope(rel, ctx), _stem(rel)), []).append(rel)
            elif name in BUILD_FILE_NAMES or name.endswith(BUILD_FILE_SUFFIXES):
                self.build_files.setdefault(_scope(rel, ctx), []).append(rel)

    def _read(self, rel: str, limit: int = 256 * 1024) -> bytes:
        try:
            with open(self.ctx.root / rel, "rb") as handle:
                return handle.read(limit)
        except OSError:
            return b""

    def plausible(self, rel: str) -> bool:
        """True when ``rel`` is a file of the tree holding real code (not empty, not a decoy)."""
        if rel not in self._plausible:
            readable = rel in self.ctx.inventory.files and rel not in self._binaries
            code = b"".join(_COMMENTS.sub(b"", self._read(rel)).split()) if readable else b""
            self._plausible[rel] = len(code) >= PLAUSIBLE_CODE_BYTES
        return self._plausible[rel]

    def by_stem(self, binary: str, scope: tuple[str | None, ...]) -> bool:
        return any(self.plausible(s) for s in self.stems.get((scope, _stem(binary)), ()))

    def by_setup(self, binary: str, scope: tuple[str | None, ...]) -> bool:
        stem = _stem(binary)
        return any(ext.name and _stem(ext.name.rsplit(".", 1)[-1]) == stem and ext.shipped
                   and all(self.plausible(s) for s in ext.shipped)
                   for ext in self.ctx.inventory.setup_extensions if _scope(ext.setup_path, self.ctx) == scope)

    def by_build_file(self, binary: str, scope: tuple[str | None, ...]) -> bool:
        word = re.compile(rb"\b" + re.escape(_stem(binary).encode()) + rb"\b")
        for build in self.build_files.get(scope, ()):
            text = self._read(build)
            if not word.search(text):
                continue
            base = os.path.dirname(build)
            for token in _SOURCE_TOKEN.findall(text):
                source = os.path.normpath(os.path.join(base, token.decode(errors="replace"))).replace(os.sep, "/")
                if self.plausible(source):
                    return True
        return False

    @property
    def index(self) -> FileIndex:
        if self._index is None:
            self._index = FileIndex(self.ctx.inventory.files)
        return self._index

    def _make_rules(self, script: str) -> list[MakeRule]:
        if script not in self._rules:
            self._rules[script] = make_rules(self._read(script).decode("utf-8", "replace"), script)
        return self._rules[script]

    def _present(self, pattern: str) -> bool:
        if "*" in pattern:
            return any(self.plausible(found) for found in self.index.matching(pattern))
        return self.plausible(pattern)

    def by_make_rule(self, path: str) -> bool:
        """A rule of a Makefile in the binary's directory or above it builds it from present sources."""
        directory = os.path.dirname(path)
        while True:
            for script in self.make_files.get(directory, ()):
                for rule in self._make_rules(script):
                    stem = rule.match(path)
                    if stem is not None and all(self._present(s.replace("%", stem)) for s in rule.sources):
                        return True
            if not directory:
                return False
            directory = os.path.dirname(directory)

    def by_cmake_target(self, binary: BinaryFile) -> bool:
        """A CMake target of the binary's organization builds it from present sources: a static
        library whose compiled members are the objects of the target's sources (CMake builds
        wherever it is run, so a copied ``libNAME.a`` may lie anywhere), or a shared library or
        executable of that name under the CMakeLists.txt's own directory (its build directory)."""
        name = binary.path.rsplit("/", 1)[-1]
        for script in self.cmake_files.get(_organization(binary.path, self.ctx), ()):
            if script not in self._targets:
                self._targets[script] = cmake_targets(self._read(script).decode("utf-8", "replace"), script)
            for target in self._targets[script]:
                if target.product != name or not target.resolved or not all(map(self.plausible, target.sources)):
                    continue
                if binary.members:
                    objects = {s.rsplit("/", 1)[-1] for s in target.sources} | set(target.generated)
                    objects |= {o.split(".", 1)[0] for o in objects}
                    if all(m.rsplit("/", 1)[-1].removesuffix(".o") in objects for m, _ in binary.members):
                        return True
                elif binary.kind != "ar-archive" and binary.path.startswith(parent_dir(script) + "/"):
                    return True
        return False

    def builds(self, binary: BinaryFile) -> bool:
        """True when something in the tree plausibly builds ``binary``."""
        if os.path.splitext(binary.path)[1].lower() in TEXT_SUFFIXES:
            return False
        scope = _scope(binary.path, self.ctx)
        # A container is built when each compiled member is (a wheel of the tree's own extension).
        if not binary.members and self.by_make_rule(binary.path) or self.by_cmake_target(binary):
            return True
        names = [member.rsplit("/", 1)[-1] for member, _ in binary.members] or [binary.path]
        return all(self.by_stem(name, scope) or self.by_setup(name, scope) or self.by_build_file(name, scope)
                   for name in names)

    def tool_artefact(self, binary: BinaryFile) -> tuple[str, str] | None:
        """(cache directory, what) when ``binary`` is a build tool's own artefact."""
        if cmake_probe(binary.path, lambda: self._read(binary.path, PROBE_READ)):
            parts = binary.path.split("/")
            return "/".join(parts[:parts.index("CMakeFiles") + 1]), "CMake compiler probe"
        what = bazel_artefact(binary.path, self.ctx.inventory.files, self.index.holds_directory)
        if what is None:
            return None
        marker = "_embedded_binaries" if what == "Bazel install base" else "external"
        parts = binary.path.split("/")
        last = len(parts) - 2 - parts[:-1][::-1].index(marker)
        return "/".join(parts[:last + 1]), what


def _group_of(ctx: CheckContext, binary: BinaryFile) -> str:
    """Where a build product is reported: its vendored tree, else its build directory, else its directory."""
    owner = ctx.inventory.vendored_owner(binary.path)
    if owner is not None:
        return owner
    parts = binary.path.split("/")
    for depth in range(len(parts) - 2):
        if parts[depth] == "build" and parts[depth + 1].startswith(("temp.", "lib.")):
            return "/".join(parts[:depth + 2])
    return os.path.dirname(binary.path) or "."


def _products_finding(ctx: CheckContext, where: str, products: list[BinaryFile]) -> Finding | None:
    names = [b.path[len(where) + 1:] if where != "." else b.path for b in products]
    listed = ", ".join(names[:LISTED_IN_MESSAGE])
    more = f" and {len(names) - LISTED_IN_MESSAGE} more" if len(names) > LISTED_IN_MESSAGE else ""
    return ctx.finding(WITH_SOURCE.id, where, f"{len(products)} committed build product(s) whose sources "
                       f"are in the tree: {listed}{more}",
                       details={"products": [{"path": b.path, "kind": b.kind, "size": b.size} for b in products]})


def _what(binary: BinaryFile) -> str:
    """What the binary is, in words: a compiled file, a container through its compiled members,
    or an archive that could not be opened."""
    if binary.members:
        named = ", ".join(f"{m} ({k})" for m, k in binary.members[:LISTED_IN_MESSAGE])
        more = f" and {len(binary.members) - LISTED_IN_MESSAGE} more" if len(binary.members) > LISTED_IN_MESSAGE else ""
        return f"{binary.kind} archive ({binary.size} bytes) holding compiled member(s) {named}{more}"
    if binary.unopened:
        return f"{binary.kind} archive ({binary.size} bytes) that cannot be opened ({binary.unopened})"
    return f"{binary.kind} ({binary.size} bytes)"


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """Binary and symlink findings."""
    builders = _Builders(ctx)
    grouped: dict[str, list[BinaryFile]] = {}
    artefacts: dict[tuple[str, str], list[BinaryFile]] = {}
    for binary in ctx.inventory.binaries:
        artefact = builders.tool_artefact(binary)
        if artefact is not None:
            artefacts.setdefault(artefact, []).append(binary)
        elif builders.builds(binary):
            grouped.setdefault(_group_of(ctx, binary), []).append(binary)
        else:
            yield ctx.finding(WITHOUT_SOURCE.id, binary.path, f"{_what(binary)} that nothing in the tree "
                              "builds (no plausible source, setup.py extension or build rule for it)",
                              details={"members": [{"member": m, "kind": k} for m, k in binary.members]}
                              if binary.members else None)
    for where, products in sorted(grouped.items()):
        yield _products_finding(ctx, where, products)
    for (where, what), found in sorted(artefacts.items()):
        names = ", ".join(b.path[len(where) + 1:] for b in found[:LISTED_IN_MESSAGE])
        more = f" and {len(found) - LISTED_IN_MESSAGE} more" if len(found) > LISTED_IN_MESSAGE else ""
        yield ctx.finding(TOOL_ARTEFACTS.id, where, f"{len(found)} {what} binar{'y' if len(found) == 1 else 'ies'} "
                          f"committed with a build cache: {names}{more}",
                          details={"artefacts": [{"path": b.path, "kind": b.kind, "size": b.size} for b in found]})
    for link in ctx.inventory.symlinks:
        if link.escapes:
            yield ctx.finding(SYMLINK.id, link.path, f"symbolic link to {link.target!r} leaves the tree")
