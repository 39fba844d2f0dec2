"""Inventory: one walk of a submission tree, classifying what it contains.

The walk follows no symlinks (a link is recorded; one that leaves the tree is
reported), never executes or imports anything, and reads each file at most
once: binaries are recognised by magic bytes whatever their name, native
kernel code by content (``__global__``, inline ``asm(``, ``@triton.jit``,
``load_inline(``, torch extension markers) as well as by extension, and
``setup.py`` files are read as an AST for ``CUDAExtension``/``CppExtension``
sources. Vendored third-party trees are recognised and grouped by
``compliance.vendored_trees``; build logs, packaging metadata and committed
build directories (``build/temp.*``, ``build/lib.*``) never count as source.
"""

from __future__ import annotations

import ast
import os
import re
import stat
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compliance.errors import InputError
from compliance.layout import (
    LayoutMapper,
    Location,
    Organization,
    find_organizations,
    flat_benchmarks,
    implementation_roots,
)
from compliance.manifest import MANIFEST_NAME
from compliance.paths import parent_dir
from compliance.setup_sources import FileIndex, SourceItem, extension_sources, module_assignments, relative_to_root
from compliance.upstream.blobs import file_normalized_blob_hash, normalized_blob_hash
from compliance.vendored_trees import (
    Fork,
    TreeFacts,
    VendoredTree,
    build_directory_of,
    is_build_noise,
    load_catalogue,
    recognise,
)

MAX_SCAN_BYTES = 4 * 1024 * 1024
"""Text files larger than this are classified by extension only."""
MAX_SETUP_BYTES = 128 * 1024
"""Largest setup.py parsed (Python's AST costs up to ~500 bytes of memory per source byte;
real ones are under 40 KB, apex's is 35 KB). A larger one that mentions extensions is ``setup-py-unparseable``."""
CUDA_EXTENSIONS = {".cu", ".cuh"}
CPP_EXTENSIONS = {".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".inl", ".inc"}
NOT_CODE_EXTENSIONS = {".md", ".rst", ".txt", ".json", ".yaml", ".yml", ".csv", ".log", ".html",
                       ".htm", ".svg", ".png", ".jpg", ".jpeg", ".gif", ".pdf", ".ipynb", ".toml",
                       ".cfg", ".ini", ".xml", ".pbtxt", ".license"}
SKIP_DIRS = {".git", ".hg", ".svn"}
"""Version-control metadata is not part of a submission's content."""

# Each marker: the literal bytes any match must contain (found with a fast
# ``bytes.find``) and, where the literal alone is too loose, a regex that runs
# only on files containing the literal. A regex alternation over every byte of
# every file was 10x slower on a 20,000-file tree.
_MARKERS: tuple[tuple[str, tuple[bytes, ...], re.Pattern[bytes] | None], ...] = (
    ("cuda", (b"__global__",), None),
    ("ptx", (b"asm",), re.compile(rb"\basm\s*(?:volatile\s*)?\(|__asm__")),
    ("triton", (b"@triton.jit",), None),
    ("inline", (b"load_inline", b"cpp_extension.load"),
     re.compile(rb"\bload_inline\s*\(|\bcpp_extension\.load\s*\(")),
    ("extension", (b"TORCH_LIBRARY", b"PYBIND11_MODULE", b"torch/extension.h"), None),
)
_LANGUAGE_OF_MARKER = {"cuda": "cuda", "ptx": "ptx", "triton": "triton", "inline": "cpp",
                       "extension": "cpp"}


@dataclass(frozen=True)
class Evidence:
    """Why a file counts as native kernel code."""

    marker: str
    """cuda, ptx, triton, inline, extension, extension-file (by name) or setup.py (a
    source listed by a setup.py extension)."""
    line: int | None
    """First line where the marker appears."""


@dataclass(frozen=True)
class NativeFile:
    """A file that holds (or builds) native kernel code."""

    path: str
    """Root-relative POSIX path."""
    languages: tuple[str, ...]
    """cuda, cpp, ptx, triton (sorted)."""
    evidence: tuple[Evidence, ...]
    """What was found, first occurrence of each marker."""
    location: Location
    """Where it sits in the layout."""
    vendored_tree: str | None = None
    """Root-relative path of the (outermost) vendored tree it sits in, if any: a grouping for
    reports, never a verdict."""
    unproven: bool = False
    """Inside a catalogued or declared copy at a path upstream may have had: counted in one
    ``vendored-unproven`` finding per tree instead of one by one (``--upstream`` proves it)."""
    not_upstream_of: str | None = None
    """The catalogued copy it sits in whose upstream never had this path (so it is the
    submitter's own kernel), if any."""

    @property
    def line(self) -> int | None:
        """First evidence line."""
        return next((e.line for e in self.evidence if e.line), None)


BINARY_KINDS = ("elf-shared-object", "elf-relocatable", "elf-executable", "cubin", "fatbin",
                "ar-archive", "pe", "mach-o")


@dataclass(frozen=True)
class BinaryFile:
    """A compiled artifact recognised by its magic bytes."""

    path: str
    """Root-relative POSIX path."""
    kind: str
    """One of ``BINARY_KINDS``."""
    size: int
    """Bytes."""
    location: Location
    """Where it sits in the layout."""


@dataclass(frozen=True)
class Symlink:
    """A symbolic link (never followed)."""

    path: str
    """Root-relative POSIX path of the link."""
    target: str
    """The link's text."""
    escapes: bool
    """True when it resolves outside the checked tree (or dangles outside)."""
    location: Location
    """Where it sits in the layout."""


@dataclass(frozen=True)
class SetupExtension:
    """A ``CUDAExtension``/``CppExtension`` call found in a setup.py's AST."""

    setup_path: str
    """Root-relative path of the setup.py."""
    line: int
    """Line of the call."""
    kind: str
    """CUDAExtension, CppExtension, Pybind11Extension or Extension (setuptools' plain one: it
    builds binaries the binary check accepts, but its sources are not kernel code by that alone)."""
    name: str | None
    """Extension name (first argument), when a literal."""
    sources: tuple[str, ...]
    """Root-relative paths of the sources listed (literal or computed)."""
    patterns: tuple[str, ...] = ()
    """Root-relative glob patterns the sources come from (``glob()``, ``os.listdir``)."""
    matched: tuple[str, ...] = ()
    """Files of the tree the patterns match (filled when the walk is classified)."""

    @property
    def shipped(self) -> tuple[str, ...]:
        """Every source of the extension that the tree holds is one of these (listed or matched)."""
        return self.sources + self.matched


@dataclass(frozen=True)
class BuildDirectory:
    """A committed build directory (``build/temp.*``, ``build/lib.*``), listed by the inventory; its files
    are classified like any other (a binary there needs its source, a source there is a kernel)."""

    path: str
    """Root-relative POSIX path."""
    products: tuple[tuple[str, str], ...]
    """(root-relative path, binary kind or ``file``) of everything inside."""
    location: Location
    """Where it sits in the layout."""


@dataclass(frozen=True)
class Inventory:
    """Everything the walk found."""

    root: Path
    """The checked root (absolute)."""
    style: str
    """Layout style used to map paths (training or inference)."""
    organizations: tuple[Organization, ...]
    """Organizations found."""
    file_count: int
    """Regular files walked."""
    native: tuple[NativeFile, ...]
    """Native kernel code."""
    binaries: tuple[BinaryFile, ...]
    """Compiled artifacts."""
    symlinks: tuple[Symlink, ...]
    """Symbolic links."""
    manifests: tuple[str, ...]
    """Root-relative paths of kernel manifests."""
    setup_extensions: tuple[SetupExtension, ...]
    """Extensions declared in setup.py files."""
    vendored: tuple[VendoredTree, ...]
    """Grouped third-party trees."""
    files: frozenset[str] = field(default_factory=frozenset)
    """Every regular file's root-relative path."""
    unreadable: tuple[str, ...] = ()
    """Files or directories that could not be read or entered (permissions, paths longer than
    PATH_MAX, I/O errors); each is an error-level ``path-unreadable`` finding."""
    unparseable_setups: tuple[tuple[str, str], ...] = ()
    """(setup.py path, why) for setup.py files mentioning extensions that could not be parsed."""
    mapper: LayoutMapper | None = None
    """Path -> layout location."""
    forks: tuple[Fork, ...] = ()
    """Organization/implementation roots that are copies of a catalogued project."""
    build_directories: tuple[BuildDirectory, ...] = ()
    """Committed build directories (listed; their files are classified like any other)."""
    digests: dict[str, str] = field(default_factory=dict)
    """Native file -> git blob hash of its content with CRLF line endings made LF."""
    declared_vendored: frozenset[str] = frozenset()
    """Root-relative directories that ``vendored:`` declarations may group (strictly inside an
    implementation, none of its roots); other declarations are ``manifest-invalid``."""

    def locate(self, relpath: str) -> Location:
        """Layout location of a root-relative path."""
        return self.mapper.locate(tuple(relpath.split("/"))) if self.mapper else Location()

    def vendored_owner(self, relpath: str) -> str | None:
        """The outermost vendored tree holding ``relpath``, if any."""
        return next((t.path for t in self.vendored if t.parent is None and relpath.startswith(t.path + "/")), None)

    def by_submitter(self) -> dict[str, dict[str, int]]:
        """Counts per submitter: native, vendored native, binaries, manifests."""
        counts: dict[str, Counter[str]] = {}
        for item in self.native:
            key = "vendored_native" if item.vendored_tree else "native"
            counts.setdefault(item.location.submitter or "-", Counter())[key] += 1
        for binary in self.binaries:
            counts.setdefault(binary.location.submitter or "-", Counter())["binaries"] += 1
        for manifest in self.manifests:
            counts.setdefault(self.locate(manifest).submitter or "-", Counter())["manifests"] += 1
        return {k: dict(v) for k, v in sorted(counts.items())}


# --------------------------------------------------------------------------- sniffing

def binary_kind(head: bytes) -> str | None:
    """Binary kind from the first bytes of a file, or None for non-binaries."""
    if head.startswith(b"\x7fELF") and len(head) >= 20:
        little = head[5] == 1
        e_type = int.from_bytes(head[16:18], "little" if little else "big")
        e_machine = int.from_bytes(head[18:20], "little" if little else "big")
        if e_machine == 190:  # EM_CUDA
            return "cubin"
        return {1: "elf-relocatable", 2: "elf-executable", 3: "elf-shared-object"}.get(e_type, "elf-shared-object")
    if head.startswith(b"!<arch>\n"):
        return "ar-archive"
    if head[:4] == b"\x50\xed\x55\xba":  # fatbin magic 0xBA55ED50, little-endian
        return "fatbin"
    if head[:4] in (b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
                    b"\xca\xfe\xba\xbe"):
        return "mach-o"
    if head.startswith(b"MZ") and len(head) >= 64:
        pe_offset = int.from_bytes(head[60:64], "little")
        return "pe" if pe_offset < 4096 else None
    return None


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _first_match(data: bytes, literals: tuple[bytes, ...], pattern: re.Pattern[bytes] | None) -> int | None:
    hits = [i for i in (data.find(lit) for lit in literals) if i >= 0]
    if not hits:
        return None
    if pattern is None:
        return min(hits)
    match = pattern.search(data, max(0, min(hits) - 16))
    return match.start() if match else None


def scan_markers(data: bytes) -> list[Evidence]:
    """First occurrence of each native-code marker in ``data``."""
    found = []
    for kind, literals, pattern in _MARKERS:
        offset = _first_match(data, literals, pattern)
        if offset is not None:
            found.append(Evidence(kind, _line_of(data, offset)))
    return found


EXTENSION_CALLS = ("CUDAExtension", "CppExtension", "Extension", "Pybind11Extension")
"""setup.py calls that build a native extension (setuptools' plain ``Extension`` builds fairseq's
``libbleu``; ``Pybind11Extension`` is pybind11's)."""


def _literal_strings(node: ast.AST | None) -> list[str]:
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def parse_setup(source: bytes, setup_relpath: str) -> tuple[list[SetupExtension], str | None]:
    """(extensions found, why the file could not be parsed or None): AST only, never run.

    A hostile setup.py can make the parser itself fail (``a.b.b...`` nested past the
    recursion limit, a run of unary minus signs exhausting memory); that is reported,
    because extensions it may build would otherwise go unseen.
    """
    if len(source) > MAX_SETUP_BYTES:
        return [], f"larger than the {MAX_SETUP_BYTES // 1024} KiB limit for parsing"
    try:
        with warnings.catch_warnings():  # the tree's odd literals are not the operator's concern
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename=setup_relpath)
        return setup_extensions_of(tree, setup_relpath), None
    except SyntaxError as exc:
        return [], f"syntax error at line {exc.lineno}: {exc.msg}"
    except (ValueError, RecursionError, MemoryError) as exc:
        return [], f"{type(exc).__name__} while parsing{': ' + str(exc) if str(exc) else ''}"


def setup_extensions(source: bytes, setup_relpath: str) -> list[SetupExtension]:
    """``CUDAExtension``/``CppExtension`` calls in a setup.py (AST only; never run)."""
    return parse_setup(source, setup_relpath)[0]


def setup_extensions_of(tree: ast.AST, setup_relpath: str) -> list[SetupExtension]:
    """The extension calls in a parsed setup.py (``ast.walk`` is iterative: no depth limit).

    Sources are literal lists or computed ones (``glob``, ``os.path.join``, ``os.listdir``,
    names assigned once): ``compliance.setup_sources`` evaluates what it can, statically."""
    base = parent_dir(setup_relpath)
    names = module_assignments(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _call_name(node) not in EXTENSION_CALLS:
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        name_node = node.args[0] if node.args else keywords.get("name")
        name = name_node.value if isinstance(name_node, ast.Constant) and isinstance(name_node.value, str) else None
        items = extension_sources(node, names)
        if items is None:
            sources_node = node.args[1] if len(node.args) > 1 else keywords.get("sources")
            items = [SourceItem(s, False) for s in _literal_strings(sources_node)]
        resolved = [(relative_to_root(i.text, base), i) for i in items]
        sources = tuple(r for r, i in resolved if r is not None and not i.pattern)
        patterns = tuple(r for r, i in resolved if r is not None and i.pattern)
        found.append(SetupExtension(setup_relpath, node.lineno, str(_call_name(node)), name, sources, patterns))
    return found


# --------------------------------------------------------------------------- walking

@dataclass
class Walk:
    """Mutable accumulator of one walk (frozen into an ``Inventory`` at the end)."""

    root: Path
    files: set[str] = field(default_factory=set)
    native: dict[str, list[Evidence]] = field(default_factory=dict)
    binaries: list[tuple[str, str, int]] = field(default_factory=list)
    symlinks: list[tuple[str, str, bool]] = field(default_factory=list)
    manifests: list[str] = field(default_factory=list)
    setups: list[SetupExtension] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    unparseable_setups: list[tuple[str, str]] = field(default_factory=list)
    licensed_dirs: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)
    build_products: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)


def _entries(directory: str, walk: Walk, relprefix: str) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            yield from sorted(it, key=lambda e: e.name)
    except OSError:
        walk.unreadable.append(relprefix or ".")


def _escapes(root_real: str, link_path: str) -> bool:
    target = os.path.realpath(link_path)
    return not (target == root_real or target.startswith(root_real + os.sep))


def _visit_file(entry: os.DirEntry[str], rel: str, walk: Walk) -> None:
    walk.files.add(rel)
    name = entry.name
    ext = os.path.splitext(name)[1].lower()
    if name == MANIFEST_NAME:
        walk.manifests.append(rel)
    if name.upper().startswith(("LICENSE", "COPYING")):
        walk.licensed_dirs.add(parent_dir(rel))
    build_dir = build_directory_of(rel)
    if build_dir is None and is_build_noise(rel):
        return
    try:
        size = entry.stat(follow_symlinks=False).st_size
        scan = ext not in NOT_CODE_EXTENSIONS and size <= MAX_SCAN_BYTES
        with open(entry.path, "rb") as handle:
            data = handle.read(size if scan else 64)
    except OSError:
        walk.unreadable.append(rel)
        return
    kind = binary_kind(data[:64])
    if build_dir is not None:  # listed for the inventory, and classified like any other file
        walk.build_products.setdefault(build_dir, []).append((rel, kind or "file"))
        if is_build_noise(rel):
            return
    if kind is not None:
        walk.binaries.append((rel, kind, size))
        return
    evidence = scan_markers(data) if scan else []
    if ext in CUDA_EXTENSIONS or ext == ".ptx":
        evidence.insert(0, Evidence("extension-file", None))
    if name == "setup.py" and scan and b"Extension" in data:
        extensions, problem = parse_setup(data, rel)
        walk.setups.extend(extensions)
        if problem is not None:
            walk.unparseable_setups.append((rel, problem))
    if evidence:
        walk.native[rel] = evidence
        if scan:
            walk.digests[rel] = normalized_blob_hash(data)


def _walk(root: Path) -> Walk:
    walk = Walk(root)
    root_real = os.path.realpath(root)
    stack = [(str(root), "")]
    while stack:
        directory, relprefix = stack.pop()
        for entry in _entries(directory, walk, relprefix):
            rel = f"{relprefix}/{entry.name}" if relprefix else entry.name
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                walk.unreadable.append(rel)
                continue
            if stat.S_ISLNK(mode):
                try:
                    walk.symlinks.append((rel, os.readlink(entry.path), _escapes(root_real, entry.path)))
                except OSError:
                    walk.unreadable.append(rel)
            elif stat.S_ISDIR(mode):
                if entry.name not in SKIP_DIRS:
                    walk.dirs.add(rel)
                    stack.append((entry.path, rel))
            elif stat.S_ISREG(mode):
                _visit_file(entry, rel, walk)
    return walk


def _languages(rel: str, evidence: list[Evidence]) -> tuple[str, ...]:
    ext = os.path.splitext(rel)[1].lower()
    langs = {_LANGUAGE_OF_MARKER[e.marker] for e in evidence if e.marker in _LANGUAGE_OF_MARKER}
    if ext in CUDA_EXTENSIONS:
        langs.add("cuda")
    if ext == ".ptx":
        langs.add("ptx")
    if any(e.marker == "setup.py" for e in evidence):
        langs.add("cpp")
    return tuple(sorted(langs))


def _protected_dirs(walk: Walk, organizations: list[Organization], mapper: LayoutMapper) -> set[str]:
    """The root, organization and implementation roots (whatever their depth: framework-named
    levels and chains of single directories below the layout's implementation directory) and
    every directory above them."""
    tops = {"/".join(o.prefix) for o in organizations}
    children: dict[str, list[str]] = {}
    for directory in walk.dirs:
        children.setdefault(parent_dir(directory), []).append(directory)
    with_files = {parent_dir(rel) for rel in walk.files}
    for directory in walk.dirs:
        parts = tuple(directory.split("/"))
        if mapper.implementation_dir(parts + ("-",)) == parts:
            tops.update(implementation_roots(directory, children, with_files))
    protected = {""}
    for top in tops:
        names = top.split("/")
        protected.update("/".join(names[:depth]) for depth in range(1, len(names) + 1))
    return protected


def _declarable(tree: str, protected: set[str], mapper: LayoutMapper) -> bool:
    """A ``vendored:`` declaration groups only a strict subdirectory of an implementation that
    is none of its roots (never the root, an ancestor of it, or anything outside it)."""
    parts = tuple(tree.split("/"))
    impl = mapper.implementation_dir(parts)
    return tree not in protected and impl is not None and len(impl) < len(parts)


def _size_reader(root: Path) -> Callable[[str], int]:
    """Size of a root-relative file, never following a link (catalogue evidence needs sizes of
    a few signature files only, so they are read on demand rather than kept for every file)."""
    def size_of(rel: str) -> int:
        return os.stat(root / rel, follow_symlinks=False).st_size
    return size_of


def walk_tree(root: Path) -> Walk:
    """The single walk of ``root`` (raises ``InputError`` if it is not a directory)."""
    if not root.exists():
        raise InputError("path does not exist", root)
    if not root.is_dir():
        raise InputError("not a directory (give the submission's root directory)", root)
    return _walk(root)


def _add_setup_sources(walk: Walk) -> None:
    """Sources listed by setup.py extensions (literally or by a pattern) are native code even
    without markers; each extension learns which files its patterns match."""
    index = FileIndex(walk.files) if any(ext.patterns for ext in walk.setups) else None
    if index is not None:
        walk.setups = [replace(ext, matched=tuple(sorted({m for p in ext.patterns for m in index.matching(p)})))
                       for ext in walk.setups]
    for ext in walk.setups:
        if ext.kind == "Extension":
            continue
        for source in ext.shipped:
            if source in walk.files and source not in walk.native and not is_build_noise(source):
                walk.native[source] = [Evidence("setup.py", ext.line)]
                digest = file_normalized_blob_hash(walk.root / source)
                if digest is not None:
                    walk.digests[source] = digest


def classify(walk: Walk, style: str, divisions: tuple[str, ...] = (),
             vendored_markers: tuple[str, ...] = ("third_party",), min_vendored_native: int = 50,
             declared_vendored: Mapping[str, str] | None = None) -> Inventory:
    """Map a walk onto the layout ``style``; recognise vendored trees, forks and build directories."""
    root = walk.root
    _add_setup_sources(walk)
    organizations = find_organizations(root, style, divisions)
    mapper = LayoutMapper(organizations, style, flat_benchmarks(walk.files, organizations, style))

    def locate(rel: str) -> Location:
        return mapper.locate(tuple(rel.split("/"))) if rel else Location()

    def locate_dir(rel: str) -> Location:
        """Location of what is inside directory ``rel`` (an implementation root is in its implementation)."""
        return mapper.locate((*rel.split("/"), "-")) if rel else Location()

    protected = _protected_dirs(walk, organizations, mapper)
    declared = {d: repo for d, repo in (declared_vendored or {}).items() if _declarable(d, protected, mapper)}
    facts = TreeFacts(frozenset(walk.files), frozenset(walk.dirs), frozenset(walk.native),
                      frozenset(walk.licensed_dirs), _size_reader(root))
    found = recognise(facts, protected.__contains__, locate_dir, vendored_markers, min_vendored_native,
                      declared, load_catalogue())
    native = tuple(NativeFile(rel, _languages(rel, ev), tuple(ev), locate(rel), found.owner.get(rel),
                              rel in found.unproven, found.not_upstream.get(rel))
                   for rel, ev in sorted(walk.native.items()))
    return Inventory(
        root=root.resolve(), style=style, organizations=tuple(organizations),
        file_count=len(walk.files), native=native,
        binaries=tuple(BinaryFile(r, k, s, locate(r)) for r, k, s in sorted(walk.binaries)),
        symlinks=tuple(Symlink(r, t, e, locate(r)) for r, t, e in sorted(walk.symlinks)),
        manifests=tuple(sorted(walk.manifests)), setup_extensions=tuple(walk.setups),
        vendored=found.trees, files=frozenset(walk.files), unreadable=tuple(sorted(walk.unreadable)),
        mapper=mapper, forks=found.forks,
        build_directories=tuple(BuildDirectory(d, tuple(sorted(p)), locate(d))
                                for d, p in sorted(walk.build_products.items())),
        digests=dict(walk.digests), unparseable_setups=tuple(sorted(walk.unparseable_setups)),
        declared_vendored=frozenset(declared),
    )


def build_inventory(root: Path, style: str, divisions: tuple[str, ...] = (),
                    **vendored_options: Any) -> Inventory:
    """Walk ``root`` once and classify everything in it."""
    return classify(walk_tree(root), style, divisions, **vendored_options)
