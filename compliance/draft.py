"""``compliance manifest draft``: a first ``kernel_manifest.yaml`` for an implementation directory.

The draft declares one kernel per extension module (a setup.py
``CUDAExtension``/``CppExtension``, a ``load_inline``/``cpp_extension.load``
call, or a standalone source with kernel code), with its sources, entry
symbols (``__global__`` functions, pybind11 ``m.def`` names, ``TORCH_LIBRARY``
ops, ``@triton.jit`` functions), language and a guessed category with the
reason. Recognised vendored trees become ``vendored:`` entries. What only the
submitter knows (upstream, semantics, build) is left as ``FILL-IN`` values,
which fail manifest validation until replaced, so a draft never passes as
finished. Nothing is executed or imported, and nothing is written into the
tree (the caller prints the text or writes it elsewhere).
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from compliance.inventory import Inventory, NativeFile, build_inventory
from compliance.kernel_symbols import kernel_functions
from compliance.manifest import MANIFEST_NAME, PLACEHOLDER
from compliance.paths import parent_dir
from compliance.report.safetext import one_line
from compliance.ruleset import RuleSet
from compliance.vendored_trees import VendoredTree

HEADER_EXTENSIONS = frozenset({".h", ".hh", ".hpp", ".hxx", ".cuh", ".inl", ".inc"})
READ_LIMIT = 4 * 1024 * 1024
"""Bytes of a source read for its symbols."""

_DEF = re.compile(rb"\.def\(\s*\"([A-Za-z_]\w*)")
_CALLS = {"load": "cpp_extension.load", "load_inline": "load_inline"}


@dataclass(frozen=True)
class DraftKernel:
    """One kernel of the draft."""

    id: str
    """Kernel id (from the extension name or the source's stem)."""
    origin: str
    """How it was found, e.g. ``CUDAExtension in setup.py:12`` (a comment in the draft)."""
    sources: tuple[str, ...]
    """Source paths relative to the implementation directory."""
    entry_symbols: tuple[str, ...]
    """Symbols found in the sources (those the manifest check can find as functions)."""
    language: str
    """cuda, cpp, triton or ptx."""
    category: str | None
    """Guessed allowlist category, or None (a placeholder then)."""
    category_reason: str
    """Why the category was guessed (or why not)."""
    module_function: str | None
    """First pybind11 function, a candidate for ``build.function``."""


@dataclass(frozen=True)
class DraftVendored:
    """A recognised vendored tree, for the ``vendored:`` section."""

    path: str
    """Directory relative to the implementation directory."""
    repository: str | None
    """Catalogued upstream (None: a placeholder)."""
    commit: str | None
    """Identified commit (None: a placeholder)."""
    note: str
    """What was recognised (and identified)."""


@dataclass(frozen=True)
class Draft:
    """The whole draft, before rendering."""

    implementation: Path
    """The implementation directory."""
    ruleset: RuleSet
    """Rule set whose allowlist the categories were guessed from."""
    kernels: tuple[DraftKernel, ...]
    """Kernels."""
    vendored: tuple[DraftVendored, ...]
    """Vendored trees."""


Identifier = Callable[[VendoredTree], tuple[str, str] | None]
"""(commit, note) for a recognised tree, or None: how ``--identify`` fills ``vendored.commit``."""


def _read(root: Path, rel: str) -> bytes:
    try:
        with open(root / rel, "rb") as handle:
            return handle.read(READ_LIMIT)
    except OSError:
        return b""


def _ordered_unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _callable_in(symbol: str, contents: list[bytes]) -> bool:
    # The manifest check accepts a symbol written as a function (name, optional
    # template arguments, then "("); a pybind name bound to another C++ name is not.
    pattern = re.compile(rb"\b" + re.escape(symbol.encode()) + rb"\s*(?:<[^;{}()]*>\s*)?\(")
    return any(pattern.search(c) for c in contents)


def entry_symbols(contents: list[bytes]) -> tuple[tuple[str, ...], str | None]:
    """(entry symbols, first pybind11/TORCH_LIBRARY name) found in the sources."""
    found: list[str] = []
    for data in contents:
        found += kernel_functions(data, strings=True) + kernel_functions(data, python=True)
    bound = [m.group(1).decode() for data in contents for m in _DEF.finditer(data)]
    found += [b for b in bound if _callable_in(b, contents)]
    return _ordered_unique(found), (bound[0] if bound else None)


def _language(sources: Iterable[str], natives: dict[str, NativeFile]) -> str:
    langs: set[str] = set()
    for source in sources:
        native = natives.get(source)
        langs.update(native.languages if native else ())
        if os.path.splitext(source)[1] in (".cu", ".cuh"):
            langs.add("cuda")
    return next((lang for lang in ("cuda", "triton", "ptx") if lang in langs), "cpp")


def _mentions(word: str, text: str, tokens: set[str]) -> bool:
    """``word`` appears in ``text``, or (a long word) its usual 3-letter short form is a token (emb)."""
    return word in text or (len(word) >= 6 and word[:3] in tokens)


def _guess_category(ruleset: RuleSet, text: str) -> tuple[str | None, str]:
    allowed = [e.id for e in ruleset.allowlist]
    tokens = set(re.split(r"[^a-z0-9]+", text))
    best: tuple[int, str, list[str]] | None = None
    for entry_id in allowed:
        words = [w for w in re.split(r"[-_.]", entry_id.lower()) if len(w) >= 3 and _mentions(w, text, tokens)]
        if words and (best is None or len(words) > best[0]):
            best = (len(words), entry_id, words)
    if best is None:
        return None, (f"no allowlist category of {ruleset.id} matches its names "
                      f"(allowed: {', '.join(allowed) or 'none'})")
    return best[1], f"guessed: its names mention {', '.join(repr(w) for w in best[2])}"


# --------------------------------------------------------------------------- finding modules

@dataclass(frozen=True)
class _Module:
    name: str
    origin: str
    sources: tuple[str, ...]


def _string_of(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Call):  # os.path.join(here, "csrc", "a.cu"): the literal tail
        parts = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        return "/".join(parts) if parts else None
    return None


def _resolve(literal: str, py_rel: str, files: frozenset[str]) -> str | None:
    for base in (parent_dir(py_rel), ""):
        candidate = os.path.normpath(f"{base}/{literal}" if base else literal).replace(os.sep, "/")
        if candidate in files:
            return candidate
    tail = [f for f in files if f.endswith("/" + literal.lstrip("./"))]
    return tail[0] if len(tail) == 1 else None


def _python_modules(inv: Inventory, rel: str) -> list[_Module]:
    """``load_inline``/``cpp_extension.load`` calls of one Python file (AST only)."""
    try:
        tree = ast.parse(_read(inv.root, rel), filename=rel)
    except (SyntaxError, ValueError):
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name not in _CALLS:
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        module = _string_of(keywords.get("name", node.args[0] if node.args else ast.Constant(None))) or \
            os.path.splitext(rel.rsplit("/", 1)[-1])[0]
        sources: list[str] = []
        listed = keywords.get("sources", node.args[1] if len(node.args) > 1 else None)
        if name == "load" and isinstance(listed, (ast.List, ast.Tuple)):
            sources += [r for r in (_resolve(s, rel, inv.files) for s in map(_string_of, listed.elts) if s) if r]
        sources.append(rel)  # the file with the build call is itself native code (inventory marker "inline")
        if sources:
            found.append(_Module(module, f"{_CALLS[name]}(...) in {rel}:{node.lineno}", tuple(sources)))
    return found


def _modules(inv: Inventory, natives: dict[str, NativeFile]) -> list[_Module]:
    modules = [_Module(e.name or os.path.splitext(e.setup_path)[0], f"{e.kind} in {e.setup_path}:{e.line}",
                       tuple(s for s in e.sources if s in inv.files))
               for e in inv.setup_extensions]
    for rel, native in natives.items():
        if any(ev.marker == "inline" for ev in native.evidence) and rel.endswith(".py"):
            modules += _python_modules(inv, rel)
    modules = [m for m in modules if m.sources]
    covered = {s for m in modules for s in m.sources}
    leftovers = [rel for rel in natives if rel not in covered]
    for rel in (r for r in leftovers if os.path.splitext(r)[1] not in HEADER_EXTENSIONS):
        modules.append(_Module(os.path.splitext(rel.rsplit("/", 1)[-1])[0], f"standalone source {rel}", (rel,)))
    for header in (r for r in leftovers if os.path.splitext(r)[1] in HEADER_EXTENSIONS):
        modules = _attach_header(modules, header)
    return modules


def _attach_header(modules: list[_Module], header: str) -> list[_Module]:
    """Add ``header`` to the module with a source in the closest directory (or its own kernel)."""
    def shared_depth(module: _Module) -> int:
        here = header.split("/")[:-1]
        return max(len(os.path.commonprefix([here, s.split("/")[:-1]])) for s in module.sources)

    if not modules:
        return [_Module(os.path.splitext(header.rsplit("/", 1)[-1])[0], f"header {header}", (header,))]
    best = max(range(len(modules)), key=lambda i: shared_depth(modules[i]))
    chosen = modules[best]
    return [*modules[:best], _Module(chosen.name, chosen.origin, (*chosen.sources, header)), *modules[best + 1:]]


def _kernel_id(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-._") or "kernel"
    base = base if base[0].isalnum() else f"k{base}"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}-{n}", n + 1
    taken.add(candidate)
    return candidate


def draft_manifest(implementation: Path, ruleset: RuleSet, identify: Identifier | None = None) -> Draft:
    """The draft for the implementation directory ``implementation`` (read only)."""
    inv = build_inventory(implementation, ruleset.layout, ruleset.divisions,
                          vendored_markers=ruleset.vendored.markers,
                          min_vendored_native=ruleset.vendored.min_native_files)
    natives = {n.path: n for n in inv.native if n.vendored_tree is None}
    kernels: list[DraftKernel] = []
    taken: set[str] = set()
    for module in _modules(inv, natives):
        contents = [_read(inv.root, s) for s in module.sources]
        symbols, function = entry_symbols(contents)
        text = " ".join([module.name, *module.sources, *symbols]).lower()
        category, reason = _guess_category(ruleset, text)
        kernels.append(DraftKernel(_kernel_id(module.name, taken), module.origin, module.sources, symbols,
                                   _language(module.sources, natives), category, reason, function))
    vendored = []
    for tree in (t for t in inv.vendored if t.parent is None):
        known = identify(tree) if identify is not None else None
        what = f"{tree.project_name} ({tree.reason})" if tree.project_name else tree.reason
        vendored.append(DraftVendored(tree.path, tree.repository, known[0] if known else None,
                                      f"{what}; {tree.native_files} native files" + (f"; {known[1]}" if known else "")))
    return Draft(inv.root, ruleset, tuple(kernels), tuple(vendored))


def tree_identifier(cache: Path | None, offline: bool, root: Path) -> Identifier:
    """An ``Identifier`` that runs ``compliance vendored identify`` on catalogued trees.

    A tree whose upstream cannot be read keeps its placeholder; the note says why.
    """
    from compliance.cachedir import UPSTREAM
    from compliance.upstream.gitcache import GitFailure
    from compliance.upstream.identify import identify
    from compliance.upstream.settings import UpstreamSettings

    settings = UpstreamSettings(UPSTREAM.resolve(cache), offline)

    def run(tree: VendoredTree) -> tuple[str, str] | None:
        if tree.repository is None:
            return None
        try:
            found = identify(root / tree.path, settings, tree.repository)
        except GitFailure as exc:
            return f"{PLACEHOLDER}: full 40-hex commit", f"not identified: {exc.message}"
        if found.commit is None:
            return (f"{PLACEHOLDER}: full 40-hex commit", found.describe())
        return found.commit, found.describe()

    return run


# --------------------------------------------------------------------------- rendering

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def _q(value: str) -> str:
    """A YAML scalar for ``value``: plain when safe, else double-quoted (JSON escapes are YAML's)."""
    return value if _PLAIN.match(value) and value.lower() not in _YAML_WORDS else json.dumps(value)


def _flow(values: Iterable[str]) -> str:
    return "[" + ", ".join(_q(v) for v in values) + "]"


def _kernel_lines(k: DraftKernel) -> list[str]:
    symbols = _flow(k.entry_symbols) if k.entry_symbols else _flow([f"{PLACEHOLDER}-entry-symbol"])
    category = _q(k.category) if k.category else _q(f"{PLACEHOLDER}: allowlist category")
    function = _q(k.module_function) if k.module_function else _q(f"{PLACEHOLDER}: function of the built module")
    return [
        f"  # from {one_line(k.origin)}",
        f"  - id: {_q(k.id)}",
        f"    category: {category}    # {one_line(k.category_reason)}",
        f"    language: {k.language}",
        f"    sources: {_flow(k.sources)}",
        f"    entry_symbols: {symbols}",
        "    upstream:                 # where the source is published (docs/upstream.md)",
        f"      repository: {_q(PLACEHOLDER + ': clone URL of the upstream repository')}",
        f"      commit: {_q(PLACEHOLDER + ': full 40-hex commit')}",
        f"      paths: {_flow(f'{PLACEHOLDER}: upstream path of {s}' for s in k.sources)}",
        "    semantics:                # what it computes (docs/manifest.md)",
        f"      op: {_q(PLACEHOLDER + ': embedding_bag or embedding')}",
        "    build:                    # how `compliance verify` builds it (docs/verification.md)",
        f"      kind: {'torch_extension' if k.module_function else _q(PLACEHOLDER + ': torch_extension or nvrtc')}",
        f"      function: {function}",
        f"      arguments: {_q(PLACEHOLDER + ': the call arguments in order, from the vocabulary')}",
    ]


def render_draft(draft: Draft) -> str:
    """The draft as YAML text with comments (valid YAML; invalid manifest until filled)."""
    name = one_line(draft.implementation.name)
    lines = [f"# Draft {MANIFEST_NAME} for {name}, written by `compliance manifest draft`.",
             f"# Replace every {PLACEHOLDER} value (only you know them); until then this manifest fails",
             "# validation (manifest-invalid). Check the guessed categories and entry symbols.",
             "manifest_version: 1",
             f"ruleset: {_q(draft.ruleset.id)}"]
    lines.append("kernels:" if draft.kernels else "kernels: []   # no native kernel code found")
    for kernel in draft.kernels:
        lines += _kernel_lines(kernel)
    if draft.vendored:
        lines.append("vendored:")
    for tree in draft.vendored:
        lines += [f"  # {one_line(tree.note)}", f"  - path: {_q(tree.path)}",
                  f"    repository: {_q(tree.repository or PLACEHOLDER + ': upstream clone URL')}",
                  f"    commit: {_q(tree.commit or PLACEHOLDER + ': full 40-hex commit the copy was taken from')}"]
    return "\n".join(lines) + "\n"
