"""Where the shipped JSON Schemas live, for editors (``rules schema --path``)."""

from __future__ import annotations

from importlib import resources

from compliance.errors import InputError
from compliance.schema import SCHEMA_NAMES


def schema_file(name: str) -> str:
    """Filesystem path of the shipped schema ``name`` (``ruleset`` or ``manifest``)."""
    if name not in SCHEMA_NAMES:
        raise InputError(f"unknown schema {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    return str(resources.files("compliance.schemas").joinpath(f"{name}.schema.json"))
