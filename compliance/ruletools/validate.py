"""``compliance rules validate``: every problem of rule files, located, all at once.

Stages per file: YAML (syntax, duplicate keys; stops the file), JSON Schema
(every violation, each with the shape the schema expects there; semantics are
not checked on a malformed document), then semantics
(:func:`compliance.ruleset.ruleset_problems`: duplicate ids, unknown
benchmarks or divisions, ``extends`` cycles and missing parents, unknown
``remove_allowlist`` ids, unknown checks and options, adopted rule sets
without decision links). Reference ops outside the known set are schema
errors (``reference_ops`` is an enum), reported like the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compliance.errors import InputError, InputErrors
from compliance.ruleset import list_shipped, ruleset_path, ruleset_problems, same_file
from compliance.ruletools import JSON_SCHEMA_VERSION
from compliance.schema_validation import _describe, _validator, dotted, load_schema
from compliance.yamlsource import YamlDocument, load_yaml

KINDS = ("yaml", "schema", "semantic", "parent")
"""Problem kinds: ``parent`` is a problem in a file this one ``extends``."""


@dataclass(frozen=True)
class Problem:
    """One problem in a rule file."""

    path: str
    """The file it is in (an ancestor's file for kind ``parent``)."""
    line: int | None
    """1-based line, when known."""
    column: int | None
    """1-based column, when known."""
    message: str
    """What is wrong."""
    kind: str
    """One of :data:`KINDS`."""
    expected: str | None = None
    """For schema problems: the shape the schema expects at that place."""

    def location(self) -> str:
        """``file:line:column`` as far as known."""
        return ":".join(str(x) for x in (self.path, self.line, self.column) if x is not None)


@dataclass(frozen=True)
class FileResult:
    """The outcome for one rule file."""

    target: str
    """What the user named (a path or a shipped id)."""
    path: Path
    """The file validated."""
    problems: tuple[Problem, ...]
    """Every problem found, in file order; empty when the file is valid."""

    @property
    def valid(self) -> bool:
        """True when the file has no problem."""
        return not self.problems


@dataclass(frozen=True)
class Report:
    """The outcome for every file validated."""

    files: tuple[FileResult, ...]
    """One result per target, in the order given."""

    @property
    def valid(self) -> bool:
        """True when every file is valid (exit 0); otherwise exit 1."""
        return all(f.valid for f in self.files)


def resolve_targets(targets: Iterable[str], shipped: bool = False,
                    extra_roots: list[Path] | None = None) -> list[tuple[str, Path]]:
    """(target, file) pairs; ``shipped`` adds every shipped rule set.

    Raises ``InputError`` (exit 2) naming every target that is no file and no
    shipped id, before anything is validated.
    """
    names = [*targets, *(list_shipped(extra_roots) if shipped else [])]
    if not names:
        raise InputError("nothing to validate: name rule files or ids, or pass --shipped")
    found: list[tuple[str, Path]] = []
    missing: list[InputError] = []
    for name in dict.fromkeys(names):  # once each, in order
        try:
            found.append((name, ruleset_path(name, extra_roots)))
        except InputError as exc:
            missing.append(exc)
    if missing:
        raise missing[0] if len(missing) == 1 else InputErrors(missing)
    return found


def _resolve_ref(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part]
    return _resolve_ref(node, root)


def _object_shape(schema: Mapping[str, Any]) -> str:
    required = list(schema.get("required", []))
    optional = [k for k in schema.get("properties", {}) if k not in required]
    text = "a mapping"
    if required:
        text += f" with keys {', '.join(required)}"
    if optional:
        text += f" (optional: {', '.join(optional)})"
    return text


def _array_shape(schema: Mapping[str, Any], root: Mapping[str, Any]) -> str:
    text = "a non-empty list" if schema.get("minItems", 0) > 0 else "a list"
    if "items" in schema:
        text += f" of {expected_shape(schema['items'], root, describe=False)}"
    return text + (" without duplicates" if schema.get("uniqueItems") else "")


def _scalar_shape(schema: Mapping[str, Any], kind: str) -> str:
    article = "an" if kind[0] in "aeiou" else "a"
    text = f"{article} {kind}"
    if "pattern" in schema:
        text += f" matching {schema['pattern']}"
    if schema.get("minLength"):
        text = f"a non-empty {kind}" if "pattern" not in schema else text
    return text


def expected_shape(schema: Mapping[str, Any], root: Mapping[str, Any], describe: bool = True) -> str:
    """The shape ``schema`` expects, in words (its ``description`` appended when ``describe``)."""
    schema = _resolve_ref(schema, root)
    kind = schema.get("type")
    if "const" in schema:
        text = f"exactly {schema['const']!r}"
    elif "enum" in schema:
        text = "one of " + ", ".join(repr(v) for v in schema["enum"])
    elif kind == "object" or "properties" in schema:
        text = _object_shape(schema)
    elif kind == "array":
        text = _array_shape(schema, root)
    elif isinstance(kind, str):
        text = _scalar_shape(schema, kind)
    else:
        text = "any value"
    if describe and schema.get("description"):
        text += f" ({schema['description']})"
    return text


def _schema_problems(document: YamlDocument) -> list[Problem]:
    root = load_schema("ruleset")
    problems = []
    for error in _validator("ruleset").iter_errors(document.data):
        path = tuple(error.absolute_path)
        mark = document.mark(path)
        problems.append(Problem(
            str(document.path), mark.line if mark else None, mark.column if mark else None,
            f"{dotted(path)}: {_describe(error)}", "schema", expected_shape(error.schema, root)))
    return sorted(problems, key=lambda p: (p.line or 0, p.column or 0, p.message))


def _from_error(error: InputError, kind: str) -> Problem:
    return Problem(error.path or "", error.line, error.column, error.message, kind)


def _semantic_problems(target: str, path: Path, extra_roots: list[Path] | None) -> list[Problem]:
    errors = ruleset_problems(target, extra_roots)  # by the name given, so a stored id is checked too
    return [_from_error(e, "semantic" if same_file(e.path, path) else "parent") for e in errors]


def validate_file(target: str, path: Path, extra_roots: list[Path] | None = None) -> FileResult:
    """Every problem of the rule file ``path`` (which the user named ``target``)."""
    try:
        document = load_yaml(path)
    except InputErrors as exc:
        return FileResult(target, path, tuple(_from_error(e, "yaml") for e in exc.errors))
    except InputError as exc:
        return FileResult(target, path, (_from_error(exc, "yaml"),))
    problems = _schema_problems(document) or _semantic_problems(target, path, extra_roots)
    return FileResult(target, path, tuple(problems))


def validate(targets: Iterable[str], shipped: bool = False, extra_roots: list[Path] | None = None) -> Report:
    """Validate rule files or shipped ids; ``InputError`` when a target does not exist."""
    return Report(tuple(validate_file(t, p, extra_roots)
                        for t, p in resolve_targets(targets, shipped, extra_roots)))


def render_text(report: Report) -> str:
    """``file: ok`` or one line per problem (``file:line:col: message``), then a summary."""
    lines: list[str] = []
    for result in report.files:
        if result.valid:
            lines.append(f"{result.path}: ok")
        for problem in result.problems:
            lines.append(f"{problem.location()}: {problem.kind} error: {problem.message}")
            if problem.expected:
                lines.append(f"    expected: {problem.expected}")
    bad = [f for f in report.files if not f.valid]
    count = sum(len(f.problems) for f in bad)
    total = len(report.files)
    summary = (f"{total} rule file{'s' if total != 1 else ''}: "
               + ("all valid" if not bad else
                  f"{len(bad)} with errors ({count} problem{'s' if count != 1 else ''})"))
    return "\n".join([*lines, summary]) + "\n"


def _problem_json(problem: Problem) -> dict[str, Any]:
    return {"path": problem.path, "line": problem.line, "column": problem.column,
            "kind": problem.kind, "message": problem.message, "expected": problem.expected}


def to_json(report: Report) -> dict[str, Any]:
    """The JSON document of ``rules validate --format json``."""
    return {"schema_version": JSON_SCHEMA_VERSION, "valid": report.valid,
            "files": [{"target": f.target, "path": str(f.path), "valid": f.valid,
                       "problems": [_problem_json(p) for p in f.problems]}
                      for f in report.files]}
