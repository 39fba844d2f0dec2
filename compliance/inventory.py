"""Inventory: one walk of a submission tree, classifying what it contains.

Every file is examined: no directory or name is skipped (a version-control
directory, an interpreter cache or a build log inside the tree is recorded and
reported, and its files are read like any other). The walk opens every
directory and file relative to its parent's handle with ``O_NOFOLLOW`` (no
path is resolved twice, so a file swapped for a symlink mid-walk is refused,
never followed); a symlink that resolves inside the tree is examined as the
file it points to under the link's own name, one that leaves the tree is
reported. Files are streamed in chunks whatever their size, up to
``MAX_FILE_BYTES`` (a larger one is a ``path-unscanned`` error). Nothing is
executed or imported. What a file *is* comes from ``compliance.recognise``
(binaries and archives by magic bytes, also behind a prefix or in base64;
kernels by content in every form listed there), and ``setup.py`` files are
read as an AST for ``CUDAExtension``/``CppExtension`` sources. Vendored
third-party trees are recognised and grouped by ``compliance.vendored_trees``.
"""

from __future__ import annotations

import ast
import errno
import os
import stat
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from compliance import recognisers, scan_cache
from compliance.blobs import file_normalized_blob_hash, normalized_blob_hash
from compliance.containers import container_kind, examine_container, member_path, open_file
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
from compliance.parallel import OrderedWork, default_workers
from compliance.paths import is_inside, parent_dir
from compliance.recognisers import LANGUAGE_OF_MARKER, binary_kind
from compliance.setup_sources import (
    FileIndex,
    SourceItem,
    as_written,
    extension_sources,
    generated_sources,
    module_assignments,
    relative_to_root,
)
from compliance.vendored_trees import (
    Fork,
    ModifiedFile,
    TreeFacts,
    VendoredTree,
    build_directory_of,
    is_build_noise,
    load_catalogue,
    recognise,
)

CHUNK_BYTES = 8 * 1024 * 1024
"""Bytes read and scanned at a time (memory stays about this size whatever the file's)."""
MAX_FILE_BYTES = 1024 * 1024 * 1024
"""Largest file scanned (1 GiB); a larger one is reported ``path-unscanned`` (an error)."""
CONTAINER_HEAD_BYTES = 512
"""Bytes that tell a container (an uncompressed tar's magic is at byte 257)."""
MAX_DEPTH = 256
"""Deepest directory entered (one open handle per level); deeper ones are ``path-unscanned``."""
MAX_SETUP_BYTES = 128 * 1024
"""Largest setup.py parsed (Python's AST costs up to ~500 bytes of memory per source byte;
real ones are under 40 KB, apex's is 35 KB). A larger one that mentions extensions is ``setup-py-unparseable``."""
CUDA_EXTENSIONS = {".cu", ".cuh"}
CPP_EXTENSIONS = {".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".inl", ".inc"}
C_SOURCE_EXTENSIONS = CUDA_EXTENSIONS | CPP_EXTENSIONS
"""Read as the compiler reads them: a ``__global__`` in a comment or string literal is no kernel."""
DATA_EXTENSIONS = {".json", ".log", ".csv", ".txt", ".pbtxt"}
"""Data and logs: a kernel there needs a loader, which is code and is scanned for every marker;
these are scanned for CUDA/PTX source and hidden binaries only (the bulk of a round's bytes)."""
METADATA_DIRS = {".git", ".hg", ".svn", "__pycache__"}
"""Version-control and cache directories: reported, and their content examined like any other."""
METADATA_DIR_SUFFIXES = (".egg-info",)
"""Packaging metadata directories (reported and examined the same way)."""


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
    proven: bool = False
    """Inside a recognised copy, with content that is a version of an upstream file (the blob
    catalogue): upstream code, never reported."""
    modified: ModifiedFile | None = None
    """Inside a recognised copy, at a path upstream had, with content no upstream version had:
    the submitter's kernel, reported one by one with what upstream had there."""
    awaits_upstream: bool = False
    """Not proven, inside a tree declared as a copy of a catalogued project: ``--upstream``
    compares it with the declared commit (a static check reports it one by one)."""

    @property
    def line(self) -> int | None:
        """First evidence line."""
        return next((e.line for e in self.evidence if e.line), None)




@dataclass(frozen=True)



class BinaryFile:
    """A compiled artifact recognised by its magic bytes."""

    path: str
    """Root-relative POSIX path."""
    kind: str
    """One of ``compliance.recognisers.BINARY_KINDS``."""
    size: int
    """Bytes."""
    location: Location
    """Where it sits in the layout."""
    members: tuple[tuple[str, str], ...] = ()
    """A container's compiled members: (member name, binary kind), nested names joined by ``!/``
    (empty for a file that is itself compiled, or a container that could not be opened)."""
    unopened: str | None = None
    """Why a container could not be opened (it is then judged as an opaque archive)."""


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
    outside: tuple[str, ...] = ()
    """Sources (or patterns) as written that are absolute or climb out of the checked tree."""
    generated: tuple[str, ...] = ()
    """Listed sources the tree lacks that the setup.py writes before it builds (through ``open`` or
    a generator module in the tree; filled when the walk is classified)."""

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
    unscanned: tuple[tuple[str, str], ...] = ()
    """(path, why) of what the walk could not scan within its limits (over ``MAX_FILE_BYTES``,
    deeper than ``MAX_DEPTH``, not a regular file); each is an error-level ``path-unscanned``."""
    metadata_dirs: tuple[str, ...] = ()
    """Version-control, cache and packaging-metadata directories (examined, and reported)."""

    def locate(self, relpath: str) -> Location:
        """Layout location of a root-relative path."""
        return self.mapper.locate(tuple(relpath.split("/"))) if self.mapper else Location()

    def vendored_owner(self, relpath: str) -> str | None:
        """The outermost vendored tree holding ``relpath``, if any."""
        return next((t.path for t in self.vendored if t.parent is None and relpath.startswith(t.path + "/")), None)


# --------------------------------------------------------------------------- sniffing

def scan_markers(data: bytes, c_source: bool = False) -> list[Evidence]:
    """First occurrence of each native-code marker family in ``data`` (a whole file; ``c_source``:
    C, C++ or CUDA source, read as the compiler reads it)."""
    return [Evidence(name, line) for name, line in recognisers.scan_markers(data, c_source)]


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
        return setup_extensions_of(_parse_quietly(source, setup_relpath), setup_relpath), None
    except SyntaxError as exc:
        return [], f"syntax error at line {exc.lineno}: {exc.msg}"
    except (ValueError, RecursionError, MemoryError) as exc:
        return [], f"{type(exc).__name__} while parsing{': ' + str(exc) if str(exc) else ''}"


def _parse_quietly(source: bytes, filename: str) -> ast.AST:
    """``ast.parse`` without warnings (the tree's odd literals are not the operator's concern)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source, filename=filename)


def setup_extensions(source: bytes, setup_relpath: str) -> list[SetupExtension]:
    """``CUDAExtension``/``CppExtension`` calls in a setup.py (AST only; never run)."""
    return parse_setup(source, setup_relpath)[0]


def extension_aliases(tree: ast.AST) -> dict[str, str]:
    """Names bound only to extension classes (``extension = CppExtension``, later ``extension =
    CUDAExtension``, as maskrcnn-benchmark's setup.py does) -> the strongest class they hold."""
    bound: dict[str, set[str] | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            value = node.value
            held = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else None
            known = bound.get(name, set())
            bound[name] = None if held not in EXTENSION_CALLS or known is None else known | {str(held)}
    return {name: next(k for k in EXTENSION_CALLS if k in held) for name, held in bound.items() if held}


def setup_extensions_of(tree: ast.AST, setup_relpath: str) -> list[SetupExtension]:
    """The extension calls in a parsed setup.py (``ast.walk`` is iterative: no depth limit).

    Sources are literal lists or computed ones (``glob``, ``os.path.join``, ``os.listdir``,
    names assigned once): ``compliance.setup_sources`` evaluates what it can, statically. A source
    that is absolute or climbs out of the tree is kept as written (``outside``)."""
    base = parent_dir(setup_relpath)
    names = module_assignments(tree)
    aliases = extension_aliases(tree)
    found = []
    for node in ast.walk(tree):
        called = _call_name(node) if isinstance(node, ast.Call) else None
        kind = called if called in EXTENSION_CALLS else aliases.get(called or "")
        if not isinstance(node, ast.Call) or kind is None:
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
        outside = tuple(as_written(i.text) for r, i in resolved if r is None)
        found.append(SetupExtension(setup_relpath, node.lineno, kind, name, sources, patterns, outside=outside))
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
    unscanned: list[tuple[str, str]] = field(default_factory=list)
    metadata_dirs: list[str] = field(default_factory=list)
    link_targets: dict[str, str] = field(default_factory=dict)
    container_members: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    unopened: dict[str, str] = field(default_factory=dict)
    scanned: scan_cache.Entries = field(default_factory=dict)
    """Each regular file's scan-cache entry (filled only while a scan cache is in use)."""
    fresh: int = 0
    """Files examined afresh while a scan cache was in use."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _is_metadata_dir(name: str) -> bool:
    return name in METADATA_DIRS or name.endswith(METADATA_DIR_SUFFIXES)


def _read_stream(fd: int, size: int, rel: str, name: str, walk: Walk) -> None:
    """Read the open regular file ``fd`` (``size`` bytes by fstat) chunk by chunk and record what it
    is under ``rel``/``name``."""
    ext = os.path.splitext(name)[1].lower()
    if size > MAX_FILE_BYTES:
        walk.unscanned.append((rel, f"{size} bytes, over the {MAX_FILE_BYTES >> 20} MiB limit for one file"))
        _record_source(rel, name, ext, [], walk, None)  # a .cu is still native
        return
    build_dir = build_directory_of(rel) if "build/" in rel else None
    # One byte past the size: a file that grew since fstat is still read whole or streamed.
    data = os.read(fd, min(CHUNK_BYTES, size + 1))
    kind = binary_kind(data[:64])
    if build_dir is not None:  # listed as a build product, and classified like any other file
        walk.build_products.setdefault(build_dir, []).append((rel, kind or "file"))
    container = container_kind(data[:CONTAINER_HEAD_BYTES])
    if container is not None:
        _examine_container(fd, container, rel, name, size, walk)
        return
    if kind is not None:
        walk.binaries.append((rel, kind, size))
        return
    # ninja's logs and dependency lists name headers (torch/extension.h): read like data files, for
    # kernel definitions (CUDA, PTX) only, so a kernel hidden in one is still found
    is_data = ext in DATA_EXTENSIONS or (build_dir is not None and is_build_noise(rel))
    scanner = recognisers.MarkerScanner(recognisers.DATA_MARKER_SET if is_data else recognisers.CODE_MARKERS,
                                        c_source=ext in C_SOURCE_EXTENSIONS, wide=recognisers.wide_codec(data[:4]))
    whole = data if len(data) <= size and len(data) < CHUNK_BYTES else None
    base64_too = not is_data or size <= recognisers.DATA_BASE64_LIMIT
    if whole is None:
        embedded = _scan_stream(fd, data, scanner, base64_too)
    else:
        scanner.scan(whole)
        embedded = _scan_base64(whole, True, scanner, base64_too, 0)
        if ext == ".ipynb":
            cells = recognisers.notebook_text(whole)
            if cells is not None:  # lines count on from the file's last
                scanner.scan(cells, whole.count(b"\n"))
    if embedded is not None:
        walk.binaries.append((rel, embedded, size))
    _record_source(rel, name, ext, scanner.markers(), walk, whole)


def _examine_container(fd: int, kind: str, rel: str, name: str, size: int, walk: Walk) -> None:
    """A container is a binary only through a compiled member; its kernel sources are native code."""
    with open_file(fd) as handle:
        contents = examine_container(kind, handle, name)
    if contents.over_limit is not None:
        walk.unscanned.append((rel, f"{kind} archive {contents.over_limit} (the limit for examining one)"))
    if contents.unopened is not None:
        walk.binaries.append((rel, kind, size))
        walk.unopened[rel] = contents.unopened
    elif contents.binaries:
        walk.binaries.append((rel, kind, size))
        walk.container_members[rel] = contents.binaries
    for member, markers, digest in contents.sources:
        path = member_path(rel, member)
        walk.native[path] = [Evidence(marker, line or None) for marker, line in markers]
        if digest is not None:
            walk.digests[path] = digest


def _scan_stream(fd: int, first: bytes, scanner: recognisers.MarkerScanner, base64_too: bool) -> str | None:
    """Scan a file too large to read at once, ``first`` being its first chunk: each window is the
    last ``OVERLAP`` bytes of the one before plus the next chunk, so nothing across an edge is
    missed. Returns the kind of binary hidden in it, if any."""
    window, lines_before, embedded = first, 0, None
    while True:
        scanner.scan(window, lines_before)
        embedded = _scan_base64(window, window is first, scanner, base64_too, lines_before) or embedded
        more = os.read(fd, CHUNK_BYTES)
        if not more:
            return embedded
        lines_before += window.count(b"\n", 0, max(0, len(window) - recognisers.OVERLAP))
        window = window[-recognisers.OVERLAP:] + more


def _scan_base64(data: bytes, at_start: bool, scanner: recognisers.MarkerScanner, base64_too: bool,
                 lines_before: int) -> str | None:
    """The kind of binary hidden in ``data`` (behind a prefix, or in base64 when ``base64_too``);
    base64 runs that decode to text are scanned for kernels as a loader's ``b64decode`` gives them."""
    if not base64_too:
        return recognisers.embedded_binary(data, at_start, False)
    runs = recognisers.base64_runs(data)
    for offset, text in recognisers.base64_texts(data, runs):
        scanner.scan_payload(text, lines_before + data.count(b"\n", 0, offset) + 1)
    return recognisers.embedded_binary(data, at_start, True, runs)


def _record_source(rel: str, name: str, ext: str, markers: list[tuple[str, int]], walk: Walk,
                   whole: bytes | None) -> None:
    """Record kernel evidence and setup.py extensions (``whole``: the content, None when streamed)."""
    evidence = [Evidence(marker, line) for marker, line in markers]
    if ext in CUDA_EXTENSIONS or ext == ".ptx":
        evidence.insert(0, Evidence("extension-file", None))
    if name == "setup.py":
        if whole is None:  # streamed: far past the parse limit, and never a plain setup.py
            walk.unparseable_setups.append((rel, f"larger than the {MAX_SETUP_BYTES // 1024} KiB limit for parsing"))
        elif b"Extension" in whole:
            extensions, problem = parse_setup(whole, rel)
            walk.setups.extend(extensions)
            if problem is not None:
                walk.unparseable_setups.append((rel, problem))
    if evidence:
        walk.native[rel] = evidence
        if whole is not None:
            walk.digests[rel] = normalized_blob_hash(whole)


def _visit_file(dir_fd: int, name: str, rel: str, walk: Walk) -> None:
    """Open ``name`` in ``dir_fd`` (never following a link) and examine it (or replay its scan-cache
    entry when it is unchanged)."""
    if _CACHE.recording and _cached_visit(dir_fd, name, rel, walk):
        return
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        walk.unreadable.append(rel)
        return
    try:
        _examine_open(fd, rel, name, walk)
    except OSError:
        walk.unreadable.append(rel)
    finally:
        os.close(fd)


def _examine_open(fd: int, rel: str, name: str, walk: Walk) -> None:
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):  # swapped after the listing, or a FIFO/device: never read
        walk.unscanned.append((rel, "not a regular file"))
        return
    _register(rel, name, walk)
    if not _CACHE.recording:
        _read_stream(fd, status.st_size, rel, name, walk)
        return
    part = Walk(walk.root)
    _read_stream(fd, status.st_size, rel, name, part)
    merge_walk(walk, part)
    walk.scanned[rel] = scan_cache.make_entry(scan_cache.stat_key(status), _record(part))
    walk.fresh += 1


def _register(rel: str, name: str, walk: Walk) -> None:
    """What a regular file's name alone tells the walk."""
    walk.files.add(rel)
    if name == MANIFEST_NAME:
        walk.manifests.append(rel)
    if name.upper().startswith(("LICENSE", "COPYING")):
        walk.licensed_dirs.add(parent_dir(rel))


@dataclass
class _ScanCache:
    """The entries of the walk under way (set before it starts: forked workers inherit them)."""

    entries: scan_cache.Entries = field(default_factory=dict)
    recording: bool = False


_CACHE = _ScanCache()


def _record(part: Walk) -> dict[str, Any] | None:
    """What examining one file added to a walk, as JSON (None: nothing)."""
    record: dict[str, Any] = {}
    if part.native:
        record["native"] = {p: [[e.marker, e.line] for e in ev] for p, ev in part.native.items()}
    for name in ("digests", "unopened", "build_products", "container_members"):
        if getattr(part, name):
            record[name] = getattr(part, name)
    for name in ("binaries", "unscanned", "unparseable_setups"):
        if getattr(part, name):
            record[name] = [list(item) for item in getattr(part, name)]
    if part.setups:
        record["setups"] = [{f.name: getattr(ext, f.name) for f in fields(SetupExtension)} for ext in part.setups]
    return record or None


def _replay(record: dict[str, Any] | None, walk: Walk) -> None:
    """Add a file's recorded outcome to ``walk`` (the inverse of ``_record``)."""
    if not record:
        return
    for path, evidence in record.get("native", {}).items():
        walk.native[path] = [Evidence(marker, line) for marker, line in evidence]
    walk.digests.update(record.get("digests", {}))
    walk.unopened.update(record.get("unopened", {}))
    for directory, products in record.get("build_products", {}).items():
        walk.build_products.setdefault(directory, []).extend((p, k) for p, k in products)
    for container, members in record.get("container_members", {}).items():
        walk.container_members[container] = [(m, k) for m, k in members]
    walk.binaries.extend((r, k, n) for r, k, n in record.get("binaries", ()))
    walk.unscanned.extend((r, why) for r, why in record.get("unscanned", ()))
    walk.unparseable_setups.extend((r, why) for r, why in record.get("unparseable_setups", ()))
    for ext in record.get("setups", ()):
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in ext.items()}
        walk.setups.append(SetupExtension(**values))


def _cached_visit(dir_fd: int, name: str, rel: str, walk: Walk) -> bool:
    """Replay ``rel``'s entry when the file is the one it was made from, unchanged (True), without
    opening it; else False (the file is examined)."""
    entry = _CACHE.entries.get(rel)
    if entry is None:
        return False
    try:
        status = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    same, record = scan_cache.entry_record(entry, scan_cache.stat_key(status))
    if not stat.S_ISREG(status.st_mode) or not same:
        return False
    _register(rel, name, walk)
    _replay(record, walk)
    walk.scanned[rel] = entry
    return True


def _open_dir_inside(root_fd: int, parts: Sequence[str]) -> int:
    """Open the root-relative directory ``parts`` component by component, following no link."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except OSError:
        os.close(fd)
        raise
    return fd


def _open_inside(root_fd: int, parts: list[str]) -> int:
    """Open the root-relative file ``parts`` component by component, following no link."""
    fd = _open_dir_inside(root_fd, parts[:-1])
    try:
        return os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


def _visit_link(dir_fd: int, root_fd: int, root_real: str, name: str, rel: str, walk: Walk) -> None:
    """Record a symlink; one to a file inside the tree is examined as that file, under its own name."""
    try:
        target = os.readlink(name, dir_fd=dir_fd)
        resolved = os.path.realpath(os.path.join(root_real, parent_dir(rel), target))
    except OSError:
        walk.unreadable.append(rel)
        return
    inside = resolved == root_real or resolved.startswith(root_real + os.sep)
    walk.symlinks.append((rel, target, not inside))
    if name == MANIFEST_NAME:  # a manifest is read only as a regular file of the tree, never via a link
        walk.unscanned.append((rel, f"{MANIFEST_NAME} is a symbolic link; a manifest must be a regular file"))
        return
    if not inside or resolved == root_real:
        return
    target_rel = os.path.relpath(resolved, root_real)
    walk.link_targets[rel] = target_rel.replace(os.sep, "/")
    try:
        fd = _open_inside(root_fd, target_rel.split(os.sep))
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP):
            walk.unreadable.append(rel)
        return  # a dangling link, or one to a directory (walked where it is)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            _examine_open(fd, rel, name, walk)
    except OSError:
        walk.unreadable.append(rel)
    finally:
        os.close(fd)


def _visit_dir(dir_fd: int, name: str, rel: str, depth: int, walk: Walk) -> int | None:
    """Open subdirectory ``name`` for walking (None: reported instead)."""
    if depth >= MAX_DEPTH:
        walk.unscanned.append((rel, f"deeper than {MAX_DEPTH} directories"))
        return None
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        walk.unreadable.append(rel)
        return None
    walk.dirs.add(rel)
    if _is_metadata_dir(name):
        walk.metadata_dirs.append(rel)
    return fd


def _entry_mode(entry: os.DirEntry[str]) -> int:
    """The file type of a directory entry, from the listing's own type field where it has one
    (no ``lstat`` per file); anything else is asked of ``lstat``."""
    if entry.is_symlink():
        return stat.S_IFLNK
    if entry.is_dir(follow_symlinks=False):
        return stat.S_IFDIR
    if entry.is_file(follow_symlinks=False):
        return stat.S_IFREG
    return entry.stat(follow_symlinks=False).st_mode


def _listing(fd: int, rel: str, walk: Walk) -> list[tuple[str, int | None]]:
    """(name, file type or None) of each entry of the directory open as ``fd``, sorted."""
    try:
        with os.scandir(fd) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        walk.unreadable.append(rel or ".")
        return []
    listed: list[tuple[str, int | None]] = []
    for entry in entries:
        try:
            listed.append((entry.name, _entry_mode(entry)))
        except OSError:
            listed.append((entry.name, None))
    return listed


BATCH_FILES = 256
"""Files examined together by a worker (from one or several directories): few enough batches that
handing them over costs little, small enough that every core stays busy to the end of a walk."""
PARALLEL_MIN_FILES = 2000
"""Workers are forked once the walk has listed this many files; a smaller tree is examined sooner
in this process alone."""


@dataclass(frozen=True)
class FileBatch:
    """Regular files handed to a worker process, directory by directory in listing order."""

    root: Path
    root_fd: int
    """The root directory's handle (inherited by forked workers)."""
    groups: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]
    """(directory as root-relative components, names of its files to examine)."""


def examine_batch(batch: FileBatch) -> Walk:
    """Examine a batch's files into a walk of their own. Each directory is opened again from the root
    handle, component by component, never following a link; a file is then opened as in the walk."""
    part = Walk(batch.root)
    for parts, names in batch.groups:
        prefix = "/".join(parts)
        rels = [f"{prefix}/{name}" if prefix else name for name in names]
        try:
            dir_fd = _open_dir_inside(batch.root_fd, parts)
        except OSError:
            part.unreadable.extend(rels)
            continue
        try:
            for name, rel in zip(names, rels, strict=True):
                _visit_file(dir_fd, name, rel, part)
        finally:
            os.close(dir_fd)
    return part


def merge_walk(walk: Walk, part: Walk) -> None:
    """Add what ``part`` found (a batch examined apart, possibly in a worker) to ``walk``."""
    for item in fields(Walk):
        if item.name == "root":
            continue
        mine, theirs = getattr(walk, item.name), getattr(part, item.name)
        if isinstance(mine, set):
            mine |= theirs
        elif isinstance(mine, list):
            mine.extend(theirs)
        elif item.name == "build_products":
            for directory, products in theirs.items():
                mine.setdefault(directory, []).extend(products)
        elif isinstance(mine, int):
            setattr(walk, item.name, mine + theirs)
        else:
            mine.update(theirs)


@dataclass
class _Walker:
    """One walk: lists directories here and has the files examined here or by workers; whatever
    workers find is merged in the order it was listed (so ``setups`` keep the walk's order)."""

    walk: Walk
    root_fd: int
    root_real: str
    work: OrderedWork[FileBatch, Walk]
    listed: int = 0
    pending: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    pending_files: int = 0

    def walk_dir(self, fd: int, relprefix: str, depth: int) -> None:
        """Walk the directory open as ``fd`` (closed by the caller), depth first."""
        walk = self.walk
        files: list[str] = []
        for name, mode in _listing(fd, relprefix, walk):
            rel = f"{relprefix}/{name}" if relprefix else name
            if mode is not None and stat.S_ISREG(mode):
                files.append(name)
                continue
            self.examine(fd, relprefix, files)  # files listed before this entry keep their place
            if mode is None:
                walk.unreadable.append(rel)
            elif stat.S_ISLNK(mode):
                self.visit_link(fd, name, rel)
            elif stat.S_ISDIR(mode):
                child = _visit_dir(fd, name, rel, depth + 1, walk)
                if child is not None:
                    try:
                        self.walk_dir(child, rel, depth + 1)
                    finally:
                        os.close(child)
            else:
                what = "kernel manifest" if name == MANIFEST_NAME else "entry"
                walk.unscanned.append((rel, f"{what} is not a regular file (a FIFO, socket or device)"))
        self.examine(fd, relprefix, files)

    def examine(self, fd: int, relprefix: str, names: list[str]) -> None:
        """Examine ``names`` of the directory open as ``fd`` (here, or by a worker once they run); empties ``names``."""
        if not names:
            return
        self.listed += len(names)
        if self.listed >= PARALLEL_MIN_FILES:
            self.work.start()
        if self.work.parallel:
            self.pending.append((tuple(relprefix.split("/")) if relprefix else (), tuple(names)))
            self.pending_files += len(names)
            if self.pending_files >= BATCH_FILES:
                self.flush()
        else:
            for name in names:
                _visit_file(fd, name, f"{relprefix}/{name}" if relprefix else name, self.walk)
        names.clear()

    def visit_link(self, fd: int, name: str, rel: str) -> None:
        """A symlink is examined here; once workers run, in its place among their results."""
        if not self.work.parallel:
            _visit_link(fd, self.root_fd, self.root_real, name, rel, self.walk)
            return
        self.flush()
        part = Walk(self.walk.root)
        _visit_link(fd, self.root_fd, self.root_real, name, rel, part)
        self.work.add(part)

    def flush(self) -> None:
        """Hand the files gathered so far to a worker."""
        if self.pending:
            self.work.submit(FileBatch(self.walk.root, self.root_fd, tuple(self.pending)))
            self.pending, self.pending_files = [], 0


def _walk(root: Path, workers: int, cache: Path | None = None) -> Walk:
    walk = Walk(root)
    root_real = os.path.realpath(root)
    stored = scan_cache.load(cache) if cache is not None else {}
    _CACHE.entries, _CACHE.recording = stored, cache is not None
    try:
        _walk_into(walk, root, root_real, workers)
    finally:
        _CACHE.entries, _CACHE.recording = {}, False
    if cache is not None and (walk.fresh or len(walk.scanned) != len(stored)):
        scan_cache.save(cache, walk.scanned)
    _drop_redundant_links(walk)
    return walk


def _walk_into(walk: Walk, root: Path, root_real: str, workers: int) -> None:
    try:
        root_fd = os.open(root_real, _DIR_FLAGS)
    except OSError as exc:
        raise InputError(f"cannot open the directory: {exc.strerror}", root) from exc
    work: OrderedWork[FileBatch, Walk] = OrderedWork(examine_batch, workers)
    try:
        walker = _Walker(walk, root_fd, root_real, work)
        walker.walk_dir(root_fd, "", 0)
        walker.flush()
        for part in work.results():
            merge_walk(walk, part)
    finally:
        os.close(root_fd)


def _drop_redundant_links(walk: Walk) -> None:
    """A link inside the tree is its target's second name: when the target (examined where it
    is) shows every marker the link's name showed, the target alone is judged."""
    for link, target in walk.link_targets.items():
        linked, direct = walk.native.get(link), walk.native.get(target)
        if linked is not None and direct is not None and \
                {e.marker for e in linked} <= {e.marker for e in direct}:
            del walk.native[link]
            walk.digests.pop(link, None)


def _languages(rel: str, evidence: list[Evidence]) -> tuple[str, ...]:
    ext = os.path.splitext(rel)[1].lower()
    langs = {LANGUAGE_OF_MARKER[e.marker] for e in evidence if e.marker in LANGUAGE_OF_MARKER}
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


def walk_tree(root: Path, workers: int | None = None, scan_cache_dir: Path | None = None) -> Walk:
    """The single walk of ``root`` (raises ``InputError`` if it is not a directory). Files are examined
    by ``workers`` processes (default: one per usable core; 1: this process only) once the tree is
    large enough to gain from them; the result is the same either way. With ``scan_cache_dir``, an
    unchanged file's outcome is taken from the scan cache kept there (``compliance.scan_cache``)."""
    if not root.exists():
        raise InputError("path does not exist", root)
    if not root.is_dir():
        raise InputError("not a directory (give the submission's root directory)", root)
    cache = scan_cache.cache_path(scan_cache_dir, root) if scan_cache_dir is not None else None
    if cache is not None and is_inside(cache, root):
        cache = None  # nothing is written into the checked tree
    return _walk(root, default_workers() if workers is None else workers, cache)


def _add_setup_sources(walk: Walk) -> None:
    """Sources listed by setup.py extensions (literally or by a pattern) are native code even
    without markers; each extension learns which files its patterns match."""
    index = FileIndex(walk.files) if any(ext.patterns for ext in walk.setups) else None
    if index is not None:
        walk.setups = [replace(ext, matched=tuple(sorted({m for p in ext.patterns for m in index.matching(p)})))
                       for ext in walk.setups]
    walk.setups = [_with_generated(walk, ext) for ext in walk.setups]
    for ext in walk.setups:
        if ext.kind == "Extension":
            continue
        for source in ext.shipped:
            if source in walk.files and source not in walk.native and not is_build_noise(source):
                walk.native[source] = [Evidence("setup.py", ext.line)]
                digest = file_normalized_blob_hash(walk.root / source)
                if digest is not None:
                    walk.digests[source] = digest


def _with_generated(walk: Walk, ext: SetupExtension) -> SetupExtension:
    """``ext`` with the listed sources the tree lacks that its setup.py generates (read afresh: only
    a setup.py naming a missing source is parsed again)."""
    missing = frozenset(s for s in ext.sources if s not in walk.files)
    setup_tree = _parsed_tree_file(walk, ext.setup_path) if missing else None
    if setup_tree is None:
        return ext
    written = generated_sources(setup_tree, parent_dir(ext.setup_path), missing,
                                lambda rel: _parsed_tree_file(walk, rel))
    return replace(ext, generated=tuple(sorted(written))) if written else ext


def _parsed_tree_file(walk: Walk, rel: str) -> ast.AST | None:
    """The AST of a Python file of the walked tree (a regular file, not a link, within the setup.py
    size limit), or None."""
    if rel not in walk.files:
        return None
    try:
        fd = os.open(walk.root / rel, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_SETUP_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SETUP_BYTES:
        return None
    try:
        return _parse_quietly(data, rel)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _digest_reader(root: Path, digests: dict[str, str]) -> Callable[[str], str | None]:
    """LF-normalised blob id of a root-relative file: the walk's (native files read whole), else
    read now (signature files of a nominated copy, streamed files) and remembered."""
    read: dict[str, str | None] = {}

    def digest_of(rel: str) -> str | None:
        known = digests.get(rel)
        if known is None:
            if rel not in read:
                read[rel] = file_normalized_blob_hash(root / rel)
            known = read[rel]
        return known
    return digest_of


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
                      frozenset(walk.licensed_dirs), _size_reader(root), _digest_reader(root, walk.digests))
    found = recognise(facts, protected.__contains__, locate_dir, vendored_markers, min_vendored_native,
                      declared, load_catalogue())
    native = tuple(NativeFile(rel, _languages(rel, ev), tuple(ev), locate(rel), found.owner.get(rel),
                              rel in found.unproven, found.not_upstream.get(rel), rel in found.proven,
                              found.modified.get(rel), rel in found.awaiting)
                   for rel, ev in sorted(walk.native.items()))
    return Inventory(
        root=root.resolve(), style=style, organizations=tuple(organizations),
        file_count=len(walk.files), native=native,
        binaries=tuple(BinaryFile(r, k, s, locate(r), tuple(walk.container_members.get(r, ())),
                                  walk.unopened.get(r)) for r, k, s in sorted(walk.binaries)),
        symlinks=tuple(Symlink(r, t, e, locate(r)) for r, t, e in sorted(walk.symlinks)),
        manifests=tuple(sorted(walk.manifests)), setup_extensions=tuple(walk.setups),
        vendored=found.trees, files=frozenset(walk.files), unreadable=tuple(sorted(walk.unreadable)),
        mapper=mapper, forks=found.forks,
        build_directories=tuple(BuildDirectory(d, tuple(sorted(p)), locate(d))
                                for d, p in sorted(walk.build_products.items())),
        digests=dict(walk.digests), unparseable_setups=tuple(sorted(walk.unparseable_setups)),
        declared_vendored=frozenset(declared),
        unscanned=tuple(sorted(walk.unscanned)), metadata_dirs=tuple(sorted(walk.metadata_dirs)),
    )


def build_inventory(root: Path, style: str, divisions: tuple[str, ...] = (),
                    **vendored_options: Any) -> Inventory:
    """Walk ``root`` once and classify everything in it."""
    return classify(walk_tree(root), style, divisions, **vendored_options)
