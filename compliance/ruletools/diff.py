"""``compliance rules diff OLD NEW``: what a round changed, as reviewers think of it.

Both rule sets are resolved (``extends`` applied, defaults filled in) and
compared by meaning, not by text: the round (status, benchmarks, layout,
divisions), kernel categories added, removed or changed (benchmarks covered,
languages, requirements, reference ops, tolerances), the binary, upstream and
vendored-tree policies, and check configuration. Every change carries the
decision behind the new state (:class:`Why`): an allowlist entry's own
provenance, or the provenance of the rule set that set the value (found
through ``RuleSet.origins``). Identical rule sets give no changes.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from compliance.ruleset import AllowlistEntry, Provenance, RuleSet
from compliance.ruletools import JSON_SCHEMA_VERSION
from compliance.ruletools.common import (
    chain_provenance,
    provenance_dict,
    provenance_text,
    removed_entries,
    requires_text,
    tolerance_text,
    value_text,
)

ROUND_FIELDS = ("status", "usage", "round", "layout", "divisions", "benchmarks", "benchmark_aliases")
"""Rule-set level facts compared under "Round"."""
POLICIES = ("binary_policy", "upstream_policy", "vendored")
"""Policy mappings compared field by field."""
AREA_TITLES = {"round": "Round", "allowlist": "Kernel categories (allowlist)",
               "binary_policy": "Binary policy", "upstream_policy": "Upstream-link policy",
               "vendored": "Vendored third-party trees", "checks": "Check configuration"}
"""Areas in display order, with their headings."""
MARKS = {"added": "+", "removed": "-", "changed": "~"}
WIDTH = 100


@dataclass(frozen=True)
class FieldChange:
    """One fact that differs."""

    field: str
    """Dotted name, e.g. ``languages``, ``requires.upstream``, ``tolerance.float16.absolute_floor``."""
    before: Any
    """Old value (None when unset); lists for set-like facts."""
    after: Any
    """New value (None when unset)."""
    added: tuple[str, ...] = ()
    """For set-like facts (benchmarks, languages, hosts, ...): members only in the new value."""
    removed: tuple[str, ...] = ()
    """For set-like facts: members only in the old value."""


@dataclass(frozen=True)
class Why:
    """The decision behind a change."""

    ruleset: str
    """Id of the rule set that made it."""
    provenance: Provenance
    """Its provenance (an allowlist entry's own, or the rule set's)."""


@dataclass(frozen=True)
class Change:
    """One change a reviewer reads as a unit."""

    area: str
    """A key of :data:`AREA_TITLES`."""
    kind: str
    """added, removed or changed."""
    subject: str
    """Allowlist entry id, field name, policy key or check id."""
    title: str | None
    """An allowlist entry's title."""
    fields: tuple[FieldChange, ...]
    """What differs; for an added or removed entry, its facts."""
    why: Why
    """The decision behind the new state (for a removal: who removed it)."""
    previously: Why | None = None
    """For a removed allowlist entry: the decision that had admitted it."""


@dataclass(frozen=True)
class RuleSetDiff:
    """Everything that differs between two resolved rule sets."""

    old: RuleSet
    """The earlier rule set."""
    new: RuleSet
    """The later rule set."""
    changes: tuple[Change, ...]
    """In display order: round, allowlist, policies, checks."""

    @property
    def empty(self) -> bool:
        """True when the two rule sets mean the same."""
        return not self.changes


# --------------------------------------------------------------------------- comparing

def _field_change(name: str, before: Any, after: Any) -> FieldChange | None:
    if before == after:
        return None
    if isinstance(before, tuple) or isinstance(after, tuple):
        old, new = tuple(before or ()), tuple(after or ())
        return FieldChange(name, list(old), list(new), tuple(x for x in new if x not in old),
                           tuple(x for x in old if x not in new))
    return FieldChange(name, before, after)


def _compare(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[FieldChange, ...]:
    names = list(dict.fromkeys([*before, *after]))
    found = (_field_change(n, before.get(n), after.get(n)) for n in names)
    return tuple(c for c in found if c is not None)


def entry_facts(entry: AllowlistEntry) -> dict[str, Any]:
    """The comparable facts of an allowlist entry (provenance excluded)."""
    verification = entry.verification
    facts: dict[str, Any] = {
        "title": entry.title, "benchmarks": entry.benchmarks, "divisions": entry.divisions,
        "languages": entry.languages, "requires.source": entry.requires_source,
        "requires.upstream": entry.requires_upstream,
        "requires.verification": verification is not None,
        "verification.reference_ops": verification.reference_ops if verification else ()}
    for dtype, tolerance in (verification.tolerance.items() if verification else ()):
        for key, value in vars(tolerance).items():
            if value is not None:
                facts[f"tolerance.{dtype}.{key}"] = value
    return facts


class _Context:
    """Both rule sets and the provenance of every file in the new chain."""

    def __init__(self, old: RuleSet, new: RuleSet) -> None:
        self.old, self.new = old, new
        self.provenance = chain_provenance(new)

    def why(self, key: str) -> Why:
        """The decision behind the new value of dotted ``key``."""
        origin = self.new.origins.get(key, self.new.id).removesuffix(" (removed)")
        if origin not in self.provenance:
            origin = self.new.id
        return Why(origin, self.provenance[origin])


def _round_value(ruleset: RuleSet, name: str) -> Any:
    """A round-level fact; aliases as a set of ``alias->benchmark`` members."""
    value = getattr(ruleset, name)
    if name == "benchmark_aliases":
        return tuple(f"{alias}->{official}" for alias, official in sorted(value.items()))
    return value


def _round_changes(ctx: _Context) -> Iterator[Change]:
    for name in ROUND_FIELDS:
        change = _field_change(name, _round_value(ctx.old, name), _round_value(ctx.new, name))
        if change is not None:
            yield Change("round", "changed", name, None, (change,), ctx.why(name))


def _added_entry(ctx: _Context, entry: AllowlistEntry) -> Change:
    facts = _compare({}, entry_facts(entry))
    origin = ctx.why(f"allowlist.{entry.id}").ruleset
    return Change("allowlist", "added", entry.id, entry.title, facts,
                  Why(origin, entry.provenance))


def _removed_entry(ctx: _Context, entry: AllowlistEntry) -> Change:
    facts = _compare(entry_facts(entry), {})
    remover = removed_entries(ctx.new).get(entry.id, ctx.new.id)
    if remover not in ctx.provenance:
        remover = ctx.new.id
    admitted_by = ctx.old.origins.get(f"allowlist.{entry.id}", ctx.old.id)
    return Change("allowlist", "removed", entry.id, entry.title, facts,
                  Why(remover, ctx.provenance[remover]), Why(admitted_by, entry.provenance))


def _changed_entry(ctx: _Context, old: AllowlistEntry, new: AllowlistEntry) -> Change | None:
    facts = _compare(entry_facts(old), entry_facts(new))
    if not facts and old.provenance != new.provenance:
        facts = (FieldChange("provenance", provenance_dict(old.provenance),
                             provenance_dict(new.provenance)),)
    if not facts:
        return None
    origin = ctx.why(f"allowlist.{new.id}").ruleset
    return Change("allowlist", "changed", new.id, new.title, facts, Why(origin, new.provenance),
                  Why(ctx.old.origins.get(f"allowlist.{old.id}", ctx.old.id), old.provenance))


def _allowlist_changes(ctx: _Context) -> Iterator[Change]:
    old_ids = {e.id for e in ctx.old.allowlist}
    for entry in ctx.old.allowlist:
        new = ctx.new.entry(entry.id)
        if new is None:
            yield _removed_entry(ctx, entry)
        else:
            change = _changed_entry(ctx, entry, new)
            if change is not None:
                yield change
    for entry in ctx.new.allowlist:
        if entry.id not in old_ids:
            yield _added_entry(ctx, entry)


def _policy_changes(ctx: _Context) -> Iterator[Change]:
    for key in POLICIES:
        old, new = vars(getattr(ctx.old, key)), vars(getattr(ctx.new, key))
        for change in _compare(old, new):
            yield Change(key, "changed", change.field, None, (change,),
                         ctx.why(f"{key}.{change.field}"))


def _check_config(ruleset: RuleSet, check_id: str) -> dict[str, Any]:
    """Effective level and options; the raw entry when the check is not registered."""
    try:
        config = ruleset.check_config(check_id)
    except KeyError:
        return dict(ruleset.checks.get(check_id, {}))
    return {"level": config.level, **config.options}


def _check_changes(ctx: _Context) -> Iterator[Change]:
    for check_id in sorted({*ctx.old.checks, *ctx.new.checks}):
        fields = _compare(_check_config(ctx.old, check_id), _check_config(ctx.new, check_id))
        if fields:
            key = next((f"checks.{check_id}.{f.field}" for f in fields
                        if f"checks.{check_id}.{f.field}" in ctx.new.origins), "")
            yield Change("checks", "changed", check_id, None, fields, ctx.why(key))


def diff(old: RuleSet, new: RuleSet) -> RuleSetDiff:
    """What changed from ``old`` to ``new`` (both from ``load_ruleset``)."""
    ctx = _Context(old, new)
    changes = [*_round_changes(ctx), *_allowlist_changes(ctx), *_policy_changes(ctx),
               *_check_changes(ctx)]
    return RuleSetDiff(old, new, tuple(changes))


# --------------------------------------------------------------------------- rendering

def _wrap(text: str, indent: int) -> list[str]:
    pad = " " * indent
    return textwrap.wrap(text, WIDTH, initial_indent=pad, subsequent_indent=pad + "    ",
                         break_on_hyphens=False, break_long_words=False)


def _field_text(change: FieldChange) -> str:
    if change.added or change.removed:
        return " ".join([*(f"+{x}" for x in change.added), *(f"-{x}" for x in change.removed)])
    return f"{value_text(change.before)} -> {value_text(change.after)}"


def _entry_summary(entry: AllowlistEntry) -> list[str]:
    divisions = value_text(entry.divisions) if entry.divisions else "all"
    covers = (f"benchmarks: {value_text(entry.benchmarks)}; divisions: {divisions}; "
              f"languages: {value_text(entry.languages)}")
    lines = [covers, f"requires: {requires_text(entry)}"]
    tolerance = tolerance_text(entry)
    return lines + ([f"tolerance: {tolerance}"] if tolerance else [])


def _why_text(label: str, why: Why) -> str:
    return f"{label}: [{why.ruleset}] {provenance_text(why.provenance)}"


def _change_head(result: RuleSetDiff, change: Change) -> tuple[str, list[str]]:
    """The ``+``/``-``/``~`` line of a change and the lines describing what differs."""
    mark = MARKS[change.kind]
    if change.area == "allowlist":
        entry = (result.old if change.kind == "removed" else result.new).entry(change.subject)
        if entry is not None and change.kind != "changed":
            body = _entry_summary(entry)
        elif [f.field for f in change.fields] == ["provenance"]:
            body = ["only the provenance changed"]
        else:
            body = [f"{f.field}: {_field_text(f)}" for f in change.fields]
        return f"{mark} {change.subject}: {change.title}", body
    if len(change.fields) == 1:
        return f"{mark} {change.subject}: {_field_text(change.fields[0])}", []
    return f"{mark} {change.subject}", [f"{f.field}: {_field_text(f)}" for f in change.fields]


def _why_lines(change: Change, previous: Why | None) -> list[str]:
    """Provenance lines: who decided the new state (and what it replaces)."""
    if change.kind == "removed":
        admitted = [_why_text("admitted by", change.previously)] if change.previously else []
        return [*admitted, _why_text("removed by", change.why)]
    if change.why == previous:
        return ["why: the same decision as above"]
    lines = [_why_text("why", change.why)]
    if change.previously and change.previously.provenance != change.why.provenance:
        lines.append(_why_text("was", change.previously))
    return lines


def _change_lines(result: RuleSetDiff, change: Change, previous: Why | None) -> list[str]:
    head, body = _change_head(result, change)
    body += _why_lines(change, previous)
    return _wrap(head, 2) + [w for line in body for w in _wrap(line, 6)]


def _area_lines(result: RuleSetDiff, changes: list[Change]) -> list[str]:
    lines: list[str] = []
    previous: Why | None = None
    for change in changes:
        lines += _change_lines(result, change, previous)
        previous = change.why
    return lines


def render_text(result: RuleSetDiff) -> str:
    """Sections per area with ``+``/``-``/``~`` lines; empty string when nothing changed."""
    if result.empty:
        return ""
    old, new = result.old, result.new
    lines = [f"rules diff {old.id} ({old.status}) -> {new.id} ({new.status})"]
    if new.status == "proposal":
        lines.append(f"note: {new.id} is a PROPOSAL, not MLPerf policy")
    for area, heading in AREA_TITLES.items():
        changes = [c for c in result.changes if c.area == area]
        if changes:
            lines += ["", heading, *_area_lines(result, changes)]
    counts = {k: sum(c.kind == k for c in result.changes) for k in MARKS}
    summary = ", ".join(f"{n} {k}" for k, n in counts.items())
    lines += ["", f"{len(result.changes)} change(s): {summary}"]
    return "\n".join(lines) + "\n"


def _why_json(why: Why | None) -> dict[str, Any] | None:
    if why is None:
        return None
    return {"ruleset": why.ruleset, "provenance": provenance_dict(why.provenance)}


def _change_json(change: Change) -> dict[str, Any]:
    return {"area": change.area, "kind": change.kind, "subject": change.subject,
            "title": change.title,
            "fields": [{"field": f.field, "before": f.before, "after": f.after,
                        "added": list(f.added), "removed": list(f.removed)} for f in change.fields],
            "why": _why_json(change.why), "previously": _why_json(change.previously)}


def to_json(result: RuleSetDiff) -> dict[str, Any]:
    """The JSON document of ``rules diff --format json`` (``changes`` empty when identical)."""
    return {"schema_version": JSON_SCHEMA_VERSION, "old": result.old.summary(),
            "new": result.new.summary(), "changes": [_change_json(c) for c in result.changes]}
