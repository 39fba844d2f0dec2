"""``compliance rules show``: a rule set after ``extends``, with provenance and origins.

The view is a list of :class:`Line` records (label, value, origin) built once
from the resolved :class:`~compliance.ruleset.RuleSet`; the text renderer
lays them out and, with ``--origin``, appends the id of the rule set each
value comes from. The JSON form carries the same facts, structured.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

from compliance.ruleset import AllowlistEntry, RuleSet
from compliance.ruletools import JSON_SCHEMA_VERSION
from compliance.ruletools.common import (
    chain_provenance,
    one_line,
    provenance_dict,
    provenance_text,
    removed_entries,
    requires_text,
    tolerance_text,
    value_text,
)

DEFAULT_ORIGIN = "default"
"""Origin shown for a policy value no file in the chain sets (the tool's default)."""
WIDTH = 100
"""Text output wraps long values at this width."""


@dataclass(frozen=True)
class Line:
    """One line of the text view."""

    indent: int
    """Nesting level (two spaces each)."""
    label: str
    """What the value is; a section heading when ``value`` is None."""
    value: str | None
    """The rendered value; None for a heading."""
    origin: str | None = None
    """Id of the rule set that supplied the value (shown with ``--origin``)."""


@dataclass(frozen=True)
class RuleSetView:
    """A resolved rule set prepared for display."""

    ruleset: RuleSet
    """The resolved rule set."""
    chain_ids: tuple[str, ...]
    """Ids from this rule set up to the root ancestor."""
    removed: dict[str, str]
    """Allowlist ids removed along the chain -> id of the rule set that removed them."""


def view(ruleset: RuleSet) -> RuleSetView:
    """Prepare ``ruleset`` (from ``load_ruleset``) for display."""
    return RuleSetView(ruleset, tuple(chain_provenance(ruleset)), removed_entries(ruleset))


def _origin(ruleset: RuleSet, key: str) -> str:
    return ruleset.origins.get(key, DEFAULT_ORIGIN)


def _header_lines(v: RuleSetView) -> list[Line]:
    rs = v.ruleset
    lines = [Line(0, "rule set", rs.id, rs.id), Line(0, "title", rs.title, rs.id),
             Line(0, "status", _status_text(rs.status), rs.id),
             Line(0, "usage", rs.usage, rs.id), Line(0, "round", rs.round, rs.id),
             Line(0, "extends", rs.extends or "-", rs.id), Line(0, "file", str(rs.source)),
             Line(0, "chain", " <- ".join(v.chain_ids)),
             Line(0, "provenance", provenance_text(rs.provenance), rs.id)]
    for document in rs.provenance.documents or ():
        commit = document.get("commit") or "commit not recorded"
        lines.append(Line(0, "document", f"{document['url']} ({commit}): {one_line(document['what'])}",
                          rs.id))
    if rs.note:
        lines.append(Line(0, "note", one_line(rs.note), rs.id))
    return lines


def _status_text(status: str) -> str:
    if status == "proposal":
        return "proposal (NOT MLPerf policy)"
    return "adopted (encodes a working-group decision)"


def _round_lines(rs: RuleSet) -> list[Line]:
    return [Line(0, "layout", rs.layout, _origin(rs, "layout")),
            Line(0, "divisions", value_text(rs.divisions), _origin(rs, "divisions")),
            Line(0, "benchmarks", value_text(rs.benchmarks), _origin(rs, "benchmarks")),
            Line(0, "benchmark aliases", value_text([f"{a} -> {b}" for a, b in
                                                     sorted(rs.benchmark_aliases.items())]),
                 _origin(rs, "benchmark_aliases"))]


def _policy_lines(rs: RuleSet) -> list[Line]:
    lines: list[Line] = []
    for key, heading, policy in (("binary_policy", "binary policy", rs.binary_policy),
                                 ("upstream_policy", "upstream policy", rs.upstream_policy),
                                 ("vendored", "vendored trees", rs.vendored)):
        lines.append(Line(0, heading, None))
        lines += [Line(1, name, value_text(value), _origin(rs, f"{key}.{name}"))
                  for name, value in vars(policy).items()]
    return lines


def _entry_lines(rs: RuleSet, entry: AllowlistEntry) -> list[Line]:
    origin = _origin(rs, f"allowlist.{entry.id}")
    lines = [Line(1, entry.id, entry.title, origin),
             Line(2, "benchmarks", value_text(entry.benchmarks)),
             Line(2, "divisions", value_text(entry.divisions) if entry.divisions else "all"),
             Line(2, "languages", value_text(entry.languages)),
             Line(2, "requires", requires_text(entry))]
    tolerance = tolerance_text(entry)
    if tolerance:
        lines.append(Line(2, "tolerance", tolerance))
    p = entry.provenance
    lines += [Line(2, "decision", p.decision), Line(2, "date", p.date)]
    lines += [Line(2, name, one_line(value)) for name, value in
              (("round", p.round), ("body", p.body), ("note", p.note)) if value]
    return lines


def _allowlist_lines(v: RuleSetView) -> list[Line]:
    rs = v.ruleset
    count = len(rs.allowlist)
    lines = [Line(0, f"allowlist ({count} kernel categor{'y' if count == 1 else 'ies'} in force)",
                  None)]
    for entry in rs.allowlist:
        lines += _entry_lines(rs, entry)
    lines += [Line(1, f"removed {entry_id}", f"not in force (removed by {by})", by)
              for entry_id, by in v.removed.items()]
    return lines


def _checks_lines(rs: RuleSet) -> list[Line]:
    if not rs.checks:
        return [Line(0, "checks", "every check at its default level (rules explain ID)")]
    lines = [Line(0, "checks (configured here; the rest at their default level)", None)]
    for check_id in sorted(rs.checks):
        for key, value in sorted(rs.checks[check_id].items()):
            lines.append(Line(1, f"{check_id}.{key}", value_text(value),
                              _origin(rs, f"checks.{check_id}.{key}")))
    return lines


def lines(v: RuleSetView) -> list[Line]:
    """The whole view, in display order (blank labels separate sections)."""
    rs = v.ruleset
    sections = [_header_lines(v), _round_lines(rs), _policy_lines(rs), _allowlist_lines(v),
                _checks_lines(rs)]
    out: list[Line] = []
    for section in sections:
        if out:
            out.append(Line(0, "", None))
        out += section
    return out


def _format(line: Line, label_width: int, origin_width: int) -> str:
    """One line; with ``origin_width`` > 0 the origin is a left column, as in ``git blame``."""
    origin = (line.origin or "").ljust(origin_width + 2) if origin_width else ""
    pad = "  " * line.indent
    if line.value is None:
        return f"{origin}{pad}{line.label}".rstrip()
    label = f"{pad}{line.label}:".ljust(label_width + 1)
    indent = " " * (len(origin) + label_width + 2)
    return textwrap.fill(line.value, width=max(WIDTH, len(indent) + 40),
                         initial_indent=f"{origin}{label} ", subsequent_indent=indent,
                         break_on_hyphens=False, break_long_words=False)


def render_text(v: RuleSetView, with_origin: bool = False) -> str:
    """The text view; ``with_origin`` adds a left column naming the rule set of each value."""
    all_lines = lines(v)
    width = max(len("  " * ln.indent + ln.label) + 1 for ln in all_lines if ln.value is not None)
    origin_width = max(len(ln.origin or "") for ln in all_lines) if with_origin else 0
    return "\n".join(_format(ln, width, origin_width) for ln in all_lines) + "\n"


def _entry_json(rs: RuleSet, entry: AllowlistEntry, with_origin: bool) -> dict[str, Any]:
    requires: dict[str, Any] = {"source": entry.requires_source, "upstream": entry.requires_upstream}
    if entry.verification is not None:
        requires["verification"] = {
            "reference_ops": list(entry.verification.reference_ops),
            "tolerance": {d: {k: x for k, x in vars(t).items() if x is not None}
                          for d, t in entry.verification.tolerance.items()}}
    out: dict[str, Any] = {
        "id": entry.id, "title": entry.title, "benchmarks": list(entry.benchmarks),
        "divisions": list(entry.divisions), "languages": list(entry.languages),
        "requires": requires, "provenance": provenance_dict(entry.provenance)}
    if with_origin:
        out["origin"] = _origin(rs, f"allowlist.{entry.id}")
    return out


def _policies_json(rs: RuleSet) -> dict[str, Any]:
    return {key: {k: list(x) if isinstance(x, tuple) else x for k, x in vars(policy).items()}
            for key, policy in (("binary_policy", rs.binary_policy),
                                ("upstream_policy", rs.upstream_policy),
                                ("vendored", rs.vendored))}


def to_json(v: RuleSetView, with_origin: bool = False) -> dict[str, Any]:
    """The JSON document of ``rules show --format json`` (effective values, defaults filled)."""
    rs = v.ruleset
    doc: dict[str, Any] = {
        "schema_version": JSON_SCHEMA_VERSION,
        "ruleset": {**rs.summary(), "note": one_line(rs.note) if rs.note else None,
                    "extends": rs.extends, "chain": list(v.chain_ids)},
        "layout": rs.layout, "divisions": list(rs.divisions), "benchmarks": list(rs.benchmarks),
        "benchmark_aliases": dict(rs.benchmark_aliases),
        **_policies_json(rs),
        "allowlist": [_entry_json(rs, e, with_origin) for e in rs.allowlist],
        "removed_allowlist": [{"id": i, "removed_by": by} for i, by in v.removed.items()],
        "checks": {cid: dict(cfg) for cid, cfg in sorted(rs.checks.items())},
    }
    if with_origin:
        doc["origins"] = _origins_json(rs)
    return doc


def _origins_json(rs: RuleSet) -> dict[str, str]:
    """Dotted key -> rule-set id, for every value in force (stale keys dropped)."""
    out = {key: origin for key, origin in sorted(rs.origins.items())
           if _in_force(rs, key)}
    for key, policy in (("binary_policy", rs.binary_policy), ("upstream_policy", rs.upstream_policy),
                        ("vendored", rs.vendored)):
        for name in vars(policy):
            out.setdefault(f"{key}.{name}", DEFAULT_ORIGIN)
    return dict(sorted(out.items()))


def _in_force(rs: RuleSet, key: str) -> bool:
    head, _, rest = key.partition(".")
    if head == "allowlist":
        return rs.entry(rest) is not None
    return head in rs.data
