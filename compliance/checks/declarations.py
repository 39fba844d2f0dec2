"""Kernel declaration checks: every native kernel is declared, allowed, and ships its source."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from compliance.checks.interface import CheckSpec
from compliance.checks.readability import PATH_UNREADABLE
from compliance.context import DeclaredKernel
from compliance.kernel_symbols import kernel_functions
from compliance.manifest import MANIFEST_NAME
from compliance.paths import parent_dir, tree_relative
from compliance.setup_sources import fnmatch_under

if TYPE_CHECKING:
    from compliance.context import CheckContext
    from compliance.findings import Finding

MANIFEST_INVALID = CheckSpec(
    id="manifest-invalid", title="Kernel manifest does not follow its schema", default_level="error",
    doc=f"A {MANIFEST_NAME} could not be parsed or does not match the manifest schema "
        "(`compliance rules schema --manifest`), or is over the YAML limits (256 KiB, 64 levels "
        "of nesting, 20,000 nodes after alias expansion). A manifest with any schema error "
        "declares no kernels, so the code it meant to declare is reported as undeclared too.",
    hint="Fix the entry at the reported line; validate while editing with the schema "
         "(see docs/manifest.md).",
    passing="manifest_version: 1\nkernels:\n  - id: emb\n    category: dlrm-embedding\n    ...",
    failing="manifest_version: 1\nkernels:\n  - id: emb\n    language: cuda-c   # not a known language",
)
MANIFEST_MISPLACED = CheckSpec(
    id="manifest-misplaced", title="Kernel manifest outside an implementation", default_level="error",
    doc=f"A {MANIFEST_NAME} must sit inside an implementation directory "
        "(<Org>/benchmarks/<benchmark>/implementations/<impl>/), because the benchmark it "
        "belongs to decides which allowlist entries apply.",
    hint="Move the manifest into the implementation directory whose kernels it declares.",
    passing=f"Acme/benchmarks/dlrm/implementations/pytorch/{MANIFEST_NAME}",
    failing=f"Acme/{MANIFEST_NAME}",
)
UNDECLARED = CheckSpec(
    id="undeclared-kernel", title="Native kernel code no manifest declares", default_level="error",
    doc="The tree contains native kernel code (CUDA `__global__` functions, inline PTX `asm(`, "
        "`@triton.jit` functions, `load_inline(...)`/`cpp_extension.load(...)` builds, torch "
        "extension sources, or sources of a setup.py CUDAExtension/CppExtension) that is not "
        "listed as a source of any kernel in a manifest. Detection is by content, not only by "
        "file extension. A vendored grouping never hides a file: only files of a catalogued or "
        "declared copy at paths upstream may have had are counted by `vendored-unproven` instead; "
        "files of such a copy that upstream never had (the catalogue's list of upstream native "
        "paths), and every native file of a tree grouped by a marker directory (`third_party/`, "
        "`submodules/`, ...) or a licence heuristic, are reported here one by one.",
    hint=f"Declare the kernel in the implementation's {MANIFEST_NAME} (id, category, language, "
         "sources, entry symbols, upstream, semantics), or remove the code.",
    passing=f"kernels/emb.cu listed under `sources:` of a kernel in {MANIFEST_NAME}",
    failing=f"kernels/emb.cu defines a __global__ function and no {MANIFEST_NAME} lists it",
)
NOT_ALLOWLISTED = CheckSpec(
    id="kernel-not-allowlisted", title="Kernel category not allowed for this benchmark and round",
    default_level="error",
    doc="A declared kernel's `category` is not an allowlist entry of the rule set, or the entry "
        "does not cover the benchmark (or division) the kernel is submitted in.",
    hint="Use a category the round allows for this benchmark (`compliance rules show`), or "
         "replace the kernel with the framework's own op.",
    passing="category: dlrm-embedding in benchmarks/dlrm under training/v0.7",
    failing="category: dlrm-embedding in benchmarks/bert, or under training/v1.0",
)
LANGUAGE = CheckSpec(
    id="kernel-language-not-allowed", title="Kernel language not admitted by its category",
    default_level="error",
    doc="The allowlist entry admits only some kernel languages (cuda, cpp, triton, ptx); the "
        "declared kernel is written in another.",
    hint="Rewrite the kernel in an admitted language or ask the working group to extend the entry.",
    passing="language: cuda with an entry admitting [cuda]",
    failing="language: ptx with an entry admitting [cuda]",
)
REFERENCE_OP = CheckSpec(
    id="kernel-reference-op-not-allowed", title="Claimed reference op not covered by the category",
    default_level="error",
    doc="The kernel claims to compute a reference op (semantics.op) that its allowlist entry's "
        "verification requirement does not name, so it cannot be verified under this rule set.",
    hint="Declare the reference op the kernel really computes (embedding_bag or embedding).",
    passing="semantics: {op: embedding_bag} with reference_ops [embedding_bag, embedding]",
    failing="semantics: {op: embedding} with reference_ops [embedding_bag]",
)
SOURCE_MISSING = CheckSpec(
    id="kernel-source-missing", title="Declared kernel source does not exist", default_level="error",
    doc="A file listed in a kernel's `sources` is not a regular file in the tree (missing, a "
        "directory, or a symbolic link). Kernels must ship as source.",
    hint="Commit the source file at the declared path (paths are relative to the manifest).",
    passing="sources: [kernels/emb.cu] and kernels/emb.cu exists",
    failing="sources: [kernels/emb.cu] and only kernels/emb.o is committed",
)
SOURCE_OUTSIDE = CheckSpec(
    id="kernel-source-outside-tree", title="Declared kernel source outside the tree",
    default_level="error",
    doc="A declared source path is absolute or climbs out of the checked tree with `..`; the "
        "submission must contain its own kernel sources.",
    hint="Copy the source into the implementation directory and declare it by a relative path.",
    passing="sources: [kernels/emb.cu]",
    failing="sources: [../../../../other-org/kernels/emb.cu] or [/opt/src/emb.cu]",
)
SOURCE_EMPTY = CheckSpec(
    id="kernel-source-empty", title="Declared kernel source is empty", default_level="error",
    doc="A declared source file has no content other than whitespace.",
    hint="Commit the real source.",
    passing="kernels/emb.cu with the kernel's code",
    failing="kernels/emb.cu of 0 bytes",
)
ENTRY_SYMBOL = CheckSpec(
    id="kernel-entry-symbol-missing", title="Declared entry symbol not defined in the sources",
    default_level="error",
    doc="None of the kernel's declared sources mentions the declared entry symbol as a function "
        "(name followed by `(`, template arguments allowed), so the declaration does not describe "
        "the shipped code.",
    hint="Correct `entry_symbols` to the names of the kernel functions the sources define.",
    passing="entry_symbols: [embedding_bag_sum] and `__global__ void embedding_bag_sum(...)`",
    failing="entry_symbols: [embedding_bag_sum] and the source defines only `emb_sum(...)`",
)
VENDORED = CheckSpec(
    id="vendored-unproven", title="Vendored copy not proven upstream", default_level="warning",
    doc="A catalogued copy of an upstream project (NCCL, apex, CUTLASS, maskrcnn-benchmark, ...; "
        "recognised from signature files of real size, never from one empty marker) or a tree "
        "declared under `vendored:` holds native files at paths upstream may have had. A static "
        "check cannot prove they are upstream's code, so they are counted here, one finding per "
        "tree, at warning level; `compliance check --upstream` compares each file's git blob with "
        "the declared repository and commit, and every file that is not byte-identical there is "
        "the submitter's own (`upstream-vendored-differs`). With `--upstream` an undeclared copy "
        "cannot be proven and with `--require-upstream` (for gates) no copy counts as proven "
        "without it: both make this finding an error. Native files of a copy that upstream never "
        "had are not counted here: they are `undeclared-kernel` errors one by one.",
    hint=f"Declare the copy under `vendored:` (path, repository, commit) in the {MANIFEST_NAME} "
         "and run `compliance check --upstream` to prove it.",
    passing="no copy, or third_party/apex declared and proven with --upstream",
    failing="third_party/apex with 300 native files and no --upstream run",
)
VENDORED_DECLARATION = "a `vendored:` path must be a directory strictly inside the implementation"

KERNEL_FUNCTION = CheckSpec(
    id="kernel-function-undeclared", title="Kernel function in declared sources that is not declared",
    default_level="error",
    doc="A declared kernel is exactly what it declares: every kernel function its sources define "
        "(CUDA `__global__` or `__attribute__((global))`, Triton `@triton.jit`/`@jit` functions; "
        "comments ignored, line continuations joined) must be one of its `entry_symbols` or its "
        "`helpers`, and each is judged by the category of the kernel that declares it. Anything "
        "else rides on another kernel's allowlist entry: an attention kernel listed as an extra "
        "source of an allowlisted DLRM embedding kernel, or a `__global__` appended to a declared "
        "source.",
    hint="Declare the function as a helper of this kernel if it belongs to it, declare it as its "
         "own kernel with its own category, or remove it.",
    passing="entry_symbols: [emb_fwd], helpers: [emb_bwd] and the sources define exactly those",
    failing="sources: [emb.cu, attention.cu] where attention.cu defines __global__ attn_fwd",
)
UNSHIPPED = CheckSpec(
    id="unshipped-source", title="Build script names sources the tree does not ship", default_level="error",
    doc="A setup.py extension (`CUDAExtension`, `CppExtension`, `Extension`, ...) builds from "
        "sources that resolve to nothing in the tree: a literal path that is not a file, or a "
        "pattern (`glob.glob(os.path.join(extensions_dir, '*.cu'))`, `os.listdir(d)`, names "
        "assigned once, read from the AST, never run) that matches no file. The extension would "
        "build a kernel whose source is not shipped. Sources computed in ways the static reader "
        "does not follow are not reported.",
    hint="Commit the sources the build script compiles (or remove the extension).",
    passing="CUDAExtension('fast._C', glob.glob('csrc/*.cu')) and csrc/gather.cu committed",
    failing="CUDAExtension('fast._C', glob.glob('csrc/*.cu')) and no csrc/ directory",
)

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


def _undeclared(ctx: CheckContext) -> Iterator[Finding | None]:
    declared = _declared_sources(ctx)
    for native in ctx.inventory.native:
        if native.unproven or native.path in declared:
            continue
        markers = ", ".join(sorted({e.marker for e in native.evidence}))
        inside = ""
        if native.not_upstream_of:
            inside = f"; it sits in a copy at {native.not_upstream_of}/ whose upstream never had this path"
        elif native.vendored_tree:
            inside = f"; it sits in {native.vendored_tree}/, grouped by a heuristic that proves nothing"
        yield ctx.finding(UNDECLARED.id, native.path, f"native kernel code ({', '.join(native.languages)}; "
                          f"found: {markers}) is not declared in any {MANIFEST_NAME}{inside}",
                          line=native.line)


def _unshipped_extension_sources(ctx: CheckContext) -> Iterator[Finding | None]:
    for ext in ctx.inventory.setup_extensions:
        missing = [s for s in ext.sources if s not in ctx.inventory.files]
        empty = [p for p in ext.patterns if not any(fnmatch_under(p, m) for m in ext.matched)]
        if missing or empty:
            what = [*missing, *(f"{p} (pattern matching nothing)" for p in empty)]
            yield ctx.finding(UNSHIPPED.id, ext.setup_path, f"{ext.kind} {ext.name or ''} is built "
                              f"from sources that are not in the tree: {', '.join(what)}", line=ext.line,
                              details={"missing": missing, "empty_patterns": empty})


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


def _allowlist(ctx: CheckContext, item: DeclaredKernel) -> Iterator[Finding | None]:
    kernel, where = item.kernel, item.location
    entry = ctx.ruleset.entry(kernel.category)
    path, line = item.manifest_path, kernel.line
    if entry is None or not entry.covers(where.benchmark, where.division):
        scope = f"benchmark {where.benchmark!r}" + (f", division {where.division!r}" if where.division else "")
        allowed = [e.id for e in ctx.ruleset.allowlist if e.covers(where.benchmark, where.division)]
        reason = "is not on the allowlist" if entry is None else f"does not cover {scope}"
        yield ctx.finding(NOT_ALLOWLISTED.id, path, f"kernel {kernel.id!r}: category {kernel.category!r} "
                          f"{reason} of {ctx.ruleset.id} (allowed for {scope}: "
                          f"{', '.join(allowed) or 'none'})", line=line, kernel=kernel.id)
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


def _undeclared_functions(ctx: CheckContext, item: DeclaredKernel,
                          named: list[tuple[str, bytes]]) -> Iterator[Finding | None]:
    kernel = item.kernel
    own = set(kernel.entry_symbols) | set(kernel.helpers)
    for rel, data in named:
        python = rel.endswith((".py", ".pyi"))
        for function in dict.fromkeys(kernel_functions(data, python=python)):
            if function not in own and function not in _declared_in(ctx, rel):
                yield ctx.finding(KERNEL_FUNCTION.id, rel, f"kernel {kernel.id!r} (category {kernel.category!r}) "
                                  f"ships kernel function {function!r}, which is neither one of its "
                                  "entry_symbols nor its helpers", kernel=kernel.id,
                                  details={"function": function, "manifest": item.manifest_path})


def run(ctx: CheckContext) -> Iterator[Finding | None]:
    """All declaration findings."""
    yield from _manifest_findings(ctx)
    yield from _undeclared(ctx)
    yield from _unshipped_extension_sources(ctx)
    yield from _vendored(ctx)
    for item in ctx.kernels():
        yield from _allowlist(ctx, item)
        yield from _sources(ctx, item)
