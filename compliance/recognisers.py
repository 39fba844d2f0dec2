"""Recognisers: what a file's bytes are, whatever the file is called.

Two questions are asked of every file the walk examines (docs/security.md lists
every form recognised, each with a fixture under tests/compliance/cases/negative/):

* Is it a compiled artifact or an opaque archive? ``binary_kind`` reads magic
  bytes at the start (ELF, cubin, fatbin, ``ar``, PE, Mach-O, zip/wheel, gzip,
  xz, bzip2, zstd, 7z) and ``embedded_binary`` looks a little further: an ELF or
  zip magic behind a small prefix, and base64 text that decodes to one of those.
* Does it hold native kernel code? ``MarkerScanner`` looks for CUDA kernel entries in
  every spelling the CUDA front end accepts (``cuda_line``: C, C++ and CUDA sources read
  as the compiler reads them, ``compliance.preprocessor``), inline PTX and PTX modules
  (``.entry``), Triton (``@triton.jit``/``autotune`` however spaced, ``from triton import
  jit``, any alias of the module), Numba ``cuda.jit``, CuPy ``RawKernel``/``RawModule``/
  ``ElementwiseKernel``/``ReductionKernel``/``compile_with_cache``, ``torch.cuda.jiterator``,
  ``load_inline``/``load`` of ``torch.utils.cpp_extension`` under any name, NVRTC in any
  binding, TVM's and MXNet's run-time compilation, and PyTorch extension markers. Every
  window is also scanned as a loader decodes it (UTF-16/32 by its byte-order mark, JSON and
  Python string escapes, base64 runs that decode to text). Notebooks are scanned as the text
  of their cells too.

Speed (every byte of every file is examined, so this is the checker's hot loop; measured
in docs/security.md, "Cost of examining every file"): one pass of a compiled multi-literal
search (Aho-Corasick with a SIMD prefilter, from ``ahocorasick_rs``) tells which marker
families have their anchor literal anywhere in the bytes; only those families run their
confirming expression, exactly as a per-literal ``bytes.find`` would have decided. Base64
binaries are looked for only at the start of runs of 64 or more base64 characters, found from
every fourth byte first (``_base64_runs``). A single regex alternation over every byte was ten
times slower than one ``find``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import operator
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, replace

from ahocorasick_rs import BytesAhoCorasick

from compliance import preprocessor

ARCHIVE_KINDS = ("zip", "gzip", "xz", "bzip2", "zstd", "7z")
"""Opaque archives: what they hold cannot be reviewed in the tree (a wheel is a zip)."""
BINARY_KINDS = ("elf-shared-object", "elf-relocatable", "elf-executable", "cubin", "fatbin",
                "ar-archive", "pe", "mach-o", *ARCHIVE_KINDS, "elf-behind-prefix", "embedded-base64")
"""Every kind a ``BinaryFile`` may have."""
PREFIX_WINDOW = 4096
"""An ELF or zip magic this far into a file (behind a prefix a loader strips) is still a binary."""
OVERLAP = 4096
"""Bytes of one chunk carried into the next while streaming, so a marker across the edge is seen."""

_ARCHIVE_MAGIC = (
    (b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"), (b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"),
    (b"BZh", "bzip2"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"7z\xbc\xaf\x27\x1c", "7z"),
)


JAVA_CLASS_MIN_VERSION = 45
"""Java class files share the fat Mach-O magic ``CAFEBABE``; their next four bytes are the class
version (major 45 and up), a fat Mach-O's are its architecture count (a handful)."""
_FIRST_BYTES = frozenset(b"\x7f!\x50\xfe\xce\xcf\xcaMP\x1f\xfdB\x287")
"""The first byte of every magic below (most files start with none of them)."""


def binary_kind(head: bytes) -> str | None:
    """Binary kind from the first bytes of a file, or None for non-binaries."""
    if not head or head[0] not in _FIRST_BYTES:
        return None
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
    if head[:4] == b"\xca\xfe\xba\xbe" and int.from_bytes(head[4:8], "big") >= JAVA_CLASS_MIN_VERSION:
        return None  # a Java class file (its version where a fat Mach-O counts its architectures)
    if head[:4] in (b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe",
                    b"\xca\xfe\xba\xbe"):
        return "mach-o"
    if head.startswith(b"MZ") and len(head) >= 64:
        pe_offset = int.from_bytes(head[60:64], "little")
        return "pe" if pe_offset < 4096 else None
    for magic, kind in _ARCHIVE_MAGIC:
        if head.startswith(magic) and (kind != "bzip2" or head[3:4] in b"123456789" and len(head) > 3):
            return kind
    return None


_B64_MAGIC = ((b"\x7fELF", "ELF"), (b"PK\x03\x04", "zip"), (b"\x1f\x8b\x08", "gzip"))
_B64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_CLASSES = bytes(1 if byte in _B64_ALPHABET else 0 for byte in range(256))
"""``translate`` table: 1 for a base64 character, 0 for any other byte."""
_B64_RUN_CLASS = b"\x01" * 64
_SAMPLE_STRIDE = 4
_SAMPLE_RUN = b"\x01" * (64 // _SAMPLE_STRIDE)


def embedded_binary(data: bytes, at_start: bool, base64_too: bool = True,
                    runs: list[tuple[int, int]] | None = None) -> str | None:
    """``elf-behind-prefix`` or ``embedded-base64`` when ``data`` hides a binary past its start.

    ``at_start``: ``data`` begins at the file's first byte (only then is a prefix window checked);
    ``base64_too``: also look for base64 text that decodes to a binary (in ``runs``, the base64
    runs of ``data`` when the caller has them).
    """
    if at_start:
        for magic in (b"\x7fELF", b"PK\x03\x04"):
            offset = data.find(magic, 1, PREFIX_WINDOW + len(magic))
            if offset > 0 and (magic != b"\x7fELF" or binary_kind(data[offset:offset + 64])):
                return "elf-behind-prefix"
    if not base64_too:
        return None
    # A blob is a whole run: a binary hidden in base64 decodes to its magic at the run's start (an
    # image's compressed bytes hold a magic somewhere by chance, and a notebook holds many images).
    found = _base64_runs(data) if runs is None else runs
    return next(("embedded-base64" for start, _ in found if decodes_to_magic(data, start)), None)


def _base64_runs(data: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of every run of at least 64 base64 characters in ``data``, each whole.

    Such a run holds 16 consecutive bytes at offsets divisible by 4, so those are looked for in the
    every-fourth-byte sample first (a quarter of the work); only the stretch between the non-base64
    samples around such a sample run is then classified byte by byte (no run reaches past them)."""
    samples = bytearray(data[::_SAMPLE_STRIDE]).translate(_B64_CLASSES)
    sample = samples.find(_SAMPLE_RUN)
    while sample >= 0:
        after = samples.find(b"\x00", sample)
        after = len(samples) if after < 0 else after
        low = max(0, _SAMPLE_STRIDE * sample - _SAMPLE_STRIDE + 1)
        classes = bytearray(data[low:_SAMPLE_STRIDE * after]).translate(_B64_CLASSES)
        run = classes.find(_B64_RUN_CLASS)
        while run >= 0:
            end = classes.find(b"\x00", run)
            end = len(classes) if end < 0 else end
            yield low + run, low + end
            run = classes.find(_B64_RUN_CLASS, end)
        sample = samples.find(_SAMPLE_RUN, after)


def decodes_to_magic(data: bytes, start: int) -> bool:
    """The base64 run that begins at ``start`` (64 characters or more) decodes to a known magic at
    its first byte, read from any of the run's first four characters (a stray base64 letter of the
    text before the blob, ``xf0VMRg``, shifts it)."""
    for shift in range(4):
        try:
            decoded = base64.b64decode(data[start + shift:start + shift + 16], validate=True)
        except (binascii.Error, ValueError):
            continue
        if any(decoded.startswith(magic) for magic, _ in _B64_MAGIC):
            return True
    return False


# --------------------------------------------------------------------------- kernel markers

@dataclass(frozen=True)
class Marker:
    """One family of kernel evidence: a literal that must occur and the expression confirming it."""

    name: str
    """Evidence name (cuda, ptx, triton, numba, cupy, jiterator, inline, extension)."""
    literals: tuple[bytes, ...]
    """Bytes any match contains (found with ``bytes.find``)."""
    pattern: re.Pattern[bytes] | None
    """Confirmation, run only on data holding a literal; None: the literal is the evidence."""
    language: str
    """Language the evidence implies (cuda, cpp, ptx, triton)."""
    alias: re.Pattern[bytes] | None = None
    """An import that names the module something else (group 1: the name)."""
    alias_use: bytes = b""
    """What, after ``<alias>``, is the evidence (a regex fragment)."""
    anchors: tuple[bytes, ...] = ()
    """What the literal search looks for instead of ``literals`` (bytes every match contains too):
    fewer or rarer bytes keep that search fast on logs."""


_CONTINUATION_LITERALS = (b"\\\n", b"\\\r", b"\\ ", b"\\\t", b"\\\f", b"\\\v")
"""A backslash ending a line (blanks after it too): the preprocessor joins the lines, so
``__glo\\<newline>bal__`` is CUDA."""
_NVRTC = (rb"\bnvrtc\w*\s*\(|\bnvrtc\s*\.\s*\w|(?:^|[\n;])[ \t]*(?:import|from)[ \t]+[\w. \t,]*nvrtc\b|"
          rb"[<\"]nvrtc\.h[>\"]|from[ \t]+cuda\.core[\w.]*[ \t]+import\b[^\n]*\bProgram\b|"
          rb"cuda\.core\.experimental\.Program\b")
"""NVRTC in any binding: ``nvrtcCreateProgram(`` (C, ctypes), ``nvrtc.<call>`` (cuda-python's
``cuda.bindings.nvrtc``/``cuda.nvrtc``), an import of a module named like it (``pynvrtc``), its
header, cuda-python's ``cuda.core`` ``Program``."""
_TVM = (rb"\btvm\s*\.\s*(?:build|compile|driver\s*\.\s*build|relay\s*\.\s*build|contrib\s*\.\s*nvcc)\b|"
        rb"\brelay\s*\.\s*build\s*\(|\bcompile_cuda\s*\(|"
        rb"from[ \t]+tvm[\w.]*[ \t]+import\b[^\n]*\b(?:build|compile|compile_cuda|nvcc)\b")
_MXNET_RTC = (rb"\b(?:mx|mxnet)\s*\.\s*rtc\b|\bCudaModule\s*\(|"
              rb"from[ \t]+mxnet[\w.]*[ \t]+import\b[^\n]*\b(?:rtc|CudaModule)\b|import[ \t]+mxnet\.rtc\b")
MARKERS: tuple[Marker, ...] = (
    # decided by ``cuda_line`` (compliance.preprocessor: every spelling of a kernel entry, macros
    # expanded): every such entry holds ``global`` or comes from pasting tokens or joining lines
    Marker("cuda", (b"global", b"##", b"%:%:"), None, "cuda"),
    Marker("ptx", (b"asm", b".entry"), re.compile(
        rb"\basm\s*(?:volatile\s*|__volatile__\s*)?\(|__asm__|(?:^|\s)\.entry\s+[\w$]+"), "ptx"),
    Marker("triton", (b"triton",), re.compile(
        rb"triton\s*\.\s*(?:jit|autotune|heuristics)\b|"
        rb"from[ \t]+triton(?:\.\w+)*[ \t]+import\b[^\n]*\b(?:jit|autotune)\b"),
        "triton",
        re.compile(rb"import[ \t]+triton[ \t]+as[ \t]+(\w+)"), rb"\s*\.\s*jit\b"),
    Marker("numba", (b"numba", b"cuda"), re.compile(
        rb"\bcuda\s*\.\s*jit\b|from[ \t]+numba[ \t]+import\b[^\n]*\bcuda\b"), "cuda",
        re.compile(rb"(?:import[ \t]+numba\.cuda|from[ \t]+numba[ \t]+import[ \t]+cuda)[ \t]+as[ \t]+(\w+)"),
        rb"\s*\.\s*jit\b"),
    Marker("cupy", (b"Kernel", b"RawModule", b"compile_with_cache"), re.compile(
        rb"\b(?:RawKernel|RawModule|ElementwiseKernel|ReductionKernel|compile_with_cache)\b"), "cuda"),
    Marker("jiterator", (b"jiterator",), re.compile(rb"\bjiterator\b"), "cuda"),
    Marker("inline", (b"load_inline", b"cpp_extension"), re.compile(
        rb"\bload_inline\b|cpp_extension\s*\.\s*load\w*\s*\(|"
        rb"from[ \t]+torch\.utils\.cpp_extension[ \t]+import[ \t(\\\s]*(?:\w+[ \t]*(?:as[ \t]+\w+)?"
        rb"[ \t]*,[ \t\\\s]*)*load\b"), "cpp",
        re.compile(rb"(?:import[ \t]+torch\.utils\.cpp_extension|from[ \t]+torch\.utils[ \t]+import"
                   rb"[ \t]+cpp_extension)[ \t]+as[ \t]+(\w+)"), rb"\s*\.\s*load\w*\s*\("),
    Marker("extension", (b"TORCH_LIBRARY", b"PYBIND11_MODULE", b"torch/extension.h"), None, "cpp"),
    Marker("nvrtc", (b"nvrtc", b"cuda.core"), re.compile(_NVRTC + rb"|nvrtc[\w.-]*\.(?:so|dll|dylib)\b"), "cuda"),
    Marker("tvm", (b"tvm", b"compile_cuda"), re.compile(_TVM), "cuda",
           re.compile(rb"import[ \t]+tvm[ \t]+as[ \t]+(\w+)"), rb"\s*\.\s*(?:build|compile)\b"),
    Marker("mxnet-rtc", (b"rtc", b"CudaModule"), re.compile(_MXNET_RTC), "cuda"),
)
_BY_NAME = {marker.name: marker for marker in MARKERS}
DATA_MARKERS = (
    replace(MARKERS[0], anchors=(b"global",)),  # no pasted spelling: a data file holds no #define to paste
    Marker("ptx", (b".entry",), re.compile(rb"(?:^|\s)\.entry\s+[\w$]+"), "ptx"),
    # run-time compilers: Python can exec or runpy a .txt, .log or .csv (anchors rare in logs)
    replace(_BY_NAME["triton"], literals=(b"jit",), anchors=(b"jit",)),
    replace(_BY_NAME["numba"], literals=(b"jit",), anchors=(b"jit",)),
    replace(_BY_NAME["cupy"], literals=(b"Kernel",)),
    replace(_BY_NAME["jiterator"], anchors=(b"jit",)),
    Marker("nvrtc", (b"vrtc",), re.compile(_NVRTC), "cuda"),
    replace(_BY_NAME["tvm"], literals=(b"tvm",)),
)
DATA_SEARCH_GROUPS = ((b"global", b".entry", *_CONTINUATION_LITERALS), (b"jit", b"vrtc", b"tvm", b"Kernel"))
"""How the data set's anchors are searched: two automata the library searches fast on MLPerf result
logs (one over twenty literals reads every byte, several times slower). Each family's evidence holds
its anchor: a Triton or numba kernel is decorated with a ``jit``, ``jiterator`` holds one, CuPy's
``RawKernel``/``ElementwiseKernel``/``ReductionKernel`` hold ``Kernel``, NVRTC's every call ``vrtc``."""
"""What data files and logs are scanned for: CUDA and PTX kernel source, and the run-time compilers
a ``.txt`` Python runs with ``exec`` is most likely to call (Triton, numba, CuPy's kernels, jiterator,
NVRTC, TVM). Not inline ``asm`` or binding macros, which need a C++ compiler, nor CuPy's
``RawModule``, ``load_inline``, MXNet's ``CudaModule``, ``cuda.core``'s ``Program`` or a kernel
spelled by pasting tokens: those are found in code files only (docs/security.md, limits)."""
DATA_BASE64_LIMIT = 1024 * 1024
"""Data files up to this size are also searched for base64 binaries (larger ones are logs and
results; a blob in one needs code to decode it, and code is always searched)."""
LANGUAGE_OF_MARKER = {m.name: m.language for m in MARKERS}
SEARCH_SLICE = 256 * 1024
"""Bytes given to the literal search at once: bounds the matches held at a time (a file of nothing
but one literal), since a family leaves the search once one of its literals is seen."""


def first_match(data: bytes, marker: Marker) -> int | None:
    """Offset of the first match of ``marker`` at or after 256 bytes before its first literal."""
    hits = [i for i in map(data.find, marker.literals) if i >= 0]
    if not hits:
        return None
    if marker.pattern is None:
        return min(hits)
    match = marker.pattern.search(data, max(0, min(hits) - 256))
    if match:
        return match.start()
    if marker.alias is not None:
        for imported in marker.alias.finditer(data):
            use = re.compile(rb"\b" + re.escape(imported.group(1)) + marker.alias_use).search(data)
            if use:
                return use.start()
    return None


def cuda_line(data: bytes, c_source: bool) -> int | None:
    """Line (1-based, in ``data``) of the first CUDA kernel entry, or None. A C, C++ or CUDA source
    (``c_source``) is read as the compiler reads it: comments and literals do not count, macros
    are expanded. Any other text (Python holding kernel source in a string, a ``.txt`` a loader
    reads) counts a spelling anywhere, lines joined at splices, and is expanded too when it
    defines macros."""
    if c_source:
        return preprocessor.kernel_line(data)
    joined = preprocessor.join_splices(data)
    offset = preprocessor.qualifier_offset(joined)
    if offset is not None:
        return joined.count(b"\n", 0, offset) + 1
    return preprocessor.kernel_line(data) if b"define" in data and preprocessor.DEFINES.search(data) else None


def _family_line(data: bytes, marker: Marker, c_source: bool) -> int | None:
    """Line (1-based, in ``data``) where ``marker``'s family first shows."""
    if marker.name == "cuda":
        return cuda_line(data, c_source)
    offset = first_match(data, marker)
    return None if offset is None else data.count(b"\n", 0, offset) + 1


class MarkerSet:
    """Marker families compiled for scanning: one literal search over all their anchors, rebuilt
    without the families already seen. A line continuation is searched for as one more "family"
    (bit ``continuation``) while the CUDA family is scanned for: the preprocessor joins such lines.

    ``groups``: search these groups of literals one automaton each instead (for data files, most of a
    round's bytes: the library skips ahead on bytes rare in logs when an automaton holds one literal
    or a few chosen together, while one automaton over twenty literals reads every byte; the figures
    are in docs/security.md). Every anchor of every family must be in a group."""

    def __init__(self, families: tuple[Marker, ...], groups: tuple[tuple[bytes, ...], ...] = ()) -> None:
        self.families = families
        self.cuda = next((i for i, marker in enumerate(families) if marker.name == "cuda"), None)
        self.continuation = len(families)
        """Bit of a line continuation in ``present``'s result."""
        self.every = (1 << len(families)) - 1 | (1 << self.continuation if self.cuda is not None else 0)
        """Bits of everything scanned for."""
        self._searches: dict[int, tuple[BytesAhoCorasick, tuple[int, ...], int]] = {}
        self._groups = self._compile_groups(groups) if groups else ()

    def _compile_groups(self, groups: tuple[tuple[bytes, ...], ...]) -> tuple[tuple[BytesAhoCorasick, tuple[int, ...],
                                                                                    int, int], ...]:
        """(automaton, bits of its literals, bits of the group, longest literal) per group."""
        bits: dict[bytes, int] = {}
        for index, marker in enumerate(self.families):
            for literal in marker.anchors or marker.literals:
                bits[literal] = bits.get(literal, 0) | 1 << index
        if self.cuda is not None:
            for literal in _CONTINUATION_LITERALS:
                bits[literal] = bits.get(literal, 0) | 1 << self.continuation
        missing = set(bits) - {literal for group in groups for literal in group}
        if missing:
            raise ValueError(f"anchors in no search group: {sorted(missing)}")
        compiled = []
        for group in groups:
            of = tuple(bits.get(literal, 0) for literal in group)
            compiled.append((BytesAhoCorasick(list(group)), of, functools.reduce(operator.or_, of, 0),
                             max(map(len, group))))
        return tuple(compiled)

    def search(self, wanted: int) -> tuple[BytesAhoCorasick, tuple[int, ...], int]:
        """(automaton, bit of each of its literals, longest literal) for the bits set in ``wanted``."""
        cached = self._searches.get(wanted)
        if cached is None:
            literals: list[bytes] = []
            bit_of: list[int] = []
            for index, marker in enumerate(self.families):
                if wanted >> index & 1:
                    anchors = marker.anchors or marker.literals
                    literals.extend(anchors)
                    bit_of.extend([index] * len(anchors))
            if wanted >> self.continuation & 1:
                literals.extend(_CONTINUATION_LITERALS)
                bit_of.extend([self.continuation] * len(_CONTINUATION_LITERALS))
            cached = (BytesAhoCorasick(literals), tuple(bit_of), max(map(len, literals)))
            self._searches[wanted] = cached
        return cached

    def present(self, data: bytes, wanted: int) -> int:
        """The bits of ``wanted`` whose anchors (or line continuation) occur somewhere in ``data``."""
        if self._groups:
            return self._present_grouped(data, wanted)
        present = 0
        start = 0
        while wanted and start < len(data):
            automaton, bit_of, longest = self.search(wanted)
            stop = start + SEARCH_SLICE + longest - 1  # a literal across the slice edge is still seen
            part = data if start == 0 and stop >= len(data) else memoryview(data)[start:stop]
            hits = automaton.find_matches_as_indexes(part, overlapping=True)
            if hits:
                for literal in {hit[0] for hit in hits}:
                    present |= 1 << bit_of[literal]
                wanted &= ~present
            start += SEARCH_SLICE
        return present


    def _present_grouped(self, data: bytes, wanted: int) -> int:
        """``present`` by groups, every group over one slice while it is in the cache."""
        present = 0
        longest = max(group[3] for group in self._groups)
        for start in range(0, len(data), SEARCH_SLICE):
            stop = start + SEARCH_SLICE + longest - 1  # a literal across the slice edge is still seen
            part = data if start == 0 and stop >= len(data) else memoryview(data)[start:stop]
            for automaton, bit_of, group_bits, _ in self._groups:
                if group_bits & wanted & ~present:
                    for literal in {hit[0] for hit in automaton.find_matches_as_indexes(part, overlapping=True)}:
                        present |= bit_of[literal] & wanted
            if not wanted & ~present:
                break
        return present


CODE_MARKERS = MarkerSet(MARKERS)
"""What code (and any file not known to be data) is scanned for."""
DATA_MARKER_SET = MarkerSet(DATA_MARKERS, groups=DATA_SEARCH_GROUPS)
"""What data files and logs are scanned for."""


class MarkerScanner:
    """First occurrence (line) of each marker family in a file given one window at a time.

    The caller passes overlapping windows (the last ``OVERLAP`` bytes of one start the next, so a
    marker across a chunk edge is seen) with the count of newlines before each window's first byte.
    A family is looked at only in windows holding one of its anchors (one literal search for all),
    and decided there as ``first_match`` decides it.
    """

    __slots__ = ("marker_set", "c_source", "wide", "found", "_wanted")

    def __init__(self, markers: MarkerSet = CODE_MARKERS, c_source: bool = False, wide: str | None = None) -> None:
        self.marker_set = markers
        self.c_source = c_source
        """The file is C, C++ or CUDA source: read as the compiler reads it (``cuda_line``)."""
        self.wide = wide
        """The codec of a UTF-16 or UTF-32 file (from its byte-order mark): windows are decoded first."""
        self.found: dict[str, int] = {}
        self._wanted = markers.every  # families not found yet (and line continuations while CUDA is not)

    def scan(self, window: bytes, lines_before: int = 0) -> None:
        """Scan ``window``, a stretch of the file with ``lines_before`` newlines before it, as it is
        and as a loader would decode it: from UTF-16/32 (``wide``), then string escapes undone.
        Decoded text is what a loader hands a compiler, so a kernel in it counts even inside what
        the file's own language calls a string literal (a C++ file holding JSON-escaped CUDA)."""
        decoded = self.wide is not None
        if decoded:
            window = window.decode(self.wide or "", "replace").encode("utf-8", "surrogatepass")
        self.scan_plain(window, lines_before, self.c_source and not decoded)
        if self._wanted and b"\\" in window and ESCAPE_HINT.search(window):
            self.scan_plain(unescape(window), lines_before, False)

    def scan_payload(self, payload: bytes, line: int) -> None:
        """Scan text decoded from an encoding that spans lines (base64): whatever is found is at ``line``."""
        before = dict(self.found)
        self.scan_plain(payload, 0, False)
        if self._wanted and b"\\" in payload and ESCAPE_HINT.search(payload):
            self.scan_plain(unescape(payload), 0, False)
        self.found.update({name: line for name in self.found if name not in before})

    def scan_plain(self, window: bytes, lines_before: int = 0, c_source: bool | None = None) -> None:
        """Scan ``window`` as it is (``c_source``: read it as C, C++ or CUDA source; the scanner's
        own setting when None)."""
        marker_set = self.marker_set
        present = marker_set.present(window, self._wanted) if self._wanted else 0
        if not present:
            return
        if present >> marker_set.continuation & 1 and marker_set.cuda is not None:
            present |= 1 << marker_set.cuda
        as_c = self.c_source if c_source is None else c_source
        for index, marker in enumerate(marker_set.families):
            if present >> index & 1:
                line = _family_line(window, marker, as_c)
                if line is not None:
                    self.found[marker.name] = lines_before + line
                    self._wanted &= ~(1 << index)
                    if index == marker_set.cuda:
                        self._wanted &= ~(1 << marker_set.continuation)

    def markers(self) -> list[tuple[str, int]]:
        """(marker, line) in the order of ``MARKERS``."""
        if not self.found:
            return []
        return [(m.name, self.found[m.name]) for m in MARKERS if m.name in self.found]


def scan_markers(data: bytes, c_source: bool = False) -> list[tuple[str, int]]:
    """(marker, line) of each kernel marker family found in ``data`` (a whole file; ``c_source``:
    C, C++ or CUDA source, read as the compiler reads it)."""
    scanner = MarkerScanner(c_source=c_source)
    scanner.scan(data)
    return scanner.markers()


# --------------------------------------------------------------------------- decoding as a loader does

ESCAPE_HINT = re.compile(rb"\\(?:u00|U0000|x[0-9a-fA-F]{2}|N\{|[0-3][0-7]{2})")
"""A string escape that may spell a plain character (``\\u005f``, ``\\x5f``, ``\\137``, ``\\N{LOW LINE}``)."""
_ESCAPE = re.compile(rb"\\(?:u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|x([0-9a-fA-F]{2})|([0-7]{1,3})|"
                     rb"N\{([A-Za-z0-9 \-]{1,80})\}|([\\/'\"]))")
UNESCAPE_ROUNDS = 3
"""Escapes undone this many times over (a JSON string holding a Python string: ``\\\\u005f``)."""
WIDE_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
             (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
"""Byte-order marks of the encodings Python's ``open(encoding="utf-16"/"utf-32")`` reads."""


def wide_codec(head: bytes) -> str | None:
    """The UTF-16 or UTF-32 codec a file starting with ``head`` is in (by its byte-order mark), or None."""
    return next((codec for bom, codec in WIDE_BOMS if head.startswith(bom)), None)


def _unescaped(match: re.Match[bytes]) -> bytes:
    hexa = match.group(1) or match.group(2) or match.group(3)
    if hexa is not None:
        code = int(hexa, 16)
    elif match.group(4) is not None:
        code = int(match.group(4), 8)
    elif match.group(5) is not None:
        try:
            code = ord(unicodedata.lookup(match.group(5).decode()))
        except KeyError:
            return match.group()
    else:
        return match.group(6)
    if code in (0x0A, 0x0D) or code > 0x10FFFF:
        return match.group()  # kept escaped: line numbers stay those of the file
    return chr(code).encode("utf-8", "surrogatepass")


def unescape(data: bytes) -> bytes:
    """``data`` with JSON and Python string escapes undone (``\\u005f`` is ``_``), repeatedly for
    escapes of escapes; newlines stay escaped, so each line keeps its number."""
    for _ in range(UNESCAPE_ROUNDS):
        decoded = _ESCAPE.sub(_unescaped, data)
        if decoded == data or not ESCAPE_HINT.search(decoded):
            return decoded
        data = decoded
    return data


def base64_texts(data: bytes, runs: list[tuple[int, int]]) -> Iterator[tuple[int, bytes]]:
    """(offset, decoded text) of every base64 run in ``data`` that decodes to text (a loader's
    ``b64decode`` of kernel source), at whichever of the four alignments reads as text."""
    for start, end in runs:
        for shift in range(4):
            stop = start + shift + (end - start - shift) // 4 * 4
            try:
                decoded = base64.b64decode(data[start + shift:stop], validate=True)
            except (binascii.Error, ValueError):
                continue
            if _looks_like_text(decoded[:_TEXT_SAMPLE]):
                yield start, decoded
                break


_TEXT_SAMPLE = 512
_TEXT_BYTES = bytes(range(0x20, 0x7F)) + b"\t\n\r"


def _looks_like_text(sample: bytes) -> bool:
    """At least 95 % printable ASCII or whitespace: decoded source, not a compressed or binary blob."""
    return len(sample) >= 16 and len(sample.translate(None, _TEXT_BYTES)) * 20 <= len(sample)


def base64_runs(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every run of at least 64 base64 characters in ``data``."""
    return list(_base64_runs(data))


def notebook_text(data: bytes) -> bytes | None:
    """The concatenated cell sources of a Jupyter notebook (None if ``data`` is not one)."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return None
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        return None
    parts = []
    for cell in cells:
        source = cell.get("source") if isinstance(cell, dict) else None
        if isinstance(source, list):
            source = "".join(s for s in source if isinstance(s, str))
        if isinstance(source, str):
            parts.append(source)
    return "\n".join(parts).encode("utf-8", "surrogatepass")
