"""Small helpers shared by the rule tools: provenance and value formatting."""

from __future__ import annotations

from typing import Any

from compliance.ruleset import AllowlistEntry, Provenance, RuleSet
from compliance.yamlsource import load_yaml


def provenance_dict(provenance: Provenance) -> dict[str, str]:
    """The set fields of ``provenance`` (JSON-ready)."""
    return {k: v for k, v in vars(provenance).items() if v is not None}


def provenance_text(provenance: Provenance) -> str:
    """One line: ``decision (date, round, body): note``."""
    context = ", ".join(x for x in (provenance.date, provenance.round, provenance.body) if x)
    text = f"{provenance.decision} ({context})"
    return f"{text}: {one_line(provenance.note)}" if provenance.note else text


def one_line(text: str) -> str:
    """``text`` with its whitespace (folded YAML, newlines) collapsed."""
    return " ".join(text.split())


def value_text(value: Any) -> str:
    """A compact, stable rendering of a rule value for text output."""
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ", ".join(value_text(v) for v in value) if value else "(none)"
    if isinstance(value, dict):
        return "; ".join(f"{k}: {value_text(v)}" for k, v in value.items()) or "(none)"
    return str(value)


def chain_provenance(ruleset: RuleSet) -> dict[str, Provenance]:
    """Rule-set id -> its own file-level provenance, for every file in ``ruleset.chain``."""
    out: dict[str, Provenance] = {}
    for path in ruleset.chain:
        data = load_yaml(path).data
        out[str(data["id"])] = Provenance.from_data(data["provenance"])
    return out


def removed_entries(ruleset: RuleSet) -> dict[str, str]:
    """Allowlist ids an ``extends`` chain removed -> id of the rule set that removed them."""
    suffix = " (removed)"
    return {key.split(".", 1)[1]: origin[: -len(suffix)]
            for key, origin in sorted(ruleset.origins.items())
            if key.startswith("allowlist.") and origin.endswith(suffix)}


def requires_text(entry: AllowlistEntry) -> str:
    """``source; upstream link; numerical verification against ...`` for an entry; what the entry
    does not require is named as ``not required`` (never ``no ...``, which reads as forbidden)."""
    parts = ["source" if entry.requires_source else "source not required"]
    parts.append("upstream link" if entry.requires_upstream else "upstream link not required")
    if entry.verification is not None:
        parts.append("numerical verification against "
                     + ", ".join(entry.verification.reference_ops))
    return "; ".join(parts)


def tolerance_text(entry: AllowlistEntry) -> str | None:
    """The entry's tolerances per dtype, or None when it sets none."""
    if entry.verification is None or not entry.verification.tolerance:
        return None
    return "; ".join(f"{dtype}: " + ", ".join(f"{k} {v}" for k, v in vars(t).items() if v is not None)
                     for dtype, t in entry.verification.tolerance.items())
