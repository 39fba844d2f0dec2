"""``compliance rules explain RULE_ID``: a check's documentation, from the registry.

:func:`render_markdown` is the single renderer of a check's documentation:
``rules explain`` prints it, and :mod:`compliance.ruletools.reference` joins
it for every registered check into ``docs/rule-reference.md``, so the two
cannot drift (a test regenerates the reference and compares). :func:`render_terminal`
is what ``rules explain`` prints by default: the same parts as plain text (no Markdown
markup), or, for a terminal, styled (bold headings, code in colour). :func:`ids_text`
and :func:`ids_json` list every rule id with its one-line summary (``rules ids``).
"""

from __future__ import annotations

import difflib
import re
import textwrap
from typing import Any

import click

from compliance.errors import InputError
from compliance.rulespecs.interface import CheckSpec, OptionSpec
from compliance.rulespecs.registry import all_specs, spec_for
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


_CODE_SPAN = re.compile(r"`([^`]+)`")


def _styled_code(text: str, styled: bool) -> str:
    """Inline code: kept in backticks as plain text, shown in colour (no backticks) when styled."""
    if not styled:
        return text
    return _CODE_SPAN.sub(lambda m: click.style(m.group(1), fg="cyan"), text)


def _paragraph(text: str, width: int, styled: bool, indent: str = "") -> list[str]:
    # Wrapped before styling (escape sequences have no width), with each code span kept on one line
    # (its spaces made non-breaking while wrapping: textwrap breaks at ASCII whitespace only).
    joined = _CODE_SPAN.sub(lambda m: m.group().replace(" ", "\xa0"), " ".join(text.split()))
    wrapped = textwrap.fill(joined, width=width, initial_indent=indent, subsequent_indent=indent,
                            break_on_hyphens=False, break_long_words=False)
    return [_styled_code(line.replace("\xa0", " "), styled) for line in wrapped.splitlines()]


def render_terminal(spec: CheckSpec, styled: bool = False, width: int = 88) -> str:
    """The documentation of one check for a terminal: what :func:`render_markdown` says, as plain
    text (``styled`` False: for pipes and files) or with bold headings and coloured code."""
    def heading(text: str) -> str:
        return click.style(text, bold=True) if styled else text

    stage = STAGES.get(spec.stage, spec.stage).strip("`")
    lines = [heading(f"{spec.id}: {spec.title}"), f"default level: {spec.default_level}; run by {stage}", ""]
    lines += _paragraph(spec.doc, width, styled) + [""]
    lines += [heading("How to fix:")] + _paragraph(spec.hint, width, styled, "  ") + [""]
    for title, example in (("Passes:", spec.passing), ("Fails:", spec.failing)):
        lines += [heading(title)] + [f"  {line}" for line in example.rstrip("\n").splitlines()] + [""]
    configure = (f"Configure it in a rule set under `checks: {{{spec.id}: {{level: ...}}}}` "
                 "(level: error, warning, info or off)" + (", with these options:" if spec.options else "."))
    lines += _paragraph(configure, width, styled)
    if spec.options:
        rows = [("option", "type", "default", "what it changes")]
        rows += [(o.name, o.type.__name__, repr(o.default), " ".join(o.doc.split())) for o in spec.options]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines += [f"  {r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}" for r in rows]
    return "\n".join(lines) + "\n"


def ids_text() -> str:
    """Every registered rule id, its default level and its one-line summary, one per line."""
    specs = all_specs()
    width = max(len(s.id) for s in specs)
    return "".join(f"{s.id:<{width}}  {s.default_level:<7}  {s.title}\n" for s in specs)


def ids_json() -> dict[str, Any]:
    """The JSON document of ``rules ids --format json``."""
    return {"schema_version": JSON_SCHEMA_VERSION,
            "rules": [{"id": s.id, "title": s.title, "default_level": s.default_level, "stage": s.stage}
                      for s in all_specs()]}
