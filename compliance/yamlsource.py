"""Safe YAML loading that remembers where every value came from.

Rule files and manifests are data: they are parsed with PyYAML's *safe*
loader only (no tags that construct Python objects), duplicate keys are an
error instead of silently keeping the last, dates stay strings, and every
node's line/column is kept so schema errors can point at ``file:line:col``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from compliance.errors import InputError

JsonPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Mark:
    """A 1-based position in a source file."""

    line: int
    column: int


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps ISO dates as strings (JSON Schema wants strings)."""


_Loader.add_constructor(
    "tag:yaml.org,2002:timestamp",
    lambda loader, node: loader.construct_scalar(node),  # type: ignore[arg-type]
)


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


def parse_yaml(text: str, path: Path) -> YamlDocument:
    """Parse one YAML document from ``text``; errors name ``path`` and the line."""
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        reason = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"invalid YAML: {reason}", path,
                         mark.line + 1 if mark else None,
                         mark.column + 1 if mark else None) from exc
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", path) from exc
    marks: dict[JsonPath, Mark] = {}
    if node is not None:
        _record_marks(node, (), marks, path)
    return YamlDocument(path=path, data=data, marks=marks)


def load_yaml(path: Path) -> YamlDocument:
    """Read and parse ``path`` (UTF-8)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError("file not found", path) from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc.reason}", path) from exc
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path) from exc
    return parse_yaml(text, path)
