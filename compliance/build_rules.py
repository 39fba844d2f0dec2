"""What builds a binary: Makefile rules read as make reads them, and the build tools' own artefacts.

**Makefiles of any name** (``Makefile``, ``GNUmakefile``, ``Makefile.txt``, ``*.mk``): logical lines
(backslash continuations joined), variable assignments, explicit and pattern (``%``) rules and their
recipes. A rule builds its targets and every ``-o OUTPUT`` of its recipe from the sources among its
prerequisites and recipe words (``.c``, ``.cc``, ``.cpp``, ``.cu`` ...). Variables with one plain
value are substituted; any other (``$(ARCH)`` from ``$(shell uname -p)``) matches any file-name
part, so ``scripts/get_gencode_$(ARCH)`` pairs with ``scripts/get_gencode_x86_64``. Paths are
relative to the Makefile's directory (where make runs). Nothing is run.

**CMake targets** (``CMakeLists.txt``): ``add_library(NAME [STATIC|SHARED|MODULE] ...)`` and
``add_executable(NAME ...)`` with their sources, ``set()`` variables and ``${CMAKE_CURRENT_SOURCE_DIR}``
substituted; a source under the binary directory (``${CMAKE_BINARY_DIR}``: written by the build, as
LoadGen's ``version_generated.cc``) is not expected in the tree. CMake builds wherever its user
runs it, so a product is paired with its target by content where it has any: a static library's
members are the objects of the target's sources (``loadgen.cc.o``).

**Build-tool artefacts** are binaries a build tool makes for itself, recognised by where they are
and what lies beside them: CMake's compiler probes (under ``CMakeFiles/``, holding CMake's
``INFO:compiler[``/``INFO:abi[`` strings), Bazel's install base (``_embedded_binaries`` beside
``A-server.jar``/``build-label.txt``/``install_base_key``) and its ``external/`` downloads (in an
output base holding ``execroot/`` or ``DO_NOT_BUILD_HERE``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from compliance.paths import parent_dir

SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".cu", ".f90", ".f", ".s", ".S")
"""What a make rule compiles (headers alone build nothing)."""
_VARIABLE = re.compile(r"\$\(([^()$]*)\)|\$\{([^{}$]*)\}|\$([@<^*?])")
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+|override\s+)?([A-Za-z_][\w.-]*)\s*(::?=|:::=|\?=|\+=|!=|=)\s*(.*)$")
_RULE = re.compile(r"^([^\t#:=][^:=]*?)\s*::?\s*(?!=)(.*)$")
_WILD = "\0"
"""Stands for an unknown part while patterns are built (becomes ``[^/]*``)."""
CMAKE_PROBE_STRINGS = (b"INFO:compiler[", b"INFO:abi[", b"INFO:sizeof_dptr[", b"INFO:platform[")
"""Strings CMake compiles into its compiler-identification and ABI probes."""
BAZEL_INSTALL_MARKERS = ("A-server.jar", "build-label.txt", "install_base_key")
BAZEL_OUTPUT_MARKERS = ("DO_NOT_BUILD_HERE",)


def is_make_file(name: str) -> bool:
    """``Makefile``, ``makefile``, ``GNUmakefile``, ``Makefile.<anything>`` and ``*.mk``."""
    return name in ("Makefile", "makefile", "GNUmakefile") or name.startswith(("Makefile.", "makefile.")) \
        or name.endswith(".mk")


@dataclass(frozen=True)
class MakeRule:
    """One rule (or one compiling recipe line) of a Makefile, paths root-relative."""

    script: str
    """Root-relative path of the Makefile."""
    line: int
    """Line of the rule (or of the recipe line with ``-o``)."""
    outputs: tuple[str, ...]
    """Patterns of what it builds: ``*`` an unknown part, ``%`` a pattern rule's stem."""
    sources: tuple[str, ...]
    """Patterns of the sources it compiles (same notation)."""

    def match(self, path: str) -> str | None:
        """The stem (empty for no ``%``) when this rule builds root-relative ``path``, else None."""
        for output in self.outputs:
            found = _output_regex(output).match(path)
            if found:
                return found.group("stem") if "%" in output else ""
        return None


def _output_regex(pattern: str) -> re.Pattern[str]:
    parts = []
    stem_seen = False
    for char in pattern:
        if char == "%" and not stem_seen:
            parts.append("(?P<stem>[^/]+)")
            stem_seen = True
        elif char in "*%":
            parts.append("[^/]*")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts) + r"\Z")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with backslash-newline continuations joined."""
    lines: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        if raw.endswith("\\"):
            pending.append(raw[:-1])
            continue
        pending.append(raw)
        lines.append((start, " ".join(pending)))
        pending = []
    if pending:
        lines.append((start, " ".join(pending)))
    return lines


class _Expander:
    """Substitutes variables: a plain one-word value, automatic variables, else an unknown part."""

    def __init__(self, values: dict[str, str | None]) -> None:
        self.values = values

    def expand(self, text: str, targets: list[str], prerequisites: list[str]) -> str:
        automatic = {"@": targets[0] if targets else _WILD, "<": prerequisites[0] if prerequisites else _WILD,
                     "*": "%", "^": " ".join(prerequisites), "?": " ".join(prerequisites)}
        for _ in range(8):  # innermost references first; nested ones resolve on the next round
            replaced = _VARIABLE.sub(lambda m: self._value(m, automatic), text)
            if replaced == text:
                break
            text = replaced
        return text.replace("$$", "$")

    def _value(self, found: re.Match[str], automatic: dict[str, str]) -> str:
        if found.group(3):
            return automatic[found.group(3)]
        name = (found.group(1) or found.group(2) or "").strip()
        if name in ("@", "<", "*", "^"):
            return automatic[name]
        value = self.values.get(name)
        return value if value is not None else _WILD


def _plain(value: str) -> str | None:
    """A value make would substitute as one word we can follow (no function call, no spaces)."""
    value = value.split("#", 1)[0].strip()
    return value if value and " " not in value and "$(" not in value and "${" not in value else None


def _root_relative(word: str, base: str) -> str | None:
    """A Makefile-relative word as a root-relative pattern (None when absolute or out of the tree)."""
    if word.startswith("/") or not word:
        return None
    joined = os.path.normpath(f"{base}/{word}" if base else word).replace(os.sep, "/")
    return None if joined.startswith("../") or joined == ".." else joined


def _words(text: str) -> list[str]:
    return [w.strip("'\"") for w in text.split() if w.strip("'\"")]


_Raw = tuple[int, list[str], list[str], list[tuple[int, str]]]
"""A rule as read: line, targets, prerequisites, recipe lines (line, text)."""


def make_rules(text: str, script: str) -> list[MakeRule]:
    """The rules of the Makefile ``script`` (root-relative) whose text is ``text``."""
    values: dict[str, str | None] = {}
    expander = _Expander(values)
    base = parent_dir(script)
    raw: list[_Raw] = []
    current: _Raw | None = None
    for number, line in _logical_lines(text):
        if line.startswith("\t") and current is not None:
            current[3].append((number, line))
            continue
        stripped = line.split("#", 1)[0]
        if not stripped.strip():
            continue
        assigned = _ASSIGNMENT.match(stripped)
        if assigned:
            name, operator, value = assigned.groups()
            values[name] = None if operator in ("+=", "!=") or name in values else _plain(value)
            continue
        rule = _RULE.match(stripped)
        if rule and not stripped.startswith((" ", "ifeq", "ifneq", "ifdef", "ifndef", "else", "endif", "include",
                                             "-include", "define", "endef", "export", "unexport", "vpath")):
            prerequisites = rule.group(2).replace("|", " ").split(";", 1)
            current = (number, _words(rule.group(1)), _words(prerequisites[0]),
                       [(number, prerequisites[1])] if len(prerequisites) > 1 else [])
            raw.append(current)
        else:
            current = None
    return [rule for item in raw for rule in _rules_of(item, expander, base, script)]


def _rules_of(item: _Raw, expander: _Expander, base: str, script: str) -> list[MakeRule]:
    number, targets, prerequisites, recipe = item
    expanded_targets = [w for t in targets for w in _words(expander.expand(t, [], []))]
    expanded_prereqs = [w for p in prerequisites for w in _words(expander.expand(p, [], []))]
    rules = []
    sources = [w for w in expanded_prereqs if w.endswith(SOURCE_SUFFIXES)]
    for line_number, line in recipe:
        words = _words(expander.expand(line, expanded_targets, expanded_prereqs))
        line_sources = [w for w in words if w.endswith(SOURCE_SUFFIXES)]
        line_outputs = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-o"]
        if line_outputs and line_sources:
            rules.append(_rule(script, line_number, line_outputs, line_sources, base))
        sources += line_sources
    if expanded_targets and sources:
        rules.insert(0, _rule(script, number, expanded_targets, sources, base))
    return [r for r in dict.fromkeys(rules) if r.outputs and r.sources]


def _rule(script: str, line: int, outputs: list[str], sources: list[str], base: str) -> MakeRule:
    def patterns(words: list[str]) -> tuple[str, ...]:
        found = (_root_relative(w.replace(_WILD, "*"), base) for w in words)
        return tuple(dict.fromkeys(p for p in found if p))
    return MakeRule(script, line, patterns(outputs), patterns(sources))


_CMAKE_COMMAND = re.compile(r"\b(set|add_library|add_executable)\s*\(([^()]*)\)", re.I)
_CMAKE_VARIABLE = re.compile(r"\$\{([A-Za-z_][\w.-]*)\}")
_CMAKE_SOURCE_DIRS = ("CMAKE_CURRENT_SOURCE_DIR", "CMAKE_CURRENT_LIST_DIR", "PROJECT_SOURCE_DIR", "CMAKE_SOURCE_DIR")
_CMAKE_BINARY_DIRS = ("CMAKE_BINARY_DIR", "CMAKE_CURRENT_BINARY_DIR", "PROJECT_BINARY_DIR", "LIBRARY_OUTPUT_PATH")
_CMAKE_KEYWORDS = frozenset({"STATIC", "SHARED", "MODULE", "OBJECT", "EXCLUDE_FROM_ALL", "WIN32", "MACOSX_BUNDLE"})
_BUILT = "\0built\0"
"""Stands for CMake's binary directory while sources are resolved."""
_SOURCE = "\0source\0"
"""Stands for the CMakeLists.txt's own directory while sources are resolved."""


@dataclass(frozen=True)
class CMakeTarget:
    """One ``add_library``/``add_executable`` of a CMakeLists.txt, its sources root-relative."""

    script: str
    """Root-relative path of the CMakeLists.txt."""
    line: int
    """Line of the call."""
    product: str
    """File name the target builds: ``libNAME.a``, ``libNAME.so`` or ``NAME``."""
    sources: tuple[str, ...]
    """Root-relative sources it compiles that the tree should hold (generated ones left out)."""
    resolved: bool
    """False when a source could not be resolved (an unknown variable, a path leaving the tree)."""
    generated: tuple[str, ...] = ()
    """File names of the sources it compiles from its binary directory (written by the build)."""


def cmake_targets(text: str, script: str) -> list[CMakeTarget]:
    """The library and executable targets of the CMakeLists.txt ``script`` whose text is ``text``."""
    base = parent_dir(script)
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    values: dict[str, list[str] | None] = {}
    targets = []
    for call in _CMAKE_COMMAND.finditer(code):
        command, words = call.group(1).lower(), _words(call.group(2))
        if not words:
            continue
        if command == "set":
            values[words[0]] = None if words[0] in values else _cmake_expand(words[1:], values, base)
            continue
        kind = "EXECUTABLE" if command == "add_executable" else next(
            (w.upper() for w in words[1:2] if w.upper() in _CMAKE_KEYWORDS), "STATIC")
        expanded = _cmake_expand([w for w in words[1:] if w.upper() not in _CMAKE_KEYWORDS], values, base)
        compiled = [w for w in expanded or () if w.endswith(SOURCE_SUFFIXES)]
        sources = [w for w in compiled if not w.startswith(_BUILT)]
        generated = tuple(w.rsplit("/", 1)[-1] for w in compiled if w.startswith(_BUILT))
        resolved = expanded is not None and bool(sources) and not any(w.startswith("../") for w in sources)
        name = words[0]
        product = {"EXECUTABLE": name, "SHARED": f"lib{name}.so", "MODULE": f"lib{name}.so"}.get(kind, f"lib{name}.a")
        targets.append(CMakeTarget(script, code.count("\n", 0, call.start()) + 1, product, tuple(sources), resolved,
                                   generated))
    return targets


def _cmake_expand(words: list[str], values: dict[str, list[str] | None], base: str) -> list[str] | None:
    """Words with ``${VAR}`` substituted (a list variable spreads), as root-relative paths (a path
    leaving the tree starts with ``../``); None when a variable is unknown or set more than once."""
    out: list[str] = []
    for word in words:
        whole = _CMAKE_VARIABLE.fullmatch(word)
        spread = values.get(whole.group(1)) if whole else None
        if spread is not None:
            out.extend(spread)
            continue
        unknown = [v for v in _CMAKE_VARIABLE.findall(word) if v not in _CMAKE_SOURCE_DIRS + _CMAKE_BINARY_DIRS
                   and len(values.get(v) or ()) != 1]
        if unknown:
            return None
        text = _CMAKE_VARIABLE.sub(lambda m: _cmake_value(m.group(1), values), word)
        if text.startswith(_BUILT):
            out.append(text)
        else:
            out.append(_root_relative(text.replace(_SOURCE + "/", "").replace(_SOURCE, "."), base) or f"../{text}")
    return out


def _cmake_value(name: str, values: dict[str, list[str] | None]) -> str:
    if name in _CMAKE_SOURCE_DIRS:
        return _SOURCE
    if name in _CMAKE_BINARY_DIRS:
        return _BUILT
    return (values.get(name) or [""])[0]


def cmake_probe(path: str, read: Callable[[], bytes]) -> bool:
    """A CMake compiler-identification or ABI probe: under ``CMakeFiles/``, with CMake's strings."""
    if "CMakeFiles" not in path.split("/")[:-1]:
        return False
    data = read()
    return any(marker in data for marker in CMAKE_PROBE_STRINGS)


def bazel_artefact(path: str, files: frozenset[str], holds_directory: Callable[[str], bool]) -> str | None:
    """``Bazel install base`` or ``Bazel external download`` when ``path`` is one, else None.

    ``holds_directory(d)`` tells whether root-relative directory ``d`` holds a file."""
    parts = path.split("/")
    for depth in range(len(parts) - 1, 0, -1):
        name = parts[depth - 1]
        directory = "/".join(parts[:depth])
        above = parent_dir(directory)
        nearby = [f"{d}/{m}" if d else m for d in (above, directory) for m in BAZEL_INSTALL_MARKERS]
        if name == "_embedded_binaries" and any(n in files for n in nearby):
            return "Bazel install base"
        beside = [f"{above}/{m}" if above else m for m in BAZEL_OUTPUT_MARKERS]
        if name == "external" and (any(b in files for b in beside)
                                   or holds_directory(f"{above}/execroot" if above else "execroot")):
            return "Bazel external download"
    return None
