"""Safe YAML loading that remembers where every value came from.

Rule files and manifests are data: they are parsed with PyYAML's *safe*
loader only (no tags that construct Python objects), duplicate keys are an
error instead of silently keeping the last, dates stay strings, and every
node's line/column is kept so schema errors can point at ``file:line:col``.

The files come from whoever wrote the checked tree, so loading is bounded
(docs/security.md): at most ``MAX_YAML_BYTES`` are read, nesting deeper than
``MAX_DEPTH`` and documents that expand (through aliases) to more than
``MAX_NODES`` nodes are refused before anything walks them, and whatever goes
wrong while loading becomes an ``InputError`` naming the file (and line).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from compliance.errors import InputError

JsonPath = tuple[str | int, ...]

MAX_YAML_BYTES = 256 * 1024
"""Largest manifest or rule file read: 40 times the largest real one (6 KB); PyYAML's pure
Python loader (the only one whose nesting can be bounded) needs about 1.3 s for this much
dense YAML."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and sequences accepted."""
MAX_NODES = 20_000
"""Most nodes a document may have once its aliases are expanded: 50 times a real manifest
(the reference manifest has about 400); an alias bomb has billions."""
MAX_INT_DIGITS = 100
"""Longest integer literal accepted (Python refuses to convert those over 4300 digits)."""


@dataclass(frozen=True)
class Mark:
    """A 1-based position in a source file."""

    line: int
    column: int


def _too_deep(node_mark: yaml.Mark) -> yaml.MarkedYAMLError:
    return yaml.composer.ComposerError(None, None, f"nesting deeper than {MAX_DEPTH} levels", node_mark)


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps ISO dates as strings (JSON Schema wants strings) and bounds nesting."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._composed = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        # The composer recurses once per level: refuse deep documents before Python's
        # recursion limit does (a RecursionError would name no line).
        self._depth += 1
        self._composed += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _too_deep(self.peek_event().start_mark)  # type: ignore[no-untyped-call]
            if self._composed > MAX_NODES:
                raise yaml.composer.ComposerError(None, None, f"more than {MAX_NODES} nodes",
                                                  self.peek_event().start_mark)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """An int, refusing literals too long to convert cheaply."""
        if len(str(node.value)) > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"integer literal longer than {MAX_INT_DIGITS} digits", node.start_mark)
        return super().construct_yaml_int(node)


_Loader.add_constructor(
    "tag:yaml.org,2002:timestamp",
    lambda loader, node: loader.construct_scalar(node),  # type: ignore[arg-type]
)
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML document together with the position of every node."""

    path: Path
    data: Any
    marks: dict[JsonPath, Mark]

    def mark(self, json_path: Iterable[str | int]) -> Mark | None:
        """Position of the node at ``json_path``, or of its nearest ancestor."""
        key = tuple(json_path)
        while True:
            if key in self.marks:
                return self.marks[key]
            if not key:
                return None
            key = key[:-1]

    def error(self, message: str, json_path: Iterable[str | int] = ()) -> InputError:
        """An ``InputError`` located at ``json_path`` in this document."""
        where = self.mark(json_path)
        return InputError(message, self.path, where.line if where else None,
                          where.column if where else None)


def _record_marks(node: yaml.Node, prefix: JsonPath, marks: dict[JsonPath, Mark],
                  path: Path) -> None:
    marks[prefix] = Mark(node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                raise InputError(
                    f"duplicate key {key!r} (first defined on line {seen[key]})",
                    path, key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            seen[key] = key_node.start_mark.line + 1
            _record_marks(value_node, prefix + (key,), marks, path)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_marks(item, prefix + (index,), marks, path)


def _expanded_size(root: yaml.Node, path: Path) -> int:
    """Nodes of the document with every alias expanded, computed without expanding them.

    The composer shares one node object per anchor, so the document is a DAG (or, with a
    recursive alias, a cyclic graph); sizes are memoized per node object. Iterative, so
    depth costs no Python stack.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        children = _children(node)
        if children_done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_NODES:
                raise InputError(f"document expands to more than {MAX_NODES} nodes (aliases "
                                 "repeat content); write it out or simplify it", path,
                                 node.start_mark.line + 1, node.start_mark.column + 1)
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise InputError("recursive alias (a node contains itself)", path,
                             node.start_mark.line + 1, node.start_mark.column + 1)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _compose(text: str, path: Path) -> tuple[yaml.Node | None, Any]:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _expanded_size(node, path)
        return node, loader.construct_document(node)
    finally:
        loader.dispose()


def parse_yaml(text: str, path: Path) -> YamlDocument:
    """Parse one YAML document from ``text``; errors name ``path`` and the line.

    Never raises anything but ``InputError`` (whatever the text holds).
    """
    if len(text) > MAX_YAML_BYTES:
        raise InputError(f"larger than the {MAX_YAML_BYTES // 1024} KiB limit for YAML files", path)
    try:
        node, data = _compose(text, path)
    except InputError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"invalid YAML: {reason}", path,
                         mark.line + 1 if mark else None,
                         mark.column + 1 if mark else None) from exc
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", path) from exc
    except (RecursionError, MemoryError, ValueError, TypeError, OverflowError) as exc:
        # Defence in depth: the limits above should keep these from happening.
        raise InputError(f"cannot load YAML: {type(exc).__name__}: {exc}", path) from exc
    marks: dict[JsonPath, Mark] = {}
    if node is not None:
        _record_marks(node, (), marks, path)
    return YamlDocument(path=path, data=data, marks=marks)


def read_yaml_text(path: Path) -> str:
    """The UTF-8 text of ``path``, reading at most ``MAX_YAML_BYTES`` (+1 to tell it is larger).

    Raises ``InputError`` when the file is missing, unreadable, too large or not UTF-8.
    """
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_YAML_BYTES + 1)
    except FileNotFoundError as exc:
        raise InputError("file not found", path) from exc
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from exc
    if len(raw) > MAX_YAML_BYTES:
        raise InputError(f"larger than the {MAX_YAML_BYTES // 1024} KiB limit for YAML files", path)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc.reason}", path) from exc


def load_yaml(path: Path) -> YamlDocument:
    """Read and parse ``path`` (UTF-8, at most ``MAX_YAML_BYTES``)."""
    return parse_yaml(read_yaml_text(path), path)
