"""The shipped JSON Schemas and validation of YAML documents against them."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from compliance.errors import InputError
from compliance.yamlsource import YamlDocument

SCHEMA_NAMES = ("ruleset", "manifest", "catalogue")


def schema_file(name: str) -> str:
    """Filesystem path of the shipped schema ``name`` (``ruleset`` or ``manifest``)."""
    if name not in SCHEMA_NAMES:
        raise InputError(f"unknown schema {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    return str(resources.files("compliance.schemas").joinpath(f"{name}.schema.json"))


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """The JSON Schema ``name`` (``ruleset`` or ``manifest``) shipped in the package."""
    if name not in SCHEMA_NAMES:
        raise InputError(f"unknown schema {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    text = resources.files("compliance.schemas").joinpath(f"{name}.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def _validator(name: str) -> Any:
    # jsonschema is only needed once a document is validated.
    from jsonschema import Draft202012Validator

    # The shipped schemas are checked against the metaschema by the tests, not on
    # every run (that costs ~0.1 s per schema).
    return Draft202012Validator(load_schema(name))


def dotted(json_path: tuple[str | int, ...] | list[str | int]) -> str:
    """``('allowlist', 0, 'id')`` -> ``allowlist[0].id`` (``<root>`` for the top)."""
    out = ""
    for part in json_path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


@dataclass(frozen=True)
class SchemaProblem:
    """One schema violation, located in the source document."""

    json_path: tuple[str | int, ...]
    message: str
    line: int | None
    column: int | None


def _describe(error: Any) -> str:
    """A message that says what is wrong and what shape was expected."""
    validator = error.validator
    if validator == "additionalProperties":
        return f"{error.message}; allowed keys: {', '.join(sorted(error.schema.get('properties', {})))}"
    if validator == "enum":
        return f"{error.instance!r} is not one of {', '.join(map(repr, error.validator_value))}"
    if validator == "const":
        return f"{error.instance!r} must be {error.validator_value!r}"
    return str(error.message)


def validate_document(document: YamlDocument, schema_name: str) -> list[SchemaProblem]:
    """Every violation of the schema in ``document``, in file order."""
    problems = []
    for error in _validator(schema_name).iter_errors(document.data):
        path = tuple(error.absolute_path)
        mark = document.mark(path)
        problems.append(SchemaProblem(path, f"{dotted(path)}: {_describe(error)}",
                                      mark.line if mark else None, mark.column if mark else None))
    return sorted(problems, key=lambda p: (p.line or 0, p.column or 0, p.message))


def problems_as_errors(document: YamlDocument, problems: list[SchemaProblem]) -> list[InputError]:
    """The problems as located ``InputError`` objects."""
    return [InputError(p.message, document.path, p.line, p.column) for p in problems]
