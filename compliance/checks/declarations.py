"""Kernel declaration checks: every native kernel is declared, allowed, and ships its source."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from compliance import glue, preprocessor
from compliance.build_rules import bazel_artefact
from compliance.context import DeclaredKernel
from compliance.inventory import C_SOURCE_EXTENSIONS
from compliance.kernel_symbols import kernel_definitions, kernel_functions
from compliance.manifest import MANIFEST_NAME
from compliance.paths import parent_dir, tree_relative
from compliance.rulespecs.checks import (
    ENTRY_SYMBOL,
    GLUE_COMPUTES,
    KERNEL_FUNCTION,
    LANGUAGE,
    MANIFEST_INVALID,
    MANIFEST_MISPLACED,
    NOT_ALLOWLISTED,
    PATH_UNREADABLE,
    REFERENCE_OP,
    SOURCE_EMPTY,
    SOURCE_MISSING,
    SOURCE_OUTSIDE,
    UNDECLARED,
    UNSHIPPED,
    VENDORED,
)
from compliance.setup_sources import FileIndex, fixed_directory, fnmatch_under

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding
    from compliance.layout import Location
    from compliance.preprocessor import Resolver
    from compliance.ruleset import AllowlistEntry

VENDORED_DECLARATION = "a `vendored:` path must be a directory strictly inside the implementation"


_READ_LIMIT = 8 * 1024 * 1024
"""Bytes of each declared source searched for its entry symbols (sources are read no further)."""


def _manifest_findings(ctx: CheckContext) -> Iterator[Finding | None]:
    for relpath, manifest in ctx.manifests:
        for problem in manifest.problems:
            yield ctx.finding(MANIFEST_INVALID.id, relpath, problem.message, line=problem.line)
        for entry in manifest.vendored:
            tree = tree_relative(parent_dir(relpath), entry.path)
            if tree not in ctx.inventory.declared_vendored:
                where = "outside the tree" if tree is None else f"{tree or '.'}"
                yield ctx.finding(MANIFEST_INVALID.id, relpath, f"vendored path {entry.path!r} ({where}) "
                                  f"groups nothing: {VENDORED_DECLARATION} (below its root and any "
                                  "framework level), never the implementation itself, an ancestor "
                                  "of it or anything outside it", line=entry.line)
        if ctx.inventory.locate(relpath).implementation is None:
            yield ctx.finding(MANIFEST_MISPLACED.id, relpath,
                              "kernel manifest is not inside an implementation directory")


def _declared_sources(ctx: CheckContext) -> set[str]:
    declared: set[str] = set()
    for item in ctx.kernels():
        declared.update(rel for _, rel in item.source_relpaths() if rel)
    return declared


BINDING_MARKERS = frozenset({"extension"})
"""Evidence that a file binds kernels to Python (PYBIND11_MODULE, TORCH_LIBRARY, torch/extension.h)
rather than holding one."""


def _declared_glue(ctx: CheckContext) -> set[str]:
    """Files a kernel's ``build:`` lists as build dependencies or verification shims."""
    return {rel for item in ctx.kernels() for rel in item.glue_relpaths()}


def _undeclared(ctx: CheckContext) -> Iterator[Finding | None]:
    declared = _declared_sources(ctx)
    glue = _declared_glue(ctx)
    for native in ctx.inventory.native:
        if native.unproven or native.proven or native.path in declared:
            continue
        if native.awaits_upstream and ctx.proof == "upstream":
            continue  # the upstream stage compares it with the declared commit and names it if it differs
        if native.path in glue and {e.marker for e in native.evidence} <= BINDING_MARKERS:
            continue  # a binding a kernel's build declares; a kernel function in it is still undeclared
        markers = ", ".join(sorted({e.marker for e in native.evidence}))
        inside, details = "", None
        if native.modified is not None:
            inside = f"; it is {native.modified.describe()} (copy at {native.modified.tree}/)"
            details = {"modified_upstream": {"copy": native.modified.tree, "project": native.modified.project_name,
                                             "upstream_path": native.modified.upstream_path,
                                             "nearest_blob": native.modified.nearest_blob,
                                             "nearest_release": native.modified.nearest_release}}
        elif native.awaits_upstream:
            inside = (f"; it sits in {native.not_upstream_of}/, declared as a copy of a catalogued project, and "
                      "no version of that project's files has this content (--upstream compares it with the "
                      "declared commit)")
        elif native.not_upstream_of:
            inside = f"; it sits in a copy at {native.not_upstream_of}/ whose upstream never had this path"
        elif native.vendored_tree:
            inside = f"; it sits in {native.vendored_tree}/, grouped by a heuristic that proves nothing"
        yield ctx.finding(UNDECLARED.id, native.path, f"native kernel code ({', '.join(native.languages)}; "
                          f"found: {markers}) is not declared in any {MANIFEST_NAME}{inside}",
                          line=native.line, details=details)


def _unshipped_extension_sources(ctx: CheckContext) -> Iterator[Finding | None]:
    """Sources a setup.py extension names that the tree lacks: a listed file, a pattern over a
    directory the tree does not ship (an empty glob over a shipped directory is only an empty
    glob: maskrcnn's ``cuda/syncfree/*.cpp`` beside its ``.cu`` files), a path outside the tree."""
    index = FileIndex(ctx.inventory.files) if ctx.inventory.setup_extensions else None
    for ext in ctx.inventory.setup_extensions:
        if index is not None and bazel_artefact(ext.setup_path, ctx.inventory.files, index.holds_directory):
            continue  # a package Bazel downloaded into its cache: not the submission's build script
        missing = [s for s in ext.sources if s not in ctx.inventory.files and s not in ext.generated]
        unmatched = [p for p in ext.patterns if not any(fnmatch_under(p, m) for m in ext.matched)]
        empty = [p for p in unmatched if index is not None and not index.holds_directory(fixed_directory(p))]
        if missing or empty or ext.outside:
            what = [*missing, *(f"{p} (pattern matching nothing)" for p in empty),
                    *(f"{p} (outside the checked tree)" for p in ext.outside)]
            yield ctx.finding(UNSHIPPED.id, ext.setup_path, f"{ext.kind} {ext.name or ''} is built "
                              f"from sources that are not in the tree: {', '.join(what)}", line=ext.line,
                              details={"missing": missing, "empty_patterns": empty, "outside": list(ext.outside)})


def _vendored(ctx: CheckContext) -> Iterator[Finding | None]:
    for tree in ctx.inventory.vendored:
        if not tree.unproven or (tree.declared and ctx.proof == "upstream"):
            continue  # nothing to prove, or the upstream stage judges it file by file
        what = f"{tree.project_name} ({tree.repository})" if tree.project_name else "declared under vendored:"
        why = {"static": "a static check proves nothing; `--upstream` compares blobs",
               "upstream": "it is not declared under vendored:, so --upstream cannot prove it",
               "required": "--require-upstream: only --upstream proves a copy"}[ctx.proof]
        yield ctx.finding(VENDORED.id, tree.path, f"copy of {what}: {tree.unproven} of {tree.native_files} "
                          f"native file(s) unproven ({why})",
                          details={"project": tree.project, "repository": tree.repository,
                                   "unproven": tree.unproven, "declared": tree.declared})


def _not_covered(ctx: CheckContext, entry: AllowlistEntry | None, where: Location) -> str:
    """Why a category does not apply where the manifest is, and what does (a manifest outside
    any benchmark directory has no allowlist: the allowlist is per benchmark)."""
    listed = "is not on the allowlist" if entry is None else "is on the allowlist"
    if where.benchmark is None:
        return (f"{listed} of {ctx.ruleset.id}, but this manifest lies in no benchmark's directory, and "
                "categories are allowed per benchmark")
    scope = f"benchmark {where.benchmark!r}" + (f", division {where.division!r}" if where.division else "")
    allowed = [e.id for e in ctx.ruleset.allowlist if e.covers(where.benchmark, where.division)]
    reason = "is not on the allowlist" if entry is None else f"does not cover {scope}"
    return f"{reason} of {ctx.ruleset.id} (allowed for {scope}: {', '.join(allowed) or 'none'})"


def _allowlist(ctx: CheckContext, item: DeclaredKernel) -> Iterator[Finding | None]:
    kernel, where = item.kernel, item.location
    entry = ctx.ruleset.entry(kernel.category)
    path, line = item.manifest_path, kernel.line
    if entry is None or not entry.covers(where.benchmark, where.division):
        yield ctx.finding(NOT_ALLOWLISTED.id, path, f"kernel {kernel.id!r}: category {kernel.category!r} "
                          f"{_not_covered(ctx, entry, where)}", line=line, kernel=kernel.id)
        return
    if kernel.language not in entry.languages:
        yield ctx.finding(LANGUAGE.id, path, f"kernel {kernel.id!r} is {kernel.language}; category "
                          f"{entry.id!r} admits {', '.join(entry.languages)}", line=line, kernel=kernel.id)
    if entry.verification and kernel.semantics.op not in entry.verification.reference_ops:
        yield ctx.finding(REFERENCE_OP.id, path, f"kernel {kernel.id!r} claims {kernel.semantics.op}; "
                          f"category {entry.id!r} verifies {', '.join(entry.verification.reference_ops)}",
                          line=line, kernel=kernel.id)


def _read_head(ctx: CheckContext, rel: str) -> bytes | None:
    """The first ``_READ_LIMIT`` bytes of a declared source (never more: the file may be a
    sparse file of many GiB), or None when it cannot be read."""
    try:
        with open(ctx.root / rel, "rb") as handle:
            return handle.read(_READ_LIMIT)
    except OSError:
        return None


def _symbol_pattern(symbol: str) -> re.Pattern[bytes]:
    return re.compile(rb"\b" + re.escape(symbol.encode()) + rb"\s*(?:<[^;{}()]*>\s*)?\(")


def _sources(ctx: CheckContext, item: DeclaredKernel) -> Iterator[Finding | None]:
    kernel = item.kernel
    contents: list[bytes] = []
    named: list[tuple[str, bytes]] = []
    for declared, rel in item.source_relpaths():
        if rel is None:
            yield ctx.finding(SOURCE_OUTSIDE.id, item.manifest_path, f"kernel {kernel.id!r}: source "
                              f"{declared!r} is outside the tree", line=kernel.line, kernel=kernel.id)
        elif rel not in ctx.inventory.files:
            yield ctx.finding(SOURCE_MISSING.id, item.manifest_path,
                              f"kernel {kernel.id!r}: source {declared!r} is not a file in the tree "
                              f"(expected at {rel})", line=kernel.line, kernel=kernel.id)
        else:
            data = _read_head(ctx, rel)
            if data is None:
                if rel not in ctx.inventory.unreadable:  # else the walk already reported it
                    yield ctx.finding(PATH_UNREADABLE.id, rel, f"kernel {kernel.id!r}: declared source "
                                      "could not be read", kernel=kernel.id)
                continue
            if not data.strip():
                yield ctx.finding(SOURCE_EMPTY.id, rel, f"kernel {kernel.id!r}: source is empty",
                                  kernel=kernel.id)
            contents.append(data)
            named.append((rel, data))
    if not contents:
        return
    yield from _undeclared_functions(ctx, item, named)
    for symbol in kernel.entry_symbols:
        if not any(_symbol_pattern(symbol).search(c) for c in contents):
            yield ctx.finding(ENTRY_SYMBOL.id, item.manifest_path,
                              f"kernel {kernel.id!r}: entry symbol {symbol!r} is not defined in "
                              f"{', '.join(kernel.sources)}", line=kernel.line, kernel=kernel.id)


def _declared_in(ctx: CheckContext, rel: str) -> set[str]:
    """Kernel functions declared (entry symbols or helpers) by any kernel listing source ``rel``:
    kernels sharing a source each declare their own functions, judged by their own category."""
    return {name for other in ctx.kernels() if rel in {r for _, r in other.source_relpaths()}
            for name in (*other.kernel.entry_symbols, *other.kernel.helpers)}


def _include_dirs(item: DeclaredKernel) -> tuple[str, ...]:
    """Root-relative header directories the kernel's ``build.include_dirs`` declares (inside the tree)."""
    listed = item.kernel.build.get("include_dirs") or ()
    return tuple(rel for rel in (tree_relative(item.manifest_dir, d) for d in listed if isinstance(d, str))
                 if rel is not None)


def _tree_header(ctx: CheckContext, base: str, wanted: str) -> str | None:
    """The file of the tree ``wanted`` names from directory ``base`` (None outside the tree or absent)."""
    rel = posixpath.normpath(posixpath.join(base, wanted)) if base else posixpath.normpath(wanted)
    if rel.startswith(("../", "/")) or rel == ".." or rel not in ctx.inventory.files:
        return None
    return rel


def _include_resolver(ctx: CheckContext, item: DeclaredKernel) -> Resolver:
    """Resolve an ``#include`` of a declared source to a file of the tree: beside the including file,
    then in the declared include directories, then from the manifest's directory (never outside the
    tree; a system header is not found)."""

    def resolve(including: str, name: bytes) -> tuple[str, bytes] | None:
        wanted = name.decode("utf-8", "surrogateescape")
        for base in (parent_dir(including), *_include_dirs(item), item.manifest_dir):
            rel = _tree_header(ctx, base, wanted)
            data = None if rel is None else _read_head(ctx, rel)
            if rel is not None and data is not None:
                return rel, data
        return None

    return resolve


def _kernel_definitions(ctx: CheckContext, item: DeclaredKernel,
                        named: list[tuple[str, bytes]]) -> dict[tuple[str, str], None]:
    """(file, kernel function) defined by the declared sources and by the headers they include."""
    found: dict[tuple[str, str], None] = {}
    resolve = _include_resolver(ctx, item)
    for rel, data in named:
        if rel.endswith((".py", ".pyi")):
            found.update(((rel, f), None) for f in kernel_functions(data, python=True))
        else:  # text that is not C, C++ or CUDA source holds kernels for a loader, in its strings too
            strings = posixpath.splitext(rel)[1].lower() not in C_SOURCE_EXTENSIONS
            found.update((pair, None) for pair in kernel_definitions(rel, data, resolve, strings))
    return found


def _undeclared_functions(ctx: CheckContext, item: DeclaredKernel,
                          named: list[tuple[str, bytes]]) -> Iterator[Finding | None]:
    kernel = item.kernel
    own = set(kernel.entry_symbols) | set(kernel.helpers)
    for rel, function in _kernel_definitions(ctx, item, named):
        if function not in own and function not in _declared_in(ctx, rel):
            included = "" if rel in {r for _, r in item.source_relpaths()} else \
                " (in a header its sources include: the compiler builds it into the kernel)"
            yield ctx.finding(KERNEL_FUNCTION.id, rel, f"kernel {kernel.id!r} (category {kernel.category!r}) "
                              f"ships kernel function {function!r}{included}, which is neither one of its "
                              "entry_symbols nor its helpers", kernel=kernel.id,
                              details={"function": function, "manifest": item.manifest_path})


MAX_INCLUDE_DEPTH = 200
"""Levels of ``#include`` followed from a glue file: GCC's ``-fmax-include-depth`` default (the compiler
refuses anything deeper, so nothing deeper is compiled into the glue)."""


def _glue_headers(ctx: CheckContext, item: DeclaredKernel, glue_rel: str,
                  seen: set[str]) -> Iterator[tuple[str, bytes, tuple[str, ...]]]:
    """(header, its bytes, the chain of files that includes it from ``glue_rel``) for every header of the
    tree that glue file reaches by ``#include``: a quoted name beside the including file, then in the
    kernel's declared include directories; an angle-bracket name in those directories only (a system
    header is never in the tree). Each header once (``seen``), at most ``MAX_INCLUDE_DEPTH`` levels."""
    include_dirs = _include_dirs(item)
    pending: list[tuple[str, tuple[str, ...]]] = [(glue_rel, ())]
    while pending:
        including, chain = pending.pop(0)
        data = _read_head(ctx, including)
        if data is None or len(chain) >= MAX_INCLUDE_DEPTH:
            continue
        for name, quoted in preprocessor.includes(data):
            wanted = name.decode("utf-8", "surrogateescape")
            bases = (parent_dir(including), *include_dirs) if quoted else include_dirs
            header = next((h for h in (_tree_header(ctx, b, wanted) for b in bases) if h is not None), None)
            if header is None or header in seen:
                continue
            seen.add(header)
            header_data = _read_head(ctx, header)
            if header_data is not None:
                yield header, header_data, (*chain, including)
                pending.append((header, (*chain, including)))


def _computing_headers(ctx: CheckContext, listed: dict[str, list[str]]) -> Iterator[Finding | None]:
    """Headers that glue files include are glue too: the compiler pastes them into the glue (a shim's
    ``#include "impl.h"`` holding the honest function it binds). A header that a kernel declares
    under ``sources`` is that kernel's code, and a listed glue file is judged on its own."""
    declared = _declared_sources(ctx)
    reached: dict[str, tuple[bytes, tuple[str, ...], list[str]]] = {}
    for item in ctx.kernels():
        seen = set(listed) | declared
        for rel in item.glue_relpaths():
            if rel not in ctx.inventory.files or posixpath.splitext(rel)[1].lower() not in C_SOURCE_EXTENSIONS:
                continue
            for header, data, chain in _glue_headers(ctx, item, rel, seen):
                kernels = reached.setdefault(header, (data, chain, []))[2]
                kernels.extend(k for k in listed[rel] if k not in kernels)
    for header, (data, chain, kernels) in sorted(reached.items()):
        through = f" through {' -> '.join(chain[1:])}" if len(chain) > 1 else ""
        for computation in glue.computations(data):
            yield ctx.finding(GLUE_COMPUTES.id, header, f"included{through} by {chain[0]}, listed as glue "
                              f"(build_dependencies or verification_shims) of kernel(s) {', '.join(kernels)}, "
                              f"but {computation.function!r} computes: {computation.evidence}",
                              line=computation.line, kernel=kernels[0],
                              details={"function": computation.function, "kernels": kernels,
                                       "included_by": list(chain)})


def _glue_findings(ctx: CheckContext) -> Iterator[Finding | None]:
    """A file a kernel lists as a build dependency or verification shim, and every header of the tree
    it includes, holds no computation."""
    listed: dict[str, list[str]] = {}
    for item in ctx.kernels():
        for rel in item.glue_relpaths():
            listed.setdefault(rel, []).append(item.kernel.id)
    for rel, kernels in sorted(listed.items()):
        extension = posixpath.splitext(rel)[1].lower()
        if rel not in ctx.inventory.files or extension not in C_SOURCE_EXTENSIONS | {".py"}:
            continue  # a missing file is reported by the build; other files are not code that glue compiles
        data = _read_head(ctx, rel)
        if data is None:
            continue
        found = glue.python_computations(data) if extension == ".py" else glue.computations(data)
        for computation in found:
            yield ctx.finding(GLUE_COMPUTES.id, rel, f"listed as glue (build_dependencies or verification_shims) "
                              f"of kernel(s) {', '.join(kernels)}, but {computation.function!r} computes: "
                              f"{computation.evidence}", line=computation.line, kernel=kernels[0],
                              details={"function": computation.function, "kernels": kernels})
    yield from _computing_headers(ctx, listed)


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """All declaration findings."""
    yield from _manifest_findings(ctx)
    yield from _undeclared(ctx)
    yield from _unshipped_extension_sources(ctx)
    yield from _vendored(ctx)
    yield from _glue_findings(ctx)
    for item in ctx.kernels():
        yield from _allowlist(ctx, item)
        yield from _sources(ctx, item)
