"""``compliance rules explain RULE_ID``: a check's documentation, from the registry.

:func:`render_markdown` is the single renderer of a check's documentation:
``rules explain`` prints it, and :mod:`compliance.ruletools.reference` joins
it for every registered check into ``docs/rule-reference.md``, so the two
cannot drift (a test regenerates the reference and compares).
"""

from __future__ import annotations

import difflib
from typing import Any

from compliance.checks.interface import CheckSpec, OptionSpec
from compliance.checks.registry import all_specs, spec_for
from compliance.errors import InputError
from compliance.ruletools import JSON_SCHEMA_VERSION

STAGES = {"static": "`compliance check`",
          "upstream": "`compliance check --upstream`",
          "verify": "`compliance check --verify`"}
"""How each stage of check is run."""


def find_spec(rule_id: str) -> CheckSpec:
    """The registered check ``rule_id``; ``InputError`` (exit 2) with suggestions otherwise."""
    spec = spec_for(rule_id)
    if spec is not None:
        return spec
    known = [s.id for s in all_specs()]
    close = difflib.get_close_matches(rule_id, known, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "."
    raise InputError(f"unknown rule id {rule_id!r}{hint} Known rule ids: "
                     f"{', '.join(known) or 'none registered'}")


def _block(text: str) -> list[str]:
    return ["```text", *text.rstrip("\n").splitlines(), "```"]


def _option_row(option: OptionSpec) -> str:
    default = repr(option.default) if not isinstance(option.default, str) else f'"{option.default}"'
    return f"| `{option.name}` | {option.type.__name__} | `{default}` | {option.doc} |"


def _options(spec: CheckSpec) -> list[str]:
    where = f"Configure it in a rule set under `checks: {{{spec.id}: {{level: ...}}}}` "
    lines = ["", where + "(level: error, warning, info or off)."]
    if spec.options:
        lines[-1] = lines[-1][:-1] + ", with these options:"
        lines += ["", "| option | type | default | what it changes |", "|---|---|---|---|"]
        lines += [_option_row(o) for o in spec.options]
    return lines


def render_markdown(spec: CheckSpec, heading: str = "###") -> str:
    """The documentation of one check: what, why, examples, fix, configuration."""
    lines = [f"{heading} `{spec.id}`: {spec.title}", "",
             f"Default level: **{spec.default_level}**. Run by {STAGES.get(spec.stage, spec.stage)}.",
             "", spec.doc.strip(), "", f"**How to fix:** {spec.hint.strip()}", "",
             "Passes:", "", *_block(spec.passing), "", "Fails:", "", *_block(spec.failing),
             *_options(spec)]
    return "\n".join(lines) + "\n"


def to_json(spec: CheckSpec) -> dict[str, Any]:
    """The JSON document of ``rules explain --format json``."""
    return {"schema_version": JSON_SCHEMA_VERSION, "id": spec.id, "title": spec.title,
            "default_level": spec.default_level, "stage": spec.stage, "doc": spec.doc,
            "hint": spec.hint, "passing": spec.passing, "failing": spec.failing,
            "options": [{"name": o.name, "type": o.type.__name__, "default": o.default,
                         "doc": o.doc} for o in spec.options]}
